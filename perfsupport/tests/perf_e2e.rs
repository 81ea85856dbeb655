//! End-to-end check with the real `perf`: a hand-written x86-64 function in
//! anonymous executable memory, registered with the perf map and jitdump
//! sinks, sampled by `perf record -k 1`, then `perf inject --jit`.
//!
//! The call chain is `drive` (Rust) -> `toy::e2e_mid` -> `toy::e2e_spin`.
//! `toy::e2e_mid` zeroes rbp, so a frame-pointer walk cannot get past it:
//! only the DWARF unwind info we register lets perf reach `drive`.
//!
//! This binary has its own `main` (`harness = false`): run without the
//! `PSUPPORT_E2E_CHILD` variable it is the test driver; with it, it is the
//! profiled "VM" that `perf record` starts ([`child`], which is also the
//! example `e2e_vm`: `cargo run --release -p perfsupport --example e2e_vm
//! -- DIR`).
//!
//! Without `perf` (or `readelf`) the test is skipped with a loud message,
//! except under `CI=true`, where it fails.

#[path = "perf_e2e/child.rs"]
mod child;
mod common;

use child::{MID_SYMBOL, SOURCE_FILE, SYMBOL, run_child};
use common::SPIN_CODE;
use std::path::Path;
use std::process::{Command, ExitCode};

const CHILD_ENV: &str = "PSUPPORT_E2E_CHILD";

fn main() -> ExitCode {
    if let Some(work) = std::env::var_os(CHILD_ENV) {
        return match run_child(Path::new(&work)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(err) => {
                eprintln!("perf_e2e child: {err}");
                ExitCode::FAILURE
            }
        };
    }
    if !cfg!(target_arch = "x86_64") {
        println!("perf_e2e: SKIPPED: the hand-written machine code is x86-64 only");
        println!("perf_e2e: 0 passed, 0 failed, 1 skipped");
        return ExitCode::SUCCESS;
    }
    if let Some(missing) = missing_tools() {
        let ci = std::env::var("CI").is_ok_and(|v| v == "true");
        println!("perf_e2e: ########################################################");
        println!("perf_e2e: SKIPPED: {missing}");
        println!("perf_e2e: ########################################################");
        if ci {
            println!("perf_e2e: CI=true, so a missing perf is a failure");
            println!("perf_e2e: 0 passed, 1 failed");
            return ExitCode::FAILURE;
        }
        println!("perf_e2e: 0 passed, 0 failed, 1 skipped");
        return ExitCode::SUCCESS;
    }
    let mut checks = Checks::default();
    if let Err(err) = run_driver(&mut checks) {
        checks.fail(&format!("driver error: {err}"));
    }
    println!(
        "perf_e2e: {} passed, {} failed",
        checks.passed, checks.failed
    );
    if checks.failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

#[derive(Default)]
struct Checks {
    passed: usize,
    failed: usize,
}

impl Checks {
    fn check(&mut self, ok: bool, what: &str, detail: &str) {
        if ok {
            self.passed += 1;
            println!("perf_e2e: PASS {what}");
        } else {
            self.fail(&format!("{what}\n{detail}"));
        }
    }

    fn fail(&mut self, what: &str) {
        self.failed += 1;
        println!("perf_e2e: FAIL {what}");
    }
}

fn missing_tools() -> Option<String> {
    for (tool, arg) in [("perf", "--version"), ("readelf", "--version")] {
        match Command::new(tool).arg(arg).output() {
            Ok(out) if out.status.success() => {}
            _ => return Some(format!("`{tool}` is not installed or does not run")),
        }
    }
    let probe = Command::new("perf")
        .args([
            "record",
            "-q",
            "-N",
            "-e",
            "cpu-clock",
            "-o",
            "/dev/null",
            "--",
            "true",
        ])
        .output();
    match probe {
        Ok(out) if out.status.success() => None,
        Ok(out) => Some(format!(
            "`perf record` does not work here: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )),
        Err(err) => Some(format!("`perf record` cannot start: {err}")),
    }
}

/// Runs `command`, returning stdout; a failure becomes an error with stderr.
fn run(command: &mut Command) -> Result<String, String> {
    let out = command.output().map_err(|e| format!("{command:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{command:?} exited with {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn run_driver(checks: &mut Checks) -> Result<(), String> {
    // Not under /tmp/perf-: perf would read jitted-*.so there as perf maps.
    let work = tempfile::Builder::new()
        .prefix("psupport-e2e-")
        .tempdir()
        .map_err(|e| e.to_string())?;
    let work_path = work.path();
    // Keep perf's build-id cache out of ~/.debug.
    let config = work_path.join("perfconfig");
    std::fs::write(
        &config,
        format!(
            "[buildid]\n\tdir = {}\n",
            work_path.join("buildid").display()
        ),
    )
    .map_err(|e| e.to_string())?;
    let perf = |args: &[&str]| {
        let mut command = Command::new("perf");
        command
            .args(args)
            .current_dir(work_path)
            .env("PERF_CONFIG", &config)
            .env("DEBUGINFOD_URLS", "");
        command
    };
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    // One run with frame-pointer call graphs (perf map checks, and the
    // control: frame pointers cannot get past `toy::e2e_mid`), one with DWARF
    // call graphs (jitdump checks).
    let mut pids = Vec::new();
    let mut record = |output: &str, call_graph: &[&str]| -> Result<u32, String> {
        let mut args = vec!["record", "-N", "-k", "1", "-e", "cpu-clock", "-F", "999"];
        args.extend_from_slice(call_graph);
        args.extend_from_slice(&["-o", output, "--"]);
        let out = run(perf(&args).arg(&exe).env(CHILD_ENV, work_path))?;
        let pid = out
            .lines()
            .find_map(|l| l.strip_prefix("pid="))
            .and_then(|p| p.trim().parse().ok())
            .ok_or_else(|| format!("child printed no pid: {out}"))?;
        pids.push(pid);
        Ok(pid)
    };
    let result = record("fp.data", &["-g"]).and_then(|fp_pid| {
        let dwarf_pid = record("rec.data", &["--call-graph", "dwarf"])?;
        check_frame_pointer_run(checks, &perf, fp_pid)?;
        check_recording(checks, &perf, work_path, dwarf_pid)
    });
    // Clean up the perf maps we caused (the work dir goes with `work`).
    for pid in pids {
        let _ = std::fs::remove_file(format!("/tmp/perf-{pid}.map"));
    }
    if std::env::var_os("PSUPPORT_E2E_KEEP").is_some() {
        println!("perf_e2e: keeping {}", work.keep().display());
    }
    result
}

/// The perf map alone names the JIT frames; frame pointers stop at the
/// function that zeroes rbp.
fn check_frame_pointer_run(
    checks: &mut Checks,
    perf: &dyn Fn(&[&str]) -> Command,
    pid: u32,
) -> Result<(), String> {
    let map = std::fs::read_to_string(format!("/tmp/perf-{pid}.map")).unwrap_or_default();
    checks.check(
        map.lines().any(|l| l.ends_with(&format!(" {SYMBOL}"))),
        "perf map has the region",
        &map,
    );
    let with_dso = run(&mut perf(&[
        "script",
        "--no-inline",
        "-i",
        "fp.data",
        "-F",
        "ip,sym,dso",
    ]))?;
    let resolved = format!("{SYMBOL} (/tmp/perf-{pid}.map)");
    let samples = with_dso.lines().filter(|l| l.contains(&resolved)).count();
    checks.check(
        samples > 0,
        &format!("samples resolve through /tmp/perf-PID.map without jitdump ({samples})"),
        &with_dso.lines().take(40).collect::<Vec<_>>().join("\n"),
    );
    let script = run(&mut perf(&[
        "script",
        "--no-inline",
        "-i",
        "fp.data",
        "-F",
        "ip,sym",
    ]))?;
    let stacks = leaf_first_stacks(&script);
    let spin = stacks.iter().filter(|s| s[0] == SYMBOL).count();
    let past_mid = stacks
        .iter()
        .filter(|s| s[0] == SYMBOL && s.iter().any(|f| f.contains("drive")))
        .count();
    checks.check(
        spin > 0 && past_mid == 0,
        "control: frame pointers alone cannot walk past toy::e2e_mid",
        &format!("{past_mid} of {spin} stacks reached drive"),
    );
    Ok(())
}

fn check_recording(
    checks: &mut Checks,
    perf: &dyn Fn(&[&str]) -> Command,
    work: &Path,
    pid: u32,
) -> Result<(), String> {
    // Jitdump: inject, then the symbol lives in jitted-PID-0.so.
    run(&mut perf(&[
        "inject", "--jit", "-i", "rec.data", "-o", "inj.data",
    ]))?;
    let so = work.join(format!("jitted-{pid}-0.so"));
    checks.check(so.exists(), "perf inject wrote jitted-PID-0.so", "");
    let report = run(&mut perf(&[
        "report",
        "--no-inline",
        "-i",
        "inj.data",
        "--stdio",
        "--sort",
        "dso,sym",
        "-g",
        "none",
    ]))?;
    let so_name = format!("jitted-{pid}-0.so");
    checks.check(
        report
            .lines()
            .any(|l| l.contains(&so_name) && l.contains(SYMBOL)),
        "samples resolve to the symbol in the injected object",
        &report,
    );
    let sections = run(Command::new("readelf").arg("-SW").arg(&so))?;
    checks.check(
        sections.contains(".eh_frame_hdr")
            && sections.contains(".eh_frame ")
            && sections.contains(".debug_line"),
        "jitted .so has .eh_frame, .eh_frame_hdr and .debug_line",
        &sections,
    );
    let frames = run(Command::new("readelf").arg("--debug-dump=frames").arg(&so))?;
    let fde_range = format!("pc=0000000000000080..{:016x}", 0x80 + SPIN_CODE.len());
    checks.check(
        frames.contains(&fde_range) && frames.contains("DW_CFA_def_cfa_register: r6 (rbp)"),
        "the injected FDE covers the code at .text 0x80 with the rbp rules",
        &frames,
    );
    let srclines = run(&mut perf(&[
        "report",
        "--no-inline",
        "-i",
        "inj.data",
        "--stdio",
        "--sort",
        "sym,srcline",
        "-g",
        "none",
    ]))?;
    checks.check(
        srclines
            .lines()
            .any(|l| l.contains(SYMBOL) && l.contains(&format!("{SOURCE_FILE}:2"))),
        "perf report --sort srcline shows the fake file:line of the loop",
        &srclines,
    );
    let script = run(&mut perf(&[
        "script",
        "--no-inline",
        "-i",
        "inj.data",
        "-F",
        "ip,sym",
    ]))?;
    let stacks = leaf_first_stacks(&script);
    let spin_stacks: Vec<&Vec<String>> = stacks.iter().filter(|s| s[0] == SYMBOL).collect();
    let through_mid = spin_stacks
        .iter()
        .filter(|s| s.len() > 2 && s[1] == MID_SYMBOL && s[2].contains("drive"))
        .count();
    checks.check(
        !spin_stacks.is_empty() && through_mid * 10 >= spin_stacks.len() * 8,
        &format!(
            "DWARF unwinding crosses both JIT frames into Rust ({through_mid} of {} stacks)",
            spin_stacks.len()
        ),
        &stacks
            .iter()
            .take(5)
            .map(|s| s.join(" <- "))
            .collect::<Vec<_>>()
            .join("\n"),
    );
    Ok(())
}

/// Splits `perf script -F ip,sym` output into stacks of symbol names, leaf
/// first (samples are separated by blank lines; each line is `ip sym`).
fn leaf_first_stacks(script: &str) -> Vec<Vec<String>> {
    script
        .split("\n\n")
        .map(|block| {
            block
                .lines()
                .filter_map(|line| line.trim().split_once(' '))
                .map(|(_, symbol)| symbol.trim().to_string())
                .collect::<Vec<_>>()
        })
        .filter(|stack| !stack.is_empty())
        .collect()
}
