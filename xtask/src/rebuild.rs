//! `cargo xtask rebuild`: an independent builder rebuilds a published release from what its
//! registry records (the spec and sources by digest, the toolkit pins, the host compiler),
//! compares every blob and manifest bit for bit, and on a full match adds its builder
//! signature to the release's build statement.

use anyhow::{Context, Result};
use cuda_aot::SecretKey;
use cuda_aot::provenance::{Provenance, Statement, subject_names};
use cuda_aot::source::{DirSource, layout};
use cuda_aot::verify::{Options, VerifiedIndex};
use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use crate::advice::{fail, tool};
use crate::args::{RegistryArgs, ToolkitChoice};
use crate::endpoint::Target;
use crate::verify::{SaveState, verify_registry};
use crate::{devkeys, files, outdir, paths, sign};
use cuda_aot_builder::build::{self, BuildOptions};
use cuda_aot_builder::toolchain::{Pins, ToolchainOptions};

/// The file that marks a folder as a rebuild's (so a later rebuild may empty it).
const MARKER: &str = ".cuda-aot-rebuild";

/// Rebuild a published release independently and co-sign its build statement.
///
/// Verifies the registry as a prover would (trust root, timestamp, index, every manifest,
/// blob and content), except that the build statement needs only one listed builder's
/// signature: the release is waiting for this rebuild. Then fetches the spec and every
/// source the statement's provenance names from the registry (`sources/blake3/<hex>`, each
/// checked by size and blake3; a name that is absolute or climbs out with `..` is refused),
/// lays them out below a folder of its own, builds the recorded modules and targets with
/// the recorded channel and toolkit pins, with an empty build cache (every job compiles
/// here), and compares every blob and manifest with the statement. On a full match it adds
/// this builder's signature to the statement (`sign --co-sign`); on any difference it
/// signs nothing and names each differing blob with its first differing ELF section.
#[derive(clap::Args)]
#[command(after_long_help = "\
Examples:
  cargo xtask rebuild --registry /srv/candidate --trust keys/root.json --builder-key /secure/builder-b.key
  cargo xtask publish --registry /srv/candidate --publisher-key /secure/publisher.key .cuda-aot/rebuild/build

The release is usually published first into a candidate registry folder with
`cargo xtask publish --awaiting-rebuild` (clients refuse it until the trust root's builder
threshold is met). The rebuild writes into --out: tree/ (the recorded sources), cache/ (its own
empty build cache) and build/ (the rebuilt output with the co-signed statement), which the
publisher then publishes; the blobs and manifests are the ones already in the registry, so only
a new index naming the co-signed statement is written.

A candidate served over HTTP or pushed to an OCI registry is mirrored first, sources included:
  cargo xtask sync --from URL --to DIR --awaiting-rebuild

Nothing the build records names the machine, path, user or clock, so a rebuild elsewhere gives
the same bytes when the toolkit pins and the host compiler are the recorded ones; a different
host compiler is named as a different build definition.")]
pub struct Args {
    #[command(flatten)]
    at: RegistryArgs,
    /// This builder's private key file: a builder key the trust root lists, other than the
    /// keys that already signed the statement.
    #[arg(long, value_name = "FILE", env = "CUDA_AOT_BUILDER_KEY")]
    builder_key: PathBuf,
    /// Where the rebuild goes (tree/, cache/, build/); emptied first when an earlier rebuild
    /// made it [default: .cuda-aot/rebuild of the project].
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Where pinned toolkits are unpacked [default: .cuda-aot/toolkit of the project].
    #[arg(long, value_name = "DIR", env = "CUDA_AOT_TOOLKIT_DIR")]
    toolkit_dir: Option<PathBuf>,
    /// Parallel nvcc jobs [default: the number of available cores].
    #[arg(short = 'j', long = "jobs", value_name = "N")]
    jobs: Option<usize>,
}

impl Args {
    /// Runs the task.
    pub fn run(self) -> Result<()> {
        let registry = self.at.registry();
        if !matches!(Target::of(&registry), Target::Dir(_)) {
            return Err(fail(
                format!(
                    "{}: rebuild reads a registry folder, not a URL",
                    registry.display()
                ),
                "copy the candidate registry folder to this machine (it is plain files) and pass that folder to --registry",
            ));
        }
        let trust = self.at.trust_file()?;
        let key = devkeys::read_key(&self.builder_key)?;
        let out = self
            .out
            .clone()
            .unwrap_or_else(|| paths::work_dir().join("rebuild"));

        // 1. The registry, verified as clients do, the builder threshold aside.
        let opts = Options {
            awaiting_rebuild: true,
            limits: crate::limits::limits(),
            ..Options::default()
        };
        let state = paths::state_file(&registry)?;
        let verified = verify_registry(&registry, &trust, &state, &opts, SaveState::No)?;
        let index = &verified.index;
        let (file, statement) = the_statement(index, &registry, &key)?;
        let statement_bytes = std::fs::read(registry.join(layout::statement(&file)))
            .with_context(|| format!("reading the build statement {}", file.short()))?;

        // 2. The recorded sources, laid out below a folder of this rebuild's own.
        prepare_out(&out)?;
        let tree = out.join("tree");
        let src = DirSource::new(&registry);
        let spec = match fetch_sources(index, &src, &statement.predicate, &tree) {
            Ok(spec) => spec,
            Err(e) => {
                // Nothing half laid out stays behind.
                let _ = std::fs::remove_dir_all(&tree);
                return Err(e);
            }
        };
        eprintln!(
            "fetched the spec and {} source file(s) of build statement {} into {}",
            statement.predicate.sources().len() - 1,
            file.short(),
            tree.display()
        );

        // 3. The recorded build, with an empty cache of its own: every job compiles here.
        let build_out = out.join("build");
        let opts = self.build_options(&statement.predicate, &tree, spec, &out, &build_out);
        let report = build::run_build(&opts)?;
        eprintln!(
            "rebuilt {} module(s) with {} nvcc run(s) in {:.1}s",
            report.modules.len(),
            report.nvcc_runs,
            report.wall.as_secs_f64()
        );

        // 4. Compare and co-sign (which checks the statement byte for byte).
        let sections = differing_sections(&registry, &statement, &build_out)?;
        cuda_aot::fs::write_atomic(&outdir::statement_path(&build_out), &statement_bytes)
            .context("writing the statement beside the rebuild")?;
        let (n, signatures) = match sign::co_sign_output(&build_out, &key) {
            Ok(done) => done,
            Err(e) => {
                outdir::remove_statement(&build_out)?;
                if !sections.is_empty() {
                    eprintln!(
                        "the rebuild differs from what the statement attests; first differing section of each differing blob:\n{}",
                        sections.join("\n")
                    );
                }
                return Err(e);
            }
        };
        eprintln!(
            "bit-identical rebuild: co-signed build statement {} over {n} manifest(s) with builder key {} ({signatures} signatures now)\nnext: {} publish --registry {} {}",
            file.short(),
            key.public().key_id().short(),
            tool(),
            paths::shell(&registry),
            paths::shell(&build_out)
        );
        Ok(())
    }

    fn build_options(
        &self,
        p: &Provenance,
        tree: &Path,
        spec: PathBuf,
        out: &Path,
        build_out: &Path,
    ) -> BuildOptions {
        let def = &p.build_definition;
        let ext = &def.external_parameters;
        let choice = match def.internal_parameters.toolkit.source.as_str() {
            "system" => ToolkitChoice::System,
            _ => ToolkitChoice::Pinned,
        };
        // The pins the build used: the project's pin file when it recorded one, else the
        // pins built into the tool (the build definition's wheel list checks either).
        let pins = p
            .sources()
            .into_iter()
            .map(|(d, ..)| d.name.as_str())
            .find(|n| *n == "manifests/toolchain.toml" || n.ends_with("/manifests/toolchain.toml"))
            .map_or(Pins::Builtin, |n| Pins::File(tree.join(n)));
        let mut toolkit = ToolchainOptions::new(choice);
        toolkit.pins = pins;
        if let Some(d) = &self.toolkit_dir {
            toolkit.toolkit_dir = d.clone();
        }
        let mut o = BuildOptions {
            spec,
            out: build_out.to_path_buf(),
            cache: out.join("cache"),
            modules: ext.modules.clone(),
            targets: ext.targets.clone(),
            toolkit,
            channel: ext.channel,
            remote: None,
            shard: None,
            ..BuildOptions::default()
        };
        if let Some(j) = self.jobs {
            o.jobs = j.max(1);
        }
        o
    }
}

/// The one in-toto build statement the index lists, when this key may co-sign it.
fn the_statement(
    index: &VerifiedIndex,
    registry: &Path,
    key: &SecretKey,
) -> Result<(cuda_aot::Digest, Statement)> {
    let builds = index.builds();
    let [build] = builds.as_slice() else {
        return Err(fail(
            format!(
                "{}: index v{} lists {} build statements; rebuild co-signs a release of one",
                registry.display(),
                index.index().version,
                builds.len()
            ),
            "publish the release without --keep-unlisted (one build statement), then rebuild it",
        ));
    };
    let Some(statement) = build.statement else {
        return Err(fail(
            format!(
                "{}: build statement {} is of the earlier cuda-aot/build/v1 form, which records no provenance to rebuild from",
                registry.display(),
                build.file.short()
            ),
            "build, sign and publish the release again with this version of the tool: it records the provenance a rebuild starts from (docs/trust.md, \"Earlier registries\")",
        ));
    };
    let me = key.public().key_id();
    let builders = &index.root().root().roles.builder.keys;
    if !builders.contains(&key.public()) {
        return Err(fail(
            format!(
                "builder key {} is not a builder key of trust root v{}: its signature would not count",
                me.short(),
                index.root().root().version
            ),
            "co-sign with a builder key the trust root lists (--builder-key), or rotate the trust root to list this one (cargo xtask trust-root)",
        ));
    }
    if build.signers.contains(&me) {
        return Err(fail(
            format!(
                "builder key {} already signed build statement {}: a second signature by the same key does not count",
                me.short(),
                build.file.short()
            ),
            "rebuild on another machine with another builder key the trust root lists",
        ));
    }
    Ok((build.file, statement.clone()))
}

/// Empties `out` when it is an earlier rebuild's folder (or absent or empty), and marks it.
fn prepare_out(out: &Path) -> Result<()> {
    let is_ours = out.join(MARKER).is_file();
    let empty = std::fs::read_dir(out).map_or(true, |mut d| d.next().is_none());
    if out.exists() && !is_ours && !empty {
        return Err(fail(
            format!(
                "{} holds files that are not an earlier rebuild's; rebuild writes only into an empty folder or one it made",
                out.display()
            ),
            "pass another folder with --out, or empty this one",
        ));
    }
    for sub in ["tree", "cache", "build"] {
        let p = out.join(sub);
        if p.exists() {
            std::fs::remove_dir_all(&p).with_context(|| format!("emptying {}", p.display()))?;
        }
    }
    paths::prepare(out)?;
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    files::write(&out.join(MARKER), b"a folder of cargo xtask rebuild\n")
}

/// Writes every source the verified statement names (read from the registry, size and
/// blake3 checked) below `tree`; returns the spec's path there.
fn fetch_sources(
    index: &VerifiedIndex,
    src: &DirSource,
    p: &Provenance,
    tree: &Path,
) -> Result<PathBuf> {
    let sources = index.sources(src).map_err(|e| {
        fail(
            format!("{e}"),
            "the registry lacks or altered a source the build statement names: publish the release again from its signed output (cargo xtask publish), then rebuild",
        )
    })?;
    // Every name checked before anything is written.
    let mut placed: BTreeMap<PathBuf, &str> = BTreeMap::new();
    for s in &sources {
        let rel = tree_path(&s.name)?;
        if let Some((_, other)) = placed
            .iter()
            .find(|(q, _)| q.starts_with(&rel) || rel.starts_with(q))
        {
            return Err(fail(
                format!(
                    "the provenance names {:?} and {:?}, which cannot both be laid out",
                    cuda_aot::error::escape_untrusted(&s.name),
                    cuda_aot::error::escape_untrusted(other)
                ),
                "the registry's build statement is not one cuda-aot wrote: do not rebuild or co-sign it",
            ));
        }
        placed.insert(rel, &s.name);
    }
    let spec = tree_path(&p.build_definition.external_parameters.spec.name)?;
    if !placed.contains_key(&spec) {
        return Err(fail(
            format!(
                "the provenance's spec {:?} is not among its sources",
                cuda_aot::error::escape_untrusted(
                    &p.build_definition.external_parameters.spec.name
                )
            ),
            "the registry's build statement is not one cuda-aot wrote: do not rebuild or co-sign it",
        ));
    }
    for s in &sources {
        let path = tree.join(tree_path(&s.name)?);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        files::write(&path, &s.bytes)?;
    }
    Ok(tree.join(spec))
}

/// A recorded source name as a path below the rebuild's tree: relative, plain components
/// only (no `..`, `.`, root or drive, no backslash, no empty component).
fn tree_path(name: &str) -> Result<PathBuf> {
    let p = Path::new(name);
    let plain = !name.is_empty()
        && !name.contains('\\')
        && !name.split('/').any(|c| matches!(c, "" | "." | ".."))
        && p.components().all(|c| matches!(c, Component::Normal(_)));
    if !plain {
        return Err(fail(
            format!(
                "the provenance names a source {:?}, which is not a plain relative path below the source root; nothing was written",
                cuda_aot::error::escape_untrusted(name)
            ),
            "the registry's build statement is not one cuda-aot wrote: do not rebuild or co-sign it",
        ));
    }
    Ok(p.to_path_buf())
}

/// For each blob of the rebuild whose blake3 is not the statement's: its subject name and
/// the first section where the registry's bytes and the rebuild's differ.
fn differing_sections(
    registry: &Path,
    statement: &Statement,
    build_out: &Path,
) -> Result<Vec<String>> {
    let signed: BTreeMap<&str, cuda_aot::Digest> = statement
        .subject
        .iter()
        .filter_map(|s| Some((s.name.as_str(), s.digest.blake3()?)))
        .collect();
    let mut lines = Vec::new();
    for (m, _, blob) in outdir::read_output(build_out)? {
        let [name, _] = subject_names(&m.identity.module, m.identity.sm, m.identity.kind);
        let Some(d) = signed.get(name.as_str()) else {
            continue;
        };
        if *d == m.module_digest {
            continue;
        }
        // The registry's blob was verified above (size, blake3, content).
        let theirs = std::fs::read(registry.join(layout::blob(d)))
            .with_context(|| format!("reading the registry's blob {name}"))?;
        lines.push(format!("  {name}: {}", first_difference(&theirs, &blob)));
    }
    Ok(lines)
}

/// Where two blobs first differ: the ELF section (in section-table order) and the offset
/// in it, or the byte offset when either is not an ELF file.
pub fn first_difference(signed: &[u8], rebuilt: &[u8]) -> String {
    use object::{Object, ObjectSection};
    let at_byte = || {
        let i = signed
            .iter()
            .zip(rebuilt)
            .position(|(a, b)| a != b)
            .unwrap_or(signed.len().min(rebuilt.len()));
        format!(
            "differs from byte {i} ({} bytes signed, {} rebuilt)",
            signed.len(),
            rebuilt.len()
        )
    };
    let (Ok(a), Ok(b)) = (object::File::parse(signed), object::File::parse(rebuilt)) else {
        return at_byte();
    };
    let sections = |f: &object::File| -> Vec<(String, Vec<u8>)> {
        f.sections()
            .map(|s| {
                let name = s.name().unwrap_or("?").to_string();
                (name, s.data().map(<[u8]>::to_vec).unwrap_or_default())
            })
            .collect()
    };
    let (sa, sb) = (sections(&a), sections(&b));
    // By name, in the signed file's order; the name and symbol tables last (they differ
    // whenever any section is added or renamed).
    let tables = |n: &str| matches!(n, ".shstrtab" | ".strtab" | ".symtab");
    let order = sa
        .iter()
        .filter(|(n, _)| !tables(n))
        .chain(sa.iter().filter(|(n, _)| tables(n)));
    for (name, da) in order {
        let Some((_, db)) = sb.iter().find(|(n, _)| n == name) else {
            return format!("section {name} is signed, not in the rebuild");
        };
        if da != db {
            let at = da
                .iter()
                .zip(db)
                .position(|(x, y)| x != y)
                .unwrap_or(da.len().min(db.len()));
            return format!(
                "first differing section {name} at offset {at} ({} bytes signed, {} rebuilt)",
                da.len(),
                db.len()
            );
        }
    }
    if let Some((name, _)) = sb.iter().find(|(n, _)| !sa.iter().any(|(m, _)| m == n)) {
        return format!("section {name} is in the rebuild, not signed");
    }
    format!("every section is equal; {}", at_byte())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_relative_names_are_laid_out() {
        for ok in ["manifests/release.toml", "kernels/cuda/a.cu", "x"] {
            assert_eq!(tree_path(ok).unwrap(), PathBuf::from(ok));
        }
        for bad in [
            "",
            "/etc/passwd",
            "../outside",
            "a/../../b",
            "a/./b",
            "./a",
            "a//b",
            "a/",
            "a\\..\\b",
        ] {
            assert!(tree_path(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_first_difference_outside_elf_is_a_byte_offset() {
        assert_eq!(
            first_difference(b"abcd", b"abXd"),
            "differs from byte 2 (4 bytes signed, 4 rebuilt)"
        );
        assert_eq!(
            first_difference(b"abc", b"abcd"),
            "differs from byte 3 (3 bytes signed, 4 rebuilt)"
        );
    }
}
