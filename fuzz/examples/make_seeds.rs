//! Writes the fuzz seed corpus (`fuzz/seeds/<target>/`) from a real release registry.
//!
//! ```text
//! cargo xtask release      # makes .cuda-aot/registry, signed with dev keys
//! cargo run --manifest-path fuzz/Cargo.toml --example make_seeds -- .cuda-aot/registry fuzz/seeds
//! ```
//!
//! Only public metadata is copied: signed files, their payloads, manifests, cubins and PTX.
//! Seeds for the signed-document targets are containers ([`cuda_aot_fuzz::Files`]) whose
//! payloads are the release's own, with the release keys replaced by `{{key:N}}`
//! placeholders and digests and sizes by references, so the harness re-signs them with
//! its fuzzing keys. Their expiries are set relative to the harness's clock (`FUZZ_NOW`),
//! within the release root's freeze bound.
//! File names say what the replay test expects: `ok-*` is accepted, `bad-*` refused.

use std::collections::BTreeMap;
use std::path::PathBuf;

use cuda_aot::envelope::{Envelope, PayloadType};
use cuda_aot::metadata::{Index, IndexEntry, Root, Timestamp};
use cuda_aot::source::layout;
use cuda_aot::{Manifest, json};
use serde_json::Value;

/// Expiries of the verify seeds: after `cuda_aot_fuzz::FUZZ_NOW` (2027-01-15), within the
/// release root's freeze bound (31 days for a timestamp, 400 for an index).
const TS_EXPIRES: &str = "2027-02-01T00:00:00Z";
const INDEX_EXPIRES: &str = "2027-06-01T00:00:00Z";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [registry, out] = &args[..] else {
        eprintln!("usage: make_seeds REGISTRY OUT (e.g. .cuda-aot/registry fuzz/seeds)");
        std::process::exit(2);
    };
    let reg = Seeds {
        registry: PathBuf::from(registry),
        out: PathBuf::from(out),
    };
    reg.run();
}

struct Seeds {
    registry: PathBuf,
    out: PathBuf,
}

impl Seeds {
    fn read(&self, rel: &str) -> Vec<u8> {
        let p = self.registry.join(rel);
        std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    }

    fn write(&self, target: &str, name: &str, bytes: &[u8]) {
        let dir = self.out.join(target);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(name), bytes).unwrap();
        println!("{:>7} {target}/{name}", bytes.len());
    }

    fn payload(&self, rel: &str, ty: PayloadType) -> Vec<u8> {
        Envelope::parse(&self.read(rel), u64::MAX, ty, rel)
            .and_then(|e| e.payload_bytes(rel))
            .unwrap_or_else(|e| panic!("{rel}: {e}"))
    }

    fn run(&self) {
        let release = Release::read(self);
        release.envelope_seeds();
        release.document_seeds();
        release.blob_seeds();
        let (anchor, root_v1, v2) = release.root_seeds();
        release.verify_seeds(&anchor, &root_v1, &v2);
        self.bundle_seeds();
    }

    /// Target `bundle`: the release's timestamp, root, index and first blob packed as an
    /// embedded bundle (what `cuda-aot-build` writes), its metadata alone, and that damaged
    /// the ways the reader refuses.
    fn bundle_seeds(&self) {
        let all = cuda_aot::source::DirSource::new(&self.registry)
            .layout_paths()
            .unwrap();
        let mut paths: Vec<String> = all
            .iter()
            .filter(|p| *p == "timestamp.json" || p.starts_with("root/") || p.starts_with("index/"))
            .cloned()
            .collect();
        let small = paths.clone();
        paths.extend(all.iter().find(|p| p.starts_with("blobs/")).cloned());
        let root = cuda_aot::Digest::of(&self.read("root/1.root.json"));
        let pack = |paths: &[String]| {
            cuda_aot::bundle::Embedded::pack(&self.registry, paths, &root, "file:///seed").unwrap()
        };
        self.write("bundle", "ok-release", &pack(&paths));
        let ok = pack(&small);
        self.write("bundle", "ok-metadata", &ok);
        self.write("bundle", "bad-truncated", &ok[..ok.len() - 1]);
        self.write("bundle", "bad-table-cut", &ok[..70]);
        let mut v = ok.clone();
        v[0] ^= 1;
        self.write("bundle", "bad-magic", &v);
        let at = ok.windows(14).position(|w| w == b"timestamp.json").unwrap();
        let mut v = ok.clone();
        v[at..at + 14].copy_from_slice(b"../../etc/pass");
        self.write("bundle", "bad-path", &v);
        let mut v = ok;
        v[20..24].copy_from_slice(&u32::MAX.to_le_bytes());
        self.write("bundle", "bad-count", &v);
    }
}

/// The release's signed metadata, read once: timestamp, index and root (files and
/// payloads), and the entries the seeds are made of.
struct Release<'a> {
    seeds: &'a Seeds,
    ts_payload: Vec<u8>,
    ts: Timestamp,
    ix_path: String,
    ix_payload: Vec<u8>,
    ix: Index,
    root_payload: Vec<u8>,
    root: Root,
    root_file: Vec<u8>,
}

impl<'a> Release<'a> {
    /// Reads the release behind `seeds`.
    fn read(seeds: &'a Seeds) -> Release<'a> {
        let ts_payload = seeds.payload(layout::TIMESTAMP, PayloadType::Timestamp);
        let ts: Timestamp = json::parse(&ts_payload, u64::MAX, "timestamp").unwrap();
        let ix_path = layout::index(ts.index.version);
        let ix_payload = seeds.payload(&ix_path, PayloadType::Index);
        let ix: Index = json::parse(&ix_payload, u64::MAX, "index").unwrap();
        let root_payload = seeds.payload(&layout::root(1), PayloadType::Root);
        let root: Root = json::parse(&root_payload, u64::MAX, "root").unwrap();
        let root_file = seeds.read(&layout::root(1));
        Release {
            seeds,
            ts_payload,
            ts,
            ix_path,
            ix_payload,
            ix,
            root_payload,
            root,
            root_file,
        }
    }

    /// The index entry of `module` for `sm`.
    fn entry(&self, module: &str, sm: &str) -> &IndexEntry {
        self.ix
            .entries
            .iter()
            .find(|e| e.module.as_str() == module && e.sm.to_string() == sm)
            .unwrap_or_else(|| panic!("the release has no {module} {sm}"))
    }

    /// The entries the seeds use: cubins, an a-variant, PTX, another module.
    fn picked(&self) -> [&IndexEntry; 5] {
        [
            self.entry("field_ops", "sm_90"),
            self.entry("field_ops", "compute_80"),
            self.entry("ntt", "sm_80"),
            self.entry("field_ops", "sm_90a"),
            self.entry("ntt", "sm_120"),
        ]
    }

    /// An entry's manifest: its bytes and parsed.
    fn manifest_of(&self, e: &IndexEntry) -> (Vec<u8>, Manifest) {
        let path = layout::manifest(&e.manifest);
        let bytes = self.seeds.read(&path);
        let m = json::parse(&bytes, u64::MAX, &path).unwrap();
        (bytes, m)
    }

    /// The envelope seeds: the signed files as they are, behind a type selector byte.
    fn envelope_seeds(&self) {
        let statement_path = layout::statement(&self.picked()[0].statement);
        // envelope: the release's signed files as they are, behind the type selector byte.
        let sel = |t: PayloadType, bytes: &[u8]| {
            let n = [
                PayloadType::Root,
                PayloadType::Index,
                PayloadType::Timestamp,
                PayloadType::Build,
                PayloadType::Promotion,
            ]
            .iter()
            .position(|x| *x == t)
            .unwrap() as u8;
            [&[n][..], bytes].concat()
        };
        self.seeds.write(
            "envelope",
            "ok-root",
            &sel(PayloadType::Root, &self.root_file),
        );
        let ts_file = self.seeds.read(layout::TIMESTAMP);
        self.seeds.write(
            "envelope",
            "ok-timestamp",
            &sel(PayloadType::Timestamp, &ts_file),
        );
        let ix_file = self.seeds.read(&self.ix_path);
        self.seeds
            .write("envelope", "ok-index", &sel(PayloadType::Index, &ix_file));
        let st_file = self.seeds.read(&statement_path);
        self.seeds.write(
            "envelope",
            "ok-build-statement",
            &sel(PayloadType::Build, &st_file),
        );
        self.seeds.write(
            "envelope",
            "bad-timestamp-as-index",
            &sel(PayloadType::Index, &ts_file),
        );
    }

    /// The manifest, index and timestamp seeds: files and payloads.
    fn document_seeds(&self) {
        let picked = self.picked();
        let (ix_payload, ts_payload) = (&self.ix_payload, &self.ts_payload);
        // manifest, index, timestamp: the files and payloads.
        for e in &picked[..4] {
            let (bytes, _) = self.manifest_of(e);
            self.seeds
                .write("manifest", &format!("ok-{}-{}", e.module, e.sm), &bytes);
        }
        self.seeds.write("index", "ok-release", &ix_payload);
        self.seeds.write("timestamp", "ok-release", &ts_payload);
    }

    /// The elf and ptx seeds: real cubins and PTX, each also refused by the other reader.
    fn blob_seeds(&self) {
        let picked = self.picked();
        // elf and ptx: real cubins and PTX (each refused by the other reader).
        for e in &picked {
            let (_, m) = self.manifest_of(e);
            let blob = self.seeds.read(&layout::blob(&m.module_digest));
            let (ok, bad) = match e.sm.virtual_arch {
                true => ("ptx", "elf"),
                false => ("elf", "ptx"),
            };
            self.seeds
                .write(ok, &format!("ok-{}-{}", e.module, e.sm), &blob);
            if e.module.as_str() == "field_ops" {
                self.seeds
                    .write(bad, &format!("bad-{}-{}", e.module, e.sm), &blob);
            }
        }
        let ntt_ptx = self.manifest_of(self.entry("ntt", "compute_80")).1;
        self.seeds.write(
            "ptx",
            "ok-ntt-compute_80",
            &self.seeds.read(&layout::blob(&ntt_ptx.module_digest)),
        );
    }

    /// The trust-root and rotation seeds; returns the rekeyed anchor record, root v1's
    /// rekeyed payload and root v2's, which the verify seeds build on.
    fn root_seeds(&self) -> (Vec<u8>, String, String) {
        let (root, root_payload, root_file) = (&self.root, &self.root_payload, &self.root_file);
        // trust_root: the real signed root, and the same payload re-keyed for the harness.
        let keys: BTreeMap<String, usize> = [
            &root.roles.root,
            &root.roles.builder,
            &root.roles.reviewer,
            &root.roles.publisher,
        ]
        .iter()
        .enumerate()
        .flat_map(|(i, r)| r.keys.iter().map(move |k| (k.to_string(), i)))
        .collect();
        let rekey = |payload: &[u8]| -> String {
            let mut text = String::from_utf8(payload.to_vec()).unwrap();
            for (k, i) in &keys {
                text = text.replace(k, &format!("{{{{key:{i}}}}}"));
            }
            text
        };
        let root_v1 = rekey(&root_payload);
        self.seeds
            .write("trust_root", "ok-release-root", &root_file);
        let anchor = record("anchor", "root", "0", "anchor", root_v1.as_bytes());
        self.seeds.write("trust_root", "ok-rekeyed", &anchor);
        self.seeds.write(
            "trust_root",
            "bad-signed-by-builder",
            &record("anchor", "root", "1", "anchor", root_v1.as_bytes()),
        );

        // rotate: root v2 (new root key 4), signed by the old and the new root key.
        let mut v2: Value = serde_json::from_str(&root_v1).unwrap();
        v2["version"] = 2.into();
        v2["roles"]["root"]["keys"] = vec![Value::from("{{key:4}}")].into();
        let v2 = serde_json::to_string_pretty(&v2).unwrap();
        self.seeds.write(
            "rotate",
            "ok-v2",
            &record("next", "root", "0,4", "next", v2.as_bytes()),
        );
        self.seeds.write(
            "rotate",
            "bad-v2-new-key-only",
            &record("next", "root", "4", "next", v2.as_bytes()),
        );
        (anchor, root_v1, v2)
    }

    /// A small registry with the release's own files (`picks`): blobs, manifests, one
    /// build statement (builder key 1), index and timestamp (publisher key 3).
    fn registry_seed(&self, anchor: &[u8], root_v1: &str, picks: &[&IndexEntry]) -> Vec<u8> {
        let (ix, ts) = (&self.ix, &self.ts);
        let mut reg = anchor.to_vec();
        reg.extend(record(
            "root1",
            "root",
            "0",
            "root/1.root.json",
            root_v1.as_bytes(),
        ));
        let (mut attested, mut entries) = (Vec::new(), Vec::new());
        for (i, e) in picks.iter().enumerate() {
            let (_, m) = self.manifest_of(e);
            let blob = self.seeds.read(&layout::blob(&m.module_digest));
            reg.extend(record(
                &format!("b{i}"),
                "blob",
                "-",
                &format!("blobs/blake3/{{{{hex2:b{i}}}}}/{{{{hex:b{i}}}}}"),
                &blob,
            ));
            let mut mv: Value = serde_json::to_value(&m).unwrap();
            mv["module_digest"] = format!("{{{{digest:b{i}}}}}").into();
            mv["size"] = format!("@@{{{{size:b{i}}}}}@@").into();
            reg.extend(record(
                &format!("m{i}"),
                "raw",
                "-",
                &format!("manifests/blake3/{{{{hex:m{i}}}}}.json"),
                unquote(&serde_json::to_string_pretty(&mv).unwrap()).as_bytes(),
            ));
            let mut ev: Value = serde_json::to_value(*e).unwrap();
            ev["manifest"] = format!("{{{{digest:m{i}}}}}").into();
            ev["manifest_size"] = format!("@@{{{{size:m{i}}}}}@@").into();
            ev["identity"] = format!("{{{{identity:m{i}}}}}").into();
            ev["statement"] = "{{digest:st}}".into();
            let mut av = ev.clone();
            for k in ["identity", "statement", "since"] {
                av.as_object_mut().unwrap().remove(k);
            }
            attested.push(av);
            entries.push(ev);
        }
        let st = serde_json::json!({
            "schema": "cuda-aot/build/v1",
            "channel": ix.channel,
            "manifests": attested,
        });
        reg.extend(record(
            "st",
            "build",
            "1",
            "statements/blake3/{{hex:st}}.json",
            unquote(&serde_json::to_string_pretty(&st).unwrap()).as_bytes(),
        ));
        let mut iv: Value = serde_json::to_value(&ix).unwrap();
        iv["entries"] = entries.into();
        iv["statements"] =
            serde_json::json!([{ "digest": "{{digest:st}}", "size": "@@{{size:st}}@@" }]);
        iv["expires"] = INDEX_EXPIRES.into();
        let index_text = unquote(&serde_json::to_string_pretty(&iv).unwrap());
        reg.extend(record(
            "index",
            "index",
            "3",
            &layout::index(ix.version),
            index_text.as_bytes(),
        ));
        let mut tv: Value = serde_json::to_value(&ts).unwrap();
        tv["expires"] = TS_EXPIRES.into();
        tv["index"]["digest"] = "{{digest:index}}".into();
        tv["index"]["size"] = "@@{{size:index}}@@".into();
        let ts_text = unquote(&serde_json::to_string_pretty(&tv).unwrap());
        reg.extend(record(
            "ts",
            "timestamp",
            "3",
            layout::TIMESTAMP,
            ts_text.as_bytes(),
        ));
        reg
    }

    /// The verify seeds: the release registry, a PTX-only one, after a rotation, and three
    /// refused (a rollback, expired, a statement signed by the publisher).
    fn verify_seeds(&self, anchor: &[u8], root_v1: &str, v2: &str) {
        let picked = self.picked();
        let make_registry = |picks: &[&IndexEntry]| self.registry_seed(anchor, root_v1, picks);
        let reg = make_registry(&[picked[0], picked[1], picked[3]]);
        self.seeds.write("verify", "ok-release", &reg);
        // One small PTX module: a short input the fuzzer mutates faster.
        self.seeds
            .write("verify", "ok-ptx-only", &make_registry(&[picked[1]]));

        // The same registry after a root rotation to v2 (new root key 4).
        let mut rotated = reg.clone();
        rotated.extend(record(
            "root2",
            "root",
            "0,4",
            "root/2.root.json",
            v2.as_bytes(),
        ));
        self.seeds.write("verify", "ok-rotated", &rotated);

        // Saved state newer than the registry: a rollback.
        let mut rollback = reg.clone();
        rollback.extend(record(
            "state",
            "raw",
            "-",
            "state",
            br#"{"root": 1, "timestamp": 9, "index": 9}"#,
        ));
        self.seeds.write("verify", "bad-rollback", &rollback);

        // Past the timestamp's expiry.
        let mut expired = reg.clone();
        expired.extend(record("options", "raw", "-", "options", b"1900000000 0 0"));
        self.seeds.write("verify", "bad-expired", &expired);

        // The publisher signs the build statement: a threshold of builder keys is missing.
        let needle = b"%%file st build 1 ";
        let at = reg
            .windows(needle.len())
            .position(|w| w == needle)
            .expect("statement record");
        let by_publisher = [&reg[..at], b"%%file st build 3 ", &reg[at + needle.len()..]].concat();
        self.seeds
            .write("verify", "bad-statement-by-publisher", &by_publisher);
    }
}

/// One container record.
fn record(name: &str, ty: &str, signers: &str, path: &str, content: &[u8]) -> Vec<u8> {
    let mut out = format!("%%file {name} {ty} {signers} {path}\n").into_bytes();
    out.extend_from_slice(content);
    out.push(b'\n');
    out
}

/// Turns `"@@{{size:x}}@@"` (a JSON string) into `{{size:x}}` (a number once substituted).
fn unquote(text: &str) -> String {
    text.replace("\"@@", "").replace("@@\"", "")
}
