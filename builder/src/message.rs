//! What the tasks print. Results go to stdout: text for people, or with
//! `--message-format json` JSON Lines of schema `cuda-aot/xtask/v1` (docs/json.md). Progress
//! goes to stderr: a bar on a terminal, and one line per step where stderr is not a
//! terminal (CI logs), so a long build is never silent.

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crate::advice;

/// The schema every JSON message carries in its `schema` field.
pub const SCHEMA: &str = "cuda-aot/xtask/v1";

static JSON: AtomicBool = AtomicBool::new(false);

/// Selects JSON messages on stdout for this run.
pub fn set_json(on: bool) {
    JSON.store(on, Ordering::Relaxed);
}

/// Whether this run prints JSON messages on stdout (and no human tables).
pub fn json() -> bool {
    JSON.load(Ordering::Relaxed)
}

/// Prints one JSON message (`{"schema":…, "reason":…, …fields}`) as a line on stdout.
pub fn emit(reason: &str, fields: serde_json::Value) {
    let mut obj = serde_json::Map::new();
    obj.insert("schema".into(), SCHEMA.into());
    obj.insert("reason".into(), reason.into());
    if let serde_json::Value::Object(m) = fields {
        obj.extend(m);
    }
    let line = serde_json::to_string(&serde_json::Value::Object(obj)).expect("JSON value");
    let mut out = std::io::stdout().lock();
    // A closed stdout (`| head`) is not worth a panic.
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// The `error` message of a failed task: message, causes, `Fix:` advice and, where known,
/// the module, target and file it concerns.
pub fn error_fields(e: &anyhow::Error, exit_code: i32) -> serde_json::Value {
    let s = advice::subject_of(e);
    serde_json::json!({
        "message": advice::headline(e),
        "causes": advice::causes(e),
        "fix": advice::fix_for(e),
        "module": s.module,
        "target": s.target,
        "file": s.file,
        "exit_code": exit_code,
    })
}

/// Progress of `total` steps on stderr: a bar on a terminal, lines otherwise.
pub struct Progress {
    label: &'static str,
    total: usize,
    done: AtomicUsize,
    bar: Option<indicatif::ProgressBar>,
    lines: bool,
}

impl Progress {
    /// Progress for `total` steps of `label` (`build`, `toolchain`); `enabled = false`
    /// shows nothing at all.
    pub fn new(label: &'static str, total: usize, enabled: bool) -> Progress {
        let terminal = std::io::stderr().is_terminal();
        let bar = (enabled && terminal).then(|| {
            let bar = indicatif::ProgressBar::new(total as u64);
            bar.set_style(
                indicatif::ProgressStyle::with_template(
                    "{elapsed:>4} [{bar:30}] {pos}/{len} {wide_msg}",
                )
                .expect("valid template")
                .progress_chars("=> "),
            );
            bar
        });
        Progress {
            label,
            total,
            done: AtomicUsize::new(0),
            bar,
            lines: enabled && !terminal,
        }
    }

    /// A step started (`what`: e.g. `ntt sm_90 (cubin)`); `announce`: also as a line
    /// when there is no terminal.
    pub fn start(&self, what: &str, announce: bool) {
        if let Some(b) = &self.bar {
            b.set_message(what.to_string());
        }
        if self.lines && announce {
            eprintln!("{}: {what} ...", self.label);
        }
    }

    /// A step finished; `outcome` says how (`compiled in 1.2 s`), and `None` counts it
    /// without a line.
    pub fn finish(&self, what: &str, outcome: Option<&str>) {
        let n = self.done.fetch_add(1, Ordering::Relaxed) + 1;
        if let Some(b) = &self.bar {
            b.inc(1);
        }
        if let (true, Some(outcome)) = (self.lines, outcome) {
            let w = self.total.to_string().len();
            eprintln!("{}: [{n:>w$}/{}] {what}: {outcome}", self.label, self.total);
        }
    }

    /// A note between steps (shown as a line in both modes).
    pub fn note(&self, text: &str) {
        match &self.bar {
            Some(b) => b.suspend(|| eprintln!("{}: {text}", self.label)),
            None if self.lines => eprintln!("{}: {text}", self.label),
            None => {}
        }
    }

    /// Prints a warning (on stderr, above the bar) whatever the progress style: warnings
    /// are never hidden.
    pub fn warn(&self, text: &str) {
        match &self.bar {
            Some(b) => b.suspend(|| eprintln!("{}: warning: {text}", self.label)),
            None => eprintln!("{}: warning: {text}", self.label),
        }
    }

    /// Clears the bar.
    pub fn finish_and_clear(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}
