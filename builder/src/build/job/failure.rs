//! Why a toolkit run of a job failed, in words, with its output and a `Fix:`: stopped from
//! outside (a signal, an executor that could not run it), a missing header, an `extern`
//! no file defines, a link that failed.

use std::path::Path;

use super::super::{Job, extern_check, fail, kernels, nvcc};
use super::Ctx;

impl Ctx<'_> {
    /// A failed device link: each symbol nvlink could not resolve, with the files of the
    /// module that use it, or nvlink's own words.
    pub(super) fn link_failure(
        &self,
        job: &Job,
        m: &super::super::ModuleSpec,
        unit_objects: &[Vec<u8>],
        f: nvcc::Failure,
    ) -> anyhow::Error {
        let label = self.plan.label(job);
        let detail = f.detail("nvlink");
        if let Some(killed) = killed(&label, &f, &detail) {
            return killed;
        }
        let unresolved = nvcc::unresolved_at_link(&f.output);
        if unresolved.is_empty() {
            return fail(
                format!(
                    "{label}: the device link of {} failed ({})\n{detail}",
                    m.shown_sources(),
                    f.status
                ),
                "fix what nvlink reports above (a symbol defined in two files of the module: keep one definition, mark the others `static` or `extern`)",
            );
        }
        let users = |symbol: &str| -> Vec<&str> {
            m.sources
                .iter()
                .zip(unit_objects)
                .filter(|(_, o)| {
                    cuda_aot::elf::undefined_symbols(o).is_ok_and(|u| u.iter().any(|s| s == symbol))
                })
                .map(|(s, _)| s.as_str())
                .collect()
        };
        let list: Vec<String> = unresolved
            .iter()
            .map(|s| {
                let u = users(s);
                let shown = kernels::demangled(s);
                if u.is_empty() {
                    format!("`{shown}`")
                } else {
                    format!("`{shown}` (declared extern and used in {})", u.join(", "))
                }
            })
            .collect();
        fail(
            format!(
                "{label}: {} no file of the module defines: the device link of {} failed, so nothing was built\n{detail}",
                list.join(", "),
                m.shown_sources()
            ),
            format!(
                "add the file that defines {} to the module's `source` list (relative to the sources folder), or define it in one of {}",
                unresolved
                    .iter()
                    .map(|s| format!("`{}`", kernels::demangled(s)))
                    .collect::<Vec<_>>()
                    .join(", "),
                m.shown_sources()
            ),
        )
    }

    /// The error for a failed nvcc run: what it says in words (killed, a missing header,
    /// an undefined extern) with its output and a `Fix:`.
    pub(super) fn failure(
        &self,
        job: &Job,
        m: &super::super::ModuleSpec,
        source: &Path,
        f: nvcc::Failure,
    ) -> anyhow::Error {
        let label = self.plan.label(job);
        let detail = f.detail("nvcc");
        if let Some(killed) = killed(&label, &f, &detail) {
            return killed;
        }
        let undefined = extern_check::undefined_externs(&f.output);
        if !undefined.is_empty() {
            return extern_check::refusal(&label, job, m, &undefined, &f.output);
        }
        match nvcc::missing_header(&f.output) {
            Some((header, from)) => {
                let from_dir = Path::new(&from)
                    .parent()
                    .filter(|p| !p.as_os_str().is_empty())
                    .map_or_else(
                        || self.plan.spec.sources.clone(),
                        |p| self.plan.spec.sources.join(p),
                    );
                let mut searched = vec![format!(
                    "{} (the including file's folder)",
                    from_dir.display()
                )];
                searched.extend(
                    m.include_dirs
                        .iter()
                        .map(|d| format!("{} (include_dirs `{}`)", d.abs.display(), d.rel)),
                );
                searched.push("the toolkit's and the host compiler's include folders".into());
                fail(
                    format!(
                        "{label}: header `{header}` not found (included from {from}); nvcc failed ({})\nsearched:\n{}\n{detail}",
                        f.status,
                        searched
                            .iter()
                            .map(|s| format!("    {s}"))
                            .collect::<Vec<_>>()
                            .join("\n")
                    ),
                    format!(
                        "add the folder that holds `{header}` to include_dirs (build-wide or the module's; relative to {}), or fix the #include in {from}",
                        self.plan.spec.path.display()
                    ),
                )
            }
            None => fail(
                format!(
                    "{label}: nvcc failed ({}) compiling {}\n{detail}",
                    f.status,
                    source.display()
                ),
                format!(
                    "fix the error nvcc reports above in {} (or in a header it includes), then rebuild",
                    source.display()
                ),
            ),
        }
    }
}

/// The error of a compile or link that was killed from outside, if it was.
pub(super) fn killed(label: &str, f: &nvcc::Failure, detail: &str) -> Option<anyhow::Error> {
    if let Some(executor) = &f.not_run {
        return Some(fail(
            format!("{label}: {}, so nothing was built\n{detail}", f.status),
            format!(
                "nothing in the sources is at fault: the executor ({executor}) could not run the \
                 tool; with --remote-exec, check that server and its workers (the message above \
                 says what it refused), or build on this machine (without --remote-exec, or with \
                 --remote-exec-fallback local)"
            ),
        ));
    }
    let killed = f.killed.as_ref()?;
    Some(fail(
        format!("{label}: {killed}, so nothing was built\n{detail}"),
        "nothing in the sources is at fault: nvcc was stopped from outside (Ctrl-C, a CI \
         time limit, the out-of-memory killer); rerun the build, with fewer jobs (-j) if \
         memory ran out",
    ))
}
