//! The `toyvm` command line: subcommands, options, and robustness against
//! hostile input files (LANGUAGE.md, "Runtime errors": never a panic, crash or hang).

mod common;

use std::path::PathBuf;

use common::{ToyRun, toyvm};

/// Writes `contents` to a fresh file in Cargo's per-test temp dir.
fn temp_script(name: &str, contents: &[u8]) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cli");
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join(name);
    std::fs::write(&path, contents).expect("write temp script");
    path
}

fn run_file(path: &std::path::Path, extra: &[&str]) -> ToyRun {
    let path = path.to_str().expect("utf-8 temp path");
    let mut argv = vec!["run"];
    argv.extend_from_slice(extra);
    argv.push(path);
    toyvm(&argv)
}

/// A clean failure: exit status 1, a message on stderr, no Rust panic.
fn assert_clean_error(run: &ToyRun, needle: &str) {
    assert_eq!(run.status, Some(1), "stderr: {}", run.stderr);
    assert!(
        run.stderr.contains(needle),
        "stderr lacks {needle:?}: {}",
        run.stderr
    );
    assert!(!run.stderr.contains("panicked"), "panic: {}", run.stderr);
}

#[test]
fn version_and_help() {
    let version = toyvm(&["--version"]);
    assert_eq!(version.status, Some(0));
    assert_eq!(
        version.stdout.trim(),
        format!("toyvm {}", env!("CARGO_PKG_VERSION"))
    );

    let help = toyvm(&["--help"]);
    assert_eq!(help.status, Some(0));
    for word in ["run", "check", "disasm"] {
        assert!(
            help.stdout.contains(word),
            "--help lacks {word}: {}",
            help.stdout
        );
    }
    let run_help = toyvm(&["run", "--help"]);
    for flag in ["--no-jit", "--jit-threshold", "--max-depth"] {
        assert!(run_help.stdout.contains(flag), "run --help lacks {flag}");
    }
}

#[test]
fn run_passes_arguments_after_the_script() {
    let script = temp_script("args.toy", b"print(args());\nprint(len(args()));\n");
    let run = run_file(&script, &[]);
    assert_eq!(run.stdout, "[]\n0\n");
    let path = script.to_str().unwrap();
    let run = toyvm(&["run", "--no-jit", path, "10", "--flag", "x y"]);
    assert_eq!(run.status, Some(0), "{}", run.stderr);
    assert_eq!(run.stdout, "[\"10\", \"--flag\", \"x y\"]\n3\n");
}

#[test]
fn jit_threshold_is_accepted() {
    let script = temp_script("threshold.toy", b"print(1 + 2);\n");
    let path = script.to_str().unwrap();
    for flags in [
        &["--jit-threshold", "0"][..],
        &["--jit-threshold", "1000"],
        &[],
    ] {
        let mut argv = vec!["run"];
        argv.extend_from_slice(flags);
        argv.push(path);
        let run = toyvm(&argv);
        assert_eq!(
            (run.status, run.stdout.as_str()),
            (Some(0), "3\n"),
            "{flags:?}"
        );
    }
    let both = toyvm(&["run", "--no-jit", "--jit-threshold", "5", path]);
    assert_eq!(
        both.status,
        Some(2),
        "--no-jit and --jit-threshold conflict"
    );
}

#[test]
fn missing_script_is_a_clean_error() {
    let run = toyvm(&["run", "no/such/script.toy"]);
    assert_clean_error(&run, "error: cannot read 'no/such/script.toy'");
}

#[test]
fn check_reports_the_first_compile_error_with_a_caret() {
    let ok = temp_script(
        "check_ok.toy",
        b"fn f(x: int) -> int { return x * 2; }\nprint(f(2));\n",
    );
    let run = toyvm(&["check", ok.to_str().unwrap()]);
    assert_eq!(
        (run.status, run.stdout.as_str()),
        (Some(0), ""),
        "{}",
        run.stderr
    );

    let bad = temp_script(
        "check_bad.toy",
        b"let x = 1;\nlet y = x + 2.5;\nprint(y);\n",
    );
    let path = bad.to_str().unwrap();
    let run = toyvm(&["check", path]);
    assert_clean_error(&run, &format!("{path}:2:13: error: mismatched types"));
    assert!(
        run.stderr.contains("let y = x + 2.5;"),
        "source line: {}",
        run.stderr
    );
    assert!(run.stderr.contains('^'), "caret: {}", run.stderr);
    assert_eq!(run.stdout, "", "nothing runs on a compile error");
}

#[test]
fn disasm_shows_every_function_with_its_source_lines() {
    let script = temp_script(
        "disasm.toy",
        b"fn square(x: int) -> int {\n    return x * x;\n}\nprint(square(7));\n",
    );
    let run = toyvm(&["disasm", script.to_str().unwrap()]);
    assert_eq!(run.status, Some(0), "{}", run.stderr);
    for needle in ["square", "<main>", "return x * x;", "print(square(7));"] {
        assert!(
            run.stdout.contains(needle),
            "disasm lacks {needle:?}:\n{}",
            run.stdout
        );
    }
}

#[test]
fn runtime_error_keeps_earlier_output_and_shows_a_traceback() {
    let script = temp_script(
        "runtime_error.toy",
        b"fn div(a: int, b: int) -> int {\n    return a / b;\n}\nprint(1);\nprint(div(4, 0));\n",
    );
    let path = script.to_str().unwrap();
    let run = run_file(&script, &["--no-jit"]);
    assert_eq!(run.stdout, "1\n");
    assert_clean_error(&run, "error: integer division by zero");
    let expected = format!("  at div ({path}:2:14)\n  at <main> ({path}:5:7)\n");
    assert!(
        run.stderr.ends_with(&expected),
        "traceback:\n{}",
        run.stderr
    );
}

#[test]
fn max_depth_limits_recursion() {
    let script = temp_script(
        "depth.toy",
        b"fn down(n: int) -> int {\n    return down(n + 1);\n}\nprint(down(0));\n",
    );
    let run = run_file(&script, &["--max-depth", "50"]);
    assert_clean_error(&run, "error: call depth exceeded the limit of 50 frames");
    let run = run_file(&script, &[]);
    assert_clean_error(&run, "error: call depth exceeded the limit of 10000 frames");
}

#[test]
fn a_large_max_depth_runs_deep_recursion_without_crashing() {
    let script = temp_script(
        "deep.toy",
        b"fn sum(n: int) -> int {\n    if n == 0 { return 0; }\n    return n + sum(n - 1);\n}\nprint(sum(200000));\n",
    );
    let run = run_file(&script, &["--max-depth", "300000"]);
    assert_eq!(run.status, Some(0), "{}", run.stderr);
    assert_eq!(run.stdout, "20000100000\n");
}

#[test]
fn empty_file_is_an_empty_program() {
    let script = temp_script("empty.toy", b"");
    let run = run_file(&script, &[]);
    assert_eq!(
        (run.status, run.stdout.as_str(), run.stderr.as_str()),
        (Some(0), "", "")
    );
}

#[test]
fn invalid_utf8_is_a_compile_error_with_a_position() {
    let script = temp_script("latin1.toy", b"print(1);\nprint(\"caf\xe9\");\n");
    let path = script.to_str().unwrap();
    let run = run_file(&script, &[]);
    assert_clean_error(&run, &format!("{path}:2:"));
    assert!(run.stderr.contains("UTF-8"), "{}", run.stderr);
    assert_eq!(run.stdout, "");
}

#[test]
fn thousands_of_parentheses_end_cleanly() {
    let depth = 10_000;
    let source = format!("print({}1{});\n", "(".repeat(depth), ")".repeat(depth));
    let script = temp_script("parens.toy", source.as_bytes());
    let run = run_file(&script, &[]);
    // Either a correct run or a clear compile error; never a crash.
    match run.status {
        Some(0) => assert_eq!(run.stdout, "1\n"),
        _ => assert_clean_error(&run, "error: "),
    }
}

#[test]
fn a_20000_term_sum_runs() {
    let source = format!("print({});\n", vec!["1"; 20_000].join(" + "));
    let script = temp_script("chain.toy", source.as_bytes());
    let run = run_file(&script, &[]);
    assert_eq!(
        (run.status, run.stdout.as_str()),
        (Some(0), "20000\n"),
        "{}",
        run.stderr
    );
}

#[test]
fn a_10_mb_file_runs() {
    let mut source = String::from("let s = 0;\n");
    while source.len() < 10 << 20 {
        source.push_str("s = s + 1; // padding padding padding padding padding\n");
    }
    source.push_str("print(s);\n");
    let lines = source.lines().count() - 2;
    let script = temp_script("big.toy", source.as_bytes());
    let run = run_file(&script, &[]);
    assert_eq!(run.status, Some(0), "{}", run.stderr);
    assert_eq!(run.stdout, format!("{lines}\n"));
}

#[test]
fn a_closed_stdout_does_not_panic() {
    let script = temp_script("many_lines.toy", b"for i in 0..200000 { print(i); }\n");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_toyvm"))
        .args(["run", script.to_str().unwrap()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    drop(child.stdout.take()); // the reader goes away at once
    let output = child.wait_with_output().expect("wait");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(
        output.status.code().is_some(),
        "killed by a signal: {:?}",
        output.status
    );
}

/// Runs `sh -c SCRIPT` with `$TOYVM` set to the binary; (status, stdout,
/// stderr).
fn shell(script: &str) -> (Option<i32>, String, String) {
    let out = std::process::Command::new("sh")
        .args(["-c", script])
        .env("TOYVM", env!("CARGO_BIN_EXE_toyvm"))
        .current_dir(common::repo_root())
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run sh");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A script with enough functions that its disassembly fills a pipe.
fn many_functions() -> PathBuf {
    let mut source = String::new();
    for i in 0..600 {
        source.push_str(&format!(
            "fn f{i}(x: int) -> int {{ return x * {i} + 1; }}\n"
        ));
    }
    source.push_str("print(f1(2));\n");
    temp_script("many_functions.toy", source.as_bytes())
}

#[test]
fn disasm_into_a_closed_pipe_ends_quietly() {
    let script = many_functions();
    for jit in [&[][..], &["--jit"]] {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_toyvm"))
            .arg("disasm")
            .args(jit)
            .arg(&script)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn");
        // `| head -1`: read one line, then close the pipe.
        let mut first = [0u8; 1];
        std::io::Read::read_exact(child.stdout.as_mut().unwrap(), &mut first).expect("output");
        drop(child.stdout.take());
        let output = child.wait_with_output().expect("wait");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(0), "{jit:?}: {stderr}");
        assert!(stderr.is_empty(), "{jit:?}: {stderr}");
    }
}

#[test]
fn a_full_disk_or_a_closed_stderr_is_a_clean_failure_never_a_panic() {
    let script = many_functions();
    let bad = temp_script("bad.toy", b"let x = 1 + true;\n");
    let (s, b) = (script.display(), bad.display());
    for (command, status, needle) in [
        // stdout full
        (format!("$TOYVM disasm {s} > /dev/full"), 1, "No space left"),
        (
            format!("$TOYVM disasm --jit {s} > /dev/full"),
            1,
            "No space left",
        ),
        // stderr full or closed: the status says it all
        (format!("$TOYVM check {b} 2>/dev/full"), 1, ""),
        (format!("$TOYVM check {b} 2>&-"), 1, ""),
        (format!("$TOYVM run {b} 2>/dev/full"), 1, ""),
        (format!("$TOYVM check /no/such/file.toy 2>/dev/full"), 1, ""),
        (format!("$TOYVM check /no/such/file.toy 2>&-"), 1, ""),
        (
            format!("$TOYVM report /no/such/file.prof 2>/dev/full"),
            1,
            "",
        ),
        (format!("$TOYVM report /no/such/file.prof 2>&-"), 1, ""),
        (format!("$TOYVM check {s} 2>/dev/full"), 0, ""),
    ] {
        let (code, _, stderr) = shell(&command);
        assert_eq!(code, Some(status), "{command}: {stderr}");
        assert!(stderr.contains(needle), "{command}: {stderr}");
        assert!(!stderr.contains("panicked"), "{command}: {stderr}");
    }
}

#[test]
fn toyvm_flags_after_the_script_are_refused_unless_after_dashes() {
    let script = temp_script("args2.toy", b"print(args());\n");
    let path = script.to_str().unwrap();
    let run = toyvm(&["run", path, "x", "--no-jit"]);
    assert_clean_error(&run, "'--no-jit' comes after the script's arguments");
    assert!(run.stderr.contains("`--`"), "{}", run.stderr);
    let run = toyvm(&["run", path, "x", "--vmprof=a.prof"]);
    assert_clean_error(&run, "'--vmprof=a.prof' comes after the script's arguments");
    let run = toyvm(&["run", path, "--", "x", "--no-jit"]);
    assert_eq!(run.status, Some(0), "{}", run.stderr);
    assert_eq!(run.stdout, "[\"x\", \"--no-jit\"]\n");
    let help = toyvm(&["run", "--help"]);
    assert!(
        help.stdout.contains("toyvm run s.toy -- x --no-jit"),
        "{}",
        help.stdout
    );
}

#[test]
fn max_depth_zero_is_refused_with_the_valid_range() {
    let script = temp_script("depth0.toy", b"print(1);\n");
    let run = toyvm(&["run", "--max-depth", "0", script.to_str().unwrap()]);
    assert_eq!(run.status, Some(2), "{}", run.stderr);
    assert!(run.stderr.contains("--max-depth"), "{}", run.stderr);
    assert!(run.stderr.contains("1.."), "{}", run.stderr);
    assert!(!run.stderr.contains("limit of"), "{}", run.stderr);
}

#[test]
fn an_empty_jitdumpdir_is_not_the_current_directory() {
    let script = temp_script(
        "jitdumpdir.toy",
        b"fn f() -> int { return 1; }\nprint(f());\n",
    );
    let cwd = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cli-empty-jitdumpdir");
    let _ = std::fs::remove_dir_all(&cwd);
    std::fs::create_dir_all(&cwd).unwrap();
    let run = common::toyvm_in(
        &cwd,
        &["run", "--perf-jitdump", script.to_str().unwrap()],
        &[("JITDUMPDIR", "")],
    );
    assert_eq!(run.status, Some(0), "{}", run.stderr);
    let left: Vec<_> = std::fs::read_dir(&cwd).unwrap().flatten().collect();
    assert!(left.is_empty(), "files in the current directory: {left:?}");
    // The jitdump went to /tmp: remove it (only this run's; other tests
    // and other processes may have theirs there).
    let dump = PathBuf::from(format!("/tmp/jit-{}.dump", run.pid));
    assert!(dump.exists(), "no {}", dump.display());
    let _ = std::fs::remove_file(dump);
    // `--perf-dir ''` is refused.
    let run = toyvm(&[
        "run",
        "--perf-jitdump",
        "--perf-dir",
        "",
        script.to_str().unwrap(),
    ]);
    assert_eq!(run.status, Some(2), "{}", run.stderr);
    assert!(run.stderr.contains("the path is empty"), "{}", run.stderr);
}

#[test]
fn warnings_have_one_prefix() {
    let script = temp_script("warn.toy", b"print(1);\n");
    let run = toyvm(&[
        "run",
        "--vmprof",
        "/no/such/dir/p.prof",
        script.to_str().unwrap(),
    ]);
    assert_eq!(run.status, Some(0), "{}", run.stderr);
    assert!(!run.stderr.is_empty());
    for line in run.stderr.lines() {
        assert!(line.starts_with("toyvm: warning: "), "{line}");
    }
}

#[test]
fn a_compile_error_on_a_10_mb_line_prints_a_bounded_excerpt() {
    let mut source = String::from("let x = ");
    source.push_str(&" ".repeat(10 << 20));
    source.push_str("1 + true;\n");
    let script = temp_script("long_line.toy", source.as_bytes());
    let run = toyvm(&["check", script.to_str().unwrap()]);
    assert_clean_error(&run, "mismatched types");
    assert!(
        run.stderr.len() < 2000,
        "{} bytes of stderr",
        run.stderr.len()
    );
    assert!(run.stderr.contains("1 + true;"), "{}", run.stderr);
}

#[test]
fn profile_stops_before_recording_a_script_that_does_not_compile() {
    let bad = temp_script("bad_profile.toy", b"let x = 1 + true;\n");
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cli-profile-bad");
    let _ = std::fs::remove_dir_all(&out);
    let run = toyvm(&[
        "profile",
        "--out",
        out.to_str().unwrap(),
        bad.to_str().unwrap(),
    ]);
    assert_clean_error(&run, "mismatched types");
    assert!(!run.stderr.contains("wrote"), "{}", run.stderr);
    assert!(!out.exists(), "nothing is recorded");
}

/// `toyvm jitdump` decodes the dump a run wrote: every region's load, in
/// order, and `--redact` leaves nothing that differs from run to run.
#[test]
fn jitdump_decodes_a_runs_dump() {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cli-jitdump");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let run = toyvm(&[
        "run",
        "--jit-threshold",
        "0",
        "--perf-jitdump",
        "--perf-dir",
        dir.to_str().unwrap(),
        "examples/scripts/fib.toy",
    ]);
    assert_eq!(run.status, Some(0), "{}", run.stderr);
    let dump = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "dump"))
        .expect("a jitdump");
    let plain = toyvm(&["jitdump", dump.to_str().unwrap()]);
    assert_eq!(plain.status, Some(0), "{}", plain.stderr);
    assert!(
        plain.stdout.starts_with("file header: magic=0x4a695444"),
        "{}",
        plain.stdout
    );
    assert!(
        plain.stdout.contains("CODE_LOAD (id 0)"),
        "{}",
        plain.stdout
    );
    assert!(
        plain.stdout.contains("name=\"toy:jit:fib:"),
        "{}",
        plain.stdout
    );
    let redacted = toyvm(&["jitdump", "--redact", dump.to_str().unwrap()]);
    assert_eq!(redacted.status, Some(0), "{}", redacted.stderr);
    for raw in ["code_addr=0x", "vma=0x", "addr=0x", "timestamp=3", "pid=3"] {
        assert!(
            !redacted.stdout.contains(raw),
            "{raw} left:\n{}",
            redacted.stdout
        );
    }
    assert!(
        redacted.stdout.contains("pid=PID tid=TID"),
        "{}",
        redacted.stdout
    );
    // Not a jitdump: a clear error, no panic.
    let script = toyvm(&["jitdump", "examples/scripts/fib.toy"]);
    assert_eq!(script.status, Some(1), "{}", script.stderr);
    assert!(
        script.stderr.contains("not a readable jitdump"),
        "{}",
        script.stderr
    );
}
