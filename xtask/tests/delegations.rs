//! Issue 46, delegated publishing end to end through the tool: a trust root with a
//! delegations role, delegations signed and put in force (`cargo xtask delegations`), two
//! teams publishing their own modules with their own keys (`publish --team`) into one
//! folder and one S3 bucket at the same time, a team's key refused on another team's
//! module by the publisher, `verify`, `sync` and the C ABI, a team rotating and revoking
//! its keys without a new trust root, and delegated metadata that is expired, over-long,
//! oversize, rolled back or not listed, each refused with its reason. Real nvcc builds,
//! real keys made by `keygen`, real signatures.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::s3::S3;
use common::server::Server;
use common::{Out, keygen, read_key, xtask};
use cuda_aot::delegation::TeamMetadata;
use cuda_aot::metadata::{Index, TeamRef, Time, Timestamp, sign_doc};
use cuda_aot::source::layout;
use cuda_aot::trust::decode_unverified;
use cuda_aot::{Digest, Limits};

/// One workspace: keys, a trust root with a delegations role, three builds (the root's
/// builders' `core_mix`; team risc0's `risc0_ntt` and `risc0_hash`; team airbender's
/// `airbender_msm`), each signed by its owner's builder key, and the delegations v1 file.
struct Setup {
    dir: tempfile::TempDir,
}

const KERNEL: &str = "extern \"C\" __global__ void twice(unsigned int* d, unsigned int n) {\n\
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;\n\
    if (i < n) d[i] *= 2u;\n}\n";

/// The keys: the trust root's roles, its delegations role and each team's three roles
/// (airbender's second publisher and builder keys for the rotation).
const KEYS: [(&str, &str); 16] = [
    ("root", "root"),
    ("builder", "builder"),
    ("reviewer", "reviewer"),
    ("publisher", "publisher"),
    ("delegations", "publisher"),
    ("risc0-publisher", "publisher"),
    ("risc0-builder", "builder"),
    ("risc0-reviewer", "reviewer"),
    ("airbender-publisher", "publisher"),
    ("airbender-builder", "builder"),
    ("airbender-reviewer", "reviewer"),
    ("airbender-publisher-2", "publisher"),
    ("airbender-builder-2", "builder"),
    ("risc0-gpu-publisher", "publisher"),
    ("risc0-gpu-builder", "builder"),
    ("risc0-gpu-reviewer", "reviewer"),
];

impl Setup {
    fn new() -> Setup {
        common::toolkit_root();
        let s = Setup {
            dir: tempfile::Builder::new()
                .prefix("delegations-")
                .tempdir()
                .unwrap(),
        };
        std::fs::create_dir_all(s.path("keys")).unwrap();
        for (name, role) in KEYS {
            let public = keygen(role, &s.key(name));
            std::fs::write(s.path(&format!("keys/{name}.pub")), public).unwrap();
        }
        let mut root = xtask();
        root.args(["trust-root", "--channel", "dev", "--out"])
            .arg(s.trust());
        for role in ["root", "builder", "reviewer", "publisher", "delegations"] {
            root.arg(format!("--{role}")).arg(s.public(role));
        }
        Out::of(root.arg("--sign-with").arg(s.key("root"))).ok();
        std::fs::create_dir_all(s.path("src")).unwrap();
        std::fs::write(s.path("src/k.cu"), KERNEL).unwrap();
        for (build, modules, builder) in [
            ("core", &["core_mix"][..], "builder"),
            ("risc0", &["risc0_ntt", "risc0_hash"][..], "risc0-builder"),
            ("airbender", &["airbender_msm"][..], "airbender-builder"),
        ] {
            s.build(build, modules);
            s.sign(build, builder);
        }
        s.sign_delegations(
            "d1.json",
            1,
            &s.spec("airbender-publisher", "airbender-builder"),
        )
        .ok();
        s
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }
    fn key(&self, name: &str) -> PathBuf {
        self.path(&format!("keys/{name}.key"))
    }
    fn public(&self, name: &str) -> String {
        std::fs::read_to_string(self.path(&format!("keys/{name}.pub"))).unwrap()
    }
    fn trust(&self) -> PathBuf {
        self.path("keys/root.json")
    }
    fn out(&self, build: &str) -> PathBuf {
        self.path(&format!("out/{build}"))
    }

    /// Builds `modules` (all from one kernel file) for sm_90 into `out/<build>`.
    fn build(&self, build: &str, modules: &[&str]) {
        let mut spec = "[build]\nsources = \"../src\"\ntargets = [\"sm_90\"]\n".to_string();
        for m in modules {
            spec += &format!(
                "\n[[module]]\nname = \"{m}\"\nsource = \"k.cu\"\nentry_points = [\"twice\"]\nprotocol = \"t\"\nschedule_version = 1\n"
            );
        }
        let file = self.path(&format!("spec/{build}.toml"));
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(&file, spec).unwrap();
        Out::of(
            xtask()
                .args(["build", "--spec"])
                .arg(&file)
                .arg("--cache-dir")
                .arg(self.path("cache"))
                .arg("--out")
                .arg(self.out(build)),
        )
        .ok();
    }

    /// Signs `out/<build>`'s build statement with `builder`'s key.
    fn sign(&self, build: &str, builder: &str) {
        Out::of(
            xtask()
                .args(["sign", "--builder-key"])
                .arg(self.key(builder))
                .arg(self.out(build)),
        )
        .ok();
    }

    /// A delegations spec: risc0 owns `risc0_*` (terminating), airbender `airbender_*`
    /// with the given publisher and builder keys.
    fn spec(&self, airbender_publisher: &str, airbender_builder: &str) -> String {
        let role = |role: &str, key: &str| {
            format!(
                "{role} = {{ keys = [\"{}\"], threshold = 1 }}\n",
                self.public(key)
            )
        };
        format!(
            "[[delegation]]\nname = \"risc0\"\npaths = [\"risc0_*\"]\nterminating = true\n{}{}{}\n[[delegation]]\nname = \"airbender\"\npaths = [\"airbender_*\"]\n{}{}{}",
            role("publisher", "risc0-publisher"),
            role("builder", "risc0-builder"),
            role("reviewer", "risc0-reviewer"),
            role("publisher", airbender_publisher),
            role("builder", airbender_builder),
            role("reviewer", "airbender-reviewer"),
        )
    }

    /// `delegations sign` of `spec` as version `version` into `file`.
    fn sign_delegations(&self, file: &str, version: u64, spec: &str) -> Out {
        let spec_file = self.path(&format!("{file}.toml"));
        std::fs::write(&spec_file, spec).unwrap();
        Out::of(
            xtask()
                .args(["delegations", "sign", "--spec"])
                .arg(&spec_file)
                .arg("--key")
                .arg(self.key("delegations"))
                .args(["--version", &version.to_string(), "--out"])
                .arg(self.path(file)),
        )
    }

    /// `publish out/<build>` into `registry` with the registry's publisher key, plus `extra`.
    fn publish(&self, registry: &str, build: &str, extra: &[&str]) -> Command {
        let mut cmd = xtask();
        cmd.arg("publish")
            .arg(self.out(build))
            .args(["--registry", registry, "--trust"])
            .arg(self.trust())
            .arg("--publisher-key")
            .arg(self.key("publisher"))
            .args(extra);
        cmd
    }

    /// `publish --team TEAM --team-key <TEAM-publisher>` of `out/<build>`.
    fn publish_team(&self, registry: &str, build: &str, team: &str, key: &str) -> Command {
        let key = self.key(key);
        let mut cmd = self.publish(registry, build, &["--team", team, "--team-key"]);
        cmd.arg(key);
        cmd
    }

    /// A registry with the root's release and the delegations v1 in force; `env` points
    /// each command at its store.
    fn registry(&self, registry: &str, env: &dyn Fn(&mut Command)) {
        let mut publish = self.publish(registry, "core", &[]);
        env(&mut publish);
        Out::of(&mut publish).ok();
        let mut delegations = xtask();
        delegations
            .args(["delegations", "publish"])
            .arg(self.path("d1.json"))
            .args(["--registry", registry, "--trust"])
            .arg(self.trust())
            .arg("--publisher-key")
            .arg(self.key("publisher"));
        env(&mut delegations);
        Out::of(&mut delegations).ok();
    }

    /// `sync` of the folder `registry`, served over HTTP by `serve`, into `to`.
    fn sync(&self, registry: &Path, to: &str) -> Out {
        let serve = Server::start(&["serve", "--addr", "127.0.0.1:0", "--root"], &[registry]);
        Out::of(&mut self.sync_from(xtask(), &serve.url(), to))
    }

    /// `cmd` (an xtask command, with whatever environment its store needs) set up to `sync`
    /// from `from` into `to` under the trust root, with its own state file.
    fn sync_from(&self, mut cmd: Command, from: &str, to: &str) -> Command {
        cmd.args(["sync", "--from", from, "--to"])
            .arg(self.path(to))
            .arg("--trust")
            .arg(self.trust())
            .arg("--state")
            .arg(self.path(&format!("{to}.sync-state.json")));
        cmd
    }

    /// `verify` of `registry` passes and lists the root's and both teams' modules.
    fn holds_every_module(&self, registry: &Path, state: &str) {
        let table = self.verify(registry, state).ok().stdout;
        for module in ["core_mix", "risc0_ntt", "risc0_hash", "airbender_msm"] {
            assert!(
                table.contains(&format!("\n{module} ")),
                "{module}:\n{table}"
            );
        }
    }

    /// Signs `out/<build>` with `builder`'s key, then publishes it into `registry` as
    /// `team` with `publisher`'s key: the publish, to be checked.
    fn publish_signed(
        &self,
        registry: &str,
        build: &str,
        (team, publisher, builder): (&str, &str, &str),
    ) -> Out {
        self.sign(build, builder);
        Out::of(&mut self.publish_team(registry, build, team, publisher))
    }

    /// Like [`Setup::publish_signed`], which must be refused: `builder` is not a builder
    /// key of `team`.
    fn publish_refused_signed(&self, registry: &str, build: &str, who: (&str, &str, &str)) {
        let refused = self.publish_signed(registry, build, who).failed();
        assert!(
            refused.stderr.contains(&format!(
                "signed by 0 of the 1 required key(s) that delegated role {:?} has for it",
                who.0
            )),
            "{}",
            refused.stderr
        );
    }

    /// The `verify` table's row of `module`, which must name `builder`'s key.
    fn row_signed_by(&self, table: &str, module: &str, builder: &str) -> String {
        let id = read_key(&self.key(builder)).public().key_id().short();
        let row = table
            .lines()
            .find(|l| l.starts_with(&format!("{module} ")))
            .unwrap_or_else(|| panic!("no {module}:\n{table}"));
        assert!(row.contains(&format!("builder {id}")), "{row}");
        row.to_string()
    }

    fn verify(&self, registry: &Path, state: &str) -> Out {
        Out::of(
            xtask()
                .args(["verify", "--registry"])
                .arg(registry)
                .arg("--trust")
                .arg(self.trust())
                .arg("--state")
                .arg(self.path(state)),
        )
    }
}

/// What an attacker holding the registry's publisher key (but no team key) can do: sign
/// an index of its own making, and a timestamp naming it.
fn forge_index(reg: &Path, publisher: &Path, edit: impl FnOnce(&mut Index)) {
    common::forge::reissue(reg, &read_key(publisher), edit);
}

/// The team metadata `reg`'s current index lists for `team`.
fn team_metadata(reg: &Path, team: &str) -> (TeamRef, TeamMetadata) {
    let limits = Limits::default();
    let ts: Timestamp = decode_unverified(
        &std::fs::read(reg.join(layout::TIMESTAMP)).unwrap(),
        limits.timestamp,
        "timestamp",
    )
    .unwrap();
    let index: Index = decode_unverified(
        &std::fs::read(reg.join(layout::index(ts.index.version))).unwrap(),
        limits.index,
        "index",
    )
    .unwrap();
    let r = index.teams.iter().find(|t| t.name == team).unwrap().clone();
    let file = std::fs::read(reg.join(layout::team(&r.digest))).unwrap();
    (r, decode_unverified(&file, limits.index, "team").unwrap())
}

/// Stores `doc` signed by `key` in `reg`, returning what an index lists of it.
fn store_team(reg: &Path, doc: &TeamMetadata, key: &Path) -> TeamRef {
    let bytes = sign_doc(doc, &[&read_key(key)]).to_bytes();
    let r = TeamRef {
        name: doc.name.clone(),
        version: doc.version,
        digest: Digest::of(&bytes),
        size: bytes.len() as u64,
    };
    std::fs::write(reg.join(layout::team(&r.digest)), bytes).unwrap();
    r
}

fn replace_ref(index: &mut Index, r: TeamRef) {
    index.teams.retain(|t| t.name != r.name);
    index.teams.push(r);
    index.teams.sort();
}

/// Two teams' publishers, both prepared on the same index, let go at once: both succeed
/// (the loser of the compare-and-swap builds again on the winner's index), their stderr.
fn race(a: Command, b: Command, pause: &Path) -> String {
    std::fs::create_dir_all(pause).unwrap();
    let (mut a, mut b) = (a, b);
    let children = [
        common::paused(&mut a, "manifests", pause),
        common::paused(&mut b, "manifests", pause),
    ];
    common::wait_for_pauses(pause, 2);
    std::fs::write(pause.join("go"), b"").unwrap();
    let mut text = String::new();
    for c in children {
        let out = c.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "a team's publish failed:\n{err}");
        text += &err;
    }
    text
}

/// Issue 46, "Must show": two teams publish into one folder registry and one S3 registry at
/// the same time, and both land: each team's modules, signed by its own builder key, next
/// to the other's and the root's; the team that lost the race said it built again.
#[test]
fn two_teams_publishing_at_once_both_land_in_a_folder_and_in_s3() {
    let s = Setup::new();
    let folder = s.path("reg").display().to_string();
    s.registry(&folder, &|_| {});
    let text = race(
        s.publish_team(&folder, "risc0", "risc0", "risc0-publisher"),
        s.publish_team(&folder, "airbender", "airbender", "airbender-publisher"),
        &s.path("pause-folder"),
    );
    assert!(
        text.contains("another publisher committed first 1 time(s)"),
        "{text}"
    );
    let table = s.verify(&s.path("reg"), "state-folder").ok().stdout;
    for (module, key) in [
        ("core_mix", "builder"),
        ("risc0_ntt", "risc0-builder"),
        ("risc0_hash", "risc0-builder"),
        ("airbender_msm", "airbender-builder"),
    ] {
        let id = read_key(&s.key(key)).public().key_id().short();
        let line = table
            .lines()
            .find(|l| l.starts_with(module))
            .unwrap_or_else(|| panic!("{module} missing:\n{table}"));
        assert!(line.contains(&format!("builder {id}")), "{line}");
        // The owning team is named; the root's builders' module has none.
        let team = key.strip_suffix("-builder").map(|t| format!("team {t}"));
        assert_eq!(line.contains("team "), team.is_some(), "{line}");
        if let Some(t) = team {
            assert!(line.contains(&t), "{line}");
        }
    }
    assert!(table.starts_with("registry OK: index v4 "), "{table}");
    // The page for people shows who owns what: each team's patterns, keys and metadata.
    let serve = Server::start(
        &["serve", "--addr", "127.0.0.1:0", "--root"],
        &[&s.path("reg"), Path::new("--trust"), &s.trust()],
    );
    let (status, _, body) = common::server::http_get(&serve.url(), "text/html");
    let page = String::from_utf8(body).unwrap();
    assert_eq!(status, 200, "{page}");
    assert!(page.contains("<h2>Delegations</h2>"), "{page}");
    for (team, pattern, modules) in [
        ("risc0", "risc0_*", "risc0_hash, risc0_ntt"),
        ("airbender", "airbender_*", "airbender_msm"),
    ] {
        let row = page
            .split("<tr data-team=")
            .find(|r| r.starts_with(&format!("\"{team}\"")))
            .unwrap_or_else(|| panic!("no row for {team}: {page}"));
        assert!(row.contains(&format!("<code>{pattern}</code>")), "{row}");
        assert!(row.contains("v1, expires"), "{row}");
        assert!(row.contains(modules), "{row}");
        let builder = read_key(&s.key(&format!("{team}-builder")))
            .public()
            .key_id()
            .short();
        assert!(row.contains(&builder), "{row}");
    }

    let s3 = S3::start(&["teams"], &[]);
    let url = "s3://teams/registry";
    s.registry(url, &|c| {
        s3.env(c);
    });
    let mut a = s.publish_team(url, "risc0", "risc0", "risc0-publisher");
    let mut b = s.publish_team(url, "airbender", "airbender", "airbender-publisher");
    s3.env(&mut a);
    s3.env(&mut b);
    let text = race(a, b, &s.path("pause-s3"));
    assert!(
        text.contains("another publisher committed first 1 time(s)"),
        "{text}"
    );
    Out::of(&mut s.sync_from(s3.xtask(), url, "from-s3")).ok();
    s.holds_every_module(&s.path("from-s3"), "state-s3");
}

/// Issue 46: two teams publishing at once through a publishing HTTP server (its
/// timestamp's If-Match is the compare-and-swap) and into an OCI tag (no compare-and-swap:
/// the conflict is seen before or just after the push, and the team's publish builds
/// again) both land. The registry starts from the root's release published with the
/// delegations (`publish --delegations`).
#[test]
fn two_teams_publishing_at_once_both_land_over_http_and_in_an_oci_tag() {
    let s = Setup::new();
    let d1 = s.path("d1.json").display().to_string();
    // HTTP: a publishing server over an empty folder.
    let served = s.path("served");
    let (server, token) = common::server::publishing(s.dir.path(), &served, &s.trust());
    let url = server.url();
    let with_token = |mut c: Command| {
        c.arg("--token-file").arg(&token);
        c
    };
    Out::of(&mut with_token(s.publish(
        &url,
        "core",
        &["--delegations", &d1],
    )))
    .ok();
    let text = race(
        with_token(s.publish_team(&url, "risc0", "risc0", "risc0-publisher")),
        with_token(s.publish_team(&url, "airbender", "airbender", "airbender-publisher")),
        &s.path("pause-http"),
    );
    assert!(
        text.contains("another publisher committed first 1 time(s)"),
        "{text}"
    );
    s.holds_every_module(&served, "state-http");

    // OCI: a tag of the test registry.
    let oci = common::server::oci_server(s.dir.path());
    let reference = format!("oci://{}/teams/registry:v1", oci.addr);
    Out::of(&mut s.publish(&reference, "core", &["--delegations", &d1])).ok();
    let text = race(
        s.publish_team(&reference, "risc0", "risc0", "risc0-publisher"),
        s.publish_team(&reference, "airbender", "airbender", "airbender-publisher"),
        &s.path("pause-oci"),
    );
    assert!(
        text.contains("another publisher committed first 1 time(s)"),
        "{text}"
    );
    Out::of(&mut s.sync_from(xtask(), &reference, "from-oci")).ok();
    s.holds_every_module(&s.path("from-oci"), "state-oci");
}

/// An OCI tag has no compare-and-swap, so it can move between a team's push and the
/// attaching of its statement (CI saw it in the race above). The statement must be attached
/// to the team's own release, never to whatever the tag holds by then: attached to another
/// release it is foreign to that release's index, and every later sync of the tag (the
/// team's own retry first) refuses it. Here the tag is moved back to the root's release
/// while risc0's publisher waits between its push and its attestations, as a publisher
/// that started from that release would do; risc0's publish sees the conflict, builds again
/// and lands, and the tag syncs.
#[test]
fn a_team_whose_oci_tag_moves_during_its_push_attaches_its_statement_to_its_own_release() {
    use common::oci::{MANIFEST, get, put};
    let s = Setup::new();
    let d1 = s.path("d1.json").display().to_string();
    let oci = common::server::oci_server(s.dir.path());
    let reference = format!("oci://{}/teams/registry:v1", oci.addr);
    Out::of(&mut s.publish(&reference, "core", &["--delegations", &d1])).ok();
    let tag = format!("http://{}/v2/teams/registry/manifests/v1", oci.addr);
    let (status, root_release) = get(&tag, MANIFEST);
    assert_eq!(status, 200);
    let pause = s.path("pause-pushed");
    std::fs::create_dir_all(&pause).unwrap();
    let risc0 = common::paused(
        &mut s.publish_team(&reference, "risc0", "risc0", "risc0-publisher"),
        "pushed",
        &pause,
    );
    common::wait_for_pauses(&pause, 1);
    put(&tag, MANIFEST, root_release);
    std::fs::write(pause.join("go"), b"").unwrap();
    let out = risc0.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "risc0's publish failed:\n{err}");
    assert!(
        err.contains("another publisher committed first 1 time(s)"),
        "{err}"
    );
    let synced = Out::of(&mut s.sync_from(xtask(), &reference, "from-oci")).ok();
    assert!(
        synced
            .stdout
            .contains("attestation(s) attached as OCI referrers"),
        "{}",
        synced.stdout
    );
    let table = s.verify(&s.path("from-oci"), "state-mirror").ok().stdout;
    for module in ["core_mix", "risc0_ntt", "risc0_hash"] {
        assert!(
            table.contains(&format!("\n{module} ")),
            "{module}:\n{table}"
        );
    }
}

/// Issue 46, "Must show": team airbender's key signing a `risc0_*` module is refused
/// everywhere. The publisher refuses it under either team and under the root's builders,
/// changing nothing; an index forged with the registry's own publisher key is refused by
/// `verify`, `sync` and the C ABI, each naming team risc0.
#[test]
fn a_teams_key_signing_another_teams_module_is_refused_everywhere() {
    let s = Setup::new();
    let reg = s.path("reg");
    let folder = reg.display().to_string();
    s.registry(&folder, &|_| {});
    Out::of(&mut s.publish_team(&folder, "risc0", "risc0", "risc0-publisher")).ok();
    Out::of(&mut s.publish_team(&folder, "airbender", "airbender", "airbender-publisher")).ok();
    let before = std::fs::read(reg.join(layout::TIMESTAMP)).unwrap();
    // risc0's module, signed by airbender's builder key.
    s.build("evil", &["risc0_ntt"]);
    s.sign("evil", "airbender-builder");
    let under_airbender =
        Out::of(&mut s.publish_team(&folder, "evil", "airbender", "airbender-publisher")).failed();
    assert!(
        under_airbender.stderr.contains(
            "module risc0_ntt is outside the names delegated to it (patterns [\"airbender_*\"])"
        ),
        "{}",
        under_airbender.stderr
    );
    let under_risc0 =
        Out::of(&mut s.publish_team(&folder, "evil", "risc0", "risc0-publisher")).failed();
    assert!(
        under_risc0.stderr.contains(
            "signed by 0 of the 1 required key(s) that delegated role \"risc0\" has for it"
        ),
        "{}",
        under_risc0.stderr
    );
    // Not even the trust root's own builders sign a team's module.
    s.build("by-root", &["risc0_ntt"]);
    s.sign("by-root", "builder");
    let under_root = Out::of(&mut s.publish(&folder, "by-root", &[])).failed();
    assert!(
        under_root
            .stderr
            .contains("that delegated role \"risc0\" has for it"),
        "{}",
        under_root.stderr
    );
    assert_eq!(std::fs::read(reg.join(layout::TIMESTAMP)).unwrap(), before);
    s.verify(&reg, "state-before").ok();

    // The attacker holds the registry's publisher key: it stores the evil build and lists
    // its statement for risc0_ntt in an index of its own.
    let evil = s.out("evil");
    let read = |rel: &str| std::fs::read(evil.join(rel)).unwrap();
    let (statement, manifest, blob) = (
        read("build.statement.json"),
        read("risc0_ntt/sm_90.cubin.manifest.json"),
        read("risc0_ntt/sm_90.cubin"),
    );
    for (rel, bytes) in [
        (layout::statement(&Digest::of(&statement)), &statement),
        (layout::manifest(&Digest::of(&manifest)), &manifest),
        (layout::blob(&Digest::of(&blob)), &blob),
    ] {
        let p = reg.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, bytes).unwrap();
    }
    forge_index(&reg, &s.key("publisher"), |index| {
        let e = index
            .entries
            .iter_mut()
            .find(|e| e.module.as_str() == "risc0_ntt")
            .unwrap();
        e.statement = Digest::of(&statement);
        e.manifest = Digest::of(&manifest);
        e.manifest_size = manifest.len() as u64;
        index.statements.push(cuda_aot::metadata::DocRef {
            digest: Digest::of(&statement),
            size: statement.len() as u64,
        });
        index.statements.sort();
    });
    let refused = s.verify(&reg, "state-verify").failed();
    assert!(
        refused.stderr.contains("delegated role \"risc0\""),
        "{}",
        refused.stderr
    );
    assert!(refused.stderr.contains("Fix: "), "{}", refused.stderr);
    let c = common::capi::c_verify(&reg, &s.trust(), &s.path("state-c.json")).unwrap_err();
    assert!(c.contains("delegated role \"risc0\""), "{c}");
    let sync = s.sync(&reg, "mirror").failed();
    assert!(
        sync.stderr.contains("delegated role \"risc0\""),
        "{}",
        sync.stderr
    );
    assert!(!s.path("mirror/timestamp.json").exists());
}

/// Issue 46, "Must show": team airbender rotates its publisher and builder keys with a new
/// delegations version and no new trust root; the registry verifies under the same root,
/// a mirror synced before the rotation still verifies, and the old keys are refused.
#[test]
fn a_team_rotates_its_keys_without_a_new_trust_root() {
    let s = Setup::new();
    let reg = s.path("reg");
    let folder = reg.display().to_string();
    s.registry(&folder, &|_| {});
    Out::of(&mut s.publish_team(&folder, "airbender", "airbender", "airbender-publisher")).ok();
    let old = s.path("old-mirror");
    s.sync(&reg, "old-mirror").ok();
    let root_before = std::fs::read(s.trust()).unwrap();
    s.sign_delegations(
        "d2.json",
        2,
        &s.spec("airbender-publisher-2", "airbender-builder-2"),
    )
    .ok();
    // The new delegations alone would leave airbender's metadata signed by a key they no
    // longer list: refused, naming the team.
    let alone = Out::of(
        xtask()
            .args(["delegations", "publish"])
            .arg(s.path("d2.json"))
            .args(["--registry", &folder, "--trust"])
            .arg(s.trust())
            .arg("--publisher-key")
            .arg(s.key("publisher")),
    )
    .failed();
    assert!(alone.stderr.contains("\"airbender\""), "{}", alone.stderr);
    // The old builder key is revoked by the new delegations.
    let d2 = s.path("d2.json").display().to_string();
    let revoked = Out::of(
        s.publish_team(&folder, "airbender", "airbender", "airbender-publisher-2")
            .args(["--delegations", &d2]),
    )
    .failed();
    assert!(
        revoked.stderr.contains(
            "signed by 0 of the 1 required key(s) that delegated role \"airbender\" has for it"
        ),
        "{}",
        revoked.stderr
    );
    // With its new builder key and its new publisher key, the release lands with them.
    s.sign("airbender", "airbender-builder-2");
    let stale = Out::of(
        s.publish_team(&folder, "airbender", "airbender", "airbender-publisher")
            .args(["--delegations", &d2]),
    )
    .failed();
    assert!(
        stale.stderr.contains("is not one of its publisher keys"),
        "{}",
        stale.stderr
    );
    Out::of(
        s.publish_team(&folder, "airbender", "airbender", "airbender-publisher-2")
            .args(["--delegations", &d2]),
    )
    .ok();
    assert_eq!(
        std::fs::read(s.trust()).unwrap(),
        root_before,
        "no new trust root"
    );
    let table = s.verify(&reg, "state-new").ok().stdout;
    let new_id = read_key(&s.key("airbender-builder-2"))
        .public()
        .key_id()
        .short();
    assert!(table.contains(&format!("builder {new_id}")), "{table}");
    let (r, _) = team_metadata(&reg, "delegations");
    assert_eq!(r.version, 2);
    s.verify(&old, "state-old").ok();
}

/// Issue 46, "Must show": delegated metadata that is expired, over-long, truncated,
/// oversize, rolled back below a version seen, or missing from the index that should list
/// it is refused by `verify`, with its reason.
#[test]
fn expired_oversize_rolled_back_or_unlisted_team_metadata_is_refused() {
    let s = Setup::new();
    let reg = s.path("reg");
    let folder = reg.display().to_string();
    s.registry(&folder, &|_| {});
    Out::of(&mut s.publish_team(&folder, "risc0", "risc0", "risc0-publisher")).ok();
    let good = common::snapshot(&reg);
    let restore = || {
        let _ = std::fs::remove_dir_all(&reg);
        for (rel, bytes) in &good {
            let p = reg.join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, bytes).unwrap();
        }
    };
    let (r1, doc) = team_metadata(&reg, "risc0");
    let risc0 = s.key("risc0-publisher");
    let refused = |state: &str, what: &str| {
        let out = s.verify(&reg, state).failed();
        assert!(out.stderr.contains(what), "{what}:\n{}", out.stderr);
        assert!(out.stderr.contains("Fix: "), "{}", out.stderr);
    };
    // Expired: the team signed metadata whose expiry has passed.
    let expired = TeamMetadata {
        version: doc.version + 1,
        expires: Time::from_unix(Time::now().unix() - 60),
        ..doc.clone()
    };
    let r = store_team(&reg, &expired, &risc0);
    forge_index(&reg, &s.key("publisher"), |i| replace_ref(i, r));
    refused(
        "state-expired",
        "delegated role \"risc0\" (delegated by \"delegations\"): its metadata expired at",
    );
    restore();
    // Over-long and truncated: the file is not the length the index lists.
    for (state, delta, what) in [
        ("state-long", -1i64, "bytes where the index lists"),
        ("state-short", 1, "bytes where the index lists"),
    ] {
        restore();
        forge_index(&reg, &s.key("publisher"), |i| {
            replace_ref(
                i,
                TeamRef {
                    size: (r1.size as i64 + delta) as u64,
                    ..r1.clone()
                },
            )
        });
        refused(state, what);
    }
    // Oversize: a listed size above the limit is refused before anything is read.
    restore();
    forge_index(&reg, &s.key("publisher"), |i| {
        replace_ref(
            i,
            TeamRef {
                size: Limits::default().index + 1,
                ..r1.clone()
            },
        )
    });
    refused("state-oversize", "exceeds the limit of");
    // Rolled back: a client that saw risc0 v2 refuses an index listing v1 again.
    restore();
    let v2 = TeamMetadata {
        version: doc.version + 1,
        ..doc.clone()
    };
    let r2 = store_team(&reg, &v2, &risc0);
    forge_index(&reg, &s.key("publisher"), |i| replace_ref(i, r2));
    s.verify(&reg, "state-rollback").ok();
    forge_index(&reg, &s.key("publisher"), |i| replace_ref(i, r1.clone()));
    refused(
        "state-rollback",
        "older than version 2 seen before (a rollback)",
    );
    // Unlisted: the index drops risc0's metadata while listing its modules.
    restore();
    forge_index(&reg, &s.key("publisher"), |i| {
        i.teams.retain(|t| t.name != "risc0")
    });
    refused(
        "state-unlisted",
        "delegated role \"risc0\" (delegated by \"delegations\"): the index lists no metadata for it",
    );
}

/// Issue 46, "Bad input": delegations that cannot decide who owns a name are refused
/// when they are signed, naming the pattern: two teams claiming one name with no
/// terminating delegation before, a pattern no module name can match, a role that is the
/// trust root's; and a team's own delegations that delegate to itself (a cycle), to a role
/// the delegations role also delegates to, or outside the team's names.
#[test]
fn delegations_that_cannot_decide_an_owner_are_refused_when_signed() {
    let s = Setup::new();
    let key = |k: &str| format!("{{ keys = [\"{}\"], threshold = 1 }}", s.public(k));
    let team = |name: &str, paths: &str, terminating: bool| {
        format!(
            "[[delegation]]\nname = \"{name}\"\npaths = {paths}\nterminating = {terminating}\npublisher = {}\nbuilder = {}\nreviewer = {}\n",
            key("risc0-publisher"),
            key("risc0-builder"),
            key("risc0-reviewer")
        )
    };
    for (n, spec, what) in [
        (
            1,
            team("a", "[\"risc0_*\"]", false) + &team("b", "[\"risc0_n*\"]", false),
            "delegations \"a\" (pattern \"risc0_*\") and \"b\" (pattern \"risc0_n*\") both match module names such as \"risc0_n",
        ),
        (
            2,
            team("a", "[\"Risc0_*\"]", false),
            "pattern \"Risc0_*\" matches no module name",
        ),
        (
            3,
            team("a", "[\"risc0/*\"]", false),
            "pattern \"risc0/*\" matches no module name",
        ),
        (
            4,
            team("root", "[\"x_*\"]", false),
            "delegated role name \"root\": is the name of a role of the trust root",
        ),
        (
            5,
            team("a", "[\"risc0_*\"]", false).replacen(
                &s.public("risc0-publisher"),
                "ed25519:0000",
                1,
            ),
            "public key \"ed25519:0000\": bad key or signature: expected ed25519:<64 hex>\n\nFix: write each key as the one line of its `.pub` file",
        ),
    ] {
        let out = s
            .sign_delegations(&format!("bad-{n}.json"), 1, &spec)
            .failed();
        assert!(out.stderr.contains(what), "{what}:\n{}", out.stderr);
        assert!(out.stderr.contains("Fix: "), "{}", out.stderr);
        assert!(!s.path(&format!("bad-{n}.json")).exists());
    }
    // The same overlap is fine when the earlier delegation terminates: it decides.
    s.sign_delegations(
        "ordered.json",
        1,
        &(team("a", "[\"risc0_*\"]", true) + &team("b", "[\"risc0_n*\"]", false)),
    )
    .ok();

    let reg = s.path("reg");
    let folder = reg.display().to_string();
    s.registry(&folder, &|_| {});
    let before = std::fs::read(reg.join("timestamp.json")).unwrap();
    for (n, spec, what) in [
        (
            1,
            team("risc0", "[\"risc0_x*\"]", false),
            "delegated role name \"risc0\": delegates to itself (a cycle)",
        ),
        (
            2,
            team("airbender", "[\"risc0_x*\"]", false),
            "it delegates to \"airbender\", which the delegations role delegates to itself",
        ),
        (
            3,
            team("sub", "[\"airbender_*\"]", false),
            "delegation \"sub\": pattern \"airbender_*\" matches no name that its delegator \"risc0\" owns",
        ),
    ] {
        let file = s.path(&format!("team-{n}.toml"));
        std::fs::write(&file, spec).unwrap();
        let out = Out::of(
            s.publish_team(&folder, "risc0", "risc0", "risc0-publisher")
                .arg("--team-delegations")
                .arg(&file),
        )
        .failed();
        assert!(out.stderr.contains(what), "{what}:\n{}", out.stderr);
        assert!(out.stderr.contains("Fix: "), "{}", out.stderr);
    }
    assert_eq!(std::fs::read(reg.join("timestamp.json")).unwrap(), before);
}

/// Issue 46: delegations nest one level. Team risc0 delegates `risc0_gpu_*` to its sub-team
/// risc0-gpu (`publish --team-delegations`); the sub-team publishes its module with its own
/// keys, found by the search below risc0; risc0's next release leaves it in place; and
/// risc0's own builder key cannot sign the sub-team's module.
#[test]
fn a_team_delegates_to_a_sub_team_one_level_down() {
    let s = Setup::new();
    let reg = s.path("reg");
    let folder = reg.display().to_string();
    s.registry(&folder, &|_| {});
    let key = |k: &str| format!("{{ keys = [\"{}\"], threshold = 1 }}", s.public(k));
    let sub = s.path("sub.toml");
    std::fs::write(
        &sub,
        format!(
            "[[delegation]]\nname = \"risc0-gpu\"\npaths = [\"risc0_gpu_*\"]\npublisher = {}\nbuilder = {}\nreviewer = {}\n",
            key("risc0-gpu-publisher"),
            key("risc0-gpu-builder"),
            key("risc0-gpu-reviewer")
        ),
    )
    .unwrap();
    Out::of(
        s.publish_team(&folder, "risc0", "risc0", "risc0-publisher")
            .arg("--team-delegations")
            .arg(&sub),
    )
    .ok();
    s.build("gpu", &["risc0_gpu_ntt"]);
    // risc0's builder key is not the sub-team's.
    s.publish_refused_signed(
        &folder,
        "gpu",
        ("risc0-gpu", "risc0-gpu-publisher", "risc0-builder"),
    );
    s.publish_signed(
        &folder,
        "gpu",
        ("risc0-gpu", "risc0-gpu-publisher", "risc0-gpu-builder"),
    )
    .ok();
    // risc0 publishes again: the sub-team's module stays.
    Out::of(&mut s.publish_team(&folder, "risc0", "risc0", "risc0-publisher")).ok();
    let table = s.verify(&reg, "state").ok().stdout;
    s.row_signed_by(&table, "risc0_gpu_ntt", "risc0-gpu-builder");
    let (_, risc0) = team_metadata(&reg, "risc0");
    assert_eq!(risc0.delegations.len(), 1);
    let (_, gpu) = team_metadata(&reg, "risc0-gpu");
    assert_eq!(
        gpu.modules.iter().map(|m| m.as_str()).collect::<Vec<_>>(),
        ["risc0_gpu_ntt"]
    );
}

/// A real prover's kind of module, published by a team: `foreign_ntt` of the foreign corpus
/// is three files compiled as relocatable device code and device-linked (extern
/// `__constant__` tables defined in another file, a template kernel, a `__device__`
/// function defined elsewhere). A team owning `foreign_*` signs and publishes it with its
/// own keys beside the root's and risc0's modules; its module files verify (blobs and their
/// signed launch ABI included) after a sync over HTTP, under the team's builder key; the
/// root's builder key is refused on it.
#[test]
fn a_team_publishes_a_device_linked_module_of_several_files() {
    let s = Setup::new();
    let key = |k: &str| format!("{{ keys = [\"{}\"], threshold = 1 }}", s.public(k));
    let spec = s.spec("airbender-publisher", "airbender-builder")
        + &format!(
            "\n[[delegation]]\nname = \"provers\"\npaths = [\"foreign_*\"]\npublisher = {}\nbuilder = {}\nreviewer = {}\n",
            key("risc0-gpu-publisher"),
            key("risc0-gpu-builder"),
            key("risc0-gpu-reviewer")
        );
    s.sign_delegations("d3.json", 1, &spec).ok();
    let reg = s.path("reg");
    let folder = reg.display().to_string();
    let d3 = s.path("d3.json").display().to_string();
    Out::of(&mut s.publish(&folder, "core", &["--delegations", &d3])).ok();
    Out::of(&mut s.publish_team(&folder, "risc0", "risc0", "risc0-publisher")).ok();
    Out::of(
        xtask()
            .args(["build", "--spec"])
            .arg(common::repo().join("kernels/foreign/foreign.toml"))
            .args([
                "--module",
                "foreign_ntt",
                "--target",
                "sm_90",
                "--cache-dir",
            ])
            .arg(s.path("cache"))
            .arg("--out")
            .arg(s.out("linked")),
    )
    .ok();
    // The root's builder key signs for no module a team owns.
    let provers = |builder| ("provers", "risc0-gpu-publisher", builder);
    s.publish_refused_signed(&folder, "linked", provers("builder"));
    s.publish_signed(&folder, "linked", provers("risc0-gpu-builder"))
        .ok();
    s.sync(&reg, "mirror").ok();
    let table = s.verify(&s.path("mirror"), "state-mirror").ok().stdout;
    let row = s.row_signed_by(&table, "foreign_ntt", "risc0-gpu-builder");
    assert!(row.contains("team provers"), "{row}");
    // The teams' metadata expires too, and `--refresh-timestamp` does not re-sign it: the
    // table says when it expires and what re-signs it; `--json` gives the time.
    assert!(
        table.contains(", delegated metadata 20") && table.contains("publish --team"),
        "{table}"
    );
    let json = Out::of(
        xtask()
            .args(["verify", "--json", "--registry"])
            .arg(s.path("mirror"))
            .arg("--trust")
            .arg(s.trust())
            .arg("--state")
            .arg(s.path("state-json")),
    )
    .ok()
    .messages()
    .pop()
    .unwrap();
    let delegated = json["delegated_expires"].as_str().unwrap();
    assert!(
        table.contains(&format!(", delegated metadata {delegated};")),
        "{delegated}:\n{table}"
    );
    for kernel in ["ntt_dit_stage", "ntt_scale", "ntt_pow", "bit_reverse<"] {
        assert!(table.contains(kernel), "{kernel}:\n{table}");
    }
    for module in ["core_mix", "risc0_ntt", "risc0_hash"] {
        assert!(
            table.contains(&format!("\n{module} ")),
            "{module}:\n{table}"
        );
    }
}
