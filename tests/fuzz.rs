//! The cargo-fuzz targets (`fuzz/`) build and run for a bounded time
//! without finding a crash.
//!
//! A fuzz crate that nobody builds rots: `differential` stopped compiling
//! when the JIT gained an option, and nothing noticed. So CI builds every
//! target and runs each for [`SECONDS`] seconds (`fuzz/README.md` gives the
//! command for longer runs). `cargo fuzz` wants nightly flags; on the
//! stable toolchain `RUSTC_BOOTSTRAP=1` allows them, and `--sanitizer
//! none` keeps the build independent of sanitizer runtimes (the targets
//! check behaviour, and Rust code has no undefined behaviour to catch
//! outside `unsafe`, which has its own tests).
//!
//! Needs `cargo fuzz` (`cargo install --locked cargo-fuzz`): skipped
//! loudly without it, except under `CI=true`, where `.ci/run` installs it.

mod common;

use std::process::Command;

/// How long each target runs in the test.
const SECONDS: u32 = 30;

/// Every target of `fuzz/Cargo.toml`.
const TARGETS: [&str; 7] = [
    "front_end",
    "profile_reader",
    "differential",
    "bytecode",
    "capi_arguments",
    "jitdump_reader",
    "code_limit",
];

fn cargo_fuzz(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO"))
        .arg("fuzz")
        .args(args)
        .current_dir(common::repo_root().join("fuzz"))
        .env("RUSTC_BOOTSTRAP", "1")
        .output()
        .expect("run cargo fuzz")
}

#[test]
fn every_fuzz_target_builds_and_runs_without_a_crash() {
    if !common::tool_or_skip("fuzz", env!("CARGO"), &["fuzz", "--version"]) {
        return;
    }
    let build = cargo_fuzz(&["build", "-O", "--sanitizer", "none"]);
    assert!(
        build.status.success(),
        "cargo fuzz build:\n{}",
        String::from_utf8_lossy(&build.stderr)
    );
    for target in TARGETS {
        let time = format!("-max_total_time={SECONDS}");
        let mut args = vec!["run", "-O", "--sanitizer", "none", target];
        // Committed seeds (fuzz/seeds/TARGET, e.g. a real jitdump) start
        // the run past the magic numbers; the corpus is the fuzzer's own.
        let fuzz = common::repo_root().join("fuzz");
        let (corpus, seeds) = (format!("corpus/{target}"), format!("seeds/{target}"));
        if fuzz.join(&seeds).is_dir() {
            std::fs::create_dir_all(fuzz.join(&corpus)).expect("corpus directory");
            args.extend([corpus.as_str(), seeds.as_str()]);
        }
        args.extend(["--", &time, "-print_final_stats=1"]);
        let run = cargo_fuzz(&args);
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert!(
            run.status.success(),
            "{target}: a crash (the input is saved under fuzz/artifacts/{target}/):\n{}",
            stderr.lines().rev().take(60).collect::<Vec<_>>().join("\n")
        );
        // libFuzzer's summary: the run really executed inputs.
        let executed = stderr
            .lines()
            .find_map(|l| l.strip_prefix("stat::number_of_executed_units:"))
            .and_then(|n| n.trim().parse::<u64>().ok())
            .unwrap_or(0);
        assert!(executed > 100, "{target}: {executed} inputs run:\n{stderr}");
        eprintln!("fuzz {target}: {executed} inputs in {SECONDS} s");
    }
}
