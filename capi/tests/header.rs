//! The checked-in C header `capi/include/cuda_aot.h` is exactly what cbindgen generates
//! from the crate now (issue 22: a CI check that the header is current). With
//! `CUDA_AOT_BLESS_HEADER=1` the test writes the generated header instead.

use std::path::Path;

use cuda_aot_capi::Status;

fn generated() -> String {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(dir.join("cbindgen.toml")).unwrap();
    let mut out = Vec::new();
    cbindgen::Builder::new()
        .with_crate(dir)
        .with_config(config)
        .generate()
        .unwrap_or_else(|e| panic!("cbindgen: {e}"))
        .write(&mut out);
    String::from_utf8(out).unwrap()
}

#[test]
fn the_checked_in_header_is_what_cbindgen_generates() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("include/cuda_aot.h");
    let now = generated();
    if std::env::var_os("CUDA_AOT_BLESS_HEADER").is_some_and(|v| v == "1") {
        std::fs::write(&path, &now).unwrap();
        return;
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        checked_in == now,
        "{} is not what cbindgen generates from capi/src now.\n\
         Fix: CUDA_AOT_BLESS_HEADER=1 cargo test -p cuda-aot-capi --test header, then review \
         and commit the diff of capi/include/cuda_aot.h",
        path.display()
    );
}

#[test]
fn the_header_names_every_status_with_its_number() {
    let h = generated();
    for s in Status::all() {
        let name = s.c_name().trim_end_matches('\0');
        let line = format!("{name} = {},", s as i32);
        assert!(h.contains(&line), "the header lacks `{line}`");
    }
}

#[test]
fn docs_capi_md_lists_every_status_with_its_number() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/capi.md");
    let doc = std::fs::read_to_string(&path).unwrap();
    let rows: Vec<(String, String)> = doc
        .lines()
        .filter_map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            let name = cells.get(1)?.strip_prefix("`CUDA_AOT_STATUS_")?;
            Some((
                format!("CUDA_AOT_STATUS_{}", name.trim_end_matches('`')),
                cells.get(2)?.to_string(),
            ))
        })
        .collect();
    let want: Vec<(String, String)> = Status::all()
        .iter()
        .map(|s| {
            (
                s.c_name().trim_end_matches('\0').to_string(),
                (*s as i32).to_string(),
            )
        })
        .collect();
    assert_eq!(
        rows,
        want,
        "the status table of {} is not the status enum",
        path.display()
    );
}
