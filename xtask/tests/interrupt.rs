//! Issue 11, item 5: a real SIGINT sent to the real `xtask build` mid-build stops nvcc (its
//! whole process group), keeps every finished job in the cache, removes the temporary
//! folders, says `interrupted` and exits 130; the rerun compiles only what had not finished.

mod common;
#[path = "common/doc_json.rs"]
mod doc_json;

use std::collections::BTreeSet;
use std::io::BufRead;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::Ws;

/// `(pid, process group)` of every live nvcc whose command line mentions `needle`. Only
/// processes that already exec'd nvcc count: a child xtask forked but has not exec'd yet
/// still carries xtask's command line and process group.
fn nvcc_mentioning(needle: &str) -> Vec<(i32, i32)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let cmdline = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        let argv0 = cmdline.split(|b| *b == 0).next().unwrap_or_default();
        let is_nvcc = Path::new(&*String::from_utf8_lossy(argv0))
            .file_name()
            .is_some_and(|n| n == "nvcc");
        if !is_nvcc || !String::from_utf8_lossy(&cmdline).contains(needle) {
            continue;
        }
        if let Some(pgrp) = process_group(pid) {
            out.push((pid, pgrp));
        }
    }
    out
}

/// The process group of a live (not zombie) process.
fn process_group(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ppid pgrp ...`
    let fields: Vec<&str> = stat.rsplit_once(") ")?.1.split(' ').collect();
    (fields[0] != "Z").then(|| fields[2].parse().ok())?
}

/// Live processes in process group `g`.
fn group_members(g: i32) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_string_lossy().parse::<i32>().ok())
        .filter(|&pid| process_group(pid) == Some(g))
        .collect()
}

/// `module target` of each `build: [k/n] module target (kind): compiled in ...` line.
fn compiled_lines(stderr: &str) -> BTreeSet<String> {
    stderr
        .lines()
        .filter(|l| l.starts_with("build: [") && l.contains(": compiled in "))
        .map(|l| {
            let what = l.split_once("] ").unwrap().1;
            let mut words = what.split(' ');
            format!("{} {}", words.next().unwrap(), words.next().unwrap())
        })
        .collect()
}

#[test]
fn issue_11_sigint_mid_build_stops_nvcc_keeps_finished_jobs_and_cleans_up() {
    let ws = Ws::new();
    let targets = ["sm_80", "sm_86", "sm_89", "sm_90"];
    let mut cmd = ws.build_command();
    cmd.args(["-j", "1", "--json"]);
    for t in targets {
        cmd.args(["--target", t]);
    }
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        let mut all = String::new();
        for line in std::io::BufReader::new(stderr).lines() {
            let line = line.unwrap();
            all.push_str(&line);
            all.push('\n');
            let _ = tx.send(line);
        }
        all
    });

    // Wait until one job has finished and the next nvcc is running; note nvcc's group.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let line = rx
            .recv_timeout(Duration::from_secs(120))
            .expect("progress lines");
        if line.contains(": compiled in ") {
            break;
        }
    }
    let ws_dir = ws.dir.path().display().to_string();
    let nvcc_group = loop {
        let running: Vec<(i32, i32)> = nvcc_mentioning(&ws_dir)
            .into_iter()
            .filter(|&(pid, _)| pid as u32 != child.id())
            .collect();
        if let Some(&(_, g)) = running.first() {
            break g;
        }
        assert!(
            Instant::now() < deadline,
            "no nvcc started after the first job"
        );
        std::thread::sleep(Duration::from_millis(5));
    };
    assert_ne!(
        nvcc_group,
        process_group(child.id() as i32).unwrap(),
        "nvcc runs in a process group of its own"
    );
    rustix::process::kill_process(
        rustix::process::Pid::from_child(&child),
        rustix::process::Signal::INT,
    )
    .unwrap();

    let status = child.wait().unwrap();
    let stderr = reader.join().unwrap();
    let mut stdout = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut stdout).unwrap();
    assert_eq!(
        status.code(),
        Some(130),
        "exit status of an interrupted build:\n{stderr}"
    );
    assert!(stderr.lines().any(|l| l == "interrupted"), "{stderr}");
    assert!(
        !stderr.contains("nvcc failed") && !stderr.contains("fix the error nvcc reports"),
        "a killed nvcc is not a compile error:\n{stderr}"
    );
    let last: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    doc_json::check("interrupted", &last, ws.dir.path());
    assert_eq!(
        (last["reason"].as_str(), last["exit_code"].as_u64()),
        (Some("interrupted"), Some(130)),
        "{stdout}"
    );
    // nvcc and everything it started (cicc, ptxas, the host compiler) are gone.
    assert!(
        group_members(nvcc_group).is_empty(),
        "left running: {:?}",
        group_members(nvcc_group)
    );
    // No staging folder is left, and the output folder was not touched.
    let tmp = ws.path("cache/tmp");
    let leftovers: Vec<_> = std::fs::read_dir(&tmp)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(
        leftovers.is_empty(),
        "left in {}: {leftovers:?}",
        tmp.display()
    );
    assert!(
        !ws.path("out").exists(),
        "an interrupted build wrote outputs"
    );

    let finished = compiled_lines(&stderr);
    assert!(!finished.is_empty() && finished.len() < 12, "{stderr}");

    // The rerun takes every finished job from the cache and compiles only the others.
    let args: Vec<&str> = targets.iter().flat_map(|t| ["--target", *t]).collect();
    let run = ws.build(&args).ok();
    let all = common::set(&["alpha", "beta", "gamma"], &targets);
    assert_eq!(run.cached(), finished, "kept in the cache");
    assert_eq!(
        run.compiled(),
        all.difference(&finished).cloned().collect(),
        "compiled on the rerun"
    );
    assert!(Path::new(&ws.path("out")).is_dir());
}

/// Issue 43, item 4: an interrupt in the middle of a device-linked job keeps the files
/// that finished: SIGINT while the six-file `foreign_sponge` compiles its fourth file
/// (three done) keeps those three (or four, when the fourth finishes first) in the cache,
/// says so, and the rerun compiles only the other files, then links.
#[test]
fn issue_43_an_interrupted_linked_job_keeps_its_finished_files() {
    let ws = Ws::foreign("intr");
    let mut child = ws
        .build_command()
        .args(["-j", "1", "--module", "foreign_sponge", "--target", "sm_90"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || std::io::read_to_string(stderr).unwrap());
    // The fourth file of the module is being compiled: the first three are done.
    let deadline = Instant::now() + Duration::from_secs(120);
    let dir = ws.dir.path().display().to_string();
    let ours = || {
        let here = nvcc_mentioning(&dir);
        nvcc_mentioning("sponge/merkle.cu")
            .iter()
            .any(|p| here.contains(p))
    };
    while !ours() {
        assert!(Instant::now() < deadline, "merkle.cu never compiled");
        std::thread::sleep(Duration::from_millis(5));
    }
    rustix::process::kill_process(
        rustix::process::Pid::from_child(&child),
        rustix::process::Signal::INT,
    )
    .unwrap();
    let status = child.wait().unwrap();
    let stderr = reader.join().unwrap();
    assert_eq!(status.code(), Some(130), "{stderr}");
    let kept: usize = stderr
        .lines()
        .find_map(|l| {
            l.split_once(" compiled file(s) of unfinished device-linked jobs")
                .and_then(|(head, _)| head.rsplit(' ').next()?.parse().ok())
        })
        .unwrap_or_else(|| panic!("no kept files said:\n{stderr}"));
    assert!((3..=4).contains(&kept), "{stderr}");
    let run = ws
        .build(&["--module", "foreign_sponge", "--target", "sm_90"])
        .ok();
    assert_eq!(
        run.nvcc_runs(),
        (6 - kept as u64) + 1,
        "the other files and the link"
    );
}
