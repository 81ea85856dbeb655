//! End-to-end checks with the real `perf`: the names, call chains, unwind
//! tables and line tables toyvm reports for interpreted and compiled code.
//!
//! The script `tests/perf/nested.toy` runs `<main> -> outer -> middle ->
//! inner_hot`, with nearly all time in `inner_hot`:
//!
//! * (a) `--no-jit --perf`, frame-pointer call graphs: samples in
//!   `inner_hot` are under `toy:interp:inner_hot`, then `toy:interp:middle`,
//!   `toy:interp:outer`, ... `main` (the per-function trampolines).
//! * (b) `--jit-threshold 0 --perf`: leaf samples are in `toy:jit:inner_hot`
//!   and frame-pointer stacks chain `middle`, `outer` to `main`.
//! * (c) `--perf-jitdump`, `perf record -k 1 --call-graph dwarf`, then
//!   `perf inject --jit`: `toy:jit:inner_hot` resolves in a `jitted-*.so`,
//!   DWARF stacks unwind the same chain, `--sort srcline` shows `.toy`
//!   lines, and `readelf` finds `.eh_frame`, `.eh_frame_hdr` and an FDE.
//! * (d) the negative control: the same with `TOYVM_JITDUMP_NO_UNWIND=1`
//!   (test-only: the jitdump gets no unwinding records at all). perf's
//!   DWARF unwinder then stops at the first JIT frame, so almost no
//!   `inner_hot` sample reaches `middle`, and the injected object has no
//!   FDE: (c) cannot pass by accident (e.g. through a frame-pointer
//!   fallback).
//!
//! * (e) and (f): (b) and (c) in the default tiering, where code is
//!   compiled on the `toyvm-jit` thread and reported from there while the
//!   interpreter runs: leaf samples are in a compiled `inner_hot` (its OSR
//!   variant or its native function), and the stacks chain through the
//!   interpreted `middle` and `outer` (trampolines; they never get hot).
//!
//! Chains are checked as ratios of samples (>= 80%), never as counts. Each
//! scenario is retried once on a flaky capture. Without `perf` or `readelf`
//! the test is skipped loudly, except under `CI=true`, where it fails.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

/// The profiled process's arguments per tier (about a second of work each).
const INTERP_ARGS: &[&str] = &["20", "4000000"];
const JIT_ARGS: &[&str] = &["20", "8000000"];

/// One sample's stack: (symbol, dso) from leaf to root.
type Stack = Vec<(String, String)>;

use common::PerfWork as Work;

fn tool_works(cmd: &str, args: &[&str]) -> bool {
    Command::new(cmd)
        .args(args)
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Parses `perf script -F ip,sym,dso` output into stacks.
fn stacks(text: &str) -> Vec<Stack> {
    text.split("\n\n")
        .map(|block| {
            block
                .lines()
                .filter_map(|line| {
                    let mut words = line.split_whitespace();
                    words.next()?;
                    let rest: Vec<&str> = words.collect();
                    let (dso, sym) = match rest.split_last() {
                        Some((last, init)) if last.starts_with('(') => {
                            (last.to_string(), init.join(" "))
                        }
                        _ => (String::new(), rest.join(" ")),
                    };
                    Some((sym, dso))
                })
                .collect::<Stack>()
        })
        .filter(|s: &Stack| !s.is_empty())
        .collect()
}

/// True if `stack` holds frames matching `chain` in this order (leaf first),
/// with anything in between, and ends up in `main`.
fn chains(stack: &Stack, chain: &[&str]) -> bool {
    let mut at = 0;
    for frame in stack {
        if at < chain.len() && frame.0.starts_with(chain[at]) {
            at += 1;
        }
    }
    at == chain.len()
        && stack.iter().any(|(sym, _)| {
            sym == "main" || sym.ends_with("toyvm::main") || sym == "__libc_start_call_main"
        })
}

/// Records `script` under perf and returns the stacks (after inject for
/// jitdump runs) plus the work directory's pid-specific file name prefix.
fn record(
    work: &Work,
    perf_args: &[&str],
    toy_args: &[&str],
    env: &[(&str, &str)],
    inject: bool,
) -> (Vec<Stack>, u32) {
    let script = common::repo_root().join("tests/perf/nested.toy");
    let script = script.to_string_lossy().into_owned();
    let toyvm = env!("CARGO_BIN_EXE_toyvm");
    let mut args = vec![
        "record",
        "-q",
        "-e",
        "cpu-clock",
        "-F",
        "999",
        "-o",
        "perf.data",
    ];
    args.extend_from_slice(perf_args);
    args.extend_from_slice(&["--", toyvm, "run"]);
    args.extend_from_slice(toy_args);
    args.push(&script);
    let sizes = if toy_args.contains(&"--no-jit") {
        INTERP_ARGS
    } else {
        JIT_ARGS
    };
    args.extend_from_slice(sizes);
    let out = work.perf(&args, env);
    assert!(
        out.status.success(),
        "perf record failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pid_out = work.perf(&["script", "-i", "perf.data", "-F", "pid"], &[]);
    let pid: u32 = String::from_utf8_lossy(&pid_out.stdout)
        .split_whitespace()
        .next()
        .and_then(|p| p.parse().ok())
        .expect("a sample with a pid");
    let input = if inject {
        let out = work.perf(
            &["inject", "--jit", "-i", "perf.data", "-o", "perf.jit.data"],
            &[],
        );
        assert!(
            out.status.success(),
            "perf inject failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        "perf.jit.data"
    } else {
        "perf.data"
    };
    let out = work.perf(
        &["script", "--no-inline", "-i", input, "-F", "ip,sym,dso"],
        &[],
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let _ = std::fs::remove_file(format!("/tmp/perf-{pid}.map"));
    (stacks(&text), pid)
}

fn ratio(part: usize, whole: usize) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

/// Runs `check` and retries once if it fails (a flaky capture).
fn twice(name: &str, check: impl Fn() -> Result<(), String>) {
    if let Err(first) = check() {
        eprintln!("perf_e2e {name}: retrying after: {first}");
        if let Err(second) = check() {
            panic!("perf_e2e {name}: {second}");
        }
    }
}

fn scenario_a() -> Result<(), String> {
    let work = Work::new("perf-e2e");
    let (stacks, _) = record(&work, &["-g"], &["--no-jit", "--perf"], &[], false);
    let hot: Vec<&Stack> = stacks
        .iter()
        .filter(|s| {
            s.iter()
                .any(|(sym, _)| sym.starts_with("toy:interp:inner_hot:"))
        })
        .collect();
    let chained = hot
        .iter()
        .filter(|s| {
            chains(
                s,
                &[
                    "toy:interp:inner_hot:",
                    "toy:interp:middle:",
                    "toy:interp:outer:",
                    "toy:interp:<main>:",
                ],
            )
        })
        .count();
    if ratio(hot.len(), stacks.len()) < 0.5 || ratio(chained, hot.len()) < 0.8 {
        return Err(format!(
            "(a) {} samples, {} in inner_hot, {chained} chained",
            stacks.len(),
            hot.len()
        ));
    }
    Ok(())
}

fn scenario_b() -> Result<(), String> {
    let work = Work::new("perf-e2e");
    let (stacks, _) = record(
        &work,
        &["-g"],
        &["--jit-threshold", "0", "--perf"],
        &[],
        false,
    );
    let leaf: Vec<&Stack> = stacks
        .iter()
        .filter(|s| s[0].0.starts_with("toy:jit:inner_hot:"))
        .collect();
    let chained = leaf
        .iter()
        .filter(|s| {
            chains(
                s,
                &["toy:jit:inner_hot:", "toy:jit:middle:", "toy:jit:outer:"],
            )
        })
        .count();
    if ratio(leaf.len(), stacks.len()) < 0.5 || ratio(chained, leaf.len()) < 0.8 {
        return Err(format!(
            "(b) {} samples, {} leaf in inner_hot, {chained} chained",
            stacks.len(),
            leaf.len()
        ));
    }
    Ok(())
}

/// A compiled `inner_hot`: its native function or its OSR variant.
fn compiled_inner_hot(sym: &str) -> bool {
    sym.starts_with("toy:jit:inner_hot:") || sym.starts_with("toy:jit-osr:inner_hot:")
}

/// (e) and (f): the default tiering (background compilation), with frame
/// pointers and the perf map (`jitdump` false) or with the jitdump and
/// DWARF unwinding.
fn scenario_default(jitdump: bool) -> Result<(), String> {
    let work = Work::new("perf-e2e");
    let dir = work.dir.to_string_lossy().into_owned();
    let (perf_args, toy_args): (&[&str], Vec<&str>) = match jitdump {
        false => (&["-g"], vec!["--perf"]),
        true => (
            &["-k", "1", "--call-graph", "dwarf,16384"],
            vec!["--perf-jitdump", "--perf-dir", &dir],
        ),
    };
    let (stacks, _) = record(&work, perf_args, &toy_args, &[], jitdump);
    let leaf: Vec<&Stack> = stacks
        .iter()
        .filter(|s| compiled_inner_hot(&s[0].0) && (!jitdump || s[0].1.contains("jitted-")))
        .collect();
    let chained = leaf
        .iter()
        .filter(|s| chains(s, &["toy:interp:middle:", "toy:interp:outer:"]))
        .count();
    let name = if jitdump { "(f)" } else { "(e)" };
    if ratio(leaf.len(), stacks.len()) < 0.5 || ratio(chained, leaf.len()) < 0.8 {
        return Err(format!(
            "{name} {} samples, {} leaf in a compiled inner_hot, {chained} chained",
            stacks.len(),
            leaf.len()
        ));
    }
    Ok(())
}

/// (c) and (d): jitdump with DWARF unwinding; `unwind` false is the control.
fn scenario_jitdump(unwind: bool) -> Result<(), String> {
    let work = Work::new("perf-e2e");
    let dir = work.dir.to_string_lossy().into_owned();
    let env: &[(&str, &str)] = if unwind {
        &[]
    } else {
        &[("TOYVM_JITDUMP_NO_UNWIND", "1")]
    };
    let (stacks, pid) = record(
        &work,
        &["-k", "1", "--call-graph", "dwarf,16384"],
        &["--jit-threshold", "0", "--perf-jitdump", "--perf-dir", &dir],
        env,
        true,
    );
    let leaf: Vec<&Stack> = stacks
        .iter()
        .filter(|s| s[0].0.starts_with("toy:jit:inner_hot:") && s[0].1.contains("jitted-"))
        .collect();
    let chained = leaf
        .iter()
        .filter(|s| {
            chains(
                s,
                &["toy:jit:inner_hot:", "toy:jit:middle:", "toy:jit:outer:"],
            )
        })
        .count();
    let name = if unwind { "(c)" } else { "(d)" };
    if ratio(leaf.len(), stacks.len()) < 0.5 {
        return Err(format!(
            "{name} {} samples, {} leaf in a jitted inner_hot",
            stacks.len(),
            leaf.len()
        ));
    }
    if !unwind {
        eprintln!(
            "perf_e2e (d): {chained} of {} inner_hot stacks chained without unwinding records",
            leaf.len()
        );
        if ratio(chained, leaf.len()) > 0.2 {
            return Err(format!(
                "(d) {chained} of {} stacks chained without unwinding records",
                leaf.len()
            ));
        }
        let so = jitted_object(&work, pid)?;
        return match check_readelf(&so) {
            Ok(()) => Err("(d) the injected object has an FDE without unwind info".into()),
            Err(_) => Ok(()),
        };
    }
    if ratio(chained, leaf.len()) < 0.8 {
        return Err(format!(
            "(c) {} leaf samples, {chained} chained",
            leaf.len()
        ));
    }
    let out = work.perf(
        &[
            "report",
            "--no-inline",
            "-i",
            "perf.jit.data",
            "--stdio",
            "--sort",
            "sym,srcline",
            "-g",
            "none",
        ],
        &[],
    );
    let report = String::from_utf8_lossy(&out.stdout);
    if !report
        .lines()
        .any(|l| l.contains("toy:jit:inner_hot:") && l.contains("nested.toy:"))
    {
        return Err(format!(
            "(c) no nested.toy srcline for inner_hot in:\n{report}"
        ));
    }
    check_readelf(&jitted_object(&work, pid)?)
}

/// The `jitted-<pid>-*.so` perf inject wrote for `toy:jit:inner_hot`.
fn jitted_object(work: &Work, pid: u32) -> Result<PathBuf, String> {
    let prefix = format!("jitted-{pid}-");
    std::fs::read_dir(&work.dir)
        .map_err(|e| e.to_string())?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(&prefix))
        })
        .find(|p| std::fs::read(p).is_ok_and(|b| contains(&b, b"toy:jit:inner_hot:")))
        .ok_or_else(|| "no jitted-*.so for inner_hot".to_string())
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

fn check_readelf(so: &Path) -> Result<(), String> {
    let sections = Command::new("readelf")
        .arg("-S")
        .arg(so)
        .output()
        .map_err(|e| e.to_string())?;
    let sections = String::from_utf8_lossy(&sections.stdout);
    if !sections.contains(".eh_frame_hdr")
        || !sections.contains(".eh_frame ") && !sections.contains(".eh_frame\n")
    {
        return Err(format!("(c) sections of {}:\n{sections}", so.display()));
    }
    let frames = Command::new("readelf")
        .arg("--debug-dump=frames")
        .arg(so)
        .output()
        .map_err(|e| e.to_string())?;
    let frames = String::from_utf8_lossy(&frames.stdout);
    if !frames.contains(" FDE ") {
        return Err(format!("(c) no FDE in {}:\n{frames}", so.display()));
    }
    Ok(())
}

#[test]
fn perf_sees_interpreted_and_compiled_toy_frames() {
    let have_perf = tool_works("perf", common::PERF_RECORD_PROBE);
    let have_readelf = tool_works("readelf", &["--version"]);
    if !have_perf || !have_readelf {
        let ci = std::env::var("CI").is_ok_and(|v| v == "true");
        eprintln!("perf_e2e: SKIPPED: `perf record` or `readelf` is not usable here");
        assert!(!ci, "perf_e2e: CI=true, so a missing perf is a failure");
        return;
    }
    twice("(a) interpreter trampolines", scenario_a);
    twice("(b) JIT frame pointers", scenario_b);
    twice("(c) jitdump DWARF unwinding", || scenario_jitdump(true));
    twice("(d) jitdump without unwind info", || {
        scenario_jitdump(false)
    });
    twice("(e) default tiering, frame pointers", || {
        scenario_default(false)
    });
    twice("(f) default tiering, jitdump DWARF unwinding", || {
        scenario_default(true)
    });
}
