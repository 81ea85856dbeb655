//! vmprof lines mode (`toyvm run --vmprof FILE --vmprof-lines`, issue 12
//! item 3): every frame of every sample records the line it was executing,
//! in both tiers. `tests/vmprof/lines.toy` runs two loops in `work`, 70%
//! and 30% of the iterations (lines 9-11 and 13-15), timing each with
//! `clock()`; the profile must give the first the share the program
//! measured, within 5 points, read by our reader, by `toyvm report
//! --lines` and by the PyPI `vmprof` reader (`node.lines`), and every
//! sample must place `<main>` on its call site, line 27.
//!
//! Why the program's own split and not 70%: the interpreter's speed on
//! the two loops can differ by process on this virtual machine (layout):
//! a program timing such loops said 74/26 in one run of eight, and the
//! profile agreed (73.9%). Against a fixed 70%, the interpreted share was
//! 63.5-65.3% in about one run in five. The rounds stay long (about 50 ms
//! interpreted): rounds of half a millisecond, against the 1 ms sampling
//! interval, made samples fall on the same phase of the round run after
//! run (aliasing), and the share swung from 59% to 73% while the clocks
//! said 70.0%.
//!
//! The PyPI reader comes from the cached venv of `tests/vmprof_pypi.rs`;
//! without python3, venv or PyPI that part is skipped with a loud
//! message, except when `CI=true`, where it fails.

mod common;
#[path = "../perfsupport/tests/vmprof_support/venv.rs"]
mod venv;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::toyvm;
use perfsupport::vmprof::format::PROFILE_LINES;
use perfsupport::vmprof::read_profile;
use serde_json::Value;
use venv::{run, skip_or_fail, vmprof_venv};

const SCRIPT: &str = "tests/vmprof/lines.toy";
/// Most points the measured share may be off.
const TOLERANCE: f64 = 5.0;
/// The first loop's lines (`for`, body, `}`) and the second's.
const SEVENTY: std::ops::RangeInclusive<u64> = 9..=11;
const THIRTY: std::ops::RangeInclusive<u64> = 13..=15;
/// `<main>`'s call of `work`.
const CALL_SITE: u64 = 27;

/// The share of `SEVENTY` among samples on `SEVENTY` or `THIRTY`, from
/// `hits` (line, samples), checked against `measured`, the first loop's
/// share of the two loops' time by the program's own clock.
fn share(what: &str, measured: f64, hits: impl IntoIterator<Item = (u64, f64)>) -> f64 {
    let (mut a, mut b) = (0.0, 0.0);
    for (line, n) in hits {
        if SEVENTY.contains(&line) {
            a += n;
        } else if THIRTY.contains(&line) {
            b += n;
        }
    }
    assert!(a + b > 0.0, "{what}: no samples on either loop");
    let share = 100.0 * a / (a + b);
    eprintln!("{what}: {a} + {b}: {share:.1}% (the program's clocks: {measured:.1}%)");
    assert!(
        (share - measured).abs() <= TOLERANCE,
        "{what}: {share:.1}% for {measured:.1}%"
    );
    share
}

/// Profiles lines.toy with `tier_flags` and checks the three readings.
fn check_tier(name: &str, tier_flags: &[&str], rounds: &str) {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("vmprof_lines");
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join(format!("{name}.prof"));
    let _ = std::fs::remove_file(&path);
    let path_arg = path.to_str().expect("utf-8");
    let mut argv = vec!["run", "--vmprof", path_arg, "--vmprof-lines"];
    argv.extend_from_slice(tier_flags);
    argv.extend_from_slice(&[SCRIPT, rounds]);
    let profiled = toyvm(&argv);
    assert_eq!(profiled.status, Some(0), "stderr: {}", profiled.stderr);
    // The program's last line: the first loop's share by its clocks.
    let measured: f64 = (profiled.stdout.lines().last())
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or_else(|| panic!("{name}: no measured share in {:?}", profiled.stdout));
    assert!(
        (55.0..=85.0).contains(&measured),
        "{name}: the loops' clocks say {measured:.1}%, far from 70%"
    );

    // Our reader: the innermost frame's line, and <main>'s call site.
    let profile = read_profile(&path).expect("a readable profile");
    assert_eq!(profile.mode, PROFILE_LINES);
    let is = |id: u64, func: &str| profile.name(id).and_then(|n| n.split(':').nth(1)) == Some(func);
    let mut innermost: BTreeMap<u64, f64> = BTreeMap::new();
    for sample in &profile.samples {
        assert_eq!(sample.lines.len(), sample.stack.len());
        assert!(is(sample.stack[0], "<main>"));
        // A sample taken on the JIT's compiler thread (default tiering) is
        // `<main>` -> `<jit compiler>` (see `vm::vmprof`): not Toy code.
        if sample
            .stack
            .get(1)
            .is_some_and(|&id| is(id, vm::vmprof::COMPILER_FRAME))
        {
            continue;
        }
        if sample.stack.len() == 2 {
            assert!(is(sample.stack[1], "work"), "{name}");
            assert_eq!(
                sample.lines[0], CALL_SITE,
                "{name}: <main> calls at line {CALL_SITE}"
            );
            *innermost.entry(sample.lines[1]).or_default() += 1.0;
        }
    }
    let in_work: f64 = innermost.values().sum();
    assert!(
        in_work >= 200.0 && in_work >= 0.9 * profile.samples.len() as f64,
        "{name}: {in_work} of {} samples in work",
        profile.samples.len()
    );
    share(&format!("{name}, our reader"), measured, innermost);

    // `toyvm report --lines`: work's rows, `total self line source`.
    let report = toyvm(&["report", "--lines", path_arg]);
    assert_eq!(report.status, Some(0), "{}", report.stderr);
    let text = &report.stdout;
    let work = text
        .split("\n  work (lines.toy:6)")
        .nth(1)
        .unwrap_or_else(|| panic!("{name}: no lines of work:\n{text}"));
    let rows = (work.lines().skip(2))
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| {
            let mut cols = l.split_whitespace();
            let _total = cols.next()?;
            let own: f64 = cols.next()?.trim_end_matches('%').parse().ok()?;
            let line: u64 = cols.next()?.parse().ok()?;
            Some((line, own))
        });
    share(&format!("{name}, toyvm report"), measured, rows);
    // `toyvm report --folded --lines`: each frame `function:LINE`; the
    // leaves in work by line.
    let folded = toyvm(&["report", "--folded", "--lines", path_arg]);
    assert_eq!(folded.status, Some(0), "{}", folded.stderr);
    let leaves = folded.stdout.lines().filter_map(|l| {
        let (stack, n) = l.rsplit_once(' ')?;
        let (function, line) = stack.rsplit(';').next()?.rsplit_once(':')?;
        (function == "work").then_some(())?;
        Some((line.parse().ok()?, n.parse().ok()?))
    });
    share(
        &format!("{name}, toyvm report --folded --lines"),
        measured,
        leaves,
    );
    assert!(
        text.contains("h = (h * 31 + i) % 1000003;"),
        "the source text is shown:\n{text}"
    );

    // The PyPI reader: `node.lines` of the work node, and of <main>.
    match vmprof_venv("0.6.0") {
        Ok(venv) => {
            let reader = Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/vmprof/read_lines_with_vmprof.py");
            let json = run(
                Command::new(venv.join("bin/python"))
                    .arg(&reader)
                    .arg(&path),
                "read_lines_with_vmprof.py",
            )
            .unwrap_or_else(|e| panic!("vmprof cannot read our lines profile: {e}"));
            let found: Value = serde_json::from_str(&json).expect("JSON");
            let nodes = found["nodes"].as_array().expect("nodes");
            let node = |func: &str| {
                (nodes.iter())
                    .find(|n| n[1].as_str().and_then(|s| s.split(':').nth(1)) == Some(func))
                    .unwrap_or_else(|| panic!("{name}: no {func} node in {nodes:?}"))
            };
            let lines = |n: &Value| -> Vec<(u64, f64)> {
                (n[3].as_object().expect("lines").iter())
                    .map(|(l, hits)| (l.parse().expect("line"), hits.as_f64().expect("hits")))
                    .collect()
            };
            share(
                &format!("{name}, PyPI vmprof"),
                measured,
                lines(node("work")),
            );
            let main_lines = lines(node("<main>"));
            let at_call: f64 = (main_lines.iter())
                .filter(|(l, _)| *l == CALL_SITE)
                .map(|(_, n)| n)
                .sum();
            assert!(at_call >= in_work, "{name}: <main>'s lines {main_lines:?}");
        }
        Err(why) => skip_or_fail(&why),
    }
    let _ = std::fs::remove_file(&path);
}

#[test]
fn interpreter_lines_show_seventy_thirty() {
    check_tier("interp", &["--no-jit"], "40");
}

#[test]
fn jit_lines_show_seventy_thirty() {
    // The default threshold: the first call of `work` enters its loop
    // through OSR, the later ones its compiled native function.
    check_tier("jit", &[], "90");
}

#[test]
fn compiled_callers_show_their_call_site() {
    // Everything compiled before it runs: <main>'s line comes from the
    // index its compiled code stores before the call.
    check_tier("jit0", &["--jit-threshold", "0"], "90");
}

#[test]
fn inlined_calls_show_their_call_site() {
    // `add` is inlined into <main>'s loop and has no frame record: its
    // code's line table names <main> and the call's line, 15 (compiled
    // code stores nothing before an inlined call). The loop tiers up into
    // <main>'s OSR variant as under the default tiering, but on the
    // interpreter's thread (an explicit threshold): on the compiler
    // thread, a loaded machine would stretch the interpreted start, and
    // its share of the samples.
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("vmprof_lines");
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("inlined.prof");
    let _ = std::fs::remove_file(&path);
    let path_arg = path.to_str().expect("utf-8");
    let script = "examples/scripts/bench/calls.toy";
    let run = toyvm(&[
        "run",
        "--jit-threshold",
        "1000",
        "--vmprof",
        path_arg,
        "--vmprof-lines",
        script,
        "400000000",
    ]);
    assert_eq!(run.status, Some(0), "stderr: {}", run.stderr);
    let profile = read_profile(&path).expect("a readable profile");
    let lines: Vec<u64> = (profile.samples.iter())
        .filter(|s| s.stack.len() == 1)
        .map(|s| s.lines[0])
        .collect();
    assert!(lines.len() >= 100, "{} samples in <main>", lines.len());
    let on_call = lines.iter().filter(|&&l| l == 15).count();
    assert!(
        on_call * 10 >= lines.len() * 8,
        "{on_call} of {} samples on the call's line: {lines:?}",
        lines.len()
    );
    // The loop's lines, and the `print` after it (line 17), where the
    // last sample of a run may land (a CI run had three there).
    assert!(
        lines.iter().all(|&l| matches!(l, 14 | 15 | 17)),
        "{lines:?}"
    );
    let _ = std::fs::remove_file(&path);
}

#[test]
fn lines_mode_runs_the_same_program_in_every_tier() {
    // Lines mode runs the interpreter on a copy of the code with a handler
    // per instruction (`interp::handlers::line_slots`), 16 bytes apart
    // instead of 8: output, errors and the traceback's lines and columns
    // must not change, interpreted or tiered up.
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("vmprof_lines");
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("same.prof");
    let path_arg = path.to_str().expect("utf-8");
    for (script, tier) in [
        ("examples/scripts/errors.toy", "--no-jit"),
        ("examples/scripts/errors.toy", "--jit-threshold=1"),
        ("examples/scripts/profile_demo.toy", "--no-jit"),
        ("examples/scripts/arrays.toy", "--no-jit"),
    ] {
        let plain = toyvm(&["run", tier, script]);
        let lines = toyvm(&["run", tier, "--vmprof", path_arg, "--vmprof-lines", script]);
        assert_eq!(
            plain.status, lines.status,
            "{script} {tier}: {}",
            lines.stderr
        );
        assert_eq!(plain.stdout, lines.stdout, "{script} {tier}");
        assert_eq!(plain.stderr, lines.stderr, "{script} {tier}");
    }
    let _ = std::fs::remove_file(&path);
}
