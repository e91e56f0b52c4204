//! `cargo xtask install-capi`: the C library installed like one (issue 43, item 5) into a
//! prefix: headers, the shared library with its soname and development links, the static
//! library, a pkg-config file and a CMake package, honouring `DESTDIR`. A user's task, in
//! the installed tool too.

use std::path::PathBuf;

use anyhow::Result;

use crate::paths;

mod build;
mod dest;
mod packages;

/// Install the C library (headers, shared and static library, pkg-config and CMake files).
///
/// Builds `cuda-aot-capi` with cargo (release unless --debug) in the cuda-aot checkout,
/// then installs it below --prefix DIR (the layout is below). Each file and link is
/// replaced atomically, so a program running against an older install keeps working while
/// this one runs. The destination is checked before anything is built: a prefix that
/// cannot be written, or a file where a folder must be, is refused and nothing is changed.
#[derive(clap::Args)]
#[command(after_long_help = "\
Installed below the prefix:
  include/cuda_aot.h, include/cuda_aot.hpp
  lib/libcuda_aot_capi.so.X.Y.Z       the shared library (X.Y.Z: the package version)
  lib/libcuda_aot_capi.so.ABI         link to it named by its soname (ABI: 0.MINOR before 1.0,
                                      then MAJOR), what linked programs load
  lib/libcuda_aot_capi.so             link to it for the linker (-lcuda_aot_capi)
  lib/libcuda_aot_capi.a              the static library
  lib/pkgconfig/cuda-aot.pc           pkg-config: Cflags, Libs, Libs.private
  lib/cmake/cuda-aot/cuda-aotConfig.cmake, cuda-aotConfigVersion.cmake
                                      CMake: IMPORTED targets cuda-aot::cuda_aot (shared) and
                                      cuda-aot::cuda_aot_static

The prefix is what the installed files name (the pkg-config file's prefix=); a relative one
is taken from the current folder. DESTDIR stages the install as GNU makefiles do: the files go
to $DESTDIR/$PREFIX while they still name $PREFIX, for packaging or a copy as root later.

Use the installed library:
  pkg-config:  PKG_CONFIG_PATH=PREFIX/lib/pkgconfig pkg-config --cflags --libs cuda-aot
               (--static adds Libs.private, what the static library needs from the system)
  CMake:       find_package(cuda-aot 0.1 CONFIG REQUIRED) with -DCMAKE_PREFIX_PATH=PREFIX, then
               target_link_libraries(app PRIVATE cuda-aot::cuda_aot); or, through pkg-config,
               pkg_check_modules(CUDA_AOT REQUIRED IMPORTED_TARGET cuda-aot) and
               PkgConfig::CUDA_AOT (examples/cmake shows both; docs/capi.md, \"Installing\")

Exit status 0 when installed, 1 when refused or the build failed (the error and a Fix: line).

Examples:
  cargo xtask install-capi --prefix ~/.local
  cargo xtask install-capi --prefix .cuda-aot/capi --debug        for development in the checkout
  DESTDIR=$PWD/stage cargo xtask install-capi --prefix /usr/local  staged for packaging")]
pub struct Args {
    /// The installation prefix: lib/ and include/ go below it.
    #[arg(long, value_name = "DIR")]
    prefix: PathBuf,
    /// Stage the install below DIR ($DESTDIR/$PREFIX), the files still naming --prefix.
    #[arg(long, env = "DESTDIR", value_name = "DIR")]
    destdir: Option<PathBuf>,
    /// Install cargo's dev-profile build (unoptimised, with debug info) instead of release.
    #[arg(long)]
    debug: bool,
    /// The cuda-aot checkout whose capi/ is built (default: the checkout holding the current
    /// folder).
    #[arg(long, value_name = "DIR")]
    source: Option<PathBuf>,
}

impl Args {
    /// Runs the task.
    pub fn run(self) -> Result<()> {
        // 1. Where: the prefix the files name, and the folder they are written below.
        let dest = dest::Destination::new(&self.prefix, self.destdir.as_deref())?;
        // 2. Refuse a prefix whose folders cannot be made or written, before any work.
        dest.check_folders(&packages::FOLDERS)?;
        // 3. Build the library with cargo, and read what it built.
        let source = self.source.unwrap_or_else(paths::repo_root);
        let built = build::build(&source, !self.debug)?;
        // 4. Lay out every file and link; refuse a folder standing where one goes.
        let entries = packages::entries(&built, &source, dest.prefix())?;
        dest.check_files(&entries)?;
        // 5. Write them, each atomically, the shared library before its links.
        dest.install(&entries)?;
        dest.summary(&entries, &built);
        Ok(())
    }
}
