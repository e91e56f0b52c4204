//! The results of bench-load (with the `gpu` feature): bench-load.csv, bench-ratios.csv,
//! the chart bench-load.svg, and the gate that re-reads them.

use anyhow::{Context, Result, bail};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use super::run::Row;
use super::stats::{self, CONTROL_LIMIT, Ratio};
use crate::files;
use crate::repo::svg::Svg;

/// Writes bench-load.csv (`rows`' medians and percentiles), bench-ratios.csv (`ratios`),
/// both under `header`, and the chart bench-load.svg into `out`, and prints both CSVs.
pub(super) fn write_results(
    out: &Path,
    csv: &Path,
    header: &str,
    rows: &[Row],
    ratios: &[Ratio],
) -> Result<()> {
    let mut text = header.to_string() + "scope,method,bytes,reps,median_us,p10_us,p90_us\n";
    for r in rows {
        writeln!(
            text,
            "{},{},{},{},{:.1},{:.1},{:.1}",
            r.scope,
            r.method,
            r.bytes,
            r.samples.len(),
            r.median_us(),
            r.pct_us(0.1),
            r.pct_us(0.9)
        )?;
    }
    files::write(csv, text.as_bytes())?;
    let mut ratio_text = header.to_string() + stats::CSV_HEADER + "\n";
    for r in ratios {
        writeln!(ratio_text, "{}", r.csv_line())?;
    }
    files::write(&out.join("bench-ratios.csv"), ratio_text.as_bytes())?;
    let bars: Vec<Bar> = rows
        .iter()
        .map(|r| Bar {
            scope: r.scope.clone(),
            method: r.method.to_string(),
            median: r.median_us(),
        })
        .collect();
    files::write(
        &out.join("bench-load.svg"),
        chart(&bars, ratios, header).as_bytes(),
    )?;
    println!("{text}\n{ratio_text}");
    println!(
        "wrote {}, bench-ratios.csv and bench-load.svg",
        csv.display()
    );
    Ok(())
}

/// `--chart-only`: bench-load.svg redrawn from the CSVs in `out`.
pub(super) fn redraw(out: &Path, csv: &Path) -> Result<()> {
    let (bars, ratios, header) = read_results(csv)?;
    let svg = out.join("bench-load.svg");
    files::write(&svg, chart(&bars, &ratios, &header).as_bytes())?;
    println!("wrote {}", svg.display());
    Ok(())
}

/// Re-reads `bench-load.csv` and `bench-ratios.csv` beside it and applies the gate: the
/// upper end of the 95 % interval of every gated ratio within its limit (verified bundle
/// load and start-up at most 1.05x bare; two devices against one and the fresh-copy rows are
/// reported), every A/A control (`*_vs_itself`) within [1/1.05, 1.05] (else the run could
/// not resolve the gate's 5 %), both bare load methods present, and the verified bundle load
/// at least 100x faster than NVRTC compile + load.
pub fn gate(csv: &Path) -> Result<()> {
    let text =
        std::fs::read_to_string(csv).with_context(|| format!("reading {}", csv.display()))?;
    let mut medians = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with("scope,"))
    {
        let f: Vec<&str> = line.split(',').collect();
        if f.len() == 7 {
            medians.insert(
                (f[0].to_string(), f[1].to_string()),
                f[4].parse::<f64>()
                    .with_context(|| format!("bad median in {line:?}"))?,
            );
        }
    }
    let ratios_file = csv.with_file_name("bench-ratios.csv");
    let ratio_text = std::fs::read_to_string(&ratios_file)
        .with_context(|| format!("reading {} (run bench-load again)", ratios_file.display()))?;
    let ratios: Vec<Ratio> = ratio_text.lines().filter_map(Ratio::parse).collect();
    let mut failures = Vec::new();
    for required in [
        "bundle_load_vs_bare_kept",
        "bundle_load_unload_vs_bare",
        "startup_vs_bare",
    ] {
        if !ratios.iter().any(|r| r.name == required) {
            failures.push(format!("no {required} ratio in {}", ratios_file.display()));
        }
    }
    for r in &ratios {
        println!(
            "gate: {:<30} median {:.3}x, 95% interval [{:.3}, {:.3}] over {} pairs ({}): {}",
            r.name,
            r.median,
            r.low,
            r.high,
            r.pairs,
            if r.is_control() {
                format!(
                    "A/A control, within [{:.3}, {CONTROL_LIMIT:.2}]",
                    1.0 / CONTROL_LIMIT
                )
            } else {
                r.limit.map_or("reported, not gated".into(), |l| {
                    format!("limit {l:.2}x on the upper end")
                })
            },
            match (r.gated(), r.passes()) {
                (false, _) => "-",
                (true, true) => "ok",
                (true, false) => "FAIL",
            }
        );
        if r.is_control() && !r.passes() {
            failures.push(format!(
                "{} (the same bare arm twice) spans [{:.3}, {:.3}]: this run cannot resolve a \
                 {:.0} % difference (the host was busy, or the arms disturb each other). \
                 Fix: run bench-load again on a quiet host",
                r.name,
                r.low,
                r.high,
                (CONTROL_LIMIT - 1.0) * 100.0
            ));
        }
        if let (Some(limit), false) = (r.limit, r.passes()) {
            failures.push(format!(
                "{} is up to {:.3}x (95% interval upper end; limit {limit:.2}x)",
                r.name, r.high
            ));
        }
    }
    let get = |m: &str| medians.get(&("bundle".to_string(), m.to_string())).copied();
    let verified = get("verified_load").context("CSV has no bundle verified_load row")?;
    match get("nvrtc_compile_load") {
        Some(nvrtc) => {
            let speedup = nvrtc / verified;
            println!(
                "gate: NVRTC compile + load {nvrtc:.1} us / verified {verified:.1} us = {speedup:.0}x faster (need >= 100x)"
            );
            if speedup < 100.0 {
                failures.push(format!(
                    "verified load only {speedup:.0}x faster than NVRTC (need 100x)"
                ));
            }
        }
        None => {
            failures.push("no NVRTC row: run bench-load from a --features research build".into())
        }
    }
    if failures.is_empty() {
        println!("gate: PASS");
        Ok(())
    } else {
        bail!("gate FAILED: {}", failures.join("; "))
    }
}

/// One bar of the chart: a median of `bench-load.csv`.
struct Bar {
    scope: String,
    method: String,
    median: f64,
}

/// The bars and header line of a `bench-load.csv`, and the ratios of the
/// `bench-ratios.csv` beside it.
fn read_results(csv: &Path) -> Result<(Vec<Bar>, Vec<Ratio>, String)> {
    let text =
        std::fs::read_to_string(csv).with_context(|| format!("reading {}", csv.display()))?;
    let header = text.lines().next().unwrap_or_default().to_string();
    let bars = text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with("scope,"))
        .filter_map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            Some(Bar {
                scope: f.first()?.to_string(),
                method: f.get(1)?.to_string(),
                median: f.get(4)?.parse().ok()?,
            })
        })
        .collect();
    let ratios_file = csv.with_file_name("bench-ratios.csv");
    let ratios = std::fs::read_to_string(&ratios_file)
        .map(|t| t.lines().filter_map(Ratio::parse).collect())
        .unwrap_or_default();
    Ok((bars, ratios, header))
}

/// A horizontal bar chart (log scale) of every median, grouped by scope.
fn chart(rows: &[Bar], ratios: &[Ratio], title: &str) -> String {
    let (w, bar_h, left, top) = (1100.0, 18.0, 300.0, 76.0);
    let max = rows.iter().map(|r| r.median).fold(1.0, f64::max);
    let decades = max.log10().ceil().max(1.0);
    let x = |us: f64| left + (us.max(1.0).log10() / decades) * (w - left - 110.0);
    let ratio_top = top + rows.len() as f64 * (bar_h + 6.0) + 60.0;
    let h = ratio_top + 40.0 + ratios.len() as f64 * (bar_h + 6.0) + 30.0;
    let color = |m: &str| match m {
        "verified_load" => "#2b8a3e",
        "raw_cuModuleLoadData"
        | "raw_kept_loaded"
        | "raw_kept_loaded_again"
        | "raw_load_unload_fresh_copy" => "#1c7ed6",
        "verified_load_unload" | "verified_module_each" | "verified_module_each_driver" => {
            "#2f9e44"
        }
        "verified_1_device" | "verified_2_devices" => "#2b8a3e",
        "verified_1_device_lazy" | "verified_1_device_eager" => "#37b24d",
        m if m.starts_with("copy_") => "#4dabf7",
        "per_context_module" => "#1c7ed6",
        "library_once" => "#0ca678",
        "per_context_runtime" => "#2f9e44",
        "verified_1_device_connections" | "verified_2_devices_connections" => "#66a80f",
        "bare_1_device" | "bare_2_devices" => "#1c7ed6",
        "verify_at_open" => "#74b816",
        "verified_load_library" | "ready_library_api" => "#0ca678",
        "ready_module_api" => "#5c940d",
        "ptx_driver_jit" => "#f08c00",
        _ => "#c92a2a",
    };
    let mut s = Svg::new(w, h);
    // The title (the CSV's header line) on two lines: device, then the run's settings.
    let title = title.trim_start_matches("# ").trim();
    let (first, second) = title.split_once(", reps").unwrap_or((title, ""));
    s.text(10.0, 20.0, "font-size='13'", first);
    let settings = if second.is_empty() {
        String::new()
    } else {
        format!("reps{second}")
    };
    s.text(10.0, 38.0, "font-size='11'", &settings);
    s.text(
        10.0,
        58.0,
        "",
        "median load and start-up time per module, bundle and process (log scale, microseconds)",
    );
    for d in 0..=decades as u32 {
        let us = 10f64.powi(d as i32);
        let xx = x(us);
        s.line((xx, top - 5.0), (xx, ratio_top - 40.0), "#ddd", "");
        s.text(
            xx,
            ratio_top - 25.0,
            "text-anchor='middle'",
            &us.to_string(),
        );
    }
    for (i, r) in rows.iter().enumerate() {
        let y = top + i as f64 * (bar_h + 6.0);
        let m = r.median;
        s.text(
            left - 8.0,
            y + 13.0,
            "text-anchor='end'",
            &format!("{} {}", r.scope, r.method),
        );
        s.rect(left, y, (x(m) - left).max(1.0), bar_h, color(&r.method), "");
        s.text(x(m) + 4.0, y + 13.0, "", &format!("{m:.0} us"));
    }
    // Ratios: median with its 95 % interval, and the limit, on a linear scale around 1.
    s.text(
        10.0,
        ratio_top - 5.0,
        "",
        "paired ratios, median and bootstrap 95% interval (dashed: 1.0; red: the gate's limits, where the ratio is gated or an A/A control)",
    );
    let (lo, hi) = (0.6_f64, 2.0_f64);
    let rx = |r: f64| left + (r.clamp(lo, hi) - lo) / (hi - lo) * (w - left - 110.0);
    let base = ratio_top + 10.0;
    let end = base + ratios.len() as f64 * (bar_h + 6.0);
    s.line(
        (rx(1.0), base),
        (rx(1.0), end),
        "#888",
        "stroke-dasharray='4 3'",
    );
    for (i, r) in ratios.iter().enumerate() {
        let y = base + i as f64 * (bar_h + 6.0);
        let mid = y + bar_h / 2.0;
        s.text(left - 8.0, y + 13.0, "text-anchor='end'", &r.name);
        for &limit in &r.limits() {
            s.line(
                (rx(limit), y),
                (rx(limit), y + bar_h),
                "#c92a2a",
                "stroke-width='2'",
            );
        }
        s.line(
            (rx(r.low), mid),
            (rx(r.high), mid),
            "#1c7ed6",
            "stroke-width='3'",
        );
        s.circle(rx(r.median), mid, 4.0, "#2b8a3e");
        s.text(
            r.limits().into_iter().map(rx).fold(rx(r.high), f64::max) + 8.0,
            y + 13.0,
            "",
            &format!("{:.3} [{:.3}, {:.3}]", r.median, r.low, r.high),
        );
    }
    s.finish()
}
