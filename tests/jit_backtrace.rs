//! The `.eh_frame` of compiled code is registered with the system unwinder:
//! a Rust backtrace taken in a runtime helper called from JIT code walks
//! through the JIT frames up to `main` (without the registration it stops
//! at the first JIT frame).

mod common;

#[test]
fn rust_backtrace_from_a_helper_reaches_main_through_jit_frames() {
    let dir = std::env::temp_dir().join(format!("toyvm-jit-bt-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let script = dir.join("bt.toy");
    std::fs::write(
        &script,
        "fn leaf(n: int) -> int {\n    print(n);\n    return n;\n}\nfn mid(n: int) -> int {\n    return leaf(n) + 1;\n}\nprint(mid(41));\n",
    )
    .expect("write script");
    let path = script.to_string_lossy().into_owned();
    let run = common::toyvm_in(
        &common::repo_root(),
        &["run", "--jit-threshold", "0", &path],
        &[("TOYVM_JIT_BACKTRACE", "1"), ("RUST_BACKTRACE", "0")],
    );
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(run.status, Some(0), "{}", run.stderr);
    assert_eq!(run.stdout, "41\n42\n");
    let first = run
        .stderr
        .split("\n\n")
        .next()
        .expect("a backtrace on stderr");
    let frames: Vec<&str> = first
        .lines()
        .filter_map(|l| l.trim().split_once(": ").map(|(_, name)| name))
        .collect();
    let at = |name: &str| {
        frames
            .iter()
            .position(|f| *f == name || f.ends_with(&format!("::{name}")))
    };
    let helper = at("toy_jit_slow_op").unwrap_or_else(|| panic!("no helper frame:\n{first}"));
    let run_main = at("run_main").unwrap_or_else(|| panic!("stops in JIT code:\n{first}"));
    let main = at("main").unwrap_or_else(|| panic!("does not reach main:\n{first}"));
    // leaf, mid, <main> and its entry shim are compiled frames in between.
    assert!(helper + 3 < run_main && run_main < main, "{first}");
}
