//! End-to-end check with the real `perf`: a hand-written x86-64 function in
//! anonymous executable memory, registered with the perf map and jitdump
//! sinks, sampled by `perf record -k 1`, then `perf inject --jit`.
//!
//! This binary has its own `main` (`harness = false`): run without the
//! `PSUPPORT_E2E_CHILD` variable it is the test driver; with it, it is the
//! profiled "VM" that `perf record` starts.
//!
//! Without `perf` (or `readelf`) the test is skipped with a loud message,
//! except under `CI=true`, where it fails.

mod common;

use common::{SPIN_CODE, SPIN_LINES, cranelift_like_cie, frame_pointer_fde};
use perfsupport::unwind::{PerfUnwindData, REGION_START, reserved_region_size};
use perfsupport::{CodeRegion, JitDump, LineEntry, PerfMap, Profilers, RegionKind, UnwindInfo};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

const CHILD_ENV: &str = "PSUPPORT_E2E_CHILD";
const SYMBOL: &str = "toy::e2e_spin";
const SOURCE_FILE: &str = "e2e_fake.toy";

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
    let record_out = run(perf(&[
        "record",
        "-N",
        "-k",
        "1",
        "-e",
        "cpu-clock",
        "-F",
        "999",
        "-g",
        "-o",
        "rec.data",
        "--",
    ])
    .arg(&exe)
    .env(CHILD_ENV, work_path))?;
    let pid: u32 = record_out
        .lines()
        .find_map(|l| l.strip_prefix("pid="))
        .and_then(|p| p.trim().parse().ok())
        .ok_or_else(|| format!("child printed no pid: {record_out}"))?;
    let map_path = PathBuf::from(format!("/tmp/perf-{pid}.map"));
    let result = check_recording(checks, &perf, work_path, pid, &map_path);
    // Clean up the perf map we caused (the work dir goes with `work`).
    let _ = std::fs::remove_file(&map_path);
    result
}

fn check_recording(
    checks: &mut Checks,
    perf: &dyn Fn(&[&str]) -> Command,
    work: &Path,
    pid: u32,
    map_path: &Path,
) -> Result<(), String> {
    // Perf map: the file exists and the non-injected profile resolves through it.
    let map = std::fs::read_to_string(map_path).unwrap_or_default();
    checks.check(
        map.lines().any(|l| l.ends_with(&format!(" {SYMBOL}"))),
        "perf map has the region",
        &map,
    );
    let report = run(&mut perf(&[
        "report",
        "--no-inline",
        "-i",
        "rec.data",
        "--stdio",
        "--sort",
        "dso,sym",
        "-g",
        "none",
    ]))?;
    checks.check(
        report
            .lines()
            .any(|l| l.contains(SYMBOL) && l.contains("[JIT]")),
        "samples resolve through /tmp/perf-PID.map without inject",
        &report,
    );

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
    Ok(())
}

/// The profiled process: JIT one function, register it, run it ~0.5 s.
fn run_child(work: &Path) -> Result<(), String> {
    // 1. Open the dump (and its marker mapping) before any code is executable.
    let jitdump = JitDump::create_in(work).map_err(|e| e.to_string())?;
    let perf_map = PerfMap::new();
    perf_map.open().map_err(|e| e.to_string())?;
    let mut profilers = Profilers::new();
    profilers.add(Box::new(perf_map));
    profilers.add(Box::new(jitdump));

    // 2. Lay out code + reserved tail, then make it executable.
    let cie = cranelift_like_cie();
    let fde = frame_pointer_fde(REGION_START, SPIN_CODE.len() as u32);
    let unwind = UnwindInfo {
        cie: &cie,
        fde: &fde,
    };
    let reserved = reserved_region_size(SPIN_CODE.len() as u64, Some(unwind))
        .map_err(|e| e.to_string())? as usize;
    let payload = PerfUnwindData::build(SPIN_CODE.len() as u64, Some(unwind), 0)
        .map_err(|e| e.to_string())?;
    let memory = ExecMemory::new(reserved, |bytes| {
        bytes[..SPIN_CODE.len()].copy_from_slice(&SPIN_CODE);
        // Optional, as V8 and CPython do: the unwind bytes after the code.
        let tail = SPIN_CODE.len().next_multiple_of(8);
        bytes[tail..tail + payload.bytes().len()].copy_from_slice(payload.bytes());
    })?;
    let code = &memory.bytes()[..SPIN_CODE.len()];

    // 3. Register after the code is final, before it first runs.
    let lines: Vec<LineEntry> = SPIN_LINES
        .iter()
        .map(|&(offset, line)| LineEntry {
            offset,
            file: SOURCE_FILE,
            line,
            column: 1,
        })
        .collect();
    let region = CodeRegion::new(code, SYMBOL, RegionKind::JitCode)
        .with_unwind(unwind)
        .with_lines(&lines);
    let failures = profilers.register(&[region]);
    if !failures.is_empty() {
        return Err(format!("registration failed: {failures:?}"));
    }

    // 4. Run it.
    // SAFETY: `code` holds SPIN_CODE, a complete x86-64 function following
    // the C calling convention (`fn(u64)`, count in rdi, no other state), in
    // executable memory that stays mapped until `memory` drops.
    let spin: extern "C" fn(u64) = unsafe { std::mem::transmute(code.as_ptr()) };
    let deadline = Instant::now() + Duration::from_millis(500);
    while Instant::now() < deadline {
        spin(200_000);
    }
    let failures = profilers.finish();
    if !failures.is_empty() {
        return Err(format!("finish failed: {failures:?}"));
    }
    println!("pid={}", std::process::id());
    Ok(())
}

/// Anonymous memory filled while writable, then switched to read + execute.
struct ExecMemory {
    ptr: *mut u8,
    len: usize,
}

impl ExecMemory {
    fn new(len: usize, fill: impl FnOnce(&mut [u8])) -> Result<ExecMemory, String> {
        // SAFETY: a fresh private anonymous mapping; no existing memory is affected.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(format!("mmap: {}", std::io::Error::last_os_error()));
        }
        let memory = ExecMemory {
            ptr: ptr.cast(),
            len,
        };
        // SAFETY: the mapping is `len` writable bytes owned by `memory`.
        fill(unsafe { std::slice::from_raw_parts_mut(memory.ptr, len) });
        // SAFETY: changes protection of our own mapping only.
        if unsafe { libc::mprotect(ptr, len, libc::PROT_READ | libc::PROT_EXEC) } != 0 {
            return Err(format!("mprotect: {}", std::io::Error::last_os_error()));
        }
        Ok(memory)
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: `len` readable bytes, mapped for as long as `self` lives.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl Drop for ExecMemory {
    fn drop(&mut self) {
        // SAFETY: unmapping the mapping this value owns; no references outlive it.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}
