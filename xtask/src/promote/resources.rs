//! Step 3 of a promotion: the resource review (registers, shared and local memory, max
//! threads of the NVRTC build, the AOT build and the released version, each cubin figure
//! cross-checked with the driver's), as a table and as `review.json`.

use cuda_aot::source::DirSource;
use cuda_aot::state::TrustState;
use cuda_aot::verify::Options;
use cuda_aot::{Digest, Kind, Manifest, ModuleName};
use cuda_aot_kernels::parity::report::{ParityReport, Resources};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::Path;

/// One row of the resource review: an entry point's figure in each build.
#[derive(Debug, Clone, Serialize)]
pub struct ReviewRow {
    /// Entry point.
    pub entry: String,
    /// `registers`, `shared bytes`, `local bytes`, `max threads`.
    pub resource: String,
    /// Per build (`nvrtc sm_90`, `aot sm_90a`, `released sm_90`): the cubin's figure and,
    /// where it differs, the driver's.
    pub values: BTreeMap<String, String>,
    /// What a reviewer should look at: figures that differ between builds, cubin and
    /// driver disagreeing, spills.
    pub notes: Vec<String>,
}

/// The resource review document (`review.json`), bound into the promotion by its blake3.
#[derive(Debug, Clone, Serialize)]
pub struct Review {
    /// `cuda-aot/resource-review/v1`.
    pub schema: String,
    /// The module.
    pub module: String,
    /// blake3 of the parity report the figures come from.
    pub parity_report: Digest,
    /// The device they were measured on.
    pub device: String,
    /// Builds, in column order.
    pub builds: Vec<String>,
    /// Rows.
    pub rows: Vec<ReviewRow>,
    /// The table as printed.
    pub table: String,
}

/// The currently released manifest of `module` for `target`, if the registry holds one
/// that verifies against the trust root.
pub(super) fn released_manifest(
    registry: &Path,
    anchor: &[u8],
    module: &ModuleName,
    target: &str,
) -> Option<Manifest> {
    let src = DirSource::new(registry);
    let v = cuda_aot::verify::verify_metadata(
        &src,
        anchor,
        TrustState::default(),
        &Options::ignoring_expiry(),
    )
    .ok()?;
    let e = v
        .index()
        .entries
        .iter()
        .find(|e| &e.module == module && e.kind == Kind::Cubin && e.sm.to_string() == target)?;
    v.verify_entry(&src, e).ok().map(|m| m.manifest().clone())
}

/// Step 3: the resource review table.
pub fn review(r: &ParityReport, report: Digest, released: Option<&Manifest>) -> Review {
    let mut builds: Vec<String> = Vec::new();
    for x in &r.resources {
        if !builds.contains(&x.build) {
            builds.push(x.build.clone());
        }
    }
    let released_label = format!("released {}", r.device.sm);
    builds.push(released_label.clone());
    let mut entries: Vec<String> = Vec::new();
    for x in &r.resources {
        if !entries.contains(&x.entry) {
            entries.push(x.entry.clone());
        }
    }
    type Get = fn(&Resources) -> Option<u32>;
    let resources: [(&str, Get); 5] = [
        ("registers", |x| x.registers),
        ("shared bytes", |x| x.shared_bytes),
        ("local bytes", |x| x.local_bytes),
        ("stack bytes", |x| x.stack_bytes),
        ("max threads", |x| x.max_threads),
    ];
    let show = |v: Option<u32>| v.map_or("-".to_string(), |v| v.to_string());
    let mut rows = Vec::new();
    for e in &entries {
        for (name, get) in resources {
            let mut values = BTreeMap::new();
            let mut notes = Vec::new();
            let mut figures = Vec::new();
            for x in r.resources.iter().filter(|x| &x.entry == e) {
                let (mut c, d) = (get(&x.cubin), get(&x.device));
                // A cubin without a `.nv.shared.<kernel>` section uses no static shared memory.
                if name == "shared bytes" {
                    c = c.or(Some(0));
                }
                let mut s = show(c);
                // The launch bound: the driver reports its own limit when the cubin sets none.
                // The driver reports no whole-stack figure: the cubin's alone is shown.
                let comparable = (name != "max threads" || c.is_some()) && name != "stack bytes";
                // The cubin's shared section counts the bytes reserved per block from sm_90
                // on; the driver's figure does not.
                let expected = match (name, c) {
                    ("shared bytes", Some(b)) => {
                        Some(cuda_aot::elf::driver_shared_bytes(build_sm(&x.build), b))
                    }
                    _ => c,
                };
                if comparable && expected != d {
                    s += &format!(" ({})", show(d));
                    notes.push(format!(
                        "{}: cubin {} vs driver {}",
                        x.build,
                        show(c),
                        show(d)
                    ));
                }
                if name == "shared bytes" && expected != c && expected == d {
                    notes.push(format!(
                        "{}: {} of the cubin's {} B are reserved per block (sm_90+); the driver reports {}",
                        x.build,
                        cuda_aot::elf::RESERVED_SHARED_SM90,
                        show(c),
                        show(d)
                    ));
                }
                if name == "local bytes" && c.unwrap_or(0) > 0 {
                    notes.push(format!(
                        "{}: {} B local memory per thread (spills or a stack frame)",
                        x.build,
                        show(c)
                    ));
                }
                figures.push(c);
                values.insert(x.build.clone(), s);
            }
            let rel = released.and_then(|m| {
                m.functions
                    .iter()
                    .find(|f| f.symbol.as_str() == e)
                    .map(|f| match (name, get(&Resources::of_abi(&f.abi))) {
                        ("shared bytes", None) => Some(0),
                        (_, v) => v,
                    })
            });
            match rel {
                Some(v) => {
                    values.insert(released_label.clone(), show(v));
                    figures.push(v);
                }
                None => {
                    values.insert(
                        released_label.clone(),
                        if released.is_some() {
                            "(no such kernel)"
                        } else {
                            "(not released)"
                        }
                        .into(),
                    );
                }
            }
            if figures.windows(2).any(|w| w[0] != w[1]) {
                notes.insert(0, "DIFFERS between builds".into());
            }
            rows.push(ReviewRow {
                entry: e.clone(),
                resource: name.into(),
                values,
                notes,
            });
        }
    }
    let mut table = format!("    {:<22} {:<13}", "ENTRY POINT", "RESOURCE");
    for b in &builds {
        table += &format!(" {:>16}", b);
    }
    table += "  NOTES\n";
    for row in &rows {
        table += &format!("    {:<22} {:<13}", row.entry, row.resource);
        for b in &builds {
            table += &format!(" {:>16}", row.values.get(b).map_or("-", String::as_str));
        }
        table += &format!("  {}\n", row.notes.join("; "));
    }
    Review {
        schema: "cuda-aot/resource-review/v1".into(),
        module: r.module.clone(),
        parity_report: report,
        device: format!(
            "{} ({}, {}, driver {})",
            r.device.name, r.device.uuid, r.device.sm, r.device.driver
        ),
        builds,
        rows,
        table,
    }
}

/// The SM number of a parity build label (`nvrtc sm_90`, `aot sm_90a`): 90.
pub(super) fn build_sm(build: &str) -> u32 {
    build
        .rsplit("sm_")
        .next()
        .map(|t| t.trim_end_matches(|c: char| !c.is_ascii_digit()))
        .and_then(|t| t.parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_builds_sm_comes_from_its_label() {
        assert_eq!(super::build_sm("nvrtc sm_90"), 90);
        assert_eq!(super::build_sm("aot sm_90a"), 90);
        assert_eq!(super::build_sm("aot sm_120"), 120);
        assert_eq!(cuda_aot::elf::driver_shared_bytes(90, 9216), 8192);
        assert_eq!(cuda_aot::elf::driver_shared_bytes(80, 9216), 9216);
        assert_eq!(cuda_aot::elf::driver_shared_bytes(90, 0), 0);
    }
}
