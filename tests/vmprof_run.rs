//! `toyvm run --vmprof FILE`: what the profile holds, and that every way a
//! run can end leaves a complete file.

mod common;

use std::path::{Path, PathBuf};

use common::{ToyRun, toyvm};
use perfsupport::vmprof::{Profile, read_profile};

/// A fresh path in Cargo's per-test temp dir (any old file removed).
fn temp_path(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("vmprof_run");
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join(name);
    let _ = std::fs::remove_file(&path);
    path
}

fn run_profiled(profile: &Path, extra: &[&str], script: &str, args: &[&str]) -> ToyRun {
    let profile = profile.to_str().expect("utf-8 temp path");
    let mut argv = vec!["run", "--vmprof", profile];
    argv.extend_from_slice(extra);
    argv.push(script);
    argv.extend_from_slice(args);
    toyvm(&argv)
}

/// The function names of a sample's stack, root first.
fn names<'p>(profile: &'p Profile, stack: &[u64]) -> Vec<&'p str> {
    stack
        .iter()
        .map(|&id| {
            let name = profile.name(id).expect("every id is named");
            name.split(':').nth(1).expect("toy:<fn>:<line>:<file>")
        })
        .collect()
}

/// The tiers: interpreter only; tier-up at calls and loops (OSR, the
/// interpreter handing a call to fresh code); everything compiled.
const TIERS: [&[&str]; 3] = [
    &["--no-jit"],
    &["--jit-threshold", "50"],
    &["--jit-threshold", "0"],
];

#[test]
fn every_sample_is_the_toy_call_chain_under_main_in_every_tier() {
    for tier in TIERS {
        check_nested_chain(tier);
    }
}

fn check_nested_chain(tier: &[&str]) {
    let path = temp_path("nested.prof");
    // About 0.4 s of CPU: ~100 signals at the kernel's 250 Hz tick, so
    // one signal that lands in a JIT compile (charged to the caller's
    // frame) cannot break the 90% bound below.
    let run = run_profiled(&path, tier, "tests/vmprof/nested.toy", &["1000"]);
    assert_eq!(run.status, Some(0), "stderr: {}", run.stderr);
    assert_eq!(run.stderr, "");
    let profile = read_profile(&path).expect("a readable profile");
    assert_eq!(profile.interp, "toyvm");
    assert!(profile.has_trailer);
    assert_eq!(
        profile.meta_value("script"),
        Some("tests/vmprof/nested.toy")
    );
    // Besides the Toy functions, only the frame that stands for the outer
    // frames of a too-deep sample (see tests/deep_stack_profile.rs).
    let mut registered: Vec<&str> = profile.names.values().map(String::as_str).collect();
    registered.retain(|&n| n != "vmprof:[outer frames cut]:0:-");
    registered.sort_unstable();
    assert_eq!(
        registered,
        [
            "toy:<main>:1:tests/vmprof/nested.toy",
            "toy:inner_hot:5:tests/vmprof/nested.toy",
            "toy:middle:13:tests/vmprof/nested.toy",
            "toy:outer:17:tests/vmprof/nested.toy",
        ]
    );
    assert!(
        profile.samples.len() > 20,
        "{} samples",
        profile.samples.len()
    );
    let chain = ["<main>", "outer", "middle", "inner_hot"];
    let mut in_inner = 0;
    for sample in &profile.samples {
        let stack = names(&profile, &sample.stack);
        assert!(
            chain.starts_with(&stack) && !stack.is_empty(),
            "{tier:?}: a stack that is not a prefix of the call chain: {stack:?}"
        );
        in_inner += usize::from(stack.len() == 4);
    }
    // inner_hot does all the work but a few hundred steps per round.
    assert!(
        in_inner * 100 >= profile.samples.len() * 90,
        "{tier:?}: {in_inner} of {} samples in inner_hot",
        profile.samples.len()
    );
}

#[test]
fn recursion_keeps_one_frame_per_call_in_every_tier() {
    for tier in TIERS {
        let path = temp_path("fib.prof");
        let run = run_profiled(&path, tier, "examples/scripts/bench/fib.toy", &["32"]);
        assert_eq!(run.status, Some(0), "stderr: {}", run.stderr);
        let profile = read_profile(&path).expect("a readable profile");
        assert!(!profile.samples.is_empty(), "{tier:?}: no samples");
        for sample in &profile.samples {
            let stack = names(&profile, &sample.stack);
            // fib(32) is at most 32 calls deep: more frames would mean a
            // call pushed twice (e.g. by the interpreter and compiled code).
            assert!(stack.len() <= 33, "{tier:?}: {} frames", stack.len());
            assert_eq!(stack[0], "<main>", "{tier:?}");
            assert!(
                stack[1..].iter().all(|&n| n == "fib"),
                "{tier:?}: {stack:?}"
            );
        }
    }
}

#[test]
fn a_runtime_error_still_leaves_a_complete_profile() {
    let dir = temp_path("crash");
    std::fs::create_dir_all(&dir).expect("dir");
    let script = dir.join("crash.toy");
    std::fs::write(
        &script,
        "fn work(n: int) -> int {\n  let h = 0;\n  for i in 0..n { h = (h * 31 + i) % 1000003; }\n  return h;\n}\n\
         fn boom(x: int) -> int { return 10 / (x - x); }\n\
         print(work(20000000));\nprint(boom(work(10)));\n",
    )
    .expect("write script");
    let path = dir.join("crash.prof");
    let run = run_profiled(&path, &[], script.to_str().expect("utf-8"), &[]);
    assert_eq!(run.status, Some(1), "stderr: {}", run.stderr);
    assert!(run.stderr.contains("division by zero"), "{}", run.stderr);
    assert!(!run.stderr.contains("profile"), "{}", run.stderr);
    let profile = read_profile(&path).expect("a readable profile");
    assert!(profile.has_trailer, "the profile was completed");
    assert!(!profile.samples.is_empty());
    let report = toyvm(&["report", path.to_str().expect("utf-8")]);
    assert_eq!(report.status, Some(0), "{}", report.stderr);
    assert!(report.stdout.contains("work"), "{}", report.stdout);
}

#[test]
fn a_depth_error_still_leaves_a_complete_profile() {
    let path = temp_path("deep.prof");
    let script = temp_path("deep.toy");
    std::fs::write(
        &script,
        "fn down(n: int) -> int { return down(n + 1) + 1; }\nprint(down(0));\n",
    )
    .expect("write script");
    let run = run_profiled(
        &path,
        &["--max-depth", "2000"],
        script.to_str().expect("utf-8"),
        &[],
    );
    assert_eq!(run.status, Some(1), "stderr: {}", run.stderr);
    let profile = read_profile(&path).expect("a readable profile");
    assert!(profile.has_trailer);
}

#[test]
fn an_uncreatable_profile_is_one_warning_and_the_script_still_runs() {
    let path = temp_path("no-such-dir").join("x.prof");
    let run = run_profiled(&path, &[], "examples/scripts/hello.toy", &[]);
    assert_eq!(run.status, Some(0), "stderr: {}", run.stderr);
    assert_eq!(
        run.stdout,
        toyvm(&["run", "examples/scripts/hello.toy"]).stdout
    );
    assert_eq!(run.stderr.lines().count(), 1, "{}", run.stderr);
    assert!(
        run.stderr
            .starts_with("toyvm: warning: cannot write the profile '")
            && run.stderr.contains("x.prof")
            && run.stderr.contains("running without --vmprof"),
        "{}",
        run.stderr
    );
}

#[test]
fn the_interval_is_checked_and_needs_vmprof() {
    let alone = toyvm(&[
        "run",
        "--vmprof-interval-us",
        "500",
        "examples/scripts/hello.toy",
    ]);
    assert_eq!(alone.status, Some(2), "{}", alone.stderr);
    assert!(alone.stderr.contains("--vmprof"), "{}", alone.stderr);
    let path = temp_path("interval.prof");
    for bad in ["0", "9", "1000001", "x"] {
        let run = run_profiled(
            &path,
            &["--vmprof-interval-us", bad],
            "examples/scripts/hello.toy",
            &[],
        );
        assert_eq!(run.status, Some(2), "{bad}: {}", run.stderr);
        assert!(!run.stderr.contains("panicked"), "{}", run.stderr);
    }
    let run = run_profiled(
        &path,
        &["--vmprof-interval-us", "250"],
        "tests/vmprof/nested.toy",
        &["50"],
    );
    assert_eq!(run.status, Some(0), "{}", run.stderr);
    assert_eq!(read_profile(&path).expect("readable").period_us, 250);
}

#[test]
fn a_quick_script_gives_a_complete_empty_profile() {
    let path = temp_path("hello.prof");
    let run = run_profiled(&path, &[], "examples/scripts/hello.toy", &[]);
    assert_eq!(run.status, Some(0), "{}", run.stderr);
    let profile = read_profile(&path).expect("readable");
    assert!(profile.has_trailer);
    assert!(profile.samples.len() < 5);
}

/// `--vmprof-inlined`: a leaf the JIT inlines still gets its frame.
#[test]
fn inlined_leaf_callees_keep_their_frame_with_vmprof_inlined() {
    for tier in TIERS {
        // About 0.3 s of CPU in each tier.
        let n = if tier == ["--no-jit"] {
            "5000000"
        } else {
            "100000000"
        };
        let path = temp_path("leaf.prof");
        let flags: Vec<&str> = tier.iter().copied().chain(["--vmprof-inlined"]).collect();
        let run = run_profiled(&path, &flags, "tests/vmprof/leaf.toy", &[n]);
        assert_eq!(run.status, Some(0), "stderr: {}", run.stderr);
        let profile = read_profile(&path).expect("a readable profile");
        let mut in_mix = 0;
        for sample in &profile.samples {
            let stack = names(&profile, &sample.stack);
            assert!(
                ["<main>", "work", "mix"].starts_with(&stack) && !stack.is_empty(),
                "{tier:?}: {stack:?}"
            );
            in_mix += usize::from(stack.len() == 3);
        }
        // `mix` takes a real share of the samples in every tier: its body
        // is a chain of dependent multiplications, so the CPU really spends
        // time between the frame record's push and pop. (With a body of a
        // few cheap instructions, stalls on the record's stores put nearly
        // every sample just outside the frame, and the share depended on
        // code layout: 0-3% after an unrelated change to the loop.)
        // Measured on 2026-11-26, same binary: about 60% interpreted,
        // 25-32% in the default tier, but 9-20% with `--jit-threshold 50`
        // (the OSR variant's loop), before and after that day's change
        // alike; a bound of a tenth failed there once in two full runs.
        // The bound asks for a twentieth: what matters is that the inlined
        // frame is there at all, and an absent frame gives 0.
        // Under qemu-user (aarch64 emulated, `tools/aarch64-tests`) a signal
        // is taken only between translated blocks, never inside one: the
        // inlined frame's push and pop sit in one block of the OSR loop, so
        // no sample can see it there (0 of 1,987). Only the stacks' shape
        // is checked under emulation; real hardware checks the share.
        if common::emulated() {
            continue;
        }
        assert!(
            in_mix * 20 >= profile.samples.len(),
            "{tier:?}: mix on {in_mix} of {} samples",
            profile.samples.len()
        );
    }
}

/// Without `--vmprof-inlined`, compiled code pays nothing per inlined call
/// and the inlined leaf's time counts as its caller's (as perf sees it);
/// the interpreter, which never inlines, still shows it.
#[test]
fn inlined_leaf_callees_count_as_their_caller_by_default() {
    // About 0.2 s of CPU in each tier.
    let tiers = [
        (&["--no-jit"][..], "10000000", true),
        (&["--jit-threshold", "0"][..], "100000000", false),
    ];
    for (tier, n, mix_expected) in tiers {
        let path = temp_path("leaf-default.prof");
        let run = run_profiled(&path, tier, "tests/vmprof/leaf.toy", &[n]);
        assert_eq!(run.status, Some(0), "stderr: {}", run.stderr);
        let profile = read_profile(&path).expect("a readable profile");
        assert!(
            profile.samples.len() > 20,
            "{tier:?}: {} samples",
            profile.samples.len()
        );
        let mut in_work = 0;
        let mut in_mix = 0;
        for sample in &profile.samples {
            let stack = names(&profile, &sample.stack);
            assert!(
                ["<main>", "work", "mix"].starts_with(&stack),
                "{tier:?}: {stack:?}"
            );
            in_work += usize::from(stack.len() >= 2);
            in_mix += usize::from(stack.len() == 3);
        }
        assert!(
            in_work * 10 >= profile.samples.len() * 9,
            "{tier:?}: work on {in_work}"
        );
        if mix_expected {
            assert!(
                in_mix * 5 >= profile.samples.len(),
                "{tier:?}: mix on {in_mix}"
            );
        } else {
            assert_eq!(in_mix, 0, "{tier:?}: the inlined mix has no frame");
        }
    }
}

#[test]
fn samples_on_the_compiler_thread_are_the_compiler_frame_under_main() {
    // Many functions that tier up at once, compiled on the background
    // thread while `<main>` keeps interpreting: the compiler thread is
    // sampled too (its own CPU clock), so some samples land on it. They must carry only
    // `<main>` (the one root every sample shares) and the `<jit compiler>`
    // frame, named in the metadata.
    let mut src = String::new();
    for k in 0..300 {
        src.push_str(&format!(
            "fn f{k}(n: int) -> int {{ let s = {k}; for i in 0..n {{ s = (s * 7 + i) % 10007; }} return s; }}\n"
        ));
    }
    src.push_str("let t = 0;\nfor r in 0..20 {\n");
    for k in 0..300 {
        src.push_str(&format!("    t = (t + f{k}(200 + r)) % 10007;\n"));
    }
    src.push_str("}\nprint(t);\n");
    let script = temp_path("many.toy");
    std::fs::write(&script, src).expect("write script");
    let path = temp_path("many.prof");
    let run = run_profiled(
        &path,
        // Every 100 us: the compiler thread's 3-6 ms of CPU give it 30-60
        // samples (at the default 1 ms, 3-6, and the full suite once saw none).
        &[
            "--jit-threshold",
            "2",
            "--jit-background",
            "--vmprof-interval-us",
            "100",
        ],
        script.to_str().expect("utf-8"),
        &[],
    );
    assert_eq!(run.status, Some(0), "stderr: {}", run.stderr);
    let profile = read_profile(&path).expect("a readable profile");
    assert_eq!(
        profile.meta_value("compiler_thread_frame"),
        Some("<jit compiler>")
    );
    let compiler = "jit:<jit compiler>:0:-";
    let mut compiler_threads = std::collections::HashSet::new();
    let mut toy_threads = std::collections::HashSet::new();
    for sample in &profile.samples {
        let names: Vec<&str> = (sample.stack.iter())
            .map(|&id| profile.name(id).expect("every id is named"))
            .collect();
        if names.contains(&compiler) {
            assert!(
                names.len() == 2 && names[0].starts_with("toy:<main>:") && names[1] == compiler,
                "a compiler sample is <main> -> <jit compiler>, nothing else: {names:?}"
            );
            compiler_threads.insert(sample.thread);
        } else {
            assert!(names.iter().all(|n| n.starts_with("toy:")), "{names:?}");
            toy_threads.insert(sample.thread);
        }
    }
    assert!(
        compiler_threads.is_disjoint(&toy_threads),
        "a thread has both compiler and Toy samples"
    );
    // 300 compiles take far more than a sampling interval of the compiler
    // thread's CPU: its own clock (it joins the sampler's threads) sees it.
    assert!(
        !compiler_threads.is_empty(),
        "no sample on the compiler thread"
    );
    eprintln!(
        "vmprof compiler thread: {} samples, {} on the compiler thread",
        profile.samples.len(),
        (profile.samples.iter())
            .filter(|s| compiler_threads.contains(&s.thread))
            .count()
    );
}
