//! The NVRTC baseline of bench-load (compile + load, `research` builds) and the NVRTC
//! options a job's nvcc flags become.

#[cfg(feature = "research")]
use anyhow::Context;
use anyhow::Result;
use cuda_aot::cuda;
#[cfg(feature = "research")]
use cuda_aot_baseline as raw;
use std::path::Path;
#[cfg(feature = "research")]
use std::time::{Duration, Instant};

use super::Args;
use super::run::Row;

impl Args {
    /// NVRTC compile + load of each selected module's source (its spec's flags), and
    /// the bundle's sum.
    #[cfg(feature = "research")]
    pub(super) fn nvrtc_rows(
        &self,
        selected: &[(String, Vec<u8>, u32)],
        ctx: &std::sync::Arc<cuda::CudaContext>,
        info: &cuda::DeviceInfo,
        reps: usize,
    ) -> Result<Vec<Row>> {
        use cuda::research::{Output, compile};
        let arch = info.sm();
        let spec_path = self.spec.clone().expect("resolved in run");
        let spec = cuda_aot_builder::build::spec::load(&spec_path, None)?;
        let device_sm: cuda_aot::Target = arch.parse().map_err(anyhow::Error::new)?;
        let mut rows = Vec::new();
        let mut bundle = Row {
            scope: "bundle".into(),
            method: "nvrtc_compile_load",
            bytes: 0,
            samples: vec![Duration::ZERO; reps],
        };
        for (name, _, _) in selected {
            let module = cuda_aot::ModuleName::new(name).map_err(anyhow::Error::new)?;
            let m = spec
                .modules
                .iter()
                .find(|m| m.name == module)
                .with_context(|| format!("module {name} is not in {}", spec_path.display()))?;
            let job = spec
                .jobs(std::slice::from_ref(&module), &[device_sm])?
                .into_iter()
                .next()
                .context("no job")?;
            if m.is_linked() {
                anyhow::bail!(
                    "module {name} lists several sources: the NVRTC baseline compiles one file; leave it out of the NVRTC rows"
                );
            }
            let options = nvrtc_options(&job.flags, &spec.sources, m);
            let file = spec.sources.join(&m.sources[0]);
            let source = std::fs::read_to_string(&file)
                .with_context(|| format!("reading {}", file.display()))?;
            let options: Vec<&str> = options.iter().map(String::as_str).collect();
            let mut row = Row::new(name, "nvrtc_compile_load", source.len());
            for i in 0..=reps {
                let t = Instant::now();
                let cubin = compile(&source, &m.sources[0], &arch, Output::Cubin, &options)?;
                let compile_time = t.elapsed();
                let load = raw::time_module_load(ctx, &cubin, false)?;
                if i > 0 {
                    row.samples.push(compile_time + load);
                    bundle.samples[i - 1] += compile_time + load;
                }
            }
            bundle.bytes += row.bytes;
            rows.push(row);
        }
        rows.push(bundle);
        Ok(rows)
    }

    /// Without `research`: no NVRTC rows, and a note saying so.
    #[cfg(not(feature = "research"))]
    pub(super) fn nvrtc_rows(
        &self,
        _: &[(String, Vec<u8>, u32)],
        _: &std::sync::Arc<cuda::CudaContext>,
        _: &cuda::DeviceInfo,
        _: usize,
    ) -> Result<Vec<Row>> {
        eprintln!("note: built without --features research: no NVRTC baseline");
        Ok(vec![])
    }
}

/// NVRTC options equivalent to a job's nvcc flags: defines (geometry included), language
/// standard and device code-generation flags are kept; what only nvcc understands (kind,
/// `-arch`, host optimisation, `-Xcicc` pairs) is dropped. The sources folder and the
/// module's include folders become `--include-path`s.
#[cfg_attr(not(feature = "research"), allow(dead_code))]
fn nvrtc_options(
    flags: &[String],
    sources: &Path,
    m: &cuda_aot_builder::build::ModuleSpec,
) -> Vec<String> {
    let mut out = vec![format!("--include-path={}", sources.display())];
    out.extend(
        m.include_dirs
            .iter()
            .map(|d| format!("--include-path={}", d.abs.display())),
    );
    out.extend(cuda_aot_kernels::parity::module::research_flags(flags));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::paths;

    /// The parity runner reads a module's section of a spec with its own small reader (it
    /// runs on the GPU host, without the build system). Both readers must see the same
    /// module: source, include folders, geometry, protocol, and the same NVRTC options.
    #[test]
    fn the_parity_runners_reader_sees_the_module_the_build_sees() {
        use cuda_aot_kernels::parity::module::ParityModule;
        use std::collections::BTreeSet;
        let path = paths::repo_root().join("kernels/research/research.toml");
        let spec = cuda_aot_builder::build::spec::load(&path, None).unwrap();
        let canon = |p: &Path| std::fs::canonicalize(p).unwrap();
        // Include paths made canonical: the runner joins them to the spec's folder as
        // written, the build resolves them.
        let normal = |opts: Vec<String>| -> BTreeSet<String> {
            opts.into_iter()
                .map(|o| match o.strip_prefix("--include-path=") {
                    Some(d) => format!("--include-path={}", canon(Path::new(d)).display()),
                    None => o,
                })
                .collect()
        };
        let mut checked = 0;
        for m in spec.modules.iter().filter(|m| m.parity.is_some()) {
            let runner = ParityModule::load(&path, m.name.as_str()).unwrap();
            assert_eq!(canon(&runner.source), spec.sources.join(&m.sources[0]));
            assert_eq!(runner.geometry, m.geometry, "{}", m.name);
            assert_eq!(runner.protocol, m.protocol, "{}", m.name);
            assert_eq!(runner.schedule_version, m.schedule_version, "{}", m.name);
            for target in &m.targets {
                let job = spec
                    .jobs(std::slice::from_ref(&m.name), std::slice::from_ref(target))
                    .unwrap()
                    .remove(0);
                assert_eq!(
                    normal(runner.research_options()),
                    normal(nvrtc_options(&job.flags, &spec.sources, m)),
                    "{} {target}",
                    m.name
                );
            }
            checked += 1;
        }
        assert!(
            checked >= 1,
            "no module with a parity spec in {}",
            path.display()
        );
    }

    #[test]
    fn nvrtc_gets_the_specs_defines_standard_and_include_folders() {
        let spec = cuda_aot_builder::build::spec::load(
            &paths::repo_root().join("kernels/foreign/foreign.toml"),
            None,
        )
        .unwrap();
        let m = &spec.modules[1];
        let job = spec
            .jobs(std::slice::from_ref(&m.name), &["sm_90".parse().unwrap()])
            .unwrap()
            .remove(0);
        let opts = nvrtc_options(&job.flags, &spec.sources, m);
        let shown: Vec<String> = opts
            .iter()
            .map(|o| o.replace(&*paths::repo_root().to_string_lossy(), "<repo>"))
            .collect();
        assert_eq!(
            shown,
            [
                "--include-path=<repo>/kernels/foreign/src",
                "--include-path=<repo>/kernels/foreign/include",
                "--include-path=<repo>/kernels/foreign/third_party/fields/include",
                "--std=c++17",
                "-DFOREIGN_BLOCK=256",
                "-DFIELD_GOLDILOCKS",
                "-DFEATURE_DERIVATIVE",
            ]
        );
    }
}
