//! What an install holds, below the prefix: the headers, the shared library with its soname
//! and development links, the static library, and the files other build systems find it by
//! (pkg-config's `cuda-aot.pc`, CMake's `cuda-aotConfig.cmake` and its version file), written
//! from what the build gave.

use std::path::Path;

use anyhow::{Context, Result};

use super::build::{Built, SHARED, STATIC};

/// The folders below the prefix that the install writes into.
pub const FOLDERS: [&str; 4] = ["include", "lib", "lib/pkgconfig", "lib/cmake/cuda-aot"];

/// The headers, from `capi/include/` of the checkout.
const HEADERS: [&str; 2] = ["cuda_aot.h", "cuda_aot.hpp"];

/// One installed file or link.
pub struct Entry {
    /// Its path below the prefix (`lib/libcuda_aot_capi.a`).
    pub rel: String,
    /// What it is.
    pub content: Content,
}

/// A file's bytes, or the target of a link (a name in the same folder).
pub enum Content {
    /// A regular file.
    File(Vec<u8>),
    /// A symbolic link.
    Link(String),
}

/// Every file and link of the install, in the order they are written: the shared library
/// before the links that name it.
pub fn entries(built: &Built, source: &Path, prefix: &Path) -> Result<Vec<Entry>> {
    let file = |rel: String, bytes: Vec<u8>| Entry {
        rel,
        content: Content::File(bytes),
    };
    let link = |rel: String, to: String| Entry {
        rel,
        content: Content::Link(to),
    };
    let mut out = Vec::new();
    for h in HEADERS {
        let path = source.join("capi/include").join(h);
        let bytes = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
        out.push(file(format!("include/{h}"), bytes));
    }
    let real = built.real_name();
    out.push(file(format!("lib/{real}"), built.shared.clone()));
    out.push(link(format!("lib/{}", built.soname), real.clone()));
    out.push(link(format!("lib/{SHARED}"), real));
    out.push(file(format!("lib/{STATIC}"), built.static_lib.clone()));
    out.push(file(
        "lib/pkgconfig/cuda-aot.pc".into(),
        pkg_config(built, prefix).into_bytes(),
    ));
    out.push(file(
        "lib/cmake/cuda-aot/cuda-aotConfigVersion.cmake".into(),
        cmake_version(built).into_bytes(),
    ));
    out.push(file(
        "lib/cmake/cuda-aot/cuda-aotConfig.cmake".into(),
        cmake_config(built).into_bytes(),
    ));
    Ok(out)
}

/// `cuda-aot.pc`: the prefix the install names, the flags to compile and link against the
/// shared library, and in `Libs.private` what the static library needs from the system.
fn pkg_config(built: &Built, prefix: &Path) -> String {
    format!(
        "# cuda-aot.pc: written by `cargo xtask install-capi` (cuda-aot-capi {version}).\n\
         prefix={prefix}\n\
         exec_prefix=${{prefix}}\n\
         libdir=${{exec_prefix}}/lib\n\
         includedir=${{prefix}}/include\n\
         \n\
         Name: cuda-aot\n\
         Description: {description}\n\
         Version: {version}\n\
         Cflags: -I${{includedir}}\n\
         Libs: -L${{libdir}} -lcuda_aot_capi\n\
         Libs.private: {private}\n",
        version = built.version,
        prefix = prefix.display(),
        description = built.description,
        private = built.static_deps.join(" "),
    )
}

/// `cuda-aotConfig.cmake`: two IMPORTED targets, found from the file's own place so a
/// staged or moved prefix works.
fn cmake_config(built: &Built) -> String {
    let system: Vec<&str> = built
        .static_deps
        .iter()
        .map(|l| l.strip_prefix("-l").unwrap_or(l))
        .collect();
    format!(
        r#"# cuda-aotConfig.cmake: written by `cargo xtask install-capi` (cuda-aot-capi {version}).
# find_package(cuda-aot CONFIG) reads it. Two IMPORTED targets:
#   cuda-aot::cuda_aot         the shared library ({soname}) and the headers
#   cuda-aot::cuda_aot_static  the static library, the headers and what it needs from the system
# Paths are found from this file's place (PREFIX/lib/cmake/cuda-aot), so a staged (DESTDIR)
# or moved prefix works as installed.
get_filename_component(_cuda_aot_prefix "${{CMAKE_CURRENT_LIST_DIR}}/../../.." ABSOLUTE)
if(NOT TARGET cuda-aot::cuda_aot)
  add_library(cuda-aot::cuda_aot SHARED IMPORTED)
  set_target_properties(cuda-aot::cuda_aot PROPERTIES
    IMPORTED_LOCATION "${{_cuda_aot_prefix}}/lib/{real}"
    IMPORTED_SONAME "{soname}"
    INTERFACE_INCLUDE_DIRECTORIES "${{_cuda_aot_prefix}}/include")
endif()
if(NOT TARGET cuda-aot::cuda_aot_static)
  add_library(cuda-aot::cuda_aot_static STATIC IMPORTED)
  set_target_properties(cuda-aot::cuda_aot_static PROPERTIES
    IMPORTED_LOCATION "${{_cuda_aot_prefix}}/lib/{STATIC}"
    INTERFACE_INCLUDE_DIRECTORIES "${{_cuda_aot_prefix}}/include"
    INTERFACE_LINK_LIBRARIES "{system}")
endif()
unset(_cuda_aot_prefix)
"#,
        version = built.version,
        soname = built.soname,
        real = built.real_name(),
        system = system.join(";"),
    )
}

/// `cuda-aotConfigVersion.cmake`: compatible with a request for this version or an older one
/// of the same ABI version as the soname (`0.1` for `.so.0.1`: any 0.1.x up to this one),
/// for a build of the same pointer size.
fn cmake_version(built: &Built) -> String {
    let parts: Vec<&str> = built.abi().split('.').collect();
    let same_abi: Vec<String> = ["MAJOR", "MINOR", "PATCH"]
        .iter()
        .zip(&parts)
        .map(|(c, n)| format!("PACKAGE_FIND_VERSION_{c} STREQUAL \"{n}\""))
        .collect();
    format!(
        r#"# cuda-aotConfigVersion.cmake: written by `cargo xtask install-capi` (cuda-aot-capi {version}).
# Compatible with a request for {version} or an older version of the same ABI as the
# library's soname ({soname}): the leading version number(s) {abi}.
set(PACKAGE_VERSION "{version}")
if(NOT PACKAGE_FIND_VERSION)
  set(PACKAGE_VERSION_COMPATIBLE TRUE)
elseif(PACKAGE_FIND_VERSION VERSION_GREATER PACKAGE_VERSION)
  set(PACKAGE_VERSION_COMPATIBLE FALSE)
elseif({same_abi})
  set(PACKAGE_VERSION_COMPATIBLE TRUE)
  if(PACKAGE_FIND_VERSION VERSION_EQUAL PACKAGE_VERSION)
    set(PACKAGE_VERSION_EXACT TRUE)
  endif()
else()
  set(PACKAGE_VERSION_COMPATIBLE FALSE)
endif()
# Built for {bits}-bit pointers: a project of another pointer size cannot link it.
if(NOT "${{CMAKE_SIZEOF_VOID_P}}" STREQUAL "" AND NOT "${{CMAKE_SIZEOF_VOID_P}}" STREQUAL "{size}")
  set(PACKAGE_VERSION "${{PACKAGE_VERSION}} ({bits}bit)")
  set(PACKAGE_VERSION_UNSUITABLE TRUE)
endif()
"#,
        version = built.version,
        soname = built.soname,
        abi = built.abi(),
        same_abi = same_abi.join(" AND "),
        size = std::mem::size_of::<usize>(),
        bits = 8 * std::mem::size_of::<usize>(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn built(version: &str, soname: &str) -> Built {
        Built {
            version: version.into(),
            description: "C ABI of cuda-aot".into(),
            profile: "release",
            dir: "/t/release".into(),
            shared: b"so".to_vec(),
            soname: soname.into(),
            static_lib: b"a".to_vec(),
            static_deps: vec!["-lgcc_s".into(), "-lm".into(), "-lc".into()],
        }
    }

    #[test]
    fn the_pkg_config_file_names_the_prefix_the_library_and_its_private_libraries() {
        let pc = pkg_config(
            &built("0.1.0", "libcuda_aot_capi.so.0.1"),
            Path::new("/opt/x"),
        );
        for line in [
            "prefix=/opt/x",
            "libdir=${exec_prefix}/lib",
            "Version: 0.1.0",
            "Cflags: -I${includedir}",
            "Libs: -L${libdir} -lcuda_aot_capi",
            "Libs.private: -lgcc_s -lm -lc",
        ] {
            assert!(pc.lines().any(|l| l == line), "no `{line}` in\n{pc}");
        }
    }

    #[test]
    fn the_cmake_files_follow_the_soname() {
        let b = built("0.1.0", "libcuda_aot_capi.so.0.1");
        let config = cmake_config(&b);
        assert!(
            config.contains("/lib/libcuda_aot_capi.so.0.1.0\""),
            "{config}"
        );
        assert!(config.contains("IMPORTED_SONAME \"libcuda_aot_capi.so.0.1\""));
        assert!(config.contains("INTERFACE_LINK_LIBRARIES \"gcc_s;m;c\""));
        let version = cmake_version(&b);
        assert!(
            version.contains(
                "elseif(PACKAGE_FIND_VERSION_MAJOR STREQUAL \"0\" AND PACKAGE_FIND_VERSION_MINOR STREQUAL \"1\")"
            ),
            "{version}"
        );
        let one = cmake_version(&built("1.4.2", "libcuda_aot_capi.so.1"));
        assert!(
            one.contains("elseif(PACKAGE_FIND_VERSION_MAJOR STREQUAL \"1\")\n"),
            "{one}"
        );
    }

    #[test]
    fn the_links_name_the_real_file_and_follow_it() {
        let b = built("0.1.0", "libcuda_aot_capi.so.0.1");
        let dir = tempfile::tempdir().unwrap();
        for h in HEADERS {
            let p = dir.path().join("capi/include").join(h);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, h).unwrap();
        }
        let e = entries(&b, dir.path(), Path::new("/opt/x")).unwrap();
        let names: Vec<(&str, Option<&str>)> = e
            .iter()
            .map(|e| match &e.content {
                Content::File(_) => (e.rel.as_str(), None),
                Content::Link(to) => (e.rel.as_str(), Some(to.as_str())),
            })
            .collect();
        assert_eq!(
            names[2..5],
            [
                ("lib/libcuda_aot_capi.so.0.1.0", None),
                (
                    "lib/libcuda_aot_capi.so.0.1",
                    Some("libcuda_aot_capi.so.0.1.0")
                ),
                ("lib/libcuda_aot_capi.so", Some("libcuda_aot_capi.so.0.1.0")),
            ]
        );
        for e in &e {
            let folder = Path::new(&e.rel).parent().unwrap().to_str().unwrap();
            assert!(FOLDERS.contains(&folder), "{}", e.rel);
        }
    }
}
