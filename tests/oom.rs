//! Allocation failure is the runtime error `out of memory`, never an abort
//! (issue 11, item 4): with the usual traceback, identical in every tier,
//! after the output already printed; `--max-heap SIZE` bounds the heap,
//! and the default bound (a fraction of the machine) stops blow-ups too.

mod common;

use std::path::PathBuf;

/// The three tiers: interpreter, compile everything first, tier up.
const TIERS: [&[&str]; 3] = [&["--no-jit"], &["--jit-threshold", "0"], &[]];

/// A private directory of scripts (removed on drop).
struct Scripts {
    dir: PathBuf,
}

impl Scripts {
    fn new(name: &str) -> Scripts {
        let dir = std::env::temp_dir().join(format!("toyvm-oom-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("scripts dir");
        Scripts { dir }
    }

    /// Writes `s.toy` and runs it in every tier with `flags` before it.
    fn run_all_tiers(&self, source: &str, flags: &[&str]) -> Vec<common::ToyRun> {
        std::fs::write(self.dir.join("s.toy"), source).expect("script");
        TIERS
            .iter()
            .map(|tier| {
                let mut args = vec!["run"];
                args.extend_from_slice(tier);
                args.extend_from_slice(flags);
                args.push("s.toy");
                common::toyvm_in(&self.dir, &args, &[])
            })
            .collect()
    }
}

impl Drop for Scripts {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Runs `source` in every tier and checks the outcome: exit status 1, the
/// given stdout, and exactly the given stderr (message and traceback).
fn expect_oom(name: &str, source: &str, flags: &[&str], stdout: &str, stderr: &str) {
    let scripts = Scripts::new(name);
    for (run, tier) in scripts.run_all_tiers(source, flags).iter().zip(TIERS) {
        let what = format!("{name}, tier {tier:?}, flags {flags:?}");
        assert_eq!(run.status, Some(1), "{what}: {run:?}");
        assert_eq!(run.stdout, stdout, "{what}");
        assert_eq!(run.stderr, stderr, "{what}");
    }
}

#[test]
fn a_nested_repeat_beyond_the_limit_is_out_of_memory() {
    expect_oom(
        "repeat",
        "print(\"before\");\nlet a = [[0; 100000]; 100000];\nprint(len(a));\n",
        &["--max-heap", "64M"],
        "before\n",
        "error: out of memory\n  at <main> (s.toy:2:9)\n",
    );
}

#[test]
fn the_default_limit_stops_a_blow_up_too() {
    // 8 TB: beyond any machine's default (half its memory).
    expect_oom(
        "default",
        "print(\"before\");\nlet a = [[0; 1000000]; 1000000];\nprint(len(a));\n",
        &[],
        "before\n",
        "error: out of memory\n  at <main> (s.toy:2:9)\n",
    );
}

#[test]
fn string_doubling_is_out_of_memory_with_a_traceback() {
    expect_oom(
        "concat",
        "fn grow(s: str) -> str {\n    while true { s = s + s; }\n    return s;\n}\n\
         print(\"start\");\nprint(len(grow(\"ab\")));\n",
        &["--max-heap", "64M"],
        "start\n",
        "error: out of memory\n  at grow (s.toy:2:24)\n  at <main> (s.toy:6:11)\n",
    );
}

#[test]
fn deep_copies_beyond_the_limit_are_out_of_memory() {
    // `[row; n]` copies `row` n times: 8 MB each.
    expect_oom(
        "deep_copy",
        "let row = [0; 1000000];\nprint(len(row));\nlet g = [row; 100000];\nprint(len(g));\n",
        &["--max-heap", "256M"],
        "1000000\n",
        "error: out of memory\n  at <main> (s.toy:3:9)\n",
    );
}

#[test]
fn deep_copies_of_nested_arrays_are_bounded() {
    // Each copy of `grid` is 100 rows: the bound counts every level.
    expect_oom(
        "deep_copy_nested",
        "fn copies(grid: [[int]], n: int) -> int {\n    let g = [grid; n];\n    return len(g);\n}\n\
         let grid = [[7; 10000]; 100];\nprint(copies(grid, 10));\nprint(copies(grid, 1000));\n",
        &["--max-heap", "128M"],
        "10\n",
        "error: out of memory\n  at copies (s.toy:2:13)\n  at <main> (s.toy:7:7)\n",
    );
}

#[test]
fn pushing_forever_is_out_of_memory() {
    expect_oom(
        "push",
        "let a: [int] = [];\nprint(1);\nwhile true { push(a, 1); }\n",
        &["--max-heap", "32M"],
        "1\n",
        "error: out of memory\n  at <main> (s.toy:3:14)\n",
    );
}

#[test]
fn garbage_is_collected_before_the_limit_is_reached() {
    // 2,000 arrays of 800 KB (1.6 GB in all), one live at a time, and
    // strings that double up to 8 MB and are then dropped: the limit is
    // never reached because collections make room first. (The previous
    // `copy` stays rooted in its register while the next one is built.)
    let scripts = Scripts::new("garbage");
    let source = "\
let t = 0;
for i in 0..2000 { let s = [i; 100000]; t += len(s); }
print(t);
for r in 0..20 {
    let s = \"ab\";
    while len(s) < 8000000 { s = s + s; }
    t += len(s);
}
print(t);
let grid = [[1; 1000]; 1000];
for r in 0..10 { let copy = [grid; 2]; t += len(copy); }
print(t);
";
    for (run, tier) in scripts
        .run_all_tiers(source, &["--max-heap", "48M"])
        .iter()
        .zip(TIERS)
    {
        assert_eq!(run.status, Some(0), "tier {tier:?}: {run:?}");
        assert_eq!(
            run.stdout, "200000000\n367772160\n367772180\n",
            "tier {tier:?}"
        );
    }
}

#[test]
fn max_heap_sizes_are_checked() {
    let scripts = Scripts::new("flags");
    std::fs::write(scripts.dir.join("s.toy"), "print(1);\n").expect("script");
    for good in ["512M", "4G", "1048576", "64k"] {
        let run = common::toyvm_in(&scripts.dir, &["run", "--max-heap", good, "s.toy"], &[]);
        assert_eq!(
            (run.status, run.stdout.as_str()),
            (Some(0), "1\n"),
            "{good}"
        );
    }
    for bad in ["0", "12Q", "-1G", "", "1.5G"] {
        let flag = format!("--max-heap={bad}");
        let run = common::toyvm_in(&scripts.dir, &["run", &flag, "s.toy"], &[]);
        assert_eq!(run.status, Some(2), "{bad:?}: {run:?}");
        assert!(run.stderr.contains("--max-heap"), "{bad:?}: {}", run.stderr);
        assert!(!run.stderr.contains("panicked"), "{bad:?}: {}", run.stderr);
    }
}
