//! Errors with advice: the `Fix:` line every refusal ends with, the subject it concerns
//! (module, target, file) for machine-readable output, and how the CLI prints them; and
//! the name the user ran the tool by, so every command it prints can be pasted as is.

use std::fmt::Display;
use std::path::PathBuf;
use std::sync::OnceLock;

static TOOL: OnceLock<&'static str> = OnceLock::new();

/// Records how the tool was started (`cargo xtask`, or `cargo cuda-aot` when installed as
/// a cargo subcommand); called once by `main`.
pub fn set_tool(name: &'static str) {
    let _ = TOOL.set(name);
}

/// The command the user ran: what every printed next step and `Fix:` line starts with.
pub fn tool() -> &'static str {
    TOOL.get().copied().unwrap_or("cargo xtask")
}

/// `text` with every `cargo xtask` command written as the user runs the tool. Advice
/// written once (here and in the libraries' errors) names the canonical `cargo xtask`;
/// the CLI prints it as the user's own command.
pub fn as_run(text: &str) -> String {
    match tool() {
        "cargo xtask" => text.to_string(),
        other => text.replace("cargo xtask", other),
    }
}

/// An error's `Fix:` advice, attached to the chain so the CLI prints it.
#[derive(Debug)]
pub struct Fix(pub String);

impl Display for Fix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl std::error::Error for Fix {}

/// What an error is about, attached to the chain ([`Subject::attach`]) for
/// `--message-format json`; the human output does not print it (the message names it).
#[derive(Debug, Default, Clone)]
pub struct Subject {
    /// The module.
    pub module: Option<String>,
    /// The target (`sm_90`, `compute_80`).
    pub target: Option<String>,
    /// The file.
    pub file: Option<PathBuf>,
}

impl Display for Subject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts = Vec::new();
        if let Some(m) = &self.module {
            parts.push(format!("module `{m}`"));
        }
        if let Some(t) = &self.target {
            parts.push(format!("target {t}"));
        }
        if let Some(p) = &self.file {
            parts.push(p.display().to_string());
        }
        write!(f, "{}", parts.join(" "))
    }
}

impl Subject {
    /// `e`, with this subject attached below whatever context is added later.
    pub fn attach(self, e: anyhow::Error) -> anyhow::Error {
        anyhow::Error::new(About {
            subject: self,
            fix: None,
            inner: e,
        })
    }
}

/// `e` with `fix` as its advice, in place of the advice of the errors below it (which
/// knew less about what the caller was doing).
pub fn refix(e: impl Into<anyhow::Error>, fix: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(About {
        subject: Subject::default(),
        fix: Some(fix.into()),
        inner: e.into(),
    })
}

/// A hidden chain element carrying a [`Subject`] or advice; its source is the error it is
/// about.
#[derive(Debug)]
struct About {
    subject: Subject,
    fix: Option<String>,
    inner: anyhow::Error,
}

impl Display for About {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.subject.fmt(f)
    }
}

impl std::error::Error for About {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(self.inner.as_ref())
    }
}

/// An error whose message is `message` and whose `Fix:` advice is `fix`.
pub fn fail(message: impl Display, fix: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(Fix(fix.into())).context(message.to_string())
}

/// Attaches a message and `Fix:` advice to any error.
pub trait Advise<T> {
    /// The error becomes `message: error`, with `fix` as its advice.
    fn advise(
        self,
        message: impl FnOnce() -> String,
        fix: impl FnOnce() -> String,
    ) -> anyhow::Result<T>;
}

impl<T, E: Into<anyhow::Error>> Advise<T> for std::result::Result<T, E> {
    fn advise(
        self,
        message: impl FnOnce() -> String,
        fix: impl FnOnce() -> String,
    ) -> anyhow::Result<T> {
        self.map_err(|e| {
            let e: anyhow::Error = e.into();
            fail(format!("{}: {e:#}", message()), fix())
        })
    }
}

/// The `Fix:` advice of the first error in the chain that has one, naming the command as
/// the user runs it.
pub fn fix_for(e: &anyhow::Error) -> Option<String> {
    fix_in_chain(e).map(|f| as_run(&f))
}

fn fix_in_chain(e: &anyhow::Error) -> Option<String> {
    e.chain().find_map(|c| {
        if let Some(x) = c.downcast_ref::<About>() {
            x.fix.clone()
        } else if let Some(x) = c.downcast_ref::<cuda_aot::Error>() {
            Some(x.fix())
        } else if let Some(x) = c.downcast_ref::<cuda_aot_registry::Error>() {
            Some(x.fix())
        } else {
            c.downcast_ref::<Fix>().map(|f| f.0.clone())
        }
    })
}

/// The messages of the chain without the hidden advice and subject entries, and without
/// a message the one before it already spells out (an error that prints its source, such
/// as `path: Not a directory`, followed by that source): the first is the headline
/// (`error: ...`), the others are printed as `caused by:` lines.
fn messages(e: &anyhow::Error) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for c in e.chain() {
        if c.downcast_ref::<Fix>().is_some() || c.downcast_ref::<About>().is_some() {
            continue;
        }
        let m = c.to_string();
        if out.last().is_some_and(|prev| prev.contains(&m)) {
            continue;
        }
        out.push(m);
    }
    out
}

/// What went wrong, in one line (the top message of the chain).
pub fn headline(e: &anyhow::Error) -> String {
    messages(e)
        .into_iter()
        .next()
        .map(|m| as_run(&m))
        .unwrap_or_default()
}

/// The messages below the headline (printed as `caused by:` lines).
pub fn causes(e: &anyhow::Error) -> Vec<String> {
    messages(e)
        .into_iter()
        .skip(1)
        .map(|m| as_run(&m))
        .collect()
}

/// The subject of an error: the first [`Subject`] in its chain (fields merged outward in).
pub fn subject_of(e: &anyhow::Error) -> Subject {
    let mut s = Subject::default();
    for x in e
        .chain()
        .filter_map(|c| c.downcast_ref::<About>())
        .map(|a| &a.subject)
    {
        s.module = s.module.or_else(|| x.module.clone());
        s.target = s.target.or_else(|| x.target.clone());
        s.file = s.file.or_else(|| x.file.clone());
    }
    s
}

/// Prints an error the way the CLI does: `error: ...`, `caused by:` lines, `Fix: ...`.
pub fn print_human(e: &anyhow::Error) {
    eprintln!("error: {}", headline(e));
    for cause in causes(e) {
        eprintln!("  caused by: {cause}");
    }
    if let Some(fix) = fix_for(e) {
        eprintln!("Fix: {fix}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cause_the_message_above_already_spells_out_is_not_repeated() {
        let io = std::io::Error::from_raw_os_error(20);
        let e = anyhow::Error::new(cuda_aot::Error::Io {
            path: "/etc/hostname/state.json".into(),
            source: io,
        })
        .context("reading the trust state");
        assert_eq!(headline(&e), "reading the trust state");
        let causes = causes(&e);
        assert_eq!(causes.len(), 1, "{causes:?}");
        assert!(
            causes[0].starts_with("/etc/hostname/state.json: "),
            "{causes:?}"
        );
    }

    #[test]
    fn advice_and_subject_are_found_through_the_chain_and_not_printed_as_causes() {
        let e = Subject {
            module: Some("ntt".into()),
            target: Some("sm_90".into()),
            file: None,
        }
        .attach(fail("inner", "do this"))
        .context("outer");
        assert_eq!(fix_for(&e).as_deref(), Some("do this"));
        assert_eq!(headline(&e), "outer");
        assert_eq!(causes(&e), ["inner"]);
        let bare = Subject::default().attach(fail("only", "x"));
        assert_eq!((headline(&bare), causes(&bare)), ("only".into(), vec![]));
        let s = subject_of(&e);
        assert_eq!(
            (s.module.as_deref(), s.target.as_deref()),
            (Some("ntt"), Some("sm_90"))
        );
        let below = fail("garbage", "republish it");
        let e = refix(below, "make one with trust-root").context("reading root.json");
        assert_eq!(fix_for(&e).as_deref(), Some("make one with trust-root"));
        assert_eq!(causes(&e), ["garbage"]);
        let wrapped: std::result::Result<(), std::io::Error> =
            Err(std::io::Error::other("disk full"));
        let e = wrapped.advise(|| "writing x".into(), || "free space".into());
        let e = e.unwrap_err();
        assert_eq!(e.to_string(), "writing x: disk full");
        assert_eq!(fix_for(&e).as_deref(), Some("free space"));
    }
}
