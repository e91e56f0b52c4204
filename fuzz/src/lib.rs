//! The fuzz harness: one function per fuzz target, each feeding bytes to a parser of the
//! `cuda-aot` runtime crate and checking properties that must hold for every input.
//!
//! A panic is a finding. Besides the parsers' own panics (overflow, slicing), the harness
//! asserts invariants a correct parser keeps: what parses re-serialises to bytes that parse
//! to the same value, a verified module's bytes hash to the digest its manifest signs, a
//! verification never accepts versions older than the saved state. Each function returns
//! a [`Verdict`] so the workspace test `tests/fuzz_replay.rs` (which compiles this file
//! with `#[path]`) can also check that known-bad inputs are refused.
//!
//! The signed-document targets (`trust_root`, `rotate`, `verify`) read a small container
//! format, [`Files`], that the harness turns into real signed files with fixed fuzzing
//! keys, so mutations reach the checks behind the signatures instead of stopping at them.

use std::collections::BTreeMap;
use std::sync::OnceLock;
use std::time::Duration;

use cuda_aot::delegation::TeamMetadata;
use cuda_aot::envelope::{Envelope, PayloadType};
use cuda_aot::metadata::{
    BuildStatement, CacheEntry, CacheRecords, CacheUnit, Index, Promotion, Root, Time, Timestamp,
};
use cuda_aot::provenance::Statement;
use cuda_aot::source::{RegistrySource, layout};
use cuda_aot::state::TrustState;
use cuda_aot::trust::{VerifiedRoot, rotate as rotate_root, verify_anchor};
use cuda_aot::verify::{Freshness, Options, verify_all};
use cuda_aot::{Digest, Kind, Limits, Manifest, PublicKey, SecretKey, json};

/// What a parser made of one input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The input was accepted (parsed, or verified).
    Accepted,
    /// The input was refused with this error text.
    Refused(String),
}

impl Verdict {
    /// The verdict on a library result, its error shown as [`shown`] does.
    fn of<T>(r: &cuda_aot::Result<T>) -> Verdict {
        match r {
            Ok(_) => Verdict::Accepted,
            Err(e) => Verdict::Refused(shown(e)),
        }
    }
    /// Whether the input was accepted.
    pub fn accepted(&self) -> bool {
        *self == Verdict::Accepted
    }
}

/// Formats an error the way the CLI shows it (so message and advice code run too),
/// after its variant name in brackets (`[Threshold] ...`), which `examples/verdicts.rs`
/// tallies.
fn shown(e: &cuda_aot::Error) -> String {
    format!("[{}] {e}\nFix: {}", variant(e), e.fix())
}

/// The name of an error's variant.
fn variant(e: &cuda_aot::Error) -> &'static str {
    use cuda_aot::Error as E;
    match e {
        E::Io { .. } => "Io",
        E::Missing { .. } => "Missing",
        E::TooLarge { .. } => "TooLarge",
        E::Json { .. } => "Json",
        E::DuplicateKey { .. } => "DuplicateKey",
        E::InvalidName { .. } => "InvalidName",
        E::NotRegular { .. } => "NotRegular",
        E::Symlink { .. } => "Symlink",
        E::WrongPayloadType { .. } => "WrongPayloadType",
        E::BadKey { .. } => "BadKey",
        E::Threshold { .. } => "Threshold",
        E::BadRoot { .. } => "BadRoot",
        E::RootRotation { .. } => "RootRotation",
        E::Expired { .. } => "Expired",
        E::FreezeBound { .. } => "FreezeBound",
        E::VersionOverflow { .. } => "VersionOverflow",
        E::NotAttested { .. } => "NotAttested",
        E::NotPromoted { .. } => "NotPromoted",
        E::Rollback { .. } => "Rollback",
        E::VersionMismatch { .. } => "VersionMismatch",
        E::DigestMismatch { .. } => "DigestMismatch",
        E::SizeMismatch { .. } => "SizeMismatch",
        E::MixAndMatch { .. } => "MixAndMatch",
        E::DuplicateEntry { .. } => "DuplicateEntry",
        E::ElfSmMismatch { .. } => "ElfSmMismatch",
        E::NotCubin { .. } => "NotCubin",
        E::NotPtx { .. } => "NotPtx",
        E::PtxTargetMismatch { .. } => "PtxTargetMismatch",
        E::FunctionMismatch { .. } => "FunctionMismatch",
        E::AmbiguousKernel { .. } => "AmbiguousKernel",
        E::Load { .. } => "Load",
        E::NoExactTarget { .. } => "NoExactTarget",
        E::DriverTooOld { .. } => "DriverTooOld",
        E::Unknown { .. } => "Unknown",
        E::Argument { .. } => "Argument",
        E::Channel { .. } => "Channel",
        E::Cuda(_) => "Cuda",
        E::BadBundle { .. } => "BadBundle",
        _ => "other",
    }
}

// ---- plain parsers -----------------------------------------------------------------------

/// Every document type, in the order the first input byte of `envelope` selects them.
const TYPES: [PayloadType; 5] = [
    PayloadType::Root,
    PayloadType::Index,
    PayloadType::Timestamp,
    PayloadType::Build,
    PayloadType::Promotion,
];

/// Checks that `T` re-serialises to bytes that parse back to the same value, and that the
/// second serialisation is byte-identical (the on-disk form is stable).
fn round_trips<T>(value: &T, what: &str)
where
    T: serde::Serialize + serde::de::DeserializeOwned + PartialEq + std::fmt::Debug,
{
    let bytes = json::to_vec(value);
    let back: T = json::parse(&bytes, u64::MAX, what)
        .unwrap_or_else(|e| panic!("{what}: own output does not parse: {e}\n{value:?}"));
    assert_eq!(&back, value, "{what}: value changed in a round trip");
    assert_eq!(json::to_vec(&back), bytes, "{what}: unstable serialisation");
}

/// Parses `bytes` as strict JSON of `T` under `limit`; on success checks the round trip.
fn parse_doc<T>(bytes: &[u8], limit: u64, what: &str) -> Verdict
where
    T: serde::Serialize + serde::de::DeserializeOwned + PartialEq + std::fmt::Debug,
{
    let r = json::parse::<T>(bytes, limit, what);
    if let Ok(v) = &r {
        round_trips(v, what);
    }
    Verdict::of(&r)
}

/// Parses a JSON payload as the document type `ty`.
fn parse_payload(ty: PayloadType, payload: &[u8], limit: u64) -> Verdict {
    match ty {
        PayloadType::Root => parse_doc::<Root>(payload, limit, "root"),
        PayloadType::Index => parse_doc::<Index>(payload, limit, "index"),
        PayloadType::Timestamp => parse_doc::<Timestamp>(payload, limit, "timestamp"),
        PayloadType::Build => parse_doc::<BuildStatement>(payload, limit, "build statement"),
        PayloadType::Promotion => parse_doc::<Promotion>(payload, limit, "promotion"),
        PayloadType::CacheEntry => parse_doc::<CacheEntry>(payload, limit, "cache entry"),
        PayloadType::CacheRecords => parse_doc::<CacheRecords>(payload, limit, "cache records"),
        PayloadType::CacheUnit => parse_doc::<CacheUnit>(payload, limit, "cache unit"),
        PayloadType::Team => parse_doc::<TeamMetadata>(payload, limit, "team metadata"),
        PayloadType::InToto => {
            let v = parse_doc::<Statement>(payload, limit, "in-toto statement");
            // What the verifier reads of it must not panic either.
            if let Ok(s) = json::parse::<Statement>(payload, limit, "in-toto statement") {
                let _ = s.attested("in-toto statement");
            }
            v
        }
    }
}

/// Target `envelope`: the first byte picks a document type; the rest is an envelope file
/// (`Envelope::parse`, base64 payload, then the payload as that type's strict JSON). The
/// same bytes are also parsed directly as every signed document type, as a manifest and
/// as the trust state.
pub fn envelope(data: &[u8]) -> Verdict {
    let Some((&sel, rest)) = data.split_first() else {
        return Verdict::Refused("empty".into());
    };
    let ty = TYPES[usize::from(sel) % TYPES.len()];
    let limit = 1 << 20;
    for t in TYPES {
        parse_payload(t, rest, limit);
    }
    // Cache entries and records are parsed too, though the selector never picks them (it
    // keeps the five types it had, so the committed regressions keep their meaning).
    parse_payload(PayloadType::CacheEntry, rest, limit);
    parse_payload(PayloadType::CacheRecords, rest, limit);
    parse_payload(PayloadType::CacheUnit, rest, limit);
    parse_doc::<Manifest>(rest, limit, "manifest");
    parse_doc::<TrustState>(rest, limit, "trust state");
    let env = match Envelope::parse(rest, limit, ty, "fuzz envelope") {
        Ok(env) => env,
        Err(e) => return Verdict::Refused(shown(&e)),
    };
    // An envelope that parsed re-serialises to one that parses to the same value.
    let again = Envelope::parse(&env.to_bytes(), u64::MAX, ty, "re-serialised envelope")
        .expect("own envelope output parses");
    assert_eq!(again, env, "envelope changed in a round trip");
    match env.payload_bytes("fuzz envelope") {
        Ok(payload) => parse_payload(ty, &payload, limit),
        Err(e) => Verdict::Refused(shown(&e)),
    }
}

/// Target `manifest`: a manifest file (strict JSON, attested by a build statement), its
/// identity digest and label.
pub fn manifest(data: &[u8]) -> Verdict {
    let r = json::parse::<Manifest>(data, Limits::default().manifest, "manifest");
    if let Ok(m) = &r {
        round_trips(m, "manifest");
        let d = m.identity.digest();
        assert_eq!(
            d,
            m.identity.clone().digest(),
            "identity digest is not stable"
        );
        let _ = m.label();
        // Names that parsed are safe path components.
        let module = m.identity.module.as_str();
        assert!(!module.is_empty() && !module.contains(['/', '.', '\0']));
        assert_eq!(
            m.identity.sm.to_string().parse::<cuda_aot::Target>().ok(),
            Some(m.identity.sm),
            "target does not round-trip through its name"
        );
        let _ = layout::blob(&m.module_digest);
    }
    Verdict::of(&r)
}

/// Target `index`: a bundle index payload (strict JSON) and the paths it names.
pub fn index(data: &[u8]) -> Verdict {
    let r = json::parse::<Index>(data, Limits::default().index, "index");
    if let Ok(ix) = &r {
        round_trips(ix, "index");
        for e in &ix.entries {
            let p = layout::manifest(&e.manifest);
            assert!(p.starts_with("manifests/blake3/") && !p.contains(".."));
            let _ = (e.module.to_string(), e.sm.to_string(), e.kind.to_string());
        }
        let _ = layout::index(ix.version);
    }
    Verdict::of(&r)
}

/// Target `timestamp`: a timestamp payload (strict JSON), its expiry compared with now.
pub fn timestamp(data: &[u8]) -> Verdict {
    let r = json::parse::<Timestamp>(data, Limits::default().timestamp, "timestamp");
    if let Ok(ts) = &r {
        round_trips(ts, "timestamp");
        let _ = ts.expires.to_string();
        let _ = ts.expires < Time::now();
        let _ = layout::index(ts.index.version);
    }
    Verdict::of(&r)
}

/// Target `elf`: `cuda_aot::elf::inspect` (the one cubin reader of the builder and the
/// verifier) and `elf::check_structure` (the loader's check before the driver sees the
/// bytes) on arbitrary bytes.
pub fn elf(data: &[u8]) -> Verdict {
    let structure = cuda_aot::elf::check_structure(data);
    let r = cuda_aot::elf::inspect(data);
    if let Ok(info) = &r {
        assert!(info.sm >= 10, "an SM below 10 was accepted: {info:?}");
        assert!(
            structure.is_ok(),
            "inspect accepted a cubin the loader's structure check refuses: {structure:?}"
        );
        let t = info.target();
        assert_eq!(
            t.to_string().parse::<cuda_aot::Target>().ok(),
            Some(t),
            "the header's target does not round-trip through its name"
        );
        assert_eq!(
            cuda_aot::elf::inspect(data).as_ref(),
            Ok(info),
            "not deterministic"
        );
    }
    match r {
        Ok(_) => Verdict::Accepted,
        Err(e) => Verdict::Refused(e),
    }
}

/// Target `ptx`: `cuda_aot::ptx::inspect`, the one PTX reader (its `.target` and kernels
/// with their launch ABI), on arbitrary bytes.
pub fn ptx(data: &[u8]) -> Verdict {
    let r = cuda_aot::ptx::inspect(data);
    if let Ok(info) = &r {
        assert!(!info.target.is_empty(), "PTX accepted without a target");
        assert!(
            !data.starts_with(b"\x7fELF"),
            "an ELF image was accepted as PTX"
        );
        assert_eq!(
            cuda_aot::ptx::inspect(data).as_ref(),
            Ok(info),
            "not deterministic"
        );
    }
    match r {
        Ok(_) => Verdict::Accepted,
        Err(e) => Verdict::Refused(e),
    }
}

/// Target `bundle`: `cuda_aot::bundle::parse`, the embedded bundle's reader (the C ABI hands
/// it any pointer and length), on arbitrary bytes: every file it accepts is a registry
/// layout path, inside the input, after the table, in order and without overlap.
pub fn bundle(data: &[u8]) -> Verdict {
    let r = cuda_aot::bundle::parse(data);
    if let Ok(b) = &r {
        let range = data.as_ptr_range();
        let mut end = 0usize;
        // Table order is path order; files must follow one another in that order.
        for (path, bytes) in &b.files {
            assert!(
                cuda_aot::source::layout::is_layout_path(path),
                "{path:?} accepted"
            );
            let start = bytes.as_ptr() as usize - range.start as usize;
            assert!(
                bytes.is_empty()
                    || (range.contains(&bytes.as_ptr()) && start + bytes.len() <= data.len()),
                "{path}: outside the input"
            );
            assert!(bytes.is_empty() || start >= end, "{path}: overlaps");
            end = end.max(start + bytes.len());
        }
        assert_eq!(
            cuda_aot::bundle::parse(data).map(|p| p.files.len()).ok(),
            Some(b.files.len()),
            "not deterministic"
        );
    }
    Verdict::of(&r)
}

// ---- signed documents from a container -----------------------------------------------------

/// The fixed fuzzing keys, from public seeds: they sign only what the harness builds from
/// fuzz inputs (never a release), so signed inputs replay identically on any machine.
pub fn fuzz_key(n: usize) -> &'static SecretKey {
    static KEYS: OnceLock<Vec<SecretKey>> = OnceLock::new();
    &KEYS.get_or_init(|| {
        (0..FUZZ_KEYS)
            .map(|i| {
                let seed = Digest::of(format!("cuda-aot fuzzing key {i}").as_bytes());
                SecretKey::from_seed(seed.0)
            })
            .collect()
    })[n % FUZZ_KEYS]
}

/// How many fixed fuzzing keys there are (`{{key:0}}` .. `{{key:7}}`).
pub const FUZZ_KEYS: usize = 8;

/// The marker that starts a record of the container format.
pub const RECORD: &[u8] = b"%%file ";

/// Registry files built from a fuzz input.
///
/// The input is a sequence of records, each starting at the input's start or after a
/// newline with a header line, then the content up to the newline before the next header:
///
/// ```text
/// %%file NAME TYPE SIGNERS PATH
/// content...
/// ```
///
/// - `TYPE` is `blob` (bytes as they are), `raw` (placeholders substituted, not signed),
///   or a document type `root`, `index`, `timestamp`, `build`, `promotion`: the content
///   (placeholders substituted) becomes the payload of an envelope of that type.
/// - `SIGNERS` is `-` or comma-separated fuzzing key numbers (`0,4`) that sign it.
/// - Placeholders, resolved against earlier records by `NAME`: `{{key:N}}` (public key N),
///   `{{digest:NAME}}`, `{{hex:NAME}}`, `{{hex2:NAME}}` (first two hex digits),
///   `{{size:NAME}}` of that record's final bytes, and `{{identity:NAME}}` (the identity
///   digest of that record's manifest). `PATH` may use them too, including the
///   record's own `NAME`. Unresolved placeholders stay as written.
#[derive(Debug, Default, Clone)]
pub struct Files {
    /// Final bytes by registry path, plus the special paths `anchor`, `next`, `state` and
    /// `options`.
    pub by_path: BTreeMap<String, Vec<u8>>,
    /// Final bytes and payload by record name.
    named: BTreeMap<String, (Vec<u8>, Vec<u8>)>,
}

impl Files {
    /// Builds the files of a container input.
    pub fn build(data: &[u8]) -> Files {
        let mut files = Files::default();
        for (header, content) in records(data) {
            let header = String::from_utf8_lossy(header);
            let mut parts = header.split(' ');
            let (Some(name), Some(ty), Some(signers), Some(path)) =
                (parts.next(), parts.next(), parts.next(), parts.next())
            else {
                continue;
            };
            let (payload, bytes) = match ty {
                "blob" => (content.to_vec(), content.to_vec()),
                "raw" => {
                    let p = files.substitute(content);
                    (p.clone(), p)
                }
                _ => {
                    let Some(pt) = payload_type(ty) else { continue };
                    let payload = files.substitute(content);
                    let keys: Vec<&SecretKey> = signers
                        .split(',')
                        .filter_map(|s| s.parse::<usize>().ok())
                        .map(fuzz_key)
                        .collect();
                    let bytes = Envelope::sign(pt, &payload, &keys).to_bytes();
                    (payload, bytes)
                }
            };
            files
                .named
                .insert(name.to_string(), (bytes.clone(), payload));
            let path = String::from_utf8_lossy(&files.substitute(path.as_bytes())).into_owned();
            files.by_path.insert(path, bytes);
        }
        files
    }

    /// Replaces the placeholders in `text`.
    fn substitute(&self, text: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(text.len());
        let mut rest = text;
        while let Some(at) = find(rest, b"{{") {
            out.extend_from_slice(&rest[..at]);
            let after = &rest[at + 2..];
            match find(after, b"}}").and_then(|end| Some((end, self.resolve(&after[..end])?))) {
                Some((end, value)) => {
                    out.extend_from_slice(&value);
                    rest = &after[end + 2..];
                }
                None => {
                    out.extend_from_slice(b"{{");
                    rest = after;
                }
            }
        }
        out.extend_from_slice(rest);
        out
    }

    fn resolve(&self, token: &[u8]) -> Option<Vec<u8>> {
        let token = std::str::from_utf8(token).ok()?;
        let (kind, arg) = token.split_once(':')?;
        if kind == "key" {
            let n: usize = arg.parse().ok()?;
            return Some(fuzz_key(n).public().to_string().into_bytes());
        }
        let (bytes, payload) = self.named.get(arg)?;
        let d = Digest::of(bytes);
        let text = match kind {
            "digest" => d.to_string(),
            "hex" => d.hex(),
            "hex2" => d.hex()[..2].to_string(),
            "size" => bytes.len().to_string(),
            "identity" => json::parse::<Manifest>(payload, u64::MAX, "placeholder")
                .ok()?
                .identity
                .digest()
                .to_string(),
            _ => return None,
        };
        Some(text.into_bytes())
    }

    /// The bytes at `path`, if a record made them.
    pub fn get(&self, path: &str) -> Option<&[u8]> {
        self.by_path.get(path).map(Vec::as_slice)
    }
}

fn payload_type(name: &str) -> Option<PayloadType> {
    Some(match name {
        "root" => PayloadType::Root,
        "index" => PayloadType::Index,
        "timestamp" => PayloadType::Timestamp,
        "build" => PayloadType::Build,
        "promotion" => PayloadType::Promotion,
        "intoto" => PayloadType::InToto,
        _ => return None,
    })
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Splits a container into `(header line, content)` records.
fn records(data: &[u8]) -> Vec<(&[u8], &[u8])> {
    // Record starts: offset 0 if the input starts with the marker, and after every
    // "\n" + marker.
    let mut starts = Vec::new();
    if data.starts_with(RECORD) {
        starts.push(0);
    }
    let mut at = 0;
    while let Some(i) = find(&data[at..], b"\n%%file ") {
        starts.push(at + i + 1);
        at += i + 1;
    }
    let mut out = Vec::new();
    for (k, &s) in starts.iter().enumerate() {
        let end = match starts.get(k + 1) {
            Some(&next) => next - 1, // the newline before the next header
            None => data.len(),
        };
        let rec = &data[s + RECORD.len()..end.max(s + RECORD.len())];
        let (header, content) = match rec.iter().position(|&b| b == b'\n') {
            Some(nl) => (&rec[..nl], &rec[nl + 1..]),
            None => (rec, &rec[rec.len()..]),
        };
        out.push((header, content));
    }
    out
}

/// The fixed trust anchor of the `rotate` target: root v1 with fuzzing keys 0 (root),
/// 1 (builder), 2 (reviewer) and 3 (publisher), threshold 1 each, signed by key 0.
pub fn fixed_anchor() -> &'static VerifiedRoot {
    static ANCHOR: OnceLock<VerifiedRoot> = OnceLock::new();
    ANCHOR.get_or_init(|| {
        let text = anchor_payload(1);
        let file = Envelope::sign(PayloadType::Root, text.as_bytes(), &[fuzz_key(0)]).to_bytes();
        verify_anchor(&file, &Limits::default(), "fixed fuzzing anchor")
            .expect("the fixed anchor verifies")
    })
}

/// A root payload listing fuzzing keys 0-3 as root, builder, reviewer and publisher.
pub fn anchor_payload(version: u64) -> String {
    let k = |n: usize| fuzz_key(n).public().to_string();
    let role = |n: usize| format!(r#"{{ "keys": ["{}"], "threshold": 1 }}"#, k(n));
    format!(
        r#"{{ "schema": "{}", "version": {version}, "expires": "2099-01-01T00:00:00Z", "channel": "dev",
  "roles": {{ "root": {}, "builder": {}, "reviewer": {}, "publisher": {} }},
  "max_expiry": {{ "timestamp_days": 3650, "index_days": 3650 }} }}"#,
        Root::SCHEMA,
        role(0),
        role(1),
        role(2),
        role(3)
    )
}

/// Checks what every verified root must satisfy.
fn check_root(r: &VerifiedRoot) {
    let root = r.root();
    assert_eq!(root.schema, Root::SCHEMA);
    for role in cuda_aot::metadata::RoleName::ALL {
        let role = root.roles.get(role);
        assert!(role.threshold >= 1 && role.threshold as usize <= role.keys.len());
        let mut ids: Vec<_> = role.keys.iter().map(PublicKey::key_id).collect();
        ids.sort();
        ids.dedup();
        assert_eq!(
            ids.len(),
            role.keys.len(),
            "a verified role lists a key twice"
        );
    }
}

/// Target `trust_root`: `verify_anchor` of the container's `anchor` file (or of the whole
/// input when it holds no record, so real root files are seeds as they are).
pub fn trust_root(data: &[u8]) -> Verdict {
    let files = Files::build(data);
    let bytes = files.get("anchor").unwrap_or(data);
    let r = verify_anchor(bytes, &Limits::default(), "fuzz trust root");
    if let Ok(v) = &r {
        check_root(v);
        assert_eq!(v.file_bytes(), bytes);
    }
    Verdict::of(&r)
}

/// Target `rotate`: `rotate` from [`fixed_anchor`] (root v1) to the container's `next`
/// file (or the whole input when it holds no record).
pub fn rotate(data: &[u8]) -> Verdict {
    let files = Files::build(data);
    let bytes = files.get("next").unwrap_or(data);
    let anchor = fixed_anchor();
    let r = rotate_root(anchor, bytes, &Limits::default(), "root/2.root.json");
    if let Ok(v) = &r {
        check_root(v);
        assert_eq!(v.root().version, 2, "rotation skipped a version");
    }
    Verdict::of(&r)
}

/// A registry held in memory: the container's files by layout path.
pub struct MemSource<'a>(&'a Files);

impl RegistrySource for MemSource<'_> {
    fn read_at_most(&self, path: &str, max: u64) -> cuda_aot::Result<Option<Vec<u8>>> {
        Ok(self.0.get(path).map(|b| {
            let n = usize::try_from(max.saturating_add(1)).unwrap_or(usize::MAX);
            b[..b.len().min(n)].to_vec()
        }))
    }
    fn describe(&self) -> String {
        "fuzz registry".into()
    }
}

/// The verifier's clock in the `verify` target unless an `options` record sets one:
/// 2027-01-15T08:00:00Z.
pub const FUZZ_NOW: u64 = 1_800_000_000;

/// Target `verify`: the whole offline verifier (`verify_all`: steps 1-8, for
/// every manifest) over the container's files as an in-memory registry, anchored at its
/// `anchor` file, with the saved state of its `state` file (strict JSON of
/// [`TrustState`]) and the clock, skew and offline grace of its `options` file
/// (`NOW_UNIX SKEW_SECS GRACE_SECS`, any of them as large as `u64::MAX`).
pub fn verify(data: &[u8]) -> Verdict {
    let files = Files::build(data);
    let Some(anchor) = files.get("anchor") else {
        return Verdict::Refused("no anchor record".into());
    };
    let limits = Limits::default();
    let seen = files
        .get("state")
        .and_then(|b| json::parse::<TrustState>(b, limits.state, "state").ok())
        .unwrap_or_default();
    let mut numbers = [FUZZ_NOW, 0, 0];
    if let Some(o) = files.get("options") {
        let text = String::from_utf8_lossy(o);
        for (slot, word) in numbers.iter_mut().zip(text.split_whitespace()) {
            if let Ok(n) = word.parse::<u64>() {
                *slot = n;
            }
        }
    }
    let [now, skew, grace] = numbers;
    let opts = Options {
        now: Time::from_unix(now),
        skew: Duration::from_secs(skew),
        offline_grace: Duration::from_secs(grace),
        limits,
        required_channel: None,
        awaiting_rebuild: false,
    };
    let src = MemSource(&files);
    let verified = match verify_all(&src, anchor, seen.clone(), &opts) {
        Ok(v) => v,
        Err(f) => return Verdict::Refused(shown(&f.error)),
    };
    // What a successful verification promises.
    let (ts, ix, root) = (
        verified.timestamp(),
        verified.index(),
        verified.root().root(),
    );
    let state = verified.state();
    let late = |expires: Time| now > expires.unix().saturating_add(skew);
    assert!(state.root >= seen.root, "root rollback accepted");
    if verified.discarded_state().is_none() {
        assert!(
            state.timestamp >= seen.timestamp && state.index >= seen.index,
            "verification accepted a rollback: saw {seen:?}, accepted {state:?}"
        );
    }
    assert_eq!(
        ix.version, ts.index.version,
        "index is not the one the timestamp names"
    );
    match verified.freshness() {
        Freshness::Fresh => assert!(!late(ts.expires), "expired timestamp accepted as fresh"),
        Freshness::Grace { deadline, .. } => {
            assert!(now <= deadline.unix(), "timestamp accepted past the grace")
        }
    }
    assert!(!late(ix.expires), "expired index accepted");
    assert!(!late(root.expires), "expired root accepted");
    check_root(verified.root());
    let ix_bytes = files
        .get(&layout::index(ix.version))
        .expect("verified index exists");
    assert_eq!(
        Digest::of(ix_bytes),
        ts.index.digest,
        "index digest not checked"
    );
    assert_eq!(
        verified.modules().len(),
        ix.entries.len(),
        "an entry accepted without its blob"
    );
    for (m, (_, module)) in verified.manifests().iter().zip(verified.modules()) {
        let man = m.manifest();
        assert_eq!(
            man.channel, ix.channel,
            "manifest of another channel accepted"
        );
        assert_eq!(
            man.identity.digest(),
            m.entry().identity,
            "identity not checked"
        );
        assert!(
            !m.signers().is_empty(),
            "manifest verified without a signer"
        );
        assert_eq!(module.manifest(), man, "module of another manifest");
        assert_eq!(Digest::of(module.bytes()), man.module_digest, "blob digest");
        assert_eq!(module.bytes().len() as u64, man.size, "blob size");
        if man.identity.kind == Kind::Cubin {
            let info = cuda_aot::elf::inspect(module.bytes()).expect("verified cubin");
            assert_eq!(info.sm, man.identity.sm.number(), "cubin of another SM");
        }
    }
    Verdict::Accepted
}
