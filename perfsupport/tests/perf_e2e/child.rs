//! The profiled "VM" of the perfsupport end-to-end test: it JITs two
//! hand-written x86-64 functions into anonymous memory, registers them with
//! a perf map and a jitdump, and runs them for half a second. The test
//! (`tests/perf_e2e.rs`) runs it under `perf record`; the example `e2e_vm`
//! is the same code as a program (`cargo run --release -p perfsupport
//! --example e2e_vm -- DIR` writes `DIR/jit-PID.dump` and
//! `/tmp/perf-PID.map`), which the book's jitdump chapter decodes.

use crate::common::{SPIN_CODE, SPIN_LINES};
use perfsupport::jitdump::PerfUnwindData;
use perfsupport::unwind::x86_64::{frame_pointer_fde, system_v_cie};
use perfsupport::unwind::{REGION_START, reserved_region_size};
use perfsupport::{CodeRegion, JitDump, LineEntry, PerfMap, Profilers, UnwindInfo};
use std::path::Path;
use std::time::{Duration, Instant};

/// The hot function's symbol.
pub const SYMBOL: &str = "toy::e2e_spin";
/// Its caller's symbol (no frame pointer).
pub const MID_SYMBOL: &str = "toy::e2e_mid";
/// The made-up source file of the line table.
pub const SOURCE_FILE: &str = "e2e_fake.toy";

/// The profiled process: JIT one function, register it, run it ~0.5 s;
/// prints `pid=PID`.
pub fn run_child(work: &Path) -> Result<(), String> {
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
