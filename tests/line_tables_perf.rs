//! The JIT's line tables, measured with the real `perf`: a JIT-compiled
//! loop (`tests/line_tables/loop.toy`, loop on lines 4-5, `fn` on line 2)
//! recorded with `--perf-jitdump`, `perf inject --jit` and `perf report
//! --sort srcline` has at least 90% of its function's samples on the
//! loop's lines.
//!
//! Negative control: the same run with `TOYVM_JIT_OLD_LINE_FALLBACK=1`
//! (test-only: every instruction Cranelift left without a source location
//! goes to the `fn` line, as before `jit::line_table`) must miss that
//! mark, so the check cannot pass by accident (for instance if perf
//! stopped reading the line tables and put everything on one line).
//!
//! Shares of samples, never counts or times. Retried once on a flaky
//! capture. Without `perf` the test is skipped loudly, except under
//! `CI=true`, where it fails.

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;

/// Iterations: about half a second of compiled code.
const ITERATIONS: &str = "60000000";
/// The loop's lines in `tests/line_tables/loop.toy`.
const LOOP_LINES: [u32; 2] = [4, 5];

use common::PerfWork as Work;

/// `perf ARGS...` in `work`: its stdout, or an error with its stderr.
fn perf(work: &Work, args: &[&str], env: &[(&str, &str)]) -> Result<String, String> {
    let out = work.perf(args, env);
    if !out.status.success() {
        return Err(format!(
            "perf {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Records the loop under perf (with `env` for toyvm) and returns the
/// share of `toy:jit:work`'s samples per `loop.toy` line.
fn line_shares(env: &[(&str, &str)]) -> Result<BTreeMap<u32, f64>, String> {
    let work = Work::new(if env.is_empty() {
        "line-tables-new"
    } else {
        "line-tables-old"
    });
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/line_tables/loop.toy");
    let dir = work.dir.to_string_lossy().into_owned();
    let script = script.to_string_lossy().into_owned();
    perf(
        &work,
        &[
            "record",
            "-q",
            "-e",
            "cpu-clock",
            "-F",
            "999",
            "-k",
            "1",
            "-o",
            "perf.data",
            "--",
            env!("CARGO_BIN_EXE_toyvm"),
            "run",
            "--jit-threshold",
            "0",
            "--perf-jitdump",
            "--perf-dir",
            &dir,
            &script,
            ITERATIONS,
        ],
        env,
    )?;
    perf(
        &work,
        &["inject", "--jit", "-i", "perf.data", "-o", "perf.jit.data"],
        &[],
    )?;
    let report = perf(
        &work,
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
    )?;
    shares_of_work(&report)
}

/// Parses `perf report --sort sym,srcline` rows of `toy:jit:work` into
/// shares of that function's samples per `loop.toy` line.
fn shares_of_work(report: &str) -> Result<BTreeMap<u32, f64>, String> {
    let mut percent: BTreeMap<u32, f64> = BTreeMap::new();
    for row in report.lines().filter(|l| l.contains("toy:jit:work:")) {
        let mut words = row.split_whitespace();
        let share = words
            .next()
            .and_then(|p| p.trim_end_matches('%').parse::<f64>().ok());
        let line = row
            .rsplit_once("loop.toy:")
            .and_then(|(_, n)| n.trim().parse::<u32>().ok());
        match (share, line) {
            (Some(share), Some(line)) => *percent.entry(line).or_default() += share,
            _ => return Err(format!("unexpected report row: {row}\n{report}")),
        }
    }
    let total: f64 = percent.values().sum();
    if total <= 0.0 {
        return Err(format!("no samples in toy:jit:work:\n{report}"));
    }
    Ok(percent.into_iter().map(|(l, p)| (l, p / total)).collect())
}

fn loop_share(shares: &BTreeMap<u32, f64>) -> f64 {
    LOOP_LINES.iter().filter_map(|l| shares.get(l)).sum()
}

/// Runs `check` and retries once if it fails (a flaky capture).
fn twice(name: &str, check: impl Fn() -> Result<(), String>) {
    if let Err(first) = check() {
        eprintln!("line_tables_perf {name}: retrying after: {first}");
        if let Err(second) = check() {
            panic!("line_tables_perf {name}: {second}");
        }
    }
}

#[test]
fn perf_puts_a_compiled_loop_on_its_own_lines() {
    if !common::tool_or_skip("line_tables_perf", "perf", common::PERF_RECORD_PROBE) {
        return;
    }
    twice("loop lines", || {
        let shares = line_shares(&[])?;
        let share = loop_share(&shares);
        if share < 0.90 {
            return Err(format!(
                "{:.1}% of toy:jit:work's samples on lines {LOOP_LINES:?}, want >= 90%: {shares:?}",
                share * 100.0
            ));
        }
        Ok(())
    });
    twice("negative control (old fallback)", || {
        let shares = line_shares(&[("TOYVM_JIT_OLD_LINE_FALLBACK", "1")])?;
        let share = loop_share(&shares);
        if share >= 0.90 {
            return Err(format!(
                "the old fallback still puts {:.1}% on the loop's lines: {shares:?}",
                share * 100.0
            ));
        }
        Ok(())
    });
}
