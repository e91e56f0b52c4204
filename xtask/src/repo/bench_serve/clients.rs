//! The honest clients of bench-serve (with the `net` feature): cold verified syncs and
//! GETs of every file, their samples, and the release files every copy is checked against.

use anyhow::Result;
use cuda_aot::Digest;
use cuda_aot_registry::remote::{HttpOptions, HttpRemote};
use cuda_aot_registry::sync::{STAGING_DIR, SyncOptions, sync};
use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Args;

/// Samples of one (server, workload).
#[derive(Default)]
pub(super) struct Samples {
    pub(super) latencies: Vec<Duration>,
    pub(super) bytes: u64,
    pub(super) failures: usize,
    pub(super) corrupt: usize,
    pub(super) wall: Duration,
    pub(super) first_error: Option<String>,
}

impl Samples {
    pub(super) fn ops(&self) -> usize {
        self.latencies.len()
    }
    pub(super) fn per_sec(&self) -> f64 {
        self.ops() as f64 / self.wall.as_secs_f64().max(1e-9)
    }
    pub(super) fn mb_per_sec(&self) -> f64 {
        self.bytes as f64 / 1e6 / self.wall.as_secs_f64().max(1e-9)
    }
    pub(super) fn pct_ms(&self, p: f64) -> f64 {
        let v: Vec<f64> = self
            .latencies
            .iter()
            .map(|d| d.as_secs_f64() * 1e3)
            .collect();
        crate::repo::stats::percentile(&v, p)
    }
    /// The samples of every client thread, merged, with the wall time since `start`.
    pub(super) fn join(
        handles: Vec<std::thread::JoinHandle<Samples>>,
        start: Instant,
    ) -> Result<Samples> {
        let mut all = Samples::default();
        for h in handles {
            all.merge(h.join().map_err(|_| anyhow::anyhow!("a client panicked"))?);
        }
        all.wall = start.elapsed();
        Ok(all)
    }
    pub(super) fn merge(&mut self, o: Samples) {
        self.latencies.extend(o.latencies);
        self.bytes += o.bytes;
        self.failures += o.failures;
        self.corrupt += o.corrupt;
        self.wall += o.wall;
        if self.first_error.is_none() {
            self.first_error = o.first_error;
        }
    }
}

impl Args {
    /// `clients` threads, each running `syncs` cold syncs with a fresh client into empty
    /// folders; each copy is compared with the reference.
    pub(super) fn sync_load(
        &self,
        url: &str,
        anchor: &[u8],
        reference: &Arc<BTreeMap<String, (u64, Digest)>>,
        base: &Path,
    ) -> Result<Samples> {
        let start = Instant::now();
        let handles: Vec<_> = (0..self.clients)
            .map(|c| {
                let (url, anchor, reference) =
                    (url.to_string(), anchor.to_vec(), reference.clone());
                let dir = base.join(format!("c{c}"));
                let syncs = self.syncs;
                std::thread::spawn(move || {
                    let mut s = Samples::default();
                    for k in 0..syncs {
                        let target = dir.join(k.to_string());
                        let t = Instant::now();
                        let result = HttpRemote::new(&url, HttpOptions::default())
                            .and_then(|r| sync(&r, &target, &anchor, &SyncOptions::default()));
                        let took = t.elapsed();
                        match result {
                            Ok(rep) => {
                                s.latencies.push(took);
                                s.bytes += rep.bytes_fetched;
                                s.corrupt += corrupt_files(&target, &reference);
                            }
                            Err(e) => {
                                s.failures += 1;
                                s.first_error.get_or_insert(e.to_string());
                            }
                        }
                        let _ = std::fs::remove_dir_all(&target);
                    }
                    s
                })
            })
            .collect();
        Samples::join(handles, start)
    }

    /// `clients` threads, each with one keep-alive client, GETting every file of the
    /// release `get_rounds` times; every body is hashed and compared.
    pub(super) fn get_load(
        &self,
        url: &str,
        reference: &Arc<BTreeMap<String, (u64, Digest)>>,
    ) -> Result<Samples> {
        let start = Instant::now();
        let handles: Vec<_> = (0..self.clients)
            .map(|_| {
                let (url, reference, rounds) =
                    (url.to_string(), reference.clone(), self.get_rounds);
                std::thread::spawn(move || {
                    let mut s = Samples::default();
                    cuda_aot_registry::remote::install_tls_provider();
                    let client = match reqwest::blocking::Client::builder()
                        .timeout(Duration::from_secs(30))
                        .build()
                    {
                        Ok(c) => c,
                        Err(e) => {
                            s.failures += 1;
                            s.first_error = Some(e.to_string());
                            return s;
                        }
                    };
                    for _ in 0..rounds {
                        for (path, (len, digest)) in reference.iter() {
                            let t = Instant::now();
                            let body = (|| -> std::result::Result<Vec<u8>, String> {
                                let mut r = client
                                    .get(format!("{url}{path}"))
                                    .send()
                                    .map_err(|e| e.to_string())?;
                                if !r.status().is_success() {
                                    return Err(format!("{path}: HTTP {}", r.status()));
                                }
                                let mut b = Vec::with_capacity(*len as usize);
                                r.read_to_end(&mut b).map_err(|e| e.to_string())?;
                                Ok(b)
                            })();
                            let took = t.elapsed();
                            match body {
                                Ok(b) => {
                                    s.latencies.push(took);
                                    s.bytes += b.len() as u64;
                                    if Digest::of(&b) != *digest {
                                        s.corrupt += 1;
                                    }
                                }
                                Err(e) => {
                                    s.failures += 1;
                                    s.first_error.get_or_insert(e);
                                }
                            }
                        }
                    }
                    s
                })
            })
            .collect();
        Samples::join(handles, start)
    }
}

/// Every file of a synced folder (staging excluded): size and blake3.
pub(super) fn files_of(dir: &Path) -> Result<BTreeMap<String, (u64, Digest)>> {
    let mut out = BTreeMap::new();
    for f in crate::files::files_under(dir)?
        .into_iter()
        .filter(|f| f.regular)
    {
        if f.rel.starts_with(STAGING_DIR) {
            continue;
        }
        let b = std::fs::read(&f.path)?;
        out.insert(f.rel, (b.len() as u64, Digest::of(&b)));
    }
    Ok(out)
}

/// Files of `dir` that differ from the reference, are missing, or are extra.
fn corrupt_files(dir: &Path, reference: &BTreeMap<String, (u64, Digest)>) -> usize {
    match files_of(dir) {
        Ok(got) => {
            let missing_or_wrong = reference
                .iter()
                .filter(|(p, v)| got.get(*p) != Some(v))
                .count();
            let extra = got.keys().filter(|p| !reference.contains_key(*p)).count();
            missing_or_wrong + extra
        }
        Err(_) => reference.len(),
    }
}
