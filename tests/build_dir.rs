//! Cargo may build anywhere (`CARGO_TARGET_DIR`, a Cargo config's
//! `build.target-dir`): the tests, the book's generator, the benchmark
//! scripts and the C examples' build lines find toyvm, its examples and
//! libperfsupport where Cargo put them, never under an assumed `target/`.
//!
//! Each path is derived: tests from the path Cargo gives them
//! (`CARGO_BIN_EXE_toyvm`, or their own executable's directory,
//! `common::release_dir`), scripts from `tools/cargo-target-dir`. This test
//! proves it instead of running the whole suite a second time with
//! `CARGO_TARGET_DIR` elsewhere: `tools/cargo-target-dir` follows the
//! variable, `release_dir` is where this very test was built, and no
//! file that runs or builds something names `target/release` itself.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

#[test]
fn the_scripts_ask_cargo_where_it_builds() {
    let tool = common::repo_root().join("tools/cargo-target-dir");
    let elsewhere = std::env::temp_dir().join("toyvm-build-dir-probe");
    let out = Command::new(&tool)
        .env("CARGO_TARGET_DIR", &elsewhere)
        .output()
        .expect("run tools/cargo-target-dir");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        elsewhere.display().to_string()
    );
}

#[test]
fn the_tests_find_what_cargo_built_beside_them() {
    let release = common::release_dir();
    let toyvm = Path::new(env!("CARGO_BIN_EXE_toyvm"));
    assert_eq!(
        toyvm.parent(),
        Some(release.as_path()),
        "toyvm is beside deps/"
    );
    assert!(release.join("examples/embed").exists(), "the embed example");
    for lib in ["libperfsupport.a", "libperfsupport.so"] {
        assert!(release.join(lib).exists(), "{lib} in {}", release.display());
    }
}

/// The files that run or build something: tests, scripts, benchmarks,
/// examples, CI.
fn runnable_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read dir") {
        let path = entry.expect("entry").path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if path.is_dir() {
            if ![
                "target",
                ".git",
                "node_modules",
                "generated",
                "corpus",
                "seeds",
            ]
            .contains(&name.as_str())
            {
                runnable_files(&path, out);
            }
        } else if [".rs", ".sh", ".py", ".c", ".h", ".toml"]
            .iter()
            .any(|ext| name.ends_with(ext))
            || name == "run"
            || name == "cargo-target-dir"
        {
            out.push(path);
        }
    }
}

#[test]
fn no_file_that_runs_or_builds_assumes_target_release() {
    let root = common::repo_root();
    let mut files = Vec::new();
    for dir in [
        "tests",
        "bench",
        "book",
        "examples",
        "tools",
        ".ci",
        "fuzz",
        "src",
        "vm",
        "jit",
        "perfsupport",
        "perfsupport-capi",
    ] {
        runnable_files(&root.join(dir), &mut files);
    }
    assert!(files.len() > 100, "found {} files", files.len());
    let this = file!().rsplit('/').next().unwrap();
    let mut bad = Vec::new();
    for path in &files {
        if path.ends_with(this) {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(path) else {
            continue;
        };
        for (n, line) in text.lines().enumerate() {
            if line.contains("target/release") {
                bad.push(format!(
                    "{}:{}: {line}",
                    path.strip_prefix(&root).unwrap().display(),
                    n + 1
                ));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "paths that assume target/:\n{}",
        bad.join("\n")
    );
}
