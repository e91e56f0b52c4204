//! The report of bench-serve (with the `net` feature): bench-serve.csv, the document with
//! its history, the chart and the gate.

use anyhow::{Result, bail};
use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::Args;
use super::clients::Samples;
use super::hostile::Hostile;
use super::run::SERVERS;
use crate::paths;
use crate::repo::machine;
use crate::repo::svg::Svg;

impl Args {
    /// Writes bench-serve.csv, .svg and .md (the document keeps its history rows) into
    /// --out, prints the CSV, and returns the gate's verdict (printed when it passes).
    pub(super) fn report(
        &self,
        results: &BTreeMap<(&str, &str), Samples>,
        passes: &[String],
        hostile_seen: &[Hostile],
        header: &str,
    ) -> Result<()> {
        let out = self
            .out
            .clone()
            .unwrap_or_else(|| paths::work_dir().join("bench-serve"));
        std::fs::create_dir_all(&out)?;
        let csv = render_csv(results, header, self.clients);
        std::fs::write(out.join("bench-serve.csv"), &csv)?;
        std::fs::write(out.join("bench-serve.svg"), chart(results, header))?;
        let verdict = gate(results);
        let doc = out.join("bench-serve.md");
        let history = std::fs::read_to_string(&doc).unwrap_or_default();
        std::fs::write(
            &doc,
            render_doc(
                results,
                passes,
                hostile_seen,
                header,
                self,
                &verdict,
                &history,
            ),
        )?;
        print!("{csv}");
        println!("wrote {}/bench-serve.{{md,csv,svg}}", out.display());
        match verdict {
            Ok(text) => {
                println!("{text}");
                Ok(())
            }
            Err(text) => bail!("{text}"),
        }
    }
}

fn render_csv(results: &BTreeMap<(&str, &str), Samples>, header: &str, clients: usize) -> String {
    let mut s = format!(
        "# {header}\nserver,workload,clients,ops,failures,corrupt,seconds,ops_per_s,mb_per_s,p50_ms,p99_ms\n"
    );
    for ((server, workload), r) in results {
        let _ = writeln!(
            s,
            "{server},{workload},{clients},{},{},{},{:.3},{:.1},{:.2},{:.3},{:.3}",
            r.ops(),
            r.failures,
            r.corrupt,
            r.wall.as_secs_f64(),
            r.per_sec(),
            r.mb_per_sec(),
            r.pct_ms(0.5),
            r.pct_ms(0.99)
        );
    }
    s
}

/// The verdict: no failures, no corrupt files, serve ≥ 0.5 × nginx in both workloads.
fn gate(results: &BTreeMap<(&str, &str), Samples>) -> std::result::Result<String, String> {
    let mut problems = Vec::new();
    let mut lines = Vec::new();
    for ((server, workload), r) in results {
        if r.failures > 0 || r.corrupt > 0 {
            problems.push(format!(
                "{server} {workload}: {} failures, {} corrupt files (first error: {})",
                r.failures,
                r.corrupt,
                r.first_error.as_deref().unwrap_or("none")
            ));
        }
    }
    for workload in ["sync", "get"] {
        let (Some(a), Some(b)) = (
            results.get(&("serve", workload)),
            results.get(&("nginx", workload)),
        ) else {
            continue;
        };
        let ratio = a.per_sec() / b.per_sec();
        lines.push(format!("{workload}: serve/nginx throughput {ratio:.2}x"));
        if ratio < 0.5 {
            problems.push(format!(
                "{workload}: serve reached {ratio:.2}x of nginx (goal: 0.5x)"
            ));
        }
    }
    if let (Some(h), Some(clean)) = (
        results.get(&("serve", "get-hostile")),
        results.get(&("serve", "get")),
    ) {
        let ratio = h.pct_ms(0.99) / clean.pct_ms(0.99);
        lines.push(format!(
            "get under attack: honest p99 {ratio:.2}x of serve's own get ({:.2} ms vs {:.2} ms), throughput {:.2}x",
            h.pct_ms(0.99),
            clean.pct_ms(0.99),
            h.per_sec() / clean.per_sec()
        ));
        if ratio > 10.0 {
            problems.push(format!(
                "get under attack: honest p99 {ratio:.2}x of the same run without attackers (goal: at most 10x)"
            ));
        }
    }
    if problems.is_empty() {
        Ok(format!("gate passed: {}", lines.join(", ")))
    } else {
        Err(format!("gate FAILED: {}", problems.join("; ")))
    }
}

const HISTORY: &str = "## History";

/// The document: this run in full (totals, each pass, the chart, how to read it), and one
/// history row per run (rows of earlier runs, read back from `previous`, are kept).
#[allow(clippy::too_many_arguments)]
fn render_doc(
    results: &BTreeMap<(&str, &str), Samples>,
    passes: &[String],
    hostile: &[Hostile],
    header: &str,
    a: &Args,
    verdict: &std::result::Result<String, String>,
    previous: &str,
) -> String {
    let mut s = String::from("# Serving benchmark\n\n");
    s += "Written by `cargo xtask bench-serve`; rerun it to refresh. A measurement of one \
machine, not a test: `cuda-aot-registry serve` and nginx (the pinned Debian package) serve \
the same registry folder on loopback, each with one worker per core and an access log, and \
the same clients load both in the same run, alternating which goes first.\n\n";
    let _ = writeln!(s, "- run: {header}");
    let _ = writeln!(
        s,
        "- command: `cargo xtask bench-serve --clients {} --syncs {} --get-rounds {} --passes {} --hostile {} --stalled {} --stall-timeout-secs {}` (release build)",
        a.clients, a.syncs, a.get_rounds, a.passes, a.hostile, a.stalled, a.stall_timeout_secs
    );
    let _ = writeln!(
        s,
        "- sync: each client runs cold verified syncs into empty folders with a fresh HTTP client (what a prover's first start does): every file fetched, every signature and digest checked, staged and committed; each copy is then compared with the release file by file"
    );
    let _ = writeln!(
        s,
        "- get: each client GETs every file of the release over one keep-alive connection; every body is hashed"
    );
    let _ = writeln!(
        s,
        "- get-hostile (serve only): the same GETs while {} slow readers (the largest file requested, nothing read), {} pipeliners (GETs written as fast as the socket takes them, nothing read) and {} wrong-token publishers (PUT in a loop) hold on, and {} stalled connections from {} other loopback addresses (half send nothing, half part of a request line; each connects again once serve closes it) take slots; the honest GETs are repeated until two stall bounds and a second have passed, so every stalled connection is cut and comes back; serve publishes in this run, so wrong tokens meet its throttle, and runs with a stall bound of {} s, so a connection that moves no byte for that long while serve waits on its client is closed and its slot freed\n",
        a.hostile,
        a.hostile,
        a.hostile,
        a.stalled,
        super::stalled::ADDRESSES,
        a.stall_timeout_secs
    );
    for (pass, h) in hostile.iter().enumerate() {
        let _ = writeln!(s, "- pass {pass}, {h}");
    }
    if !hostile.is_empty() {
        s += "\n";
    }
    s += "| server | workload | ops | failures | corrupt files | throughput | MB/s | p50 | p99 |\n|---|---|---|---|---|---|---|---|---|\n";
    for ((server, workload), r) in results {
        let unit = if *workload == "sync" {
            "syncs/s"
        } else {
            "req/s"
        };
        let _ = writeln!(
            s,
            "| {server} | {workload} | {} | {} | {} | {:.1} {unit} | {:.2} | {:.2} ms | {:.2} ms |",
            r.ops(),
            r.failures,
            r.corrupt,
            r.per_sec(),
            r.mb_per_sec(),
            r.pct_ms(0.5),
            r.pct_ms(0.99)
        );
    }
    let _ = writeln!(
        s,
        "\n{}\n\n![throughput and latency](bench-serve.svg)\n",
        match verdict {
            Ok(t) | Err(t) => t,
        }
    );
    s += "Each pass (the servers alternate which goes first):\n\n| pass | server | workload | throughput | p50 | p99 |\n|---|---|---|---|---|---|\n";
    for line in passes {
        s += line;
        s += "\n";
    }
    s += "\nHow to read it: clients and servers share the machine's cores (on a shared build \
machine, with other jobs too: passes of the same server can differ by 2x, so compare the \
servers within a run and look at the history across runs). A cold verified sync \
is mostly client work — one build statement and the index signature checked, every manifest \
and blob hashed and content-checked, every staged file fsynced and renamed — so both servers \
reach similar sync rates and the latencies mostly measure 64 clients queueing for the cores. \
The GET workload isolates the server's per-request cost: for `serve`, one blocking-pool trip \
(path and link checks, open, ETag from a cache keyed by inode, size and mtime, small files \
read whole) and a JSON log line; for nginx, its sendfile path and access log. The gate asks \
for at least half of nginx's throughput in both workloads, with zero failures and zero \
corrupt files. In `get-hostile` the attackers share the cores with the server and the \
honest clients (the wrong-token loop alone sends hundreds of PUTs a second, each answered \
429 once the throttle holds), so its throughput mostly measures the CPU they take; the gate \
asks that the honest clients see no failure and a p99 within 10x of serve's own `get` of \
the same run. The stalled connections cost serve little CPU; what they show is that their \
slots come back: each is held for about the stall bound (the median above), then cut, and \
the honest clients' figures against `get` (the ratios in the verdict and in the history) are \
what K stalled clients cost the legitimate ones.\n";
    let rate = |server: &str, workload: &str| {
        results
            .get(&(server, workload))
            .map_or(f64::NAN, Samples::per_sec)
    };
    let bad: usize = results.values().map(|r| r.failures + r.corrupt).sum();
    let under_attack = match (
        results.get(&("serve", "get-hostile")),
        results.get(&("serve", "get")),
    ) {
        (Some(h), Some(g)) => format!(
            "{:.2}x, p99 {:.2}x ({} hostile, {} stalled)",
            h.per_sec() / g.per_sec(),
            h.pct_ms(0.99) / g.pct_ms(0.99),
            3 * a.hostile,
            a.stalled
        ),
        _ => "–".to_string(),
    };
    let row = format!(
        "| {} | {} | {} | {:.1} / {:.1} ({:.2}x) | {:.0} / {:.0} ({:.2}x) | {bad} | {under_attack} |",
        header.split(", ").nth(1).unwrap_or("?"),
        machine::cores(),
        a.clients,
        rate("serve", "sync"),
        rate("nginx", "sync"),
        rate("serve", "sync") / rate("nginx", "sync"),
        rate("serve", "get"),
        rate("nginx", "get"),
        rate("serve", "get") / rate("nginx", "get"),
    );
    let mut rows = history_rows(previous);
    rows.push(row);
    s += &format!(
        "\n{HISTORY}\n\n| date | cores | clients | sync serve / nginx (syncs/s) | get serve / nginx (req/s) | failures + corrupt | serve get-hostile / get: throughput, p99 |\n|---|---|---|---|---|---|---|\n"
    );
    for r in rows {
        s += &r;
        s += "\n";
    }
    s
}

/// The history rows of an earlier document; rows written before the last column (serve
/// under attack against its own get) existed get a dash there.
fn history_rows(previous: &str) -> Vec<String> {
    previous
        .split_once(HISTORY)
        .map(|(_, h)| {
            h.lines()
                .filter(|l| l.starts_with("| 2"))
                .map(|l| match l.matches('|').count() {
                    7 => format!("{l} – |"),
                    _ => l.to_string(),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Two panels of horizontal bars: throughput per workload (relative to the faster server)
/// and p50/p99 latency, serve and nginx side by side.
fn chart(results: &BTreeMap<(&str, &str), Samples>, title: &str) -> String {
    let (w, left, bar_h) = (1000.0, 150.0, 20.0);
    let mut rows = Vec::new();
    for workload in ["sync", "get", "get-hostile"] {
        for server in SERVERS {
            if let Some(r) = results.get(&(server, workload)) {
                rows.push((workload, server, r));
            }
        }
    }
    let h = 90.0 + rows.len() as f64 * 2.0 * (bar_h + 8.0) + 60.0;
    let color = |server: &str| {
        if server == "serve" {
            "#2b8a3e"
        } else {
            "#1c7ed6"
        }
    };
    let mut s = Svg::new(w, h);
    s.text(10.0, 20.0, "font-size='13'", title);
    s.text(
        10.0,
        42.0,
        "",
        "throughput (bar length relative to the faster server of each workload); green: cuda-aot-registry serve, blue: nginx",
    );
    let span = w - left - 170.0;
    let mut y = 60.0;
    for workload in ["sync", "get", "get-hostile"] {
        let max = rows
            .iter()
            .filter(|r| r.0 == workload)
            .map(|r| r.2.per_sec())
            .fold(1e-9, f64::max);
        for (_, server, r) in rows.iter().filter(|r| r.0 == workload) {
            let unit = if workload == "sync" {
                "syncs/s"
            } else {
                "req/s"
            };
            let len = (r.per_sec() / max * span).max(1.0);
            let label = format!("{workload} · {server}");
            s.text(left - 8.0, y + 14.0, "text-anchor='end'", &label);
            s.rect(left, y, len, bar_h, color(server), "");
            let figure = format!("{:.1} {unit}", r.per_sec());
            s.text(left + len + 6.0, y + 14.0, "", &figure);
            y += bar_h + 8.0;
        }
    }
    y += 20.0;
    s.text(
        10.0,
        y,
        "",
        "latency per operation, p50 (solid) and p99 (light), relative to the slowest p99 of each workload",
    );
    y += 14.0;
    for workload in ["sync", "get", "get-hostile"] {
        let max = rows
            .iter()
            .filter(|r| r.0 == workload)
            .map(|r| r.2.pct_ms(0.99))
            .fold(1e-9, f64::max);
        for (_, server, r) in rows.iter().filter(|r| r.0 == workload) {
            let (p50, p99) = (r.pct_ms(0.5), r.pct_ms(0.99));
            let l99 = (p99 / max * span).max(1.0);
            let l50 = (p50 / max * span).max(1.0);
            let label = format!("{workload} · {server}");
            s.text(left - 8.0, y + 14.0, "text-anchor='end'", &label);
            s.rect(left, y, l99, bar_h, color(server), "opacity='0.35'");
            s.rect(left, y, l50, bar_h, color(server), "");
            let figure = format!("p50 {p50:.2} ms, p99 {p99:.2} ms");
            s.text(left + l99 + 6.0, y + 14.0, "", &figure);
            y += bar_h + 8.0;
        }
    }
    s.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn samples(n: usize, ms: u64, failures: usize) -> Samples {
        Samples {
            latencies: vec![Duration::from_millis(ms); n],
            bytes: 1000,
            failures,
            corrupt: 0,
            wall: Duration::from_secs(1),
            first_error: None,
        }
    }

    #[test]
    fn the_gate_wants_half_of_nginx_and_no_failures() {
        let mut r = BTreeMap::new();
        r.insert(("serve", "sync"), samples(60, 5, 0));
        r.insert(("nginx", "sync"), samples(100, 3, 0));
        assert!(gate(&r).is_ok(), "{:?}", gate(&r));
        r.insert(("serve", "get"), samples(40, 5, 0));
        r.insert(("nginx", "get"), samples(100, 3, 0));
        assert!(gate(&r).unwrap_err().contains("get: serve reached 0.40x"));
        r.insert(("serve", "get"), samples(100, 5, 1));
        assert!(gate(&r).unwrap_err().contains("1 failures"));
        // Under attack: the honest p99 against serve's own get of the same run.
        r.insert(("serve", "get"), samples(100, 5, 0));
        r.insert(("serve", "get-hostile"), samples(100, 45, 0));
        assert!(gate(&r).is_ok(), "{:?}", gate(&r));
        r.insert(("serve", "get-hostile"), samples(100, 55, 0));
        assert!(gate(&r).unwrap_err().contains("honest p99 11.00x"));
    }

    #[test]
    fn history_rows_of_earlier_runs_get_the_new_column() {
        let doc = format!(
            "# x\n\n| 2026 | not history |\n\n{HISTORY}\n\n| date | … |\n|---|\n\
             | 2026-11-30T00:22:20Z | 2 | 64 | 12.6 / 9.3 (1.35x) | 10256 / 12751 (0.80x) | 0 |\n\
             | 2026-12-07T00:00:00Z | 2 | 64 | 1 / 1 (1.00x) | 1 / 1 (1.00x) | 0 | 0.50x, p99 2.00x (48 hostile, 192 stalled) |\n"
        );
        assert_eq!(
            history_rows(&doc),
            [
                "| 2026-11-30T00:22:20Z | 2 | 64 | 12.6 / 9.3 (1.35x) | 10256 / 12751 (0.80x) | 0 | – |",
                "| 2026-12-07T00:00:00Z | 2 | 64 | 1 / 1 (1.00x) | 1 / 1 (1.00x) | 0 | 0.50x, p99 2.00x (48 hostile, 192 stalled) |",
            ]
        );
    }

    #[test]
    fn the_chart_and_the_csv_hold_every_row() {
        let mut r = BTreeMap::new();
        r.insert(("serve", "sync"), samples(10, 5, 0));
        r.insert(("nginx", "sync"), samples(10, 3, 0));
        let svg = chart(&r, "t");
        assert!(svg.contains("sync · serve") && svg.contains("sync · nginx"));
        let csv = render_csv(&r, "t", 64);
        assert_eq!(csv.lines().count(), 4);
        assert!(csv.contains("nginx,sync,64,10,0,0,1.000,10.0"));
    }
}
