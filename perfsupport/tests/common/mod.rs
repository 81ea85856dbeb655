//! Helpers shared by the integration tests: Cranelift-like unwind info and
//! a hand-written x86-64 function.
#![allow(dead_code)] // each test binary uses a different subset

use gimli::write::{Address, CallFrameInstruction, CommonInformationEntry, FrameDescriptionEntry};
use gimli::{Encoding, Format, X86_64};

/// The CIE Cranelift's `isa.create_systemv_cie()` produces on x86-64:
/// CFI version 1, code alignment 1, data alignment -8, return address in
/// register 16, CFA = rsp + 8, return address at CFA - 8.
pub fn cranelift_like_cie() -> CommonInformationEntry {
    let encoding = Encoding {
        address_size: 8,
        format: Format::Dwarf32,
        version: 1,
    };
    let mut cie = CommonInformationEntry::new(encoding, 1, -8, X86_64::RA);
    cie.add_instruction(CallFrameInstruction::Cfa(X86_64::RSP, 8));
    cie.add_instruction(CallFrameInstruction::Offset(X86_64::RA, -8));
    cie
}

/// The FDE Cranelift emits for a `push rbp; mov rbp, rsp; ...` frame of
/// `len` bytes: CfaOffset(16)@1, Offset(rbp,-16)@1, CfaRegister(rbp)@4.
pub fn frame_pointer_fde(address: Address, len: u32) -> FrameDescriptionEntry {
    let mut fde = FrameDescriptionEntry::new(address, len);
    fde.add_instruction(1, CallFrameInstruction::CfaOffset(16));
    fde.add_instruction(1, CallFrameInstruction::Offset(X86_64::RBP, -16));
    fde.add_instruction(4, CallFrameInstruction::CfaRegister(X86_64::RBP));
    fde
}

/// `fn spin(n: u64)`: `push rbp; mov rbp,rsp; loop: dec rdi; jnz loop; pop rbp; ret`.
/// Lines: 1 for the prologue (offset 0), 2 for the loop (offset 4), 3 for the
/// epilogue (offset 9).
pub const SPIN_CODE: [u8; 11] = [
    0x55, // 0: push rbp
    0x48, 0x89, 0xe5, // 1: mov rbp, rsp
    0x48, 0xff, 0xcf, // 4: dec rdi
    0x75, 0xfb, // 7: jnz 4
    0x5d, // 9: pop rbp
    0xc3, // 10: ret
];

/// Offsets where each source line of [`SPIN_CODE`] starts.
pub const SPIN_LINES: [(u32, u32); 3] = [(0, 1), (4, 2), (9, 3)];

/// Rounds up to a multiple of `align`.
pub fn align_up(value: u64, align: u64) -> u64 {
    value.div_ceil(align) * align
}

/// A fresh scratch directory whose path does not start with `/tmp/perf-`.
pub fn scratch_dir(tag: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("psupport-{tag}-"))
        .tempdir()
        .expect("create scratch dir")
}
