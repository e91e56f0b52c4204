//! Debian packages from the signed archive, without root and without touching the
//! system's apt state: a private apt folder (lists, cache, lock) in the per-user cache,
//! the machine's own apt sources, and the packages' sha256 read from the signed index.
//!
//! Why no exact version pins: Debian removes a package version from the archive when a
//! security update replaces it, so an exact pin breaks every fresh machine at every
//! update. apt already checks each `.deb` against the `Packages` index whose hash the
//! archive key signed (`InRelease`), so the robust pin is the package name, the Debian
//! release (its suites) and the upstream version; the Debian revision (`+deb12uN`) is
//! whatever the signed index serves on the day, and the version and sha256 used are
//! recorded beside the unpacked files.

use anyhow::{Context, Result, bail};
use sha2::Digest as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime};

use crate::advice::fail;

/// Lists older than this are refreshed (a failed refresh keeps the old ones).
const LIST_MAX_AGE: Duration = Duration::from_secs(24 * 3600);

/// A package version the signed index offers: what `ensure` downloads and records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    /// The Debian version, e.g. `1.22.1-9+deb12u11`.
    pub version: String,
    /// The suite that lists it, e.g. `bookworm-security`.
    pub suite: String,
    /// The `.deb`'s sha256 as the signed index gives it.
    pub sha256: String,
}

/// apt run on a private state folder: `Dir::State::Lists`, `Dir::Cache` and an empty
/// dpkg status live under `dir`, the sources are the machine's own.
pub struct Apt {
    dir: PathBuf,
}

impl Apt {
    /// apt state under `dir` (created on first use).
    pub fn new(dir: PathBuf) -> Result<Apt> {
        for d in ["lists/partial", "cache/archives/partial"] {
            std::fs::create_dir_all(dir.join(d))
                .with_context(|| format!("creating {}", dir.join(d).display()))?;
        }
        let status = dir.join("status");
        if !status.exists() {
            std::fs::write(&status, b"")
                .with_context(|| format!("creating {}", status.display()))?;
        }
        Ok(Apt { dir })
    }

    fn command(&self, tool: &str) -> Command {
        let mut cmd = Command::new(tool);
        let d = &self.dir;
        let opt = |k: &str, v: &Path| format!("{k}={}", v.display());
        cmd.arg("-q")
            .arg("-o")
            .arg(opt("Dir::State::Lists", &d.join("lists")))
            .arg("-o")
            .arg(opt("Dir::Cache", &d.join("cache")))
            .arg("-o")
            .arg(opt("Dir::State::status", &d.join("status")))
            // Keep apt's binary package cache, which container images often turn off
            // (parsing the lists again costs a second per call).
            .args(["-o", "Dir::Cache::pkgcache=pkgcache.bin"])
            .args(["-o", "Dir::Cache::srcpkgcache=srcpkgcache.bin"])
            .args(["-o", "Acquire::Languages=none"])
            .args([
                "-o",
                "Acquire::IndexTargets::deb::DEP-11::DefaultEnabled=false",
            ])
            .args([
                "-o",
                "Acquire::IndexTargets::deb::DEP-11-icons::DefaultEnabled=false",
            ]);
        if running_as_root() {
            // As root apt drops to `_apt` for downloads, which cannot write a private
            // folder of root's; the signature checks do not depend on that user.
            cmd.args(["-o", "APT::Sandbox::User=root"]);
        }
        cmd.env("LC_ALL", "C");
        cmd
    }

    fn lists_age(&self) -> Option<Duration> {
        let mut newest: Option<SystemTime> = None;
        for e in std::fs::read_dir(self.dir.join("lists")).ok()?.flatten() {
            let name = e.file_name();
            if name.to_string_lossy().ends_with("InRelease") {
                let t = e.metadata().ok()?.modified().ok()?;
                newest = Some(newest.map_or(t, |n| n.max(t)));
            }
        }
        newest.map(|t| t.elapsed().unwrap_or_default())
    }

    /// Downloads the signed indexes of the machine's sources into the private lists.
    pub fn update(&self) -> Result<()> {
        eprintln!(
            "servers: apt-get update (private lists in {})",
            self.dir.display()
        );
        let out = self
            .command("apt-get")
            .arg("update")
            .output()
            .context("running apt-get (the servers are Debian packages)")?;
        // apt-get update exits 0 even when a source failed; its `W:`/`E:` lines say so.
        let err = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() || err.lines().any(|l| l.starts_with("E:")) {
            return Err(fail(
                format!("apt-get update failed: {}", err.trim()),
                "check the machine's apt sources (Debian 12: /etc/apt/sources.list.d) and that the package registry is reachable, then run `cargo xtask servers` again",
            ));
        }
        Ok(())
    }

    /// Refreshes the lists when there are none, or when they are older than a day (a
    /// failed refresh of lists that exist is a warning: they are still signed).
    pub fn refresh_if_stale(&self) -> Result<()> {
        match self.lists_age() {
            None => self.update(),
            Some(age) if age > LIST_MAX_AGE => {
                if let Err(e) = self.update() {
                    eprintln!(
                        "servers: warning: {e:#}; using the lists of {} h ago",
                        age.as_secs() / 3600
                    );
                }
                Ok(())
            }
            Some(_) => Ok(()),
        }
    }

    /// The newest version of `name` that a suite of `suites` lists and whose version
    /// starts with `upstream-` (or `upstream+`), with its sha256 from the signed index.
    pub fn candidate(&self, name: &str, upstream: &str, suites: &[String]) -> Result<Candidate> {
        let out = self
            .command("apt-cache")
            .args(["policy", name])
            .output()
            .context("running apt-cache")?;
        let text = String::from_utf8_lossy(&out.stdout);
        let table = parse_policy(&text);
        let (version, suite) = pick(&table, name, upstream, suites)?;
        let show = self
            .command("apt-cache")
            .args(["show", &format!("{name}={version}")])
            .output()
            .context("running apt-cache show")?;
        let sha256 = String::from_utf8_lossy(&show.stdout)
            .lines()
            .find_map(|l| {
                l.strip_prefix("SHA256: ")
                    .map(|s| s.trim().to_ascii_lowercase())
            })
            .filter(|s| s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit()))
            .with_context(|| format!("apt-cache show {name}={version} gives no SHA256"))?;
        Ok(Candidate {
            version,
            suite,
            sha256,
        })
    }

    /// Downloads `name=version` into `into` (apt checks it against the signed index),
    /// returning the `.deb`'s path.
    pub fn download(&self, name: &str, version: &str, into: &Path) -> Result<PathBuf> {
        let spec = format!("{name}={version}");
        eprintln!("servers: apt-get download {spec}");
        let out = self
            .command("apt-get")
            .args(["download", &spec])
            .current_dir(into)
            .output()
            .context("running apt-get download")?;
        if !out.status.success() {
            bail!(
                "apt-get download {spec}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        std::fs::read_dir(into)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .find(|p| p.extension().is_some_and(|x| x == "deb"))
            .with_context(|| format!("apt-get download {spec} wrote no .deb"))
    }
}

/// The first (newest) row of `table` that a suite of `suites` lists and whose version is
/// `upstream` with a Debian revision (`upstream-…` or `upstream+…`).
fn pick(
    table: &[(String, String)],
    name: &str,
    upstream: &str,
    suites: &[String],
) -> Result<(String, String)> {
    let allowed =
        |v: &str, suite: &str| suites.iter().any(|s| s == suite) && has_upstream(v, upstream);
    if let Some(row) = table.iter().find(|(v, s)| allowed(v, s)) {
        return Ok(row.clone());
    }
    let offered: Vec<String> = table.iter().map(|(v, s)| format!("{v} ({s})")).collect();
    Err(fail(
        format!(
            "no version {upstream}-* of {name} in the signed indexes of {} (offered: {})",
            suites.join(", "),
            if offered.is_empty() {
                "none".to_string()
            } else {
                offered.join(", ")
            }
        ),
        format!(
            "if Debian moved {name} to a new upstream version, set `upstream` in manifests/servers.toml to it; \
             if the machine is not Debian 12, run the network tests on one that is"
        ),
    ))
}

/// Whether the Debian version `v` is upstream version `upstream` with a Debian revision
/// (`1.22.1` takes `1.22.1-9+deb12u11` and `2.8.2+ds1`'s `2.8.2+ds1-1`, never `1.22.10-1`).
/// `*` takes any version; `15.*` takes every `15.N` (`15.20-0+deb12u1`): for PostgreSQL, whose minor releases
/// replace each other in the security archive while the major version fixes the data
/// format.
fn has_upstream(v: &str, upstream: &str) -> bool {
    // `*`: whatever the signed index serves (Chromium, whose security updates move it
    // to a new major version every few weeks).
    if upstream == "*" {
        return true;
    }
    let revision = |r: &str| r.starts_with(['-', '+']);
    match upstream.strip_suffix(".*") {
        Some(major) => v
            .strip_prefix(major)
            .and_then(|r| r.strip_prefix('.'))
            .is_some_and(|r| {
                let digits = r.bytes().take_while(u8::is_ascii_digit).count();
                digits > 0 && revision(&r[digits..])
            }),
        // A native package (datefudge `1.24`) has no Debian revision.
        None => v == upstream || v.strip_prefix(upstream).is_some_and(revision),
    }
}

/// `(version, suite)` rows of `apt-cache policy NAME`'s version table, newest first.
fn parse_policy(text: &str) -> Vec<(String, String)> {
    let mut rows = Vec::new();
    let mut version: Option<String> = None;
    let mut in_table = false;
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with("Version table:") {
            in_table = true;
            continue;
        }
        if !in_table || t.is_empty() {
            continue;
        }
        let fields: Vec<&str> = t.trim_start_matches("*** ").split_whitespace().collect();
        // A version line: `1.22.1-9+deb12u11 500`; a source line: `500 URI SUITE/COMP ARCH Packages`.
        match fields.as_slice() {
            [v, prio] if prio.parse::<i64>().is_ok() => version = Some(v.to_string()),
            [prio, _uri, dist, ..] if prio.parse::<i64>().is_ok() => {
                if let Some(v) = &version {
                    let suite = dist.split('/').next().unwrap_or(dist);
                    rows.push((v.clone(), suite.to_string()));
                }
            }
            _ => {}
        }
    }
    rows
}

/// The sha256 of a file, lowercase hex.
pub fn sha256_file(p: &Path) -> Result<String> {
    let bytes = std::fs::read(p).with_context(|| format!("reading {}", p.display()))?;
    Ok(hex::encode(sha2::Sha256::digest(&bytes)))
}

/// Whether this process runs as root.
pub fn running_as_root() -> bool {
    rustix::process::geteuid().is_root()
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: &str = "nginx:
  Installed: (none)
  Candidate: 1.22.1-9+deb12u11
  Version table:
     1.22.1-9+deb12u11 500
        500 http://mirror.example/debian-security bookworm-security/main amd64 Packages
     1.22.1-9+deb12u9 500
        500 http://mirror.example/debian bookworm/main amd64 Packages
     1.26.0-1 100
        100 http://mirror.example/debian bookworm-backports/main amd64 Packages
 *** 1.21.0-1 100
        100 /var/lib/dpkg/status
";

    #[test]
    fn the_policy_table_reads_as_version_and_suite_newest_first() {
        assert_eq!(
            parse_policy(POLICY),
            [
                ("1.22.1-9+deb12u11", "bookworm-security"),
                ("1.22.1-9+deb12u9", "bookworm"),
                ("1.26.0-1", "bookworm-backports"),
            ]
            .map(|(a, b)| (a.to_string(), b.to_string()))
        );
        assert!(parse_policy("nginx:\n  Installed: (none)\n  Candidate: (none)\n").is_empty());
    }

    #[test]
    fn the_pick_is_the_newest_of_the_release_with_the_pinned_upstream() {
        let table = parse_policy(POLICY);
        let bookworm: Vec<String> = ["bookworm", "bookworm-updates", "bookworm-security"]
            .map(String::from)
            .to_vec();
        let got = pick(&table, "nginx", "1.22.1", &bookworm).unwrap();
        assert_eq!(
            got,
            ("1.22.1-9+deb12u11".into(), "bookworm-security".into())
        );
        // Backports (another suite) and another upstream version are never taken.
        let only_main = vec!["bookworm".to_string()];
        assert_eq!(
            pick(&table, "nginx", "1.22.1", &only_main).unwrap().0,
            "1.22.1-9+deb12u9"
        );
        // `1.22.10` is not `1.22.1` with a revision.
        let other = [("1.22.10-1".to_string(), "bookworm".to_string())];
        let err = pick(&other, "nginx", "1.22.1", &bookworm).unwrap_err();
        assert!(
            format!("{err:#}").contains("offered: 1.22.10-1 (bookworm)"),
            "{err:#}"
        );
        assert!(crate::advice::fix_for(&err).unwrap().contains("upstream"));
        // A major version takes its newest minor release, and no other major.
        let pg = [
            (
                "15.20-0+deb12u1".to_string(),
                "bookworm-security".to_string(),
            ),
            ("15.18-0+deb12u1".to_string(), "bookworm".to_string()),
        ];
        assert_eq!(
            pick(&pg, "postgresql-15", "15.*", &bookworm).unwrap().0,
            "15.20-0+deb12u1"
        );
        assert!(pick(&pg, "postgresql-15", "1.*", &bookworm).is_err());
        assert!(!has_upstream("150.1-1", "15.*") && !has_upstream("15.-1", "15.*"));
        assert!(!has_upstream("15.2.x-1", "15.*") && has_upstream("15.2+b1", "15.*"));
        assert!(has_upstream("1.24", "1.24") && !has_upstream("1.245", "1.24"));
        // `*` (Chromium): the newest the release serves, whatever its version.
        let chromium = [
            (
                "156.0.8078.114-1~deb12u1".to_string(),
                "bookworm-security".to_string(),
            ),
            (
                "147.0.7727.137-1~deb12u1".to_string(),
                "bookworm".to_string(),
            ),
        ];
        assert_eq!(
            pick(&chromium, "chromium-common", "*", &bookworm)
                .unwrap()
                .0,
            "156.0.8078.114-1~deb12u1"
        );
        let err = pick(&table, "nginx", "1.26.0", &bookworm).unwrap_err();
        assert!(
            format!("{err:#}").contains("no version 1.26.0-* of nginx"),
            "{err:#}"
        );
    }
}
