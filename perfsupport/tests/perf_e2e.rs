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
//! profiled "VM" that `perf record` starts.
//!
//! Without `perf` (or `readelf`) the test is skipped with a loud message,
//! except under `CI=true`, where it fails.

mod common;

use common::{SPIN_CODE, SPIN_LINES};
use perfsupport::jitdump::PerfUnwindData;
use perfsupport::unwind::x86_64::{frame_pointer_fde, system_v_cie};
use perfsupport::unwind::{REGION_START, reserved_region_size};
use perfsupport::{CodeRegion, JitDump, LineEntry, PerfMap, Profilers, UnwindInfo};
use std::path::Path;
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

const CHILD_ENV: &str = "PSUPPORT_E2E_CHILD";
const SYMBOL: &str = "toy::e2e_spin";
const MID_SYMBOL: &str = "toy::e2e_mid";
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

/// The profiled process: JIT one function, register it, run it ~0.5 s.
fn run_child(work: &Path) -> Result<(), String> {
    // 1. Open the dump (and its marker mapping) before any code is executable.
    let jitdump = JitDump::create_in(work).map_err(|e| e.to_string())?;
    let perf_map = PerfMap::new();
    perf_map.open().map_err(|e| e.to_string())?;
    let mut profilers = Profilers::new();
    profilers.add(Box::new(perf_map));
    profilers.add(Box::new(jitdump));

    // 2. Lay out each region with its reserved tail, then make it executable.
    let cie = system_v_cie();
    let spin_fde = frame_pointer_fde(REGION_START, SPIN_CODE.len() as u32).unwrap();
    let spin_unwind = UnwindInfo {
        cie: &cie,
        fde: &spin_fde,
    };
    let mid_fde = mid_fde();
    let mid_unwind = UnwindInfo {
        cie: &cie,
        fde: &mid_fde,
    };
    let reserve = |size: usize, unwind| {
        reserved_region_size(size as u64, Some(unwind))
            .map(|r| r as usize)
            .map_err(|e| e.to_string())
    };
    let spin_reserved = reserve(SPIN_CODE.len(), spin_unwind)?;
    let mid_reserved = reserve(MID_CODE.len(), mid_unwind)?;
    let payloads = [
        PerfUnwindData::build(SPIN_CODE.len() as u64, Some(spin_unwind), 0),
        PerfUnwindData::build(MID_CODE.len() as u64, Some(mid_unwind), 0),
    ];
    let [spin_payload, mid_payload] = payloads.map(|p| p.map_err(|e| e.to_string()));
    let (spin_payload, mid_payload) = (spin_payload?, mid_payload?);
    let memory = ExecMemory::new(spin_reserved + mid_reserved, |bytes| {
        let spin_address = bytes.as_ptr() as u64;
        place(
            &mut bytes[..spin_reserved],
            &SPIN_CODE,
            spin_payload.bytes(),
        );
        let mut mid = MID_CODE;
        mid[MID_CALLEE_IMM..MID_CALLEE_IMM + 8].copy_from_slice(&spin_address.to_le_bytes());
        place(&mut bytes[spin_reserved..], &mid, mid_payload.bytes());
    })?;
    let spin_code = &memory.bytes()[..SPIN_CODE.len()];
    let mid_code = &memory.bytes()[spin_reserved..spin_reserved + MID_CODE.len()];

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
    let regions = [
        CodeRegion::new(spin_code, SYMBOL)
            .with_unwind(spin_unwind)
            .with_lines(&lines),
        CodeRegion::new(mid_code, MID_SYMBOL).with_unwind(mid_unwind),
    ];
    let failures = profilers.register(&regions);
    if !failures.is_empty() {
        return Err(format!("registration failed: {failures:?}"));
    }

    // 4. Run it.
    // SAFETY: `mid_code` holds MID_CODE, a complete x86-64 function following
    // the C calling convention (`fn(u64)`, count in rdi), patched to call
    // SPIN_CODE in the same mapping; both stay mapped until `memory` drops.
    let mid: extern "C" fn(u64) = unsafe { std::mem::transmute(mid_code.as_ptr()) };
    drive(mid, Duration::from_millis(500));
    let failures = profilers.finish();
    if !failures.is_empty() {
        return Err(format!("finish failed: {failures:?}"));
    }
    println!("pid={}", std::process::id());
    Ok(())
}

/// `fn mid(n: u64)`: calls `spin(n)` with rbp zeroed, like code compiled
/// without frame pointers: `push rbp; xor ebp,ebp; sub rsp,16;
/// movabs rax,<spin>; call rax; add rsp,16; pop rbp; ret`.
const MID_CODE: [u8; 25] = [
    0x55, // 0: push rbp
    0x31, 0xed, // 1: xor ebp, ebp
    0x48, 0x83, 0xec, 0x10, // 3: sub rsp, 16
    0x48, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, // 7: movabs rax, imm64 (patched)
    0xff, 0xd0, // 17: call rax
    0x48, 0x83, 0xc4, 0x10, // 19: add rsp, 16
    0x5d, // 23: pop rbp
    0xc3, // 24: ret
];

/// Offset of the callee address inside [`MID_CODE`].
const MID_CALLEE_IMM: usize = 9;

/// CFI for [`MID_CODE`]: the CFA follows rsp, since rbp is not a frame pointer.
fn mid_fde() -> gimli::write::FrameDescriptionEntry {
    use gimli::write::CallFrameInstruction::{CfaOffset, Offset, Restore};
    let mut fde = gimli::write::FrameDescriptionEntry::new(REGION_START, MID_CODE.len() as u32);
    fde.add_instruction(1, CfaOffset(16));
    fde.add_instruction(1, Offset(gimli::X86_64::RBP, -16));
    fde.add_instruction(7, CfaOffset(32));
    fde.add_instruction(23, CfaOffset(16));
    fde.add_instruction(24, CfaOffset(8));
    fde.add_instruction(24, Restore(gimli::X86_64::RBP));
    fde
}

/// Copies code and, after it (aligned to 8), its unwind payload into a slot.
fn place(slot: &mut [u8], code: &[u8], unwind: &[u8]) {
    slot[..code.len()].copy_from_slice(code);
    let tail = code.len().next_multiple_of(8);
    slot[tail..tail + unwind.len()].copy_from_slice(unwind);
}

/// The Rust frame the DWARF unwinder must reach through both JIT frames.
#[inline(never)]
fn drive(mid: extern "C" fn(u64), duration: Duration) {
    let deadline = Instant::now() + duration;
    while Instant::now() < deadline {
        mid(std::hint::black_box(200_000));
    }
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
