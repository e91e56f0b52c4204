//! Shared helpers of the xtask integration tests: the real `xtask` binary, the pinned
//! toolkit (bootstrapped once per test binary through the per-user wheel cache), and a
//! throwaway workspace of small test kernels with its own spec, cache and output folder.

#![allow(dead_code)] // each test file uses a subset

pub mod capi;
pub mod forge;
pub mod oci;
pub mod reapi;
pub mod s3;
pub mod server;
pub mod tools;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The `xtask` binary cargo built for these tests. Every test shares the checkout's pinned
/// toolkit (as a CI job shares one through `CUDA_AOT_TOOLKIT_DIR`), unless the environment
/// names another; tests that need a fresh one set it themselves.
pub fn xtask() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_xtask"));
    c.env_remove("CUDA_AOT_BUILD_CACHE")
        .env_remove("CUDA_AOT_CACHE_MAX_SIZE")
        .env("CUDA_AOT_STATE_DIR", state_dir());
    if std::env::var_os("CUDA_AOT_TOOLKIT_DIR").is_none() {
        c.env("CUDA_AOT_TOOLKIT_DIR", repo().join(".cuda-aot/toolkit"));
    }
    c
}

/// The rollback-state folder of this test binary's commands (the per-user default would
/// be the developer's own `~/.local/state`): one temporary folder per test binary, one file
/// per registry in it, as on a user's machine. A test that reads the state sets its own.
pub fn state_dir() -> &'static Path {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| tempfile::tempdir().expect("a temporary state folder"))
        .path()
}

/// The repository root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Bootstraps the pinned toolkit (once per test binary) and returns its root.
pub fn toolkit_root() -> &'static Path {
    static ROOT: OnceLock<PathBuf> = OnceLock::new();
    ROOT.get_or_init(|| {
        let out = xtask()
            .arg("toolchain")
            .output()
            .expect("run xtask toolchain");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "xtask toolchain failed (CI needs network access to PyPI once):\n{}\n{stdout}",
            String::from_utf8_lossy(&out.stderr)
        );
        let line = stdout
            .lines()
            .find_map(|l| l.strip_prefix("toolkit"))
            .expect("toolkit line");
        PathBuf::from(line.trim())
    })
}

/// The per-user cache folder, as the tool computes it.
pub fn user_cache_dir() -> PathBuf {
    if let Some(x) = std::env::var_os("CUDA_AOT_CACHE_DIR") {
        return PathBuf::from(x);
    }
    std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir)
        .join("cuda-aot")
}

pub const COMMON_CUH: &str = "#pragma once\n\
__device__ __forceinline__ unsigned long long mix(unsigned long long x) {\n\
    return x * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;\n\
}\n";

pub const OTHER_CUH: &str = "#pragma once\n\
__device__ __forceinline__ unsigned int twice(unsigned int x) { return 2u * x; }\n";

pub const ALPHA_CU: &str = "#include \"common.cuh\"\n\
#ifndef CUDA_AOT_BLOCK\n#error the build passes -DCUDA_AOT_BLOCK\n#endif\n\
extern \"C\" __global__ void __launch_bounds__(CUDA_AOT_BLOCK)\n\
alpha_mix(unsigned long long* data, unsigned int n) {\n\
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;\n\
    if (i < n) data[i] = mix(data[i]);\n\
}\n";

/// Has an internal-linkage `__constant__` table in a namespace: nvcc mangles its symbol
/// name with a hash of the source path unless the build pins that path.
pub const BETA_CU: &str = "#include \"common.cuh\"\n\
namespace beta { static __constant__ unsigned long long SALT[2] = {0x1234ull, 0x5678ull}; }\n\
extern \"C\" __global__ void beta_salt(const unsigned long long* in, unsigned long long* out, unsigned int n) {\n\
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;\n\
    if (i < n) out[i] = mix(in[i] ^ beta::SALT[i & 1]);\n\
}\n";

pub const GAMMA_CU: &str = "#include \"other.cuh\"\n\
extern \"C\" __global__ void gamma_twice(unsigned int* data, unsigned int n) {\n\
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;\n\
    if (i < n) data[i] = twice(data[i]);\n\
}\n";

pub const SPEC: &str = r#"[build]
sources = "../src"
targets = ["sm_80", "sm_90"]
nvcc_flags = ["--std=c++17"]

[[module]]
name = "alpha"
source = "alpha.cu"
entry_points = ["alpha_mix"]
protocol = "test-v1"
schedule_version = 1
geometry = { block = 128 }

[[module]]
name = "beta"
source = "beta.cu"
entry_points = ["beta_salt"]
protocol = "test-v1"
schedule_version = 1

[[module]]
name = "gamma"
source = "gamma.cu"
entry_points = ["gamma_twice"]
protocol = "test-v1"
schedule_version = 1
"#;

/// A throwaway workspace: `src/` (kernels), `spec/release.toml`, `cache/`, `out/`.
pub struct Ws {
    pub dir: tempfile::TempDir,
    runs: AtomicUsize,
    /// The spec file, relative to `dir`.
    spec: String,
}

/// One `xtask build` run.
pub struct Run {
    pub ok: bool,
    pub stdout: String,
    pub stderr: String,
    pub report: Option<serde_json::Value>,
}

impl Ws {
    /// Three modules (alpha and beta include common.cuh, gamma includes other.cuh), two
    /// targets.
    pub fn new() -> Ws {
        toolkit_root();
        let ws = Ws {
            dir: tempfile::Builder::new()
                .prefix("xtask-test-")
                .tempdir()
                .unwrap(),
            runs: AtomicUsize::new(0),
            spec: "spec/release.toml".into(),
        };
        for (f, text) in [
            ("src/common.cuh", COMMON_CUH),
            ("src/other.cuh", OTHER_CUH),
            ("src/alpha.cu", ALPHA_CU),
            ("src/beta.cu", BETA_CU),
            ("src/gamma.cu", GAMMA_CU),
            ("spec/release.toml", SPEC),
        ] {
            ws.write(f, text);
        }
        ws
    }

    /// A copy of the repository's foreign-style corpus (`kernels/foreign`) at
    /// `<tmp>/<prefix>/foreign`, with its own spec (`foreign/foreign.toml`, outside the
    /// sources folder), cache and output folders.
    /// This workspace building the spec at `rel` (relative to the workspace) instead.
    pub fn with_spec(self, rel: &str) -> Ws {
        Ws {
            spec: rel.to_string(),
            ..self
        }
    }

    pub fn foreign(prefix: &str) -> Ws {
        toolkit_root();
        let dir = tempfile::Builder::new()
            .prefix("xtask-foreign-")
            .tempdir()
            .unwrap();
        let src = repo().join("kernels/foreign");
        for e in walkdir::WalkDir::new(&src) {
            let e = e.unwrap();
            let to = dir
                .path()
                .join(prefix)
                .join("foreign")
                .join(e.path().strip_prefix(&src).unwrap());
            if e.file_type().is_dir() {
                std::fs::create_dir_all(&to).unwrap();
            } else {
                std::fs::copy(e.path(), &to).unwrap();
            }
        }
        Ws {
            dir,
            runs: AtomicUsize::new(0),
            spec: format!("{prefix}/foreign/foreign.toml"),
        }
    }

    /// The spec file.
    pub fn spec_path(&self) -> PathBuf {
        self.path(&self.spec)
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    pub fn write(&self, rel: &str, text: &str) {
        let p = self.path(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    pub fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.path(rel)).unwrap()
    }

    /// Rewrites the spec.
    pub fn edit_spec(&self, f: impl FnOnce(String) -> String) {
        let s = f(self.read(&self.spec));
        self.write(&self.spec.clone(), &s);
    }

    /// `xtask build` on this workspace, plus `extra` arguments.
    pub fn build(&self, extra: &[&str]) -> Run {
        self.build_with(extra, |_| {})
    }

    /// `cargo xtask release` of this workspace's spec (its own build cache): the dev
    /// release in `spec/.cuda-aot/registry`, its trust root in `spec/.cuda-aot/dev-keys/`.
    pub fn release(&self) -> Out {
        Out::of(
            xtask()
                .env("CUDA_AOT_BUILD_CACHE", self.path("cache"))
                .args(["release", "--spec"])
                .arg(self.spec_path()),
        )
        .ok()
    }

    /// `xtask build` of this workspace's spec into its own cache and `out` folders, to add
    /// arguments to and run (or spawn, to interrupt it).
    pub fn build_command(&self) -> Command {
        let mut cmd = xtask();
        cmd.arg("build")
            .arg("--spec")
            .arg(self.spec_path())
            .arg("--cache-dir")
            .arg(self.path("cache"))
            .arg("--out")
            .arg(self.path("out"));
        cmd
    }

    /// Like [`Ws::build`], with a hook to adjust the command (environment).
    pub fn build_with(&self, extra: &[&str], f: impl FnOnce(&mut Command)) -> Run {
        let n = self.runs.fetch_add(1, Ordering::Relaxed);
        let report = self.path(&format!("reports/{n}.json"));
        std::fs::create_dir_all(report.parent().unwrap()).unwrap();
        let mut cmd = self.build_command();
        cmd.arg("--report-json")
            .arg(&report)
            .arg("-j")
            .arg("2")
            .args(extra);
        f(&mut cmd);
        let out = cmd.output().expect("run xtask build");
        Run {
            ok: out.status.success(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            report: std::fs::read(&report)
                .ok()
                .map(|b| serde_json::from_slice(&b).unwrap()),
        }
    }

    /// Every file under `rel` with its bytes (empty when the folder does not exist).
    pub fn snapshot(&self, rel: &str) -> BTreeMap<PathBuf, Vec<u8>> {
        snapshot(&self.path(rel))
    }
}

/// Flips one byte (in the middle) of the first blob file of the registry folder `reg`, as
/// a tampering server or mirror would; returns the blob's path and its good bytes, to put
/// back with `std::fs::write`.
pub fn flip_a_blob(reg: &Path) -> (PathBuf, Vec<u8>) {
    let blob = walkdir::WalkDir::new(reg.join("blobs"))
        .into_iter()
        .map(|e| e.unwrap())
        .find(|e| e.file_type().is_file())
        .expect("a blob in the registry")
        .into_path();
    let good = std::fs::read(&blob).unwrap();
    let mut bad = good.clone();
    bad[good.len() / 2] ^= 1;
    std::fs::write(&blob, &bad).unwrap();
    (blob, good)
}

/// A build output's snapshot with its provenance's build definition in place of the file:
/// a rebuild from the same inputs records the same definition but a run of its own (times,
/// invocation id).
pub fn outputs_and_definition(mut snap: BTreeMap<PathBuf, Vec<u8>>) -> BTreeMap<PathBuf, Vec<u8>> {
    let p = PathBuf::from("build.provenance.json");
    if let Some(bytes) = snap.remove(&p) {
        let v: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        snap.insert(p, serde_json::to_vec(&v["buildDefinition"]).unwrap());
    }
    snap
}

/// Every file under `dir` with its bytes.
pub fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    if !dir.exists() {
        return out;
    }
    for e in walkdir::WalkDir::new(dir) {
        let e = e.unwrap();
        if e.file_type().is_file() {
            out.insert(
                e.path().strip_prefix(dir).unwrap().to_path_buf(),
                std::fs::read(e.path()).unwrap(),
            );
        }
    }
    out
}

impl Run {
    /// Asserts success and returns self.
    #[track_caller]
    pub fn ok(self) -> Run {
        assert!(self.ok, "build failed:\n{}\n{}", self.stderr, self.stdout);
        self
    }

    /// Asserts failure and returns self.
    #[track_caller]
    pub fn failed(self) -> Run {
        assert!(!self.ok, "build succeeded unexpectedly:\n{}", self.stdout);
        assert!(self.report.is_none(), "a failed build wrote a report");
        self
    }

    fn report(&self) -> &serde_json::Value {
        self.report.as_ref().expect("a report")
    }

    pub fn nvcc_runs(&self) -> u64 {
        self.report()["nvcc_runs"].as_u64().unwrap()
    }

    /// `module target` of every blob that was compiled (not taken from the cache).
    pub fn compiled(&self) -> BTreeSet<String> {
        self.blobs(false)
    }

    /// `module target` of every blob that came from the cache.
    pub fn cached(&self) -> BTreeSet<String> {
        self.blobs(true)
    }

    fn blobs(&self, cached: bool) -> BTreeSet<String> {
        self.report()["modules"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["cached"].as_bool() == Some(cached))
            .map(|m| {
                format!(
                    "{} {}",
                    m["module"].as_str().unwrap(),
                    m["target"].as_str().unwrap()
                )
            })
            .collect()
    }

    /// `module target` → the blob's digest (`blake3:…`), for every blob of the build.
    pub fn digests(&self) -> BTreeMap<String, String> {
        self.column("module_digest")
    }

    /// `module target` → the report's string `field` of that blob, for every blob.
    pub fn column(&self, field: &str) -> BTreeMap<String, String> {
        self.report()["modules"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| {
                (
                    format!(
                        "{} {}",
                        m["module"].as_str().unwrap(),
                        m["target"].as_str().unwrap()
                    ),
                    m[field].as_str().unwrap().to_string(),
                )
            })
            .collect()
    }

    /// Why `module target` compiled: (input, detail) of each change `--explain` names.
    pub fn changed(&self, module: &str, target: &str) -> Vec<(String, String)> {
        self.report()["modules"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["module"] == module && m["target"] == target)
            .unwrap_or_else(|| panic!("no {module} {target} in the report"))["changed"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    c["input"].as_str().unwrap().to_string(),
                    c["detail"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    }

    /// The kinds of input `--explain` names for `module target`.
    pub fn inputs(&self, module: &str, target: &str) -> Vec<String> {
        let mut v: Vec<String> = self
            .changed(module, target)
            .into_iter()
            .map(|c| c.0)
            .collect();
        v.dedup();
        v
    }

    /// The blob digest of `module target`.
    pub fn digest(&self, module: &str, target: &str) -> String {
        self.field(module, target, "module_digest")
    }

    /// The identity digest of `module target`.
    pub fn identity(&self, module: &str, target: &str) -> String {
        self.field(module, target, "identity_digest")
    }

    fn field(&self, module: &str, target: &str, field: &str) -> String {
        self.report()["modules"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["module"] == module && m["target"] == target)
            .unwrap_or_else(|| panic!("no {module} {target} in the report"))[field]
            .as_str()
            .unwrap()
            .to_string()
    }
}

/// `{"a x", "a y", ...}` for every module and target given.
pub fn set(modules: &[&str], targets: &[&str]) -> BTreeSet<String> {
    modules
        .iter()
        .flat_map(|m| targets.iter().map(move |t| format!("{m} {t}")))
        .collect()
}

/// `cmd` with no toolkit and no cached wheels available, and pip unable to fetch any: a
/// command that tries to bootstrap the toolkit fails at once, and `dir`'s `toolkit/` and
/// `user-cache/` show whether it tried.
pub fn without_toolkit(cmd: &mut Command, dir: &Path) {
    cmd.env("CUDA_AOT_TOOLKIT_DIR", dir.join("toolkit"))
        .env("CUDA_AOT_CACHE_DIR", dir.join("user-cache"))
        .env("PIP_NO_INDEX", "1")
        .env_remove("PIP_FIND_LINKS");
}

/// Whether `without_toolkit` folders stayed untouched (nothing fetched or unpacked).
pub fn toolkit_untouched(dir: &Path) -> bool {
    snapshot(&dir.join("toolkit")).is_empty() && snapshot(&dir.join("user-cache")).is_empty()
}

/// `xtask keygen --role ROLE --out OUT`: the new key's public half (what it prints).
pub fn keygen(role: &str, out: &Path) -> String {
    let o = xtask()
        .args(["keygen", "--role", role, "--out"])
        .arg(out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).unwrap().trim().to_string()
}

/// Signing keys made by `xtask keygen` and a trust root made by `xtask trust-root`, in a
/// folder of their own.
pub struct Keys {
    pub dir: PathBuf,
}

impl Keys {
    /// Keys for every role and a root of `channel` (`dev` or `production`) listing them.
    pub fn new(dir: &Path, channel: &str) -> Keys {
        Keys::with_builders(dir, channel, 1, 1)
    }

    /// Like [`Keys::new`], with `builders` builder keys (`builder.key`, `builder-2.key`, …)
    /// of which the root wants `threshold`.
    pub fn with_builders(dir: &Path, channel: &str, builders: usize, threshold: u32) -> Keys {
        std::fs::create_dir_all(dir).unwrap();
        let k = Keys {
            dir: dir.to_path_buf(),
        };
        let mut cmd = xtask();
        cmd.args(["trust-root", "--channel", channel, "--out"])
            .arg(k.root())
            .args(["--builder-threshold", &threshold.to_string()]);
        for role in ["root", "reviewer", "publisher"] {
            cmd.args([format!("--{role}"), keygen(role, &k.key(role))]);
        }
        for n in 1..=builders {
            cmd.args(["--builder".to_string(), keygen("builder", &k.builder(n))]);
        }
        let out = cmd.arg("--sign-with").arg(k.key("root")).output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        k
    }

    /// The `n`th builder key (1: `builder.key`).
    pub fn builder(&self, n: usize) -> PathBuf {
        match n {
            1 => self.key("builder"),
            n => self.key(&format!("builder-{n}")),
        }
    }

    pub fn key(&self, role: &str) -> PathBuf {
        self.dir.join(format!("{role}.key"))
    }

    pub fn root(&self) -> PathBuf {
        self.dir.join("root.json")
    }
}

/// Output of a finished command, as text.
pub struct Out {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Out {
    pub fn of(cmd: &mut Command) -> Out {
        let o = cmd.output().expect("run the command");
        Out {
            code: o.status.code(),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }

    #[track_caller]
    pub fn ok(self) -> Out {
        assert_eq!(
            self.code,
            Some(0),
            "failed:\n{}\n{}",
            self.stderr,
            self.stdout
        );
        self
    }

    #[track_caller]
    pub fn failed(self) -> Out {
        assert_eq!(
            self.code,
            Some(1),
            "did not fail with 1:\n{}\n{}",
            self.stderr,
            self.stdout
        );
        self
    }

    /// The JSON messages on stdout (one per line).
    pub fn messages(&self) -> Vec<serde_json::Value> {
        self.stdout
            .lines()
            .map(|l| {
                serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON line: {l}: {e}"))
            })
            .collect()
    }

    /// The `Fix:` line of stderr.
    pub fn fix(&self) -> &str {
        self.stderr
            .lines()
            .find_map(|l| l.strip_prefix("Fix: "))
            .unwrap_or_else(|| panic!("no Fix: line in\n{}", self.stderr))
    }
}

/// Shell words of a command line, with `&&`, `||`, `|` and `;` as words of their own and
/// `# comments` dropped (quotes kept together, as the shell does).
pub fn shell_words(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quote: Option<char> = None;
    let mut chars = line.chars().peekable();
    let flush = |cur: &mut String, out: &mut Vec<String>| {
        if !cur.is_empty() {
            out.push(std::mem::take(cur));
        }
    };
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => cur.push(c),
            (None, '"' | '\'') => quote = Some(c),
            (None, '#') if cur.is_empty() => break,
            (None, ' ' | '\t') => flush(&mut cur, &mut out),
            (None, ';') => {
                flush(&mut cur, &mut out);
                out.push(";".into());
            }
            (None, '&' | '|') => {
                flush(&mut cur, &mut out);
                let mut op = c.to_string();
                if chars.peek() == Some(&c) {
                    op.push(chars.next().unwrap());
                }
                out.push(op);
            }
            (None, c) => cur.push(c),
        }
    }
    flush(&mut cur, &mut out);
    out
}

/// For a build output made by hand (a manifest and blob written by a test, not by `build`):
/// the provenance `build` would have recorded beside it, naming one source (the spec) kept
/// in `<out>/build.sources/`, so `sign` and `publish` take it.
pub fn record_provenance(out: &Path, channel: cuda_aot::Channel) {
    let toolkit = cuda_aot::Toolkit {
        nvcc: "13.0.88".into(),
        digest: cuda_aot::Digest::of(b"tk"),
        source: "pinned-wheels".into(),
    };
    let p = cuda_aot_testkit::provenance_for(channel, toolkit, "g++".into());
    std::fs::write(
        out.join("build.provenance.json"),
        cuda_aot::json::to_vec(&p),
    )
    .unwrap();
    let spec_bytes = cuda_aot_testkit::FIXTURE_SPEC;
    let dir = out.join("build.sources");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(cuda_aot::Digest::of(spec_bytes).hex()), spec_bytes).unwrap();
}

/// A key file written by `xtask keygen` (its `seed:` line).
pub fn read_key(path: &Path) -> cuda_aot::SecretKey {
    let text = std::fs::read_to_string(path).unwrap();
    let seed = text
        .lines()
        .find_map(|l| l.strip_prefix("seed: "))
        .expect("a seed line");
    let mut bytes = [0u8; 32];
    hex::decode_to_slice(seed.trim(), &mut bytes).unwrap();
    cuda_aot::SecretKey::from_seed(bytes)
}

/// Spawns `cmd` (a publish) to pause after the publish step `step` (the `test-hooks` pause
/// point, `CUDA_AOT_PUBLISH_PAUSE`), announcing it in `dir`; its output captured. It goes
/// on once `dir/go` exists.
pub fn paused(cmd: &mut Command, step: &str, dir: &Path) -> std::process::Child {
    cmd.env(
        "CUDA_AOT_PUBLISH_PAUSE",
        format!("{step}:{}", dir.display()),
    )
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped())
    .spawn()
    .unwrap()
}

/// Waits (two minutes at most) until `count` publishers announced their pause in `dir`.
pub fn wait_for_pauses(dir: &Path, count: usize) {
    let start = std::time::Instant::now();
    loop {
        let n = std::fs::read_dir(dir)
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .ends_with(".reached")
            })
            .count();
        if n >= count {
            return;
        }
        assert!(
            start.elapsed() < std::time::Duration::from_secs(120),
            "publishers did not reach the pause point"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}
