//! The compile budget (`jit/src/translate/limits.rs`): functions too large to compile
//! in bounded time and memory stay interpreted, with the same output in
//! every tier. Each shape used to make Cranelift's compile time and memory
//! explode (issue 11.3); here it is generated just over the budget, and
//! `--jit-stats` must say the function was not compiled.

mod common;

use std::path::PathBuf;

/// Writes `source` to a fresh temporary script; returns (dir, path).
fn script(name: &str, source: &str) -> (PathBuf, String) {
    let dir = std::env::temp_dir().join(format!("toyvm-jit-limits-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join(format!("{name}.toy"));
    std::fs::write(&path, source).expect("write script");
    let text = path.to_string_lossy().into_owned();
    (dir, text)
}

/// Runs `source` interpreted, in the default tier and at
/// `--jit-threshold 0` (all with `--jit-stats`); asserts the same output
/// and success everywhere, that no tier compiled `func`, and that
/// `--jit-stats` says it refused to (in the default tier only if `hot`:
/// a function that never gets hot is never considered).
fn assert_stays_interpreted(name: &str, source: &str, func: &str, hot: bool) {
    let (dir, path) = script(name, source);
    let interp = common::toyvm(&["run", "--no-jit", &path]);
    let default = common::toyvm(&["run", "--jit-stats", &path]);
    let eager = common::toyvm(&["run", "--jit-threshold", "0", "--jit-stats", &path]);
    let _ = std::fs::remove_dir_all(dir);
    assert_eq!(interp.status, Some(0), "{}", interp.stderr);
    assert!(!interp.stdout.is_empty());
    let refused = format!("jit-stats: {func}: not compiled: ");
    for (tier, run, considered) in [
        ("default", &default, hot),
        ("--jit-threshold 0", &eager, true),
    ] {
        assert_eq!(run.status, Some(0), "{tier}: {}", run.stderr);
        assert_eq!(run.stdout, interp.stdout, "{tier}");
        assert!(
            !considered || run.stderr.lines().any(|l| l.starts_with(&refused)),
            "{tier}: {func} was compiled:\n{}",
            run.stderr
        );
        assert!(
            !run.stderr
                .lines()
                .any(|l| l.starts_with(&format!("jit-stats: {func}: ")) && l.ends_with(" us")),
            "{tier}: {func} was compiled:\n{}",
            run.stderr
        );
    }
}

#[test]
fn a_huge_straight_line_main_stays_interpreted() {
    // 2,500 lines already took 60 MB to compile; memory grew quadratically.
    let mut src = String::from("let x = 1;\nlet y = 2;\n");
    for k in 0..3000 {
        if k % 2 == 0 {
            src.push_str(&format!("x = (x * {} + y) & 16777215;\n", k % 13 + 3));
        } else {
            src.push_str(&format!("y = (y + x + {k}) & 16777215;\n"));
        }
    }
    src.push_str("print(x + y);\n");
    assert_stays_interpreted("huge_main", &src, "<main>", false);
}

#[test]
fn a_hot_function_with_thousands_of_calls_stays_interpreted() {
    // `step` is no inlinable leaf (it branches): every call stays a call.
    let mut src = String::from(
        "fn step(x: int) -> int {\n    if x % 2 == 0 { return x / 2 + 7; }\n    return x * 3 + 1;\n}\n\
         fn many(x0: int) -> int {\n    let x = x0;\n",
    );
    for _ in 0..3000 {
        src.push_str("    x = step(x) & 1048575;\n");
    }
    src.push_str(
        "    return x;\n}\nlet t = 0;\nfor r in 0..1100 { t = (t + many(r)) & 1048575; }\nprint(t);\n",
    );
    assert_stays_interpreted("many_calls", &src, "many", true);
}

#[test]
fn a_huge_array_literal_stays_interpreted() {
    let elements: Vec<String> = (0..20_000).map(|k| (k * 7 % 1000).to_string()).collect();
    let src = format!(
        "let a = [{}];\nlet s = 0;\nfor i in 0..len(a) {{ s = s + a[i]; }}\nprint(s);\n",
        elements.join(", ")
    );
    assert_stays_interpreted("array_literal", &src, "<main>", true);
}

#[test]
fn a_function_within_the_budget_is_still_compiled() {
    let mut src = String::from("fn mid(x0: int) -> int {\n    let x = x0;\n");
    for k in 0..200 {
        src.push_str(&format!("    x = (x * 3 + {k}) & 65535;\n"));
    }
    src.push_str("    return x;\n}\nprint(mid(1));\n");
    let (dir, path) = script("mid", &src);
    let eager = common::toyvm(&["run", "--jit-threshold", "0", "--jit-stats", &path]);
    let interp = common::toyvm(&["run", "--no-jit", &path]);
    let _ = std::fs::remove_dir_all(dir);
    assert_eq!(eager.status, Some(0), "{}", eager.stderr);
    assert_eq!(eager.stdout, interp.stdout);
    assert!(
        eager
            .stderr
            .lines()
            .any(|l| l.starts_with("jit-stats: mid: ") && l.ends_with(" us")),
        "{}",
        eager.stderr
    );
}
