//! The registry's page for people (issue 46): what `serve --trust FILE` answers a browser
//! (`Accept: text/html`) at `/`. It is rendered on the server from metadata verified
//! against that trust root the way a prover verifies it (blobs and their content
//! included), and holds no script: modules × targets with sizes and digests, who signed
//! what (builders, reviewers and their promotions, the trust root's role keys, the
//! delegations: each team's patterns, keys and metadata), the index
//! history with expiry dates, each module's kernels with their signed launch ABI and
//! resources, and what changed in those resources since the previous release. Every string
//! from a file is escaped ([`esc`]).

use std::fmt::Write as _;
use std::path::Path;

use cuda_aot::manifest::Manifest;
use cuda_aot::metadata::{Index, Time};
use cuda_aot::source::{DirSource, RegistrySource, layout, read_exact_signed};
use cuda_aot::verify::{Options, Select, VerifiedIndex, verify_metadata};
use cuda_aot::{Function, Limits};

/// One index version the registry holds, signature-checked against the trust root.
#[derive(Debug, Clone)]
pub struct HistoryRow {
    /// Its version.
    pub version: u64,
    /// Its expiry, when its signatures verified under the trust root in use.
    pub expires: Option<Time>,
    /// Its entries, when verified.
    pub entries: usize,
}

/// A kernel resource that differs between a release and the one before.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// The module.
    pub module: String,
    /// The target.
    pub target: String,
    /// The index version of the manifest compared with.
    pub previous: u64,
    /// The kernel (display name).
    pub kernel: String,
    /// Which resource (`registers`, `shared`, …), or `kernel` for one added or removed.
    pub what: &'static str,
    /// Before (`-` when absent).
    pub before: String,
    /// Now (`-` when absent).
    pub now: String,
}

/// What the page shows, all of it verified.
pub struct View {
    /// The verified metadata (blobs and content checked too).
    pub index: VerifiedIndex,
    /// Every index version in `index/`, newest first.
    pub history: Vec<HistoryRow>,
    /// Resource changes of the current manifests against the previous release's.
    pub changes: Vec<Change>,
    /// When the page was made.
    pub now: Time,
    /// The delegations in force, each role's metadata checked (empty without delegations).
    pub delegations: Vec<cuda_aot::verify::DelegatedRole>,
}

/// Verifies the registry folder `dir` against the trust root `anchor` (steps 1–8, no
/// rollback state: a page shows what is there) and gathers the history and changes.
pub fn view(dir: &Path, anchor: &[u8], limits: &Limits) -> cuda_aot::Result<View> {
    let src = DirSource::new(dir);
    let opts = Options {
        limits: *limits,
        ..Options::default()
    };
    let verified = verify_metadata(&src, anchor, Default::default(), &opts)?
        .complete(&src, Select::all())
        .map_err(|f| *f.error)?;
    let index = verified.metadata().clone();
    let current = index.index().version;
    let mut history = Vec::new();
    let mut older: Vec<(u64, Index)> = Vec::new();
    for version in (1..=current).rev().take(MAX_HISTORY) {
        let Some(bytes) = src.read_at_most(&layout::index(version), limits.index)? else {
            continue;
        };
        let opened = index
            .root()
            .open::<Index>(&bytes, limits.index, &layout::index(version));
        match opened {
            Ok(o) => {
                history.push(HistoryRow {
                    version,
                    expires: Some(o.doc.expires),
                    entries: o.doc.entries.len(),
                });
                if version < current {
                    older.push((version, o.doc));
                }
            }
            Err(_) => history.push(HistoryRow {
                version,
                expires: None,
                entries: 0,
            }),
        }
    }
    let changes = changes(&src, &index, &older, limits);
    let now = Time::now();
    let delegations = index.delegated_roles(&src, now)?;
    Ok(View {
        index,
        history,
        changes,
        now,
        delegations,
    })
}

/// The most index versions the history lists.
const MAX_HISTORY: usize = 50;

/// For each current manifest, the resources that differ from the newest older index's
/// manifest of the same module, target and kind (read and checked against that index).
fn changes(
    src: &DirSource,
    index: &VerifiedIndex,
    older: &[(u64, Index)],
    limits: &Limits,
) -> Vec<Change> {
    let mut out = Vec::new();
    for m in index.manifests() {
        let e = m.entry();
        let before = older.iter().find_map(|(v, idx)| {
            let old = idx.entries.iter().find(|o| {
                o.module == e.module && o.sm == e.sm && o.kind == e.kind && o.manifest != e.manifest
            })?;
            let bytes = read_exact_signed(
                src,
                &layout::manifest(&old.manifest),
                old.manifest_size,
                &old.manifest,
                "an earlier manifest",
            )
            .ok()?;
            let man: Manifest = cuda_aot::json::parse(&bytes, limits.manifest, "manifest").ok()?;
            Some((*v, man))
        });
        let Some((previous, old)) = before else {
            continue;
        };
        let push = |out: &mut Vec<Change>, kernel: &str, what, before: String, now: String| {
            out.push(Change {
                module: e.module.to_string(),
                target: e.sm.to_string(),
                previous,
                kernel: kernel.to_string(),
                what,
                before,
                now,
            })
        };
        let now = &m.manifest().functions;
        for f in now {
            match old.functions.iter().find(|o| o.symbol == f.symbol) {
                None => push(
                    &mut out,
                    f.display_name(),
                    "kernel",
                    "-".into(),
                    "added".into(),
                ),
                Some(o) => {
                    for (what, a, b) in resources(o, f) {
                        if a != b {
                            push(&mut out, f.display_name(), what, a, b);
                        }
                    }
                }
            }
        }
        for o in old
            .functions
            .iter()
            .filter(|o| !now.iter().any(|f| f.symbol == o.symbol))
        {
            push(
                &mut out,
                o.display_name(),
                "kernel",
                "present".into(),
                "removed".into(),
            );
        }
    }
    out
}

/// The compared resources of a kernel before and now.
fn resources(a: &Function, b: &Function) -> Vec<(&'static str, String, String)> {
    let o = |v: Option<u32>| v.map_or("-".to_string(), |v| v.to_string());
    let (x, y) = (&a.abi, &b.abi);
    vec![
        ("registers", o(x.registers), o(y.registers)),
        ("shared bytes", o(x.shared_bytes), o(y.shared_bytes)),
        ("local bytes", o(x.local_bytes), o(y.local_bytes)),
        ("stack bytes", o(x.stack_bytes), o(y.stack_bytes)),
        ("max threads", o(x.max_threads), o(y.max_threads)),
        (
            "parameter bytes",
            x.param_bytes.to_string(),
            y.param_bytes.to_string(),
        ),
        ("parameters", x.describe_params(), y.describe_params()),
    ]
}

/// `text` safe inside HTML text and attribute values.
pub fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if c.is_control() => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

const STYLE: &str = "body{font:14px/1.4 system-ui,sans-serif;margin:2em;color:#111}\
table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:.2em .5em;text-align:left;vertical-align:top}\
th{background:#f3f3f3}code{font:12px ui-monospace,monospace;word-break:break-all}.num{text-align:right}.dev{color:#a50}h2{margin-top:1.5em}";

/// The page of `view`, titled with `registry` (a name or URL of the served folder).
pub fn render(view: &View, registry: &str) -> String {
    let v = &view.index;
    let idx = v.index();
    let root = v.root().root();
    let mut s = String::new();
    let _ = write!(
        s,
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>cuda-aot registry: {}</title><style>{STYLE}</style></head><body>",
        esc(registry)
    );
    let _ = write!(
        s,
        "<h1>cuda-aot registry</h1><p id=\"status\">{} verified {} against trust root v{} [{}]: index v{} (expires {}), timestamp v{} (expires {}), trust root expires {}. {} module file(s), {} signature check(s). Nothing on this page comes from an unverified file.</p>",
        esc(registry),
        view.now,
        root.version,
        root.channel,
        idx.version,
        idx.expires,
        v.timestamp().version,
        v.timestamp().expires,
        root.expires,
        idx.entries.len(),
        v.signature_checks()
    );
    matrix(&mut s, v);
    modules_table(&mut s, v);
    s += "<h2>Kernels</h2>";
    for m in v.manifests() {
        let man = m.manifest();
        let _ = write!(
            s,
            "<h3>{} <small>{} {}</small></h3><table class=\"kernels\"><tr><th>kernel</th><th>parameters</th><th>parameter bytes</th><th>registers</th><th>shared bytes</th><th>local bytes</th><th>stack bytes</th><th>max threads</th></tr>",
            esc(man.identity.module.as_str()),
            esc(&man.identity.sm.to_string()),
            esc(&man.identity.kind.to_string())
        );
        for f in &man.functions {
            let a = &f.abi;
            let o = |v: Option<u32>| v.map_or("-".to_string(), |v| v.to_string());
            let _ = write!(
                s,
                "<tr><td><code>{}</code></td><td><code>{}</code></td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
                esc(f.display_name()),
                esc(&a.describe_params()),
                a.param_bytes,
                o(a.registers),
                o(a.shared_bytes),
                o(a.local_bytes),
                o(a.stack_bytes),
                o(a.max_threads)
            );
        }
        s += "</table>";
    }
    changes_table(&mut s, view);
    signers(&mut s, v);
    delegations(&mut s, &view.delegations);
    s += "<h2>Index history</h2><table id=\"history\"><tr><th>index</th><th>expires</th><th>entries</th></tr>";
    for h in &view.history {
        let _ = match h.expires {
            Some(t) => write!(
                s,
                "<tr><td>v{}{}</td><td>{t}</td><td class=\"num\">{}</td></tr>",
                h.version,
                if h.version == idx.version {
                    " (current)"
                } else {
                    ""
                },
                h.entries
            ),
            None => write!(
                s,
                "<tr><td>v{}</td><td colspan=\"2\">not signed by this trust root's publisher keys</td></tr>",
                h.version
            ),
        };
    }
    s += "</table></body></html>\n";
    s
}

/// Modules × targets at a glance: each cell the kind and size of that module's file.
fn matrix(s: &mut String, v: &VerifiedIndex) {
    let mut targets: Vec<String> = v
        .manifests()
        .iter()
        .map(|m| m.entry().sm.to_string())
        .collect();
    targets.sort();
    targets.dedup();
    let mut modules: Vec<String> = v
        .manifests()
        .iter()
        .map(|m| m.entry().module.to_string())
        .collect();
    modules.sort();
    modules.dedup();
    *s += "<h2>Modules × targets</h2><table id=\"matrix\"><tr><th>module</th>";
    for t in &targets {
        let _ = write!(s, "<th>{}</th>", esc(t));
    }
    *s += "</tr>";
    for m in &modules {
        let _ = write!(s, "<tr><td>{}</td>", esc(m));
        for t in &targets {
            let cell = v
                .manifests()
                .iter()
                .find(|x| x.entry().module.as_str() == m && x.entry().sm.to_string() == *t);
            let _ = match cell {
                Some(x) => write!(
                    s,
                    "<td class=\"num\">{} {} B</td>",
                    esc(&x.entry().kind.to_string()),
                    x.manifest().size
                ),
                None => write!(s, "<td></td>"),
            };
        }
        *s += "</tr>";
    }
    *s += "</table>";
}

/// The modules × targets table, one row per index entry (the rows `verify --json` lists).
fn modules_table(s: &mut String, v: &VerifiedIndex) {
    *s += "<h2>Module files</h2><table id=\"modules\"><tr><th>module</th><th>target</th><th>kind</th><th>size</th><th>blake3</th><th>identity</th><th>builders</th><th>reviewers</th></tr>";
    for m in v.manifests() {
        let man = m.manifest();
        let keys = |k: &[cuda_aot::keys::KeyId]| {
            k.iter()
                .map(|k| format!("<code>{}</code>", esc(&k.to_string())))
                .collect::<Vec<_>>()
                .join(" ")
        };
        let _ = write!(
            s,
            "<tr data-module=\"{m_}\" data-target=\"{t}\"><td>{m_}</td><td>{t}</td><td>{k}{dev}</td><td class=\"num\">{}</td><td><code>{}</code></td><td><code>{}</code></td><td>{}</td><td>{}</td></tr>",
            man.size,
            esc(&man.module_digest.to_string()),
            esc(&man.identity.digest().to_string()),
            keys(m.signers()),
            keys(m.promoted_by()),
            m_ = esc(man.identity.module.as_str()),
            t = esc(&man.identity.sm.to_string()),
            k = esc(&man.identity.kind.to_string()),
            dev = if man.channel == cuda_aot::Channel::Dev {
                " <span class=\"dev\">[dev]</span>"
            } else {
                ""
            },
        );
    }
    *s += "</table>";
}

/// What changed in kernel resources since the previous release.
fn changes_table(s: &mut String, view: &View) {
    *s += "<h2>Resource changes since the previous release</h2>";
    if view.changes.is_empty() {
        *s += "<p>None: every kernel's resources are those of the release before (or there is none).</p>";
        return;
    }
    *s += "<table id=\"changes\"><tr><th>module</th><th>target</th><th>against</th><th>kernel</th><th>what</th><th>before</th><th>now</th></tr>";
    for c in &view.changes {
        let _ = write!(
            s,
            "<tr><td>{}</td><td>{}</td><td>index v{}</td><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&c.module),
            esc(&c.target),
            c.previous,
            esc(&c.kernel),
            c.what,
            esc(&c.before),
            esc(&c.now)
        );
    }
    *s += "</table>";
}

/// The trust root's role keys, the build statements and the promotions with their reviewers.
fn signers(s: &mut String, v: &VerifiedIndex) {
    let root = v.root().root();
    *s += "<h2>Who signs</h2><table id=\"roles\"><tr><th>role</th><th>threshold</th><th>keys</th></tr>";
    let roles = [
        ("root", Some(&root.roles.root)),
        ("builder", Some(&root.roles.builder)),
        ("reviewer", Some(&root.roles.reviewer)),
        ("publisher", Some(&root.roles.publisher)),
        ("delegations", root.delegations.as_ref()),
    ];
    for (r, role) in roles {
        let Some(role) = role else { continue };
        let keys: Vec<String> = role
            .keys
            .iter()
            .map(|k| format!("<code>{}</code>", esc(&k.key_id().to_string())))
            .collect();
        let _ = write!(
            s,
            "<tr><td>{r}</td><td class=\"num\">{}</td><td>{}</td></tr>",
            role.threshold,
            keys.join(" ")
        );
    }
    *s += "</table><h3>Promotions</h3><table id=\"promotions\"><tr><th>module</th><th>schedule</th><th>manifests</th><th>parity report</th><th>resource review</th><th>note</th></tr>";
    for (doc, p) in v.promotions() {
        let _ = write!(
            s,
            "<tr><td>{}</td><td>v{}</td><td class=\"num\">{}</td><td><code>{}</code></td><td><code>{}</code></td><td>{} <small>(record <code>{}</code>)</small></td></tr>",
            esc(p.module.as_str()),
            p.schedule_version,
            p.manifests.len(),
            esc(&p.parity_report.to_string()),
            esc(&p.resource_review.to_string()),
            esc(&p.note),
            esc(&doc.digest.to_string()),
        );
    }
    *s += "</table>";
}

/// The delegations in force (issue 46): each team's patterns, order and keys as its
/// delegator lists them, and its metadata (version, expiry, modules) or why it was refused.
fn delegations(s: &mut String, roles: &[cuda_aot::verify::DelegatedRole]) {
    if roles.is_empty() {
        return;
    }
    let role = |r: &cuda_aot::metadata::Role| {
        let keys: Vec<String> = r
            .keys
            .iter()
            .map(|k| format!("<code>{}</code>", esc(&k.key_id().short())))
            .collect();
        format!("{} of {}", r.threshold, keys.join(" "))
    };
    *s += "<h2>Delegations</h2><table id=\"delegations\"><tr><th>team</th><th>delegated by</th><th>patterns</th><th>terminating</th><th>publisher</th><th>builders</th><th>reviewers</th><th>metadata</th><th>modules</th></tr>";
    for r in roles {
        let d = &r.delegation;
        let paths: Vec<String> = d
            .paths
            .iter()
            .map(|p| format!("<code>{}</code>", esc(p)))
            .collect();
        let (metadata, modules) = match &r.metadata {
            Ok(m) => (
                format!("v{}, expires {}", m.version, m.expires),
                m.modules
                    .iter()
                    .map(|x| esc(x))
                    .collect::<Vec<_>>()
                    .join(", "),
            ),
            Err(e) => (
                format!("<strong>refused</strong>: {}", esc(e)),
                String::new(),
            ),
        };
        let _ = write!(
            s,
            "<tr data-team=\"{}\"><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{metadata}</td><td>{modules}</td></tr>",
            esc(&d.name),
            esc(&d.name),
            esc(&r.delegator),
            paths.join(" "),
            if d.terminating { "yes" } else { "no" },
            role(&d.publisher),
            role(&d.builder),
            role(&d.reviewer),
        );
    }
    *s += "</table>";
}

#[cfg(test)]
mod tests {
    use super::esc;

    #[test]
    fn hostile_text_is_escaped() {
        assert_eq!(
            esc("<script>alert('x')</script>&\"\u{7}"),
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&amp;&quot;\u{fffd}"
        );
    }
}
