//! Compiled code never overflows the native stack (issue 11.1): deep
//! recursion of a function with a large compiled frame gives the same
//! result, or the same depth error, in every tier. It used to die with
//! SIGSEGV in the JIT tiers: the run thread's stack was sized for
//! interpreted frames (512 bytes per call), a compiled frame with 130
//! live locals is about 2 KB, and compiled code never checked the stack.

mod common;

use std::path::PathBuf;

/// Writes `source` to a fresh temporary script; returns (dir, path).
fn script(name: &str, source: &str) -> (PathBuf, String) {
    let dir = std::env::temp_dir().join(format!("toyvm-jit-stack-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join(format!("{name}.toy"));
    std::fs::write(&path, source).expect("write script");
    let text = path.to_string_lossy().into_owned();
    (dir, text)
}

/// A function with `locals` locals, all live across its recursive call
/// (so each is spilled to the compiled frame), recursing `depth` deep.
fn wide_recursion(locals: usize, depth: usize) -> String {
    let mut src = String::from("fn r(a: [int], n: int) -> int {\n");
    for k in 0..locals {
        src.push_str(&format!("    let v{k} = a[{k}];\n"));
    }
    src.push_str("    if n == 0 { return 0; }\n    let s = r(a, n - 1);\n");
    for k in 0..locals {
        src.push_str(&format!("    s = (s + v{k}) % 1000003;\n"));
    }
    src.push_str("    return s;\n}\n");
    src.push_str(&format!(
        "let a = [0; {locals}];\nfor i in 0..{locals} {{ a[i] = i * 7 + 1; }}\nprint(\"start\");\nprint(r(a, {depth}));\n"
    ));
    src
}

const TIERS: [(&str, &[&str]); 3] = [
    ("interpreter", &["--no-jit"]),
    ("default", &[]),
    ("--jit-threshold 0", &["--jit-threshold", "0"]),
];

/// Runs `source` in every tier with `extra` flags; returns the runs.
fn every_tier(name: &str, source: &str, extra: &[&str]) -> Vec<(&'static str, common::ToyRun)> {
    let (dir, path) = script(name, source);
    let runs = TIERS
        .iter()
        .map(|(tier, flags)| {
            let mut args = vec!["run"];
            args.extend_from_slice(flags);
            args.extend_from_slice(extra);
            args.push(&path);
            (*tier, common::toyvm(&args))
        })
        .collect();
    let _ = std::fs::remove_dir_all(dir);
    runs
}

#[test]
fn deep_recursion_with_a_large_frame_succeeds_in_every_tier() {
    // `<main>` is frame 1: 9,990 more frames stay within the default 10,000.
    let runs = every_tier("wide_ok", &wide_recursion(130, 9990), &[]);
    let interp = &runs[0].1;
    assert_eq!(interp.status, Some(0), "{}", interp.stderr);
    assert!(interp.stdout.starts_with("start\n"));
    for (tier, run) in &runs {
        assert_eq!(run.status, Some(0), "{tier}: {}", run.stderr);
        assert_eq!(run.stdout, interp.stdout, "{tier}");
        assert_eq!(run.stderr, "", "{tier}");
    }
}

#[test]
fn recursion_over_the_depth_limit_fails_the_same_in_every_tier() {
    let runs = every_tier("wide_over", &wide_recursion(130, 20_000), &[]);
    let interp = &runs[0].1;
    assert_eq!(interp.status, Some(1), "{}", interp.stderr);
    assert!(interp.stderr.contains("depth"), "{}", interp.stderr);
    for (tier, run) in &runs {
        assert_eq!(run.status, Some(1), "{tier}: {}", run.stderr);
        assert_eq!(
            run.stdout, "start\n",
            "{tier}: output before the error is kept"
        );
        assert_eq!(run.stderr, interp.stderr, "{tier}");
    }
}

#[test]
fn a_raised_depth_limit_is_met_in_every_tier() {
    // With `--max-depth` raised, the stack is sized for it: 60,000 compiled
    // frames of about 1.1 KB (65 MB) used to overflow the 55 MB sized for
    // 100,000 interpreted frames ("has overflowed its stack", or SIGSEGV).
    let runs = every_tier(
        "wide_deep",
        &wide_recursion(130, 60_000),
        &["--max-depth", "100000"],
    );
    let interp = &runs[0].1;
    assert_eq!(interp.status, Some(0), "{}", interp.stderr);
    for (tier, run) in &runs {
        assert_eq!(run.status, Some(0), "{tier}: {}", run.stderr);
        assert_eq!(run.stdout, interp.stdout, "{tier}");
    }
}
