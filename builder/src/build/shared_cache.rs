//! The shared build cache (`--remote-cache`, issue 20): entries by identity that several
//! machines build into and take from, each signed by a builder key of the trust root and
//! taken only after the checks `verify` makes (signature, identity, digests, content), with
//! the dependency records and file sets that let a build know an entry's identity without
//! running nvcc.
//!
//! ```text
//! v1/entries/<identity hex>/entry.json     the signed cache entry (CacheEntry, builder role)
//! v1/entries/<identity hex>/manifest.json  the unsigned manifest the entry names
//! v1/entries/<identity hex>/blob           the cubin or PTX
//! v1/deps/<dependency key hex>.json        dependency records, as the local cache keeps them
//! v1/deps/<dependency key hex>.sig.json    their signature (CacheRecords, builder role)
//! v1/sets/<set hex>.json                   toolkit and system header sets (content-addressed)
//! v1/timings.json                          compile time per dependency key, for --shard
//! v1/root/<N>.root.json                    the trust roots its builders trusted (a chain)
//! ```
//!
//! A build walks the store's root chain from the root it trusts (each rotation signed by
//! the previous root's keys, as `verify` walks a registry's) and checks every signature
//! against the newest: a builder key a rotation removed signs nothing it takes.
//!
//! Records name files this machine then reads, so they are signed too: a build takes the
//! records of a job only when a builder key of its trust root signed exactly those bytes
//! for exactly that job key, and a set only when it hashes to the name a signed record
//! gives it. Nothing unsigned from the store enters the local cache. Even a signed record's
//! files are read as inputs only ([`super::inputs::digest_file`]: no link followed, no
//! blocking on a FIFO, regular files of bounded size, hashed as they stream).

use anyhow::{Context, Result, bail};
use cuda_aot::metadata::{CacheEntry, CacheRecords};
use cuda_aot::trust::VerifiedRoot;
use cuda_aot::{Digest, Identity, Manifest, SecretKey};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use super::cache::{Cache, StoredRecord};
use super::inputs::Names;

// Where entries are kept: a folder, a bucket, an OCI repository.
mod store;
// The compiled files of device-linked modules, shared like entries.
mod units;
use super::{BuildOptions, Keyed, SharedCache};
use crate::message::Progress;
use crate::{anchor, devkeys, paths};
pub use store::check_url;
#[cfg(feature = "net")]
pub use store::oci_options;
use store::{CacheStore, open_store, store_failed};

/// Byte caps of what a shared cache serves (a blob's own cap is the manifest's size, and
/// that is capped by the limits of a registry blob).
const ENTRY_LIMIT: u64 = 64 << 10;
const MANIFEST_LIMIT: u64 = 1 << 20;
const RECORDS_LIMIT: u64 = 4 << 20;

/// Where the shared cache is and how a build uses it.
#[derive(Debug, Clone)]
pub struct RemoteOptions {
    /// `file:///path` (a folder, e.g. on a shared file system), `s3://BUCKET/PREFIX` or
    /// `oci://HOST/REPOSITORY`.
    pub url: String,
    /// Read, or read-write.
    pub mode: SharedCacheMode,
    /// The trust root whose builder keys sign entries [default: the project's].
    pub trust: Option<PathBuf>,
    /// The builder key that signs added entries (read-write) [default: the dev builder key
    /// when the trust root is the project's dev root].
    pub key: Option<PathBuf>,
    /// How long one request may wait for the store before it counts as failed (S3: its
    /// retries included; OCI: each attempt).
    pub timeout: Duration,
}

/// How a build uses the shared build cache (`--remote-cache-mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum SharedCacheMode {
    /// Take entries; never write (no private key needed).
    #[default]
    Read,
    /// Take entries, and after a build that succeeded add every entry, record and set the
    /// shared cache lacks, signed with a builder key.
    ReadWrite,
}

/// A shared cache this build of the library cannot reach: `s3://` and `oci://` need the
/// crate's `net` feature. A command line answers it by running again with that part.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NeedsNet {
    /// What asked for it, for messages (`--remote-cache s3://…`).
    pub what: String,
}

impl std::fmt::Display for NeedsNet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} needs the network stack, which this build of the tool leaves out",
            self.what
        )
    }
}

impl std::error::Error for NeedsNet {}

/// Why a build did not take an entry the shared cache has: what a user reads in the
/// summary, naming what was wrong.
#[derive(Debug, Clone)]
pub struct Refusal {
    /// `module target (kind)`.
    pub what: String,
    /// What was wrong with it.
    pub reason: String,
}

/// An entry taken from the shared cache: verified, not yet in the local cache.
pub struct Taken {
    /// Its manifest (identity equal to the one the build computed).
    pub manifest: Manifest,
    /// Its blob (the signed digest and size, content checked).
    pub blob: Vec<u8>,
}

/// An open shared cache.
pub struct Remote {
    url: String,
    store: Box<dyn CacheStore>,
    mode: SharedCacheMode,
    root: VerifiedRoot,
    key: Option<SecretKey>,
    refused: Mutex<Vec<Refusal>>,
    /// The host compiler's include folders (`nvcc::host_include_dirs`), asked once.
    system: std::sync::OnceLock<Vec<PathBuf>>,
    /// The first failure to read the store (records, sets, timings), if any.
    read_failed: Mutex<Option<String>>,
    /// The first request that failed after the client's own retries because the store
    /// failed ([`store_failed`]): the rest of the build asks the store nothing more (a store
    /// that is down or hangs costs one request's timeout, not one per object).
    down: Mutex<Option<String>>,
}

fn entry_dir(id: &Digest) -> String {
    format!("v1/entries/{}", id.hex())
}

impl Remote {
    /// Opens the shared cache `opts` names: reads and checks the trust root, and for
    /// read-write the builder key (which must be one of the root's builder keys).
    pub fn open(opts: &RemoteOptions) -> Result<Remote> {
        let store = open_store(&opts.url, opts.timeout)?;
        let trust = anchor::trust_file_flag(opts.trust.as_deref(), "--remote-cache-trust")?;
        let (anchor_bytes, anchor_root) = anchor::read(&trust)?;
        // The store keeps the roots its builders trusted (`v1/root/<N>.root.json`): walked
        // from this one as `verify` walks a registry's, so a builder key the newest root
        // rotated out signs nothing this build takes.
        let anchor_version = anchor_root.root().version;
        // A store that cannot be read is a store that is down (the build goes on without
        // it, as after any failed request); a root file that is no rotation is refused.
        let mut down = None;
        let root = match store::newest_root(&*store, &opts.url, anchor_root.clone()) {
            Ok(root) => root,
            Err(e @ cuda_aot::Error::Io { .. }) => {
                down = Some(format!("reading its trust roots: {e}"));
                anchor_root
            }
            Err(e) => {
                return Err(crate::advice::fail(
                    format!("shared cache {}: its trust root chain: {e:#}", opts.url),
                    "remove the root file the error names from the store (only a rotation signed by the previous root's keys belongs there), or build without --remote-cache",
                ));
            }
        };
        // Entries are trusted through the root's builder keys: not once the root expired.
        cuda_aot::verify::check_root_current(&root, &cuda_aot::verify::Options::default())
            .map_err(|e| {
                crate::advice::refix(
                    e,
                    "renew the trust root (cargo xtask trust-root --previous OLD ..., docs/trust.md) and pass it with --remote-cache-trust, or correct this machine's clock; without --remote-cache the build compiles everything here",
                )
                .context(format!(
                    "the shared build cache's trust root {}",
                    paths::shown(&trust)
                ))
            })?;
        let key = match (opts.mode, &opts.key) {
            (SharedCacheMode::Read, _) => None,
            (SharedCacheMode::ReadWrite, Some(p)) => Some(devkeys::read_key(p)?),
            (SharedCacheMode::ReadWrite, None)
                if trust == paths::dev_keys_dir().join("root.json") =>
            {
                Some(devkeys::ensure()?.builder)
            }
            (SharedCacheMode::ReadWrite, None) => {
                return Err(crate::advice::fail(
                    format!(
                        "--remote-cache-mode read-write signs what it adds, and no builder key was given for the trust root {}",
                        paths::shown(&trust)
                    ),
                    "pass --remote-cache-key FILE (a builder key the trust root lists), or use --remote-cache-mode read",
                ));
            }
        };
        if let Some(k) = &key {
            let id = k.public().key_id();
            if !root
                .root()
                .roles
                .builder
                .keys
                .iter()
                .any(|p| p.key_id() == id)
            {
                return Err(crate::advice::fail(
                    format!(
                        "the builder key {} is not a builder key of the trust root {}: entries it signed would be refused by every reader",
                        id.short(),
                        paths::shown(&trust)
                    ),
                    "pass the builder key the trust root lists (--remote-cache-key), or the trust root that lists this key (--remote-cache-trust)",
                ));
            }
        }
        if down.is_none() && key.is_some() && root.root().version == anchor_version {
            // The root this builder trusts, for readers that still start from an older one
            // (best effort: a reader that misses it keeps its own root).
            let _ = store::put_root(&*store, anchor_version, &anchor_bytes);
        }
        Ok(Remote {
            url: opts.url.clone(),
            store,
            mode: opts.mode,
            root,
            key,
            refused: Mutex::new(Vec::new()),
            system: std::sync::OnceLock::new(),
            read_failed: Mutex::new(down.clone()),
            down: Mutex::new(down),
        })
    }

    /// The host compiler `host`'s include folders: where a shared record may name files
    /// besides the project and the toolkit (asked of the compiler once per build).
    pub fn system_dirs(&self, host: &std::path::Path) -> &[PathBuf] {
        self.system
            .get_or_init(|| super::nvcc::host_include_dirs(host))
    }

    /// The URL it was opened from.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Whether builds add to it.
    pub fn writes(&self) -> bool {
        self.mode == SharedCacheMode::ReadWrite
    }

    /// The dependency records the shared cache has under `key` (none when it has none, or
    /// they cannot be read: the build then only misses the chance of a hit).
    ///
    /// Records are hints that name files this machine reads: they are taken only when a
    /// builder key of the trust root signed exactly these bytes for exactly this job key
    /// (`v1/deps/<key>.sig.json`, a [`CacheRecords`] envelope). Unsigned, altered or
    /// replayed records are refused (listed with the refusals) and never read further.
    pub fn records(&self, key: &Digest) -> Vec<StoredRecord> {
        match self.signed_records(key) {
            Ok(records) => records,
            Err(reason) => {
                self.refuse(format!("dependency records {}", key.short()), reason);
                Vec::new()
            }
        }
    }

    /// The records under `key` if signed ([`Remote::records`]); `Err` says why not.
    fn signed_records(&self, key: &Digest) -> std::result::Result<Vec<StoredRecord>, String> {
        let sig_path = format!("v1/deps/{}.sig.json", key.hex());
        let Some(envelope) = self.read(&sig_path, ENTRY_LIMIT) else {
            return match self.read(&format!("v1/deps/{}.json", key.hex()), RECORDS_LIMIT) {
                Some(_) => Err("unsigned: no builder signed them (no .sig.json), so they name nothing this build reads".into()),
                None => Ok(Vec::new()),
            };
        };
        let signed: CacheRecords = self
            .root
            .open::<CacheRecords>(&envelope, ENTRY_LIMIT, "cache records")
            .map_err(|e| format!("signature: {e}"))?
            .doc;
        if signed.key != *key {
            return Err(format!(
                "signed for job key {}, not for {} (records replayed under another job)",
                signed.key.short(),
                key.short()
            ));
        }
        if signed.records_size > RECORDS_LIMIT {
            return Err(format!(
                "signed records of {} bytes, past the {RECORDS_LIMIT}-byte limit",
                signed.records_size
            ));
        }
        let bytes = self
            .read(&format!("v1/deps/{}.json", key.hex()), RECORDS_LIMIT)
            .ok_or("the signed records file is missing or past the size limit")?;
        if bytes.len() as u64 != signed.records_size || Digest::of(&bytes) != signed.records {
            return Err(format!(
                "the records file is not the signed one (blake3 {} of {} bytes, signed {} of {}): altered, or being rewritten by another builder",
                Digest::of(&bytes).short(),
                bytes.len(),
                signed.records.short(),
                signed.records_size
            ));
        }
        Cache::parse_records(&bytes).ok_or_else(|| "the signed records do not parse".to_string())
    }

    /// The object at `rel`, refused when larger than `limit`; an error without asking the
    /// store once a request to it failed in this build.
    fn get(&self, rel: &str, limit: u64) -> Result<Option<Vec<u8>>> {
        let got = self.ask(rel, || self.store.get(rel, limit))?;
        match got {
            Some(b) if b.len() as u64 > limit => {
                bail!("{} {rel} is larger than {limit} bytes", self.url)
            }
            other => Ok(other),
        }
    }

    /// Writes `bytes` at `rel` (see [`Remote::get`] for a store that failed).
    fn put(&self, rel: &str, bytes: &[u8]) -> Result<()> {
        self.ask(rel, || self.store.put(rel, bytes))
    }

    /// Runs one request unless an earlier one failed; a failure marks the store down.
    fn ask<T>(&self, rel: &str, request: impl FnOnce() -> Result<T>) -> Result<T> {
        if let Some(why) = self.down() {
            bail!("not asked: the store failed earlier in this build ({why})");
        }
        request().inspect_err(|e| {
            if store_failed(e) {
                let mut down = self.down.lock().expect("store down");
                down.get_or_insert_with(|| format!("{rel}: {e:#}"));
            }
        })
    }

    /// Why the store is not asked any more in this build, if it failed.
    pub fn down(&self) -> Option<String> {
        self.down.lock().expect("store down").clone()
    }

    /// A best-effort read: `None` when there is nothing, or when the store failed (the
    /// first failure is kept for [`Remote::read_failed`]).
    fn read(&self, rel: &str, limit: u64) -> Option<Vec<u8>> {
        match self.get(rel, limit) {
            Ok(b) => b,
            Err(e) => {
                let mut first = self.read_failed.lock().expect("read failure");
                first.get_or_insert_with(|| format!("{rel}: {e:#}"));
                None
            }
        }
    }

    /// The first failure to read the store, if any: the jobs it might have given were
    /// compiled instead.
    pub fn read_failed(&self) -> Option<String> {
        self.read_failed.lock().expect("read failure").clone()
    }

    /// Copies the file set `id` into `local` when the shared cache has it intact (its
    /// content hashes to its name) and `local` does not. A set that does not is refused:
    /// listed with the refused entries (warned, counted in the summary), and the job that
    /// needed it says so in `--explain` ([`Remote::set_refused`]). `Err` is a name of the
    /// set that `allowed` refuses: the set is not taken.
    pub fn import_set(
        &self,
        local: &Cache,
        id: &Digest,
        allowed: impl Fn(&str) -> bool,
    ) -> std::result::Result<(), String> {
        if local.set(id).is_some() {
            return Ok(());
        }
        let Some(bytes) = self.read(&format!("v1/sets/{}.json", id.hex()), RECORDS_LIMIT) else {
            return Ok(());
        };
        match Cache::parse_set(&bytes, id) {
            Some(set) => {
                if let Some(f) = set.files.iter().find(|f| !allowed(&f.name)) {
                    return Err(f.name.clone());
                }
                let _ = local.put_set(&set);
            }
            None => self.refuse(set_label(id), SET_REFUSED.to_string()),
        }
        Ok(())
    }

    /// Notes a refusal of something the store holds (listed, warned, counted).
    fn refuse(&self, what: String, reason: String) {
        self.refused
            .lock()
            .expect("refusals")
            .push(Refusal { what, reason });
    }

    /// Why the shared cache's file set `id` was refused in this build, if it was.
    pub fn set_refused(&self, id: &Digest) -> Option<String> {
        let what = set_label(id);
        self.refused
            .lock()
            .expect("refusals")
            .iter()
            .any(|r| r.what == what)
            .then(|| format!("{what}: {SET_REFUSED}"))
    }

    /// The entry for `identity`, if the shared cache has one that passes every check.
    /// `Err` is why the entry it has was refused (also noted, see [`Remote::refused`]), so
    /// the job compiles; `Ok(None)`: it has none, or the store failed (said once, in
    /// [`Remote::read_failed`]).
    pub fn fetch(
        &self,
        identity: &Identity,
        what: &str,
    ) -> std::result::Result<Option<Taken>, String> {
        // A store that failed is not an entry that failed: said once, in the read failure.
        if let Some(why) = self.down() {
            let mut first = self.read_failed.lock().expect("read failure");
            first.get_or_insert(why);
            return Ok(None);
        }
        self.check(identity).inspect_err(|reason| {
            self.refused.lock().expect("refusals").push(Refusal {
                what: what.to_string(),
                reason: reason.clone(),
            });
        })
    }

    /// The checks of one entry, in the order `verify` makes them: signature, identity,
    /// manifest, blob, content. `Ok(None)`: no entry at all.
    fn check(&self, identity: &Identity) -> std::result::Result<Option<Taken>, String> {
        let id = identity.digest();
        let dir = entry_dir(&id);
        let get = |name: &str, limit: u64| {
            self.get(&format!("{dir}/{name}"), limit)
                .map_err(|e| format!("{name} cannot be read: {e:#}"))
        };
        let Some(envelope) = get("entry.json", ENTRY_LIMIT)? else {
            return match get("manifest.json", MANIFEST_LIMIT)? {
                Some(_) => Err(
                    "unsigned: it has a manifest but no entry.json (an upload that did not finish, or a removed signature)".into(),
                ),
                None => Ok(None),
            };
        };
        let entry: CacheEntry = self
            .root
            .open::<CacheEntry>(&envelope, ENTRY_LIMIT, "cache entry")
            .map_err(|e| format!("signature: {e}"))?
            .doc;
        if entry.identity != id {
            return Err(format!(
                "signed for identity {}, not for the identity {} this build computed (an entry replayed under another identity)",
                entry.identity.short(),
                id.short()
            ));
        }
        let file =
            get("manifest.json", MANIFEST_LIMIT)?.ok_or("the signed entry has no manifest.json")?;
        if file.len() as u64 != entry.manifest_size || Digest::of(&file) != entry.manifest {
            return Err(format!(
                "manifest.json is not the signed one (blake3 {} of {} bytes, signed {} of {})",
                Digest::of(&file).short(),
                file.len(),
                entry.manifest.short(),
                entry.manifest_size
            ));
        }
        let manifest: Manifest = cuda_aot::json::parse(&file, MANIFEST_LIMIT, "cached manifest")
            .map_err(|e| format!("manifest.json: {e}"))?;
        if manifest.identity != *identity || manifest.schema != Manifest::SCHEMA {
            return Err(
                "its manifest describes another identity or schema than the signed one".into(),
            );
        }
        if (manifest.module_digest, manifest.size) != (entry.blob, entry.blob_size) {
            return Err("its manifest names another blob than the signed entry".into());
        }
        let blob = get("blob", entry.blob_size)?.ok_or("the signed entry has no blob")?;
        if blob.len() as u64 != entry.blob_size || Digest::of(&blob) != entry.blob {
            return Err(format!(
                "blob is not the signed one (blake3 {} of {} bytes, signed {} of {}): altered or truncated",
                Digest::of(&blob).short(),
                blob.len(),
                entry.blob.short(),
                entry.blob_size
            ));
        }
        cuda_aot::content::check(&manifest, &blob).map_err(|e| format!("content: {e}"))?;
        Ok(Some(Taken { manifest, blob }))
    }

    /// The entries this build refused, in the order they were met.
    pub fn refused(&self) -> Vec<Refusal> {
        self.refused.lock().expect("refusals").clone()
    }

    /// The builder key this build signs with (read-write only).
    fn signer(&self) -> Result<&SecretKey> {
        self.key
            .as_ref()
            .context("adding to the shared cache needs --remote-cache-mode read-write")
    }

    /// Writes the dependency records under `key`: the local ones merged with the shared
    /// cache's signed ones (this build's first), the file sets they name, and the signature
    /// over the records file, last.
    fn put_records(&self, local: &Cache, key: &Digest, signer: &SecretKey) -> Result<()> {
        let mut records = local.records(key);
        for r in self.records(key) {
            if !records
                .iter()
                .any(|o| (&o.files, o.set) == (&r.files, r.set))
            {
                records.push(r);
            }
        }
        for set in records.iter().filter_map(|r| r.set) {
            if let Some(s) = local.set(&set)
                && self
                    .get(&format!("v1/sets/{}.json", set.hex()), RECORDS_LIMIT)?
                    .is_none()
            {
                self.put(
                    &format!("v1/sets/{}.json", set.hex()),
                    &cuda_aot::json::to_vec(&s),
                )?;
            }
        }
        let bytes = Cache::records_file(&records);
        self.put(&format!("v1/deps/{}.json", key.hex()), &bytes)?;
        // The signature last: a reader that finds it finds the records it names.
        let signed = cuda_aot::metadata::sign_doc(&CacheRecords::over(*key, &bytes), &[signer]);
        self.put(
            &format!("v1/deps/{}.sig.json", key.hex()),
            &signed.to_bytes(),
        )
    }

    /// Adds one job's result (read-write): its entry, signed, unless the shared cache
    /// already has one that passes every check; its dependency records merged with the
    /// shared ones (this build's first); the file sets they name. Returns whether it
    /// uploaded an entry.
    pub fn add(
        &self,
        local: &Cache,
        key: &Digest,
        manifest: &Manifest,
        blob: &[u8],
    ) -> Result<bool> {
        let signer = self.signer()?;
        self.put_records(local, key, signer)?;
        if matches!(self.check(&manifest.identity), Ok(Some(_))) {
            return Ok(false);
        }
        let dir = entry_dir(&manifest.identity.digest());
        let file = cuda_aot::json::to_vec(manifest);
        let entry = CacheEntry::over(manifest, &file, blob);
        let envelope = cuda_aot::metadata::sign_doc(&entry, &[signer]);
        // The blob and manifest first, the signed entry last: a reader that sees the entry
        // finds what it names.
        self.put(&format!("{dir}/blob"), blob)?;
        self.put(&format!("{dir}/manifest.json"), &file)?;
        self.put(&format!("{dir}/entry.json"), &envelope.to_bytes())?;
        Ok(true)
    }

    /// After a build that succeeded: adds (read-write) every job's entry, records and
    /// header sets the shared cache lacks, and the compile times `--shard` splits by (a
    /// whole build only); warns of what could not be read, refused or added; and says what
    /// the cache gave and took. A failed add fails only a shard, whose purpose it is.
    pub(super) fn share(
        &self,
        plan: &super::Plan,
        cache: &Cache,
        written: &super::commit::Written,
        keyed: &Keyed,
        opts: &BuildOptions,
        progress: &Progress,
    ) -> Result<SharedCache> {
        let mut uploaded = 0;
        let mut add_failed = None;
        if self.writes() {
            for ((m, (key, _)), job) in written.modules.iter().zip(keyed).zip(&plan.jobs) {
                // The manifest as written beside the blob: a reader checks its bytes
                // against the signed digest and takes it whatever its channel (the
                // reader's build sets its own).
                let blob = std::fs::read(&m.blob)
                    .with_context(|| format!("reading {}", m.blob.display()))?;
                // A device-linked module's files too: a machine that changed one of them
                // takes the others.
                let added = self.add(cache, key, &m.manifest, &blob).and_then(|up| {
                    match plan.spec.modules[job.module].is_linked() {
                        true => self.add_units(cache, plan, job).map(|_| up),
                        false => Ok(up),
                    }
                });
                match added {
                    Ok(true) => uploaded += 1,
                    Ok(false) => {}
                    // A shard's whole purpose is its upload: without it the final
                    // build would compile this part again.
                    Err(e) if opts.shard.is_some() => {
                        return Err(e.context(format!(
                            "built, but adding {} to the shared cache {} failed (the local cache and {} are complete); run the shard again",
                            m.manifest.label(),
                            self.url(),
                            opts.out.display()
                        )));
                    }
                    Err(e) => {
                        add_failed = Some(format!(
                            "adding {} failed, the rest not tried: {e:#}",
                            m.manifest.label()
                        ));
                        break;
                    }
                }
            }
        }
        if self.writes() && opts.shard.is_none() && add_failed.is_none() {
            let times: Vec<(Digest, u64)> = keyed
                .iter()
                .filter_map(|(k, _)| cache.records(k).first().map(|rec| (*k, rec.compile_ms)))
                .collect();
            if let Err(e) = self.put_timings(&times) {
                add_failed = Some(format!("writing the shard timings failed: {e:#}"));
            }
        }
        if let Some(why) = &add_failed {
            progress.warn(&format!(
                "shared cache {}: {why}. This build's output and local cache are complete and verified; the shared cache only misses what was not added (an entry is visible to readers only once its signed entry.json is written, so nothing half-added is taken). Fix: check the store, then build again with --remote-cache-mode read-write: the build is a no-op and adds what is missing",
                self.url()
            ));
        }
        let read_failed = self.read_failed();
        if let Some(why) = &read_failed {
            let after = match self.down() {
                Some(_) => " and was asked nothing more in this build",
                None => "",
            };
            progress.warn(&format!(
                "shared cache {} could not be read ({why}){after}; the jobs it might have given were compiled instead. Fix: check the store's address and credentials (--remote-cache-timeout-secs N if it is only slow)",
                self.url()
            ));
        }
        let refused = self.refused();
        for f in &refused {
            progress.warn(&format!(
                "shared cache {}: refused the entry for {}: {}; compiled it instead",
                self.url(),
                f.what,
                f.reason
            ));
        }
        progress.note(&format!(
            "shared cache {}: {} job(s) taken, {} refused, {uploaded} added",
            self.url(),
            written.shared_taken,
            refused.len()
        ));
        Ok(SharedCache {
            url: self.url().to_string(),
            taken: written.shared_taken,
            refused,
            added: uploaded,
            add_failed,
            read_failed,
        })
    }
}

/// What `v1/timings.json` holds: each job's last compile time in milliseconds, by the hex of
/// its dependency key. Written only by a whole (unsharded) read-write build, read by shard
/// builds, so every shard of one run splits the jobs by the same numbers. Unsigned: a forged
/// file can only unbalance the split; which jobs exist and what they produce never depend
/// on it.
#[derive(serde::Serialize, serde::Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct Timings {
    schema: String,
    jobs: std::collections::BTreeMap<String, u64>,
}

const TIMINGS_SCHEMA: &str = "cuda-aot/shard-timings/v1";
const TIMINGS: &str = "v1/timings.json";
/// At most this many jobs are remembered (the most recently written ones win).
const MAX_TIMINGS: usize = 100_000;

impl Remote {
    /// The compile time the shared cache's timings give for each of `keys` (`None` where it
    /// has none, or no readable timings at all).
    pub fn timings(&self, keys: &[Digest]) -> Vec<Option<u64>> {
        let t: Timings = self
            .read(TIMINGS, RECORDS_LIMIT)
            .and_then(|b| cuda_aot::json::parse(&b, RECORDS_LIMIT, "shard timings").ok())
            .filter(|t: &Timings| t.schema == TIMINGS_SCHEMA)
            .unwrap_or_default();
        keys.iter().map(|k| t.jobs.get(&k.hex()).copied()).collect()
    }

    /// Records these jobs' compile times (read-write builds of the whole release only).
    pub fn put_timings(&self, jobs: &[(Digest, u64)]) -> Result<()> {
        let mut t: Timings = self
            .get(TIMINGS, RECORDS_LIMIT)?
            .and_then(|b| cuda_aot::json::parse(&b, RECORDS_LIMIT, "shard timings").ok())
            .filter(|t: &Timings| t.schema == TIMINGS_SCHEMA)
            .unwrap_or_default();
        t.schema = TIMINGS_SCHEMA.into();
        for (k, ms) in jobs {
            t.jobs.insert(k.hex(), *ms);
        }
        while t.jobs.len() > MAX_TIMINGS {
            let first = t.jobs.keys().next().cloned().expect("non-empty");
            t.jobs.remove(&first);
        }
        self.put(TIMINGS, &cuda_aot::json::to_vec(&t))
    }
}

/// Why a shared file set is refused: its bytes are not the set its name is the digest of.
const SET_REFUSED: &str =
    "its content does not hash to its name (altered or damaged in the store), so it was not taken";

/// A file set as refusals name it.
fn set_label(id: &Digest) -> String {
    format!("header set {}", &id.hex()[..12])
}

/// Merges the shared cache's records for a job into the local ones (local first; a shared
/// record with the same inputs as a local one is left out) and brings the file sets they
/// name into the local cache. A record (or its set) naming a file outside this build's
/// inputs ([`Names::confined`]: the project, the toolkit, the host compiler's include
/// folders `system`) is refused, and nothing it names is read.
pub fn merge_records(
    remote: &Remote,
    local: &Cache,
    key: &Digest,
    mut records: Vec<StoredRecord>,
    names: &Names,
    system: &[PathBuf],
) -> Vec<StoredRecord> {
    let allowed = |n: &str| names.confined(n, system);
    let outside = |name: &str| {
        format!(
            "a record names {name:?}, outside the sources, include folders, toolkit and host compiler include folders: nothing it names is read"
        )
    };
    for r in remote.records(key) {
        if records
            .iter()
            .any(|o| (&o.files, o.set) == (&r.files, r.set))
        {
            continue;
        }
        if let Some(f) = r.files.iter().find(|f| !allowed(&f.name)) {
            remote.refuse(
                format!("dependency records {}", key.short()),
                outside(&f.name),
            );
            continue;
        }
        if let Some(set) = r.set
            && let Err(name) = remote.import_set(local, &set, allowed)
        {
            remote.refuse(set_label(&set), outside(&name));
            continue;
        }
        records.push(r);
    }
    records
}
