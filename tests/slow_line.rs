//! `toyvm run --slow-line LINE:NANOS` (the slowdown experiment that checks
//! a profile, issue 36): the output never changes, each entry into the
//! line costs about NANOS of CPU time in every tier, a profile gives that
//! time to the line, and bad values are refused with a clear error.

mod common;

use common::{Measured, measured, toyvm_in};

/// `step`'s line 2 and `work`'s line 10 each run once per iteration of
/// `work`'s loop. `work` is called three times: `--jit-threshold 0`
/// compiles it whole, the default tiering enters it by OSR from its loop,
/// and the JIT inlines `step` into it (so line 2's work is machine code in
/// `work`'s code).
const SCRIPT: &str = "\
fn step(s: int, i: int) -> int {
    return s + i % 7;
}

fn work(n: int) -> int {
    let s = 0;
    let i = 0;
    while i < n {
        s = step(s, i);
        i = i + 1;
    }
    return s;
}

let total = 0;
for round in 0..3 { total = total + work(parse_int(args()[0])); }
print(total);
";

/// Entries into line 2, and into line 10, in one run: three calls of `work(N)`.
const N: u64 = 20_000;
const ENTRIES: u64 = 3 * N;

/// The tiers: the interpreter, the default tiering (background compiles,
/// OSR), everything compiled before it runs.
const TIERS: [&[&str]; 3] = [&["--no-jit"], &[], &["--jit-threshold", "0"]];

fn dir(test: &str) -> common::PerfWork {
    let dir = common::PerfWork::new(&format!("slow-line-{test}"));
    std::fs::write(dir.dir.join("work.toy"), SCRIPT).unwrap();
    dir
}

fn run(dir: &common::PerfWork, tier: &[&str], slow: Option<&str>) -> Measured {
    let n = N.to_string();
    let mut args = vec!["run"];
    args.extend_from_slice(tier);
    if let Some(slow) = slow {
        args.extend(["--slow-line", slow]);
    }
    args.extend(["work.toy", n.as_str()]);
    let run = measured(&dir.dir, &args);
    assert_eq!(run.status, Some(0), "{args:?}: {}", run.stderr);
    run
}

#[test]
fn output_is_unchanged_and_each_entry_costs_about_nanos_in_every_tier() {
    if std::env::var_os("TOYVM_TEST_RUNNER").is_some() {
        eprintln!("slow_line: timing is not measured under emulation");
        return;
    }
    let dir = dir("cost");
    // 10 µs per entry: 0.6 s over the run, well above the noise of a run.
    let nanos = 10_000u64;
    let expected = (ENTRIES * nanos) as f64 / 1e9;
    for tier in TIERS {
        // The fastest of three runs each way: a loaded machine only ever
        // adds CPU time (frequency, cache), never takes it away.
        let best = |slow: Option<&str>| {
            (0..3)
                .map(|_| run(&dir, tier, slow))
                .min_by(|a, b| a.cpu.total_cmp(&b.cpu))
                .unwrap()
        };
        let plain = best(None);
        // Line 2 is inlined into `work` when compiled, line 10 is `work`'s own.
        for line in [2, 10] {
            let slowed = best(Some(&format!("{line}:{nanos}")));
            assert_eq!(slowed.stdout, plain.stdout, "{tier:?}: output changed");
            let added = slowed.cpu - plain.cpu;
            eprintln!(
                "{tier:?} line {line}: {:.3} s -> {:.3} s, added {added:.3} s, expected {expected:.3} s",
                plain.cpu, slowed.cpu
            );
            assert!(
                (0.7 * expected..1.5 * expected).contains(&added),
                "{tier:?}: --slow-line {line}:{nanos} added {added:.3} s of CPU time over \
                 {ENTRIES} entries; expected about {expected:.3} s"
            );
        }
    }
}

#[test]
fn the_vmprof_profile_gives_the_time_to_the_slowed_line() {
    let dir = dir("vmprof");
    for tier in TIERS {
        let mut args = vec!["run"];
        args.extend_from_slice(tier);
        args.extend([
            "--vmprof",
            "p.prof",
            "--vmprof-lines",
            "--slow-line",
            "10:20000",
            "work.toy",
            "20000",
        ]);
        let run = toyvm_in(&dir.dir, &args, &[]);
        assert_eq!(run.status, Some(0), "{tier:?}: {}", run.stderr);
        let report = toyvm_in(&dir.dir, &["report", "--lines", "p.prof"], &[]);
        assert_eq!(report.status, Some(0), "{}", report.stderr);
        // `work`'s section: a header with its own share ("work (work.toy:5):
        // A% total, B% self"), then its line table, hottest line first.
        let mut section =
            (report.stdout.lines()).skip_while(|l| !l.trim_start().starts_with("work ("));
        let header = section
            .next()
            .unwrap_or_else(|| panic!("{tier:?}: no line table for work:\n{}", report.stdout));
        let percent = |text: &str| -> f64 { text.trim_end_matches(['%', ',']).parse().unwrap() };
        let work_self = percent(header.split_whitespace().rev().nth(1).unwrap());
        let hottest: Vec<&str> = section.nth(1).unwrap().split_whitespace().collect();
        assert_eq!(
            hottest.get(2),
            Some(&"10"),
            "{tier:?}: the hottest line of work is not line 10:\n{}",
            report.stdout
        );
        // Of `work`'s own time (a JIT's compiler thread has its share of
        // the whole, large under emulation).
        let share = 100.0 * percent(hottest[1]) / work_self;
        assert!(
            share > 90.0,
            "{tier:?}: line 10 has {share:.1}% of work's self time:\n{}",
            report.stdout
        );
    }
}

#[test]
fn bad_values_are_refused_with_a_clear_error() {
    let dir = dir("refused");
    let refused = |value: &str, expect: &str| {
        let run = toyvm_in(
            &dir.dir,
            &["run", "--slow-line", value, "work.toy", "1"],
            &[],
        );
        assert!(
            run.status.is_some_and(|s| s != 0),
            "{value}: accepted\n{}",
            run.stdout
        );
        assert!(run.stdout.is_empty(), "{value}: ran the script");
        assert!(
            run.stderr.contains(expect),
            "{value}: expected {expect:?} in:\n{}",
            run.stderr
        );
        assert!(!run.stderr.contains("panicked"), "{}", run.stderr);
    };
    refused("99:100", "work.toy has no line 99 (it has 17)");
    refused("4:100", "line 4 of work.toy has no code to slow down");
    refused("5:0", "is not a number of nanoseconds from 1 to 1000000000");
    refused("5:1000000001", "is not a number of nanoseconds");
    refused("5:-3", "is not a number of nanoseconds");
    refused("5:ten", "is not a number of nanoseconds");
    refused("0:100", "is not a line number");
    refused("5", "is not LINE:NANOS");
}

#[test]
fn the_interpreter_counts_the_entries_the_experiment_predicts_from() {
    let dir = dir("counts");
    let n = N.to_string();
    let run = toyvm_in(
        &dir.dir,
        &[
            "run",
            "--no-jit",
            "--slow-line",
            "2:1",
            "--slow-line",
            "10:1",
            "--slow-line-counts",
            "work.toy",
            &n,
        ],
        &[],
    );
    assert_eq!(run.status, Some(0), "{}", run.stderr);
    // Line 2 is entered once per call of `step`, line 10 once per
    // iteration of `work`'s loop: N each per call of `work`.
    assert!(
        run.stderr
            .contains(&format!("slow-line: line 2 (step): {ENTRIES} entries\n")),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr
            .contains(&format!("slow-line: line 10 (work): {ENTRIES} entries\n")),
        "{}",
        run.stderr
    );
    // Compiled code does not count, so the count asks for the interpreter.
    let refused = toyvm_in(
        &dir.dir,
        &[
            "run",
            "--slow-line",
            "2:1",
            "--slow-line-counts",
            "work.toy",
            &n,
        ],
        &[],
    );
    assert_ne!(refused.status, Some(0));
    assert!(refused.stderr.contains("--no-jit"), "{}", refused.stderr);
}
