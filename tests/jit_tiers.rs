//! Tier-up behaviour seen from the command line: which flags compile what
//! (through `--jit-stats`), OSR of a loop in a function called once, and
//! the depth limit at an inlined call.

mod common;

use std::path::PathBuf;

/// Writes `source` to a fresh temporary script and returns its path.
fn script(name: &str, source: &str) -> (PathBuf, String) {
    let dir = std::env::temp_dir().join(format!("toyvm-jit-tiers-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join(format!("{name}.toy"));
    std::fs::write(&path, source).expect("write script");
    let text = path.to_string_lossy().into_owned();
    (dir, text)
}

const LOOPS: &str = "fn sq(x: int) -> int {\n    return x * x;\n}\nfn sum(n: int) -> int {\n    let s = 0;\n    for i in 0..n { s += sq(i) % 7; }\n    return s;\n}\nprint(sum(20000000));\n";

fn compiled(stderr: &str) -> Vec<String> {
    stderr
        .lines()
        .filter_map(|l| l.strip_prefix("jit-stats: "))
        .map(|l| l.rsplit_once(':').map_or(l, |(name, _)| name).to_string())
        .collect()
}

#[test]
fn flags_choose_what_is_compiled() {
    let (dir, path) = script("flags", LOOPS);
    let never = common::toyvm(&["run", "--no-jit", "--jit-stats", &path]);
    let eager = common::toyvm(&["run", "--jit-threshold", "0", "--jit-stats", &path]);
    let default = common::toyvm(&["run", "--jit-stats", &path]);
    let _ = std::fs::remove_dir_all(dir);
    for run in [&never, &eager, &default] {
        assert_eq!(run.status, Some(0), "{}", run.stderr);
        assert_eq!(run.stdout, never.stdout);
    }
    assert!(compiled(&never.stderr).is_empty(), "{}", never.stderr);
    // Everything, callees first, before anything runs.
    assert_eq!(
        compiled(&eager.stderr),
        ["sq", "sum", "<main>"],
        "{}",
        eager.stderr
    );
    // The default tiering compiles in the background, and a compile still
    // queued when the script ends is dropped: the loop runs about 200 ms
    // interpreted, ten times what the compiles take, so the compiler
    // thread delivers before the script ends on a loaded machine too.
    // `sum` is called once: its loop tiers up through OSR, one compile
    // (the variant, not the whole function too); `sq`, called once per
    // iteration, tiers up by itself at a call; `<main>` never gets hot.
    let tiered = compiled(&default.stderr);
    assert!(
        tiered.iter().any(|n| n == "sum (OSR)"),
        "{}",
        default.stderr
    );
    assert!(!tiered.contains(&"sum".to_string()), "{}", default.stderr);
    assert!(tiered.contains(&"sq".to_string()), "{}", default.stderr);
    assert!(
        !tiered.contains(&"<main>".to_string()),
        "{}",
        default.stderr
    );
}

#[test]
fn the_depth_limit_holds_at_an_inlined_call() {
    // `leaf` is inlined into `down`; at the deepest level its call must
    // still fail exactly like a real call.
    let (dir, path) = script(
        "depth",
        "fn leaf(a: int) -> int { return a * 2 + 1; }\nfn down(n: int) -> int {\n    if n == 0 { return leaf(n); }\n    return down(n - 1) + 1;\n}\nprint(down(5));\nprint(down(20));\n",
    );
    let runs: Vec<_> = [["--no-jit"], ["--jit-threshold=0"], ["--jit-threshold=2"]]
        .iter()
        .map(|tier| common::toyvm(&["run", tier[0], "--max-depth", "22", &path]))
        .collect();
    let _ = std::fs::remove_dir_all(dir);
    assert_eq!(runs[0].status, Some(1));
    assert_eq!(runs[0].stdout, "6\n");
    assert!(
        runs[0]
            .stderr
            .starts_with("error: call depth exceeded the limit of 22 frames\n  at down ("),
        "{}",
        runs[0].stderr
    );
    assert!(runs[0].stderr.contains(":3:24)\n"), "{}", runs[0].stderr);
    for run in &runs[1..] {
        assert_eq!(
            (run.status, &run.stdout, &run.stderr),
            (runs[0].status, &runs[0].stdout, &runs[0].stderr)
        );
    }
}

#[test]
fn profiler_files_that_cannot_be_opened_are_reported_once_and_the_run_goes_on() {
    let (dir, path) = script("noperf", "print(1 + 2);\n");
    let missing = dir.join("no-such-dir");
    let missing = missing.to_string_lossy().into_owned();
    let run = common::toyvm(&["run", "--perf-jitdump", "--perf-dir", &missing, &path]);
    let _ = std::fs::remove_dir_all(dir);
    assert_eq!(run.status, Some(0));
    assert_eq!(run.stdout, "3\n");
    assert_eq!(run.stderr.lines().count(), 1, "{}", run.stderr);
    assert!(
        run.stderr.contains("cannot write the jitdump"),
        "{}",
        run.stderr
    );
}

#[test]
fn entry_shims_are_built_on_the_first_entry_table_call() {
    // `f` tiers up at its third call and takes `g`, which already ran, into
    // its batch: `g` gets only its native function (`f` calls it
    // directly). Then the interpreted `<main>` calls `g` through the entry
    // table, which builds `g`'s shim; `<main>` never tiers up (no loop,
    // one call).
    let (dir, path) = script(
        "lazy_shim",
        "fn g(n: int) -> int {\n    let s = 0;\n    for i in 0..n { s += i; }\n    return s;\n}\nfn f(x: int) -> int { return g(0) + x; }\nlet t = f(1) + f(2) + f(3) + f(4);\nt += g(10);\nprint(t);\n",
    );
    let plain = common::toyvm(&["run", "--no-jit", &path]);
    let run = common::toyvm(&["run", "--jit-threshold", "2", "--jit-stats", &path]);
    let _ = std::fs::remove_dir_all(dir);
    assert_eq!((plain.status, plain.stdout.as_str()), (Some(0), "55\n"));
    assert_eq!(run.status, Some(0), "{}", run.stderr);
    assert_eq!(run.stdout, plain.stdout);
    assert_eq!(
        compiled(&run.stderr),
        ["g", "f", "g (entry shim)"],
        "{}",
        run.stderr
    );
}

#[test]
fn the_depth_limit_holds_where_compiled_code_is_entered() {
    // A compiled function's depth check leaves the error to whoever
    // receives its status: compiled `g` (threshold 0 and 2), or, by
    // default, the entry shim of `f` (hot at its calls in `<main>`'s
    // loop), called by `g`, which stays interpreted. `<main>`'s loop runs
    // about 200 ms interpreted, so the background compile of `f` lands
    // before it ends on a loaded machine too.
    let (dir, path) = script(
        "depth_entry",
        "fn f(x: int) -> int { let a = [x]; return a[0]; }\nfn g(n: int) -> int { if n == 0 { return f(7); } return g(n - 1) + 0; }\nlet t = 0;\nfor i in 0..3000000 { t += f(i); }\nprint(t);\nprint(g(27));\nprint(g(28));\n",
    );
    // The last run uses the default threshold.
    let tiers: [&[&str]; 4] = [
        &["--no-jit"],
        &["--jit-threshold=0"],
        &["--jit-threshold=2"],
        &[],
    ];
    let runs: Vec<_> = tiers
        .iter()
        .map(|tier| {
            let mut args = vec!["run"];
            args.extend_from_slice(tier);
            args.extend_from_slice(&["--jit-stats", "--max-depth", "30", &path]);
            common::toyvm(&args)
        })
        .collect();
    let _ = std::fs::remove_dir_all(dir);
    let errors = |stderr: &str| -> String {
        stderr
            .lines()
            .filter(|l| !l.starts_with("jit-stats: "))
            .map(|l| format!("{l}\n"))
            .collect()
    };
    assert_eq!(runs[0].status, Some(1));
    assert_eq!(runs[0].stdout, "4499998500000\n7\n");
    assert!(
        errors(&runs[0].stderr)
            .starts_with("error: call depth exceeded the limit of 30 frames\n  at g ("),
        "{}",
        runs[0].stderr
    );
    for run in &runs[1..] {
        assert_eq!(
            (run.status, &run.stdout, errors(&run.stderr)),
            (runs[0].status, &runs[0].stdout, errors(&runs[0].stderr))
        );
    }
    let default = compiled(&runs[3].stderr);
    assert!(
        default.contains(&"f".to_string()) && !default.contains(&"g".to_string()),
        "{}",
        runs[3].stderr
    );
}
