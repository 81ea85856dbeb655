//! Call-frame information for x86-64 code from any code generator: the
//! standard frame-pointer function in one call, any other prologue as a short
//! list of [`CfiRow`]s.
//!
//! A profiler that unwinds with DWARF (`perf record --call-graph dwarf`, then
//! `perf inject --jit`) needs to know, at every instruction of a JIT
//! function, where the caller's frame is: the *canonical frame address*
//! (CFA, the caller's `rsp` before its `call`) and where each callee-saved
//! register was saved. On x86-64 the return address always sits at CFA − 8.
//!
//! | your code | build | unwinding |
//! |---|---|---|
//! | `push rbp; mov rbp, rsp` … `pop rbp; ret` | [`CallFrameInfo::x86_64_frame_pointer`] | DWARF, and frame pointers |
//! | any other prologue | [`CallFrameInfo::x86_64_rows`] with one [`CfiRow`] per change | DWARF |
//! | no CFI at all | nothing: [`CodeRegion::new`](crate::CodeRegion::new) without `with_unwind` | frame pointers only, so keep a `push rbp; mov rbp, rsp` frame |
//!
//! Cranelift users do not need this module: pass Cranelift's own CIE and FDE
//! as an [`UnwindInfo`](crate::UnwindInfo).
//!
//! # The standard frame-pointer function
//!
//! ```
//! use perfsupport::unwind::CallFrameInfo;
//! use perfsupport::{CodeRegion};
//!
//! # fn main() -> std::io::Result<()> {
//! // push rbp; mov rbp, rsp; dec rdi; jnz -5; pop rbp; ret
//! let code: &[u8] = &[0x55, 0x48, 0x89, 0xe5, 0x48, 0xff, 0xcf, 0x75, 0xfb, 0x5d, 0xc3];
//! let cfi = CallFrameInfo::x86_64_frame_pointer(code.len() as u32)?;
//! let region = CodeRegion::new(code, "minijit::spin").with_unwind(&cfi);
//! assert!(region.validate().is_ok());
//! # Ok(())
//! # }
//! ```
//!
//! # Any other prologue, row by row
//!
//! Each [`CfiRow`] gives the **whole** rule set from its offset on (until the
//! next row): the CFA as register + offset, and the registers saved so far.
//! Before the first row the entry state holds: CFA = `rsp` + 8, nothing saved.
//! This function saves `rbx` without a frame pointer (`push rbx; sub rsp, 16;
//! … add rsp, 16; pop rbx; ret`):
//!
//! ```
//! use perfsupport::gimli::X86_64;
//! use perfsupport::unwind::x86_64::{CfiRow, SavedRegister};
//! use perfsupport::unwind::CallFrameInfo;
//!
//! # fn main() -> std::io::Result<()> {
//! let rbx_saved = [SavedRegister { register: X86_64::RBX, cfa_offset: -16 }];
//! let rows = [
//!     // after `push rbx` (1 byte)
//!     CfiRow { offset: 1, cfa_register: X86_64::RSP, cfa_offset: 16, saved: &rbx_saved },
//!     // after `sub rsp, 16` (4 bytes)
//!     CfiRow { offset: 5, cfa_register: X86_64::RSP, cfa_offset: 32, saved: &rbx_saved },
//!     // after `add rsp, 16`, at offset 20
//!     CfiRow { offset: 24, cfa_register: X86_64::RSP, cfa_offset: 16, saved: &rbx_saved },
//!     // after `pop rbx`: only the return address is left, at the `ret`
//!     CfiRow { offset: 25, cfa_register: X86_64::RSP, cfa_offset: 8, saved: &[] },
//! ];
//! let cfi = CallFrameInfo::x86_64_rows(26, &rows)?;
//! # let _ = cfi;
//! # Ok(())
//! # }
//! ```
//!
//! Registers are DWARF register numbers ([`gimli::X86_64`]: `rax` 0, `rdx` 1,
//! `rcx` 2, `rbx` 3, `rsi` 4, `rdi` 5, `rbp` 6, `rsp` 7, `r8`–`r15` 8–15,
//! return address 16).

use super::{CallFrameInfo, REGION_START, invalid};
use gimli::write::{Address, CallFrameInstruction, CommonInformationEntry, FrameDescriptionEntry};
use gimli::{Encoding, Format, Register, X86_64};
use std::io;

/// The x86-64 System V CIE, the same as Cranelift's `isa.create_systemv_cie()`:
/// CFI version 1, code alignment 1, data alignment −8, return address in
/// register 16; at function entry CFA = `rsp` + 8 and the return address is
/// saved at CFA − 8.
pub fn system_v_cie() -> CommonInformationEntry {
    let encoding = Encoding {
        address_size: 8,
        format: Format::Dwarf32,
        version: 1,
    };
    let mut cie = CommonInformationEntry::new(encoding, CODE_ALIGNMENT, DATA_ALIGNMENT, X86_64::RA);
    cie.add_instruction(CallFrameInstruction::Cfa(X86_64::RSP, ENTRY_CFA_OFFSET));
    cie.add_instruction(CallFrameInstruction::Offset(X86_64::RA, -8));
    cie
}

// ANCHOR: frame_pointer_rows
/// The FDE of a standard frame-pointer function of `code_len` bytes (at
/// least 6) for [`system_v_cie`]:
///
/// | offset | instruction | CFA | `rbp` |
/// |---|---|---|---|
/// | 0 | `push rbp` (1 byte) | `rsp` + 8 | caller's |
/// | 1 | `mov rbp, rsp` (3 bytes) | `rsp` + 16 | at CFA − 16 |
/// | 4 | body … `pop rbp` | `rbp` + 16 | at CFA − 16 |
/// | `code_len` − 1 | `ret` (the last byte) | `rsp` + 8 | caller's |
///
/// `address` is the region start, usually [`REGION_START`]. The last row
/// assumes the function's only `pop rbp; ret` ends it; an early return in
/// the body is described as body code (a sample exactly on its `ret` unwinds
/// one frame wrong). Describe such code with [`fde_from_rows`].
///
/// # Errors
///
/// `InvalidInput` if `code_len` is below 6 (the prologue and epilogue alone
/// take 6 bytes).
pub fn frame_pointer_fde(address: Address, code_len: u32) -> io::Result<FrameDescriptionEntry> {
    const RBP_SAVED: [SavedRegister; 1] = [SavedRegister {
        register: X86_64::RBP,
        cfa_offset: -16,
    }];
    if code_len < 6 {
        return Err(invalid(format!(
            "a frame-pointer function has at least 6 bytes (push rbp; mov rbp, rsp; pop rbp; ret), not {code_len}"
        )));
    }
    let rows = [
        CfiRow {
            offset: 1,
            cfa_register: X86_64::RSP,
            cfa_offset: 16,
            saved: &RBP_SAVED,
        },
        CfiRow {
            offset: 4,
            cfa_register: X86_64::RBP,
            cfa_offset: 16,
            saved: &RBP_SAVED,
        },
        CfiRow {
            offset: code_len - 1,
            cfa_register: X86_64::RSP,
            cfa_offset: ENTRY_CFA_OFFSET,
            saved: &[],
        },
    ];
    fde_from_rows(address, code_len, &rows)
}
// ANCHOR_END: frame_pointer_rows

// ANCHOR: cfi_row
/// The unwinding rules from `offset` on, up to the next row (or the end of
/// the code): the CFA is `cfa_register` + `cfa_offset`, each register in
/// `saved` holds its caller's value at CFA + its `cfa_offset`, and every
/// other register still holds its caller's value.
///
/// The same rows describe aarch64 code ([`CallFrameInfo::aarch64_rows`],
/// re-exported as [`aarch64::CfiRow`](super::aarch64::CfiRow)), with
/// `sp`, `x29`, `x30` for `rsp`, `rbp` and the return address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CfiRow<'a> {
    /// Offset from the region start of the first instruction the row covers,
    /// usually the one right after a `push`, `sub rsp` or `mov rbp, rsp`
    /// (aarch64: a multiple of 4, after an `stp`, `sub sp` or `mov x29, sp`).
    pub offset: u32,
    /// The register the CFA is computed from: `rsp`, or `rbp` once the frame
    /// pointer is set up (aarch64: `sp`, or `x29`).
    pub cfa_register: Register,
    /// CFA = `cfa_register` + `cfa_offset` (non-negative: 8 at entry, 16
    /// after one push; aarch64: 0 at entry).
    pub cfa_offset: i32,
    /// Where the callee-saved registers pushed so far are.
    pub saved: &'a [SavedRegister],
}

/// A callee-saved register whose caller's value is on the stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SavedRegister {
    /// The register (a DWARF number, see [`gimli::X86_64`] and
    /// [`gimli::AArch64`]).
    pub register: Register,
    /// Its save slot is at CFA + `cfa_offset`: −16 for the first push after
    /// the return address, −24 for the second, … (a multiple of 8).
    pub cfa_offset: i32,
}
// ANCHOR_END: cfi_row

/// The FDE for [`system_v_cie`] that follows `rows` over `code_len` bytes,
/// starting at `address` (usually [`REGION_START`]).
///
/// # Errors
///
/// `InvalidInput` naming the row, if `code_len` is 0, a row's offset is not
/// inside the code or not above the previous row's, a CFA offset is
/// negative, a save slot is not a negative multiple of 8, or a register
/// appears twice in one row.
pub fn fde_from_rows(
    address: Address,
    code_len: u32,
    rows: &[CfiRow<'_>],
) -> io::Result<FrameDescriptionEntry> {
    super::fde_from_entry_and_rows(
        address,
        code_len,
        super::EntryRule {
            cfa_register: X86_64::RSP,
            cfa_offset: ENTRY_CFA_OFFSET,
            instruction_alignment: 1,
        },
        rows,
    )
}

impl CallFrameInfo {
    /// Call-frame information for a standard x86-64 frame-pointer function
    /// of `code_len` bytes, `push rbp; mov rbp, rsp` … `pop rbp; ret` (see
    /// [`frame_pointer_fde`] for the rows and the module docs for an example).
    ///
    /// # Errors
    ///
    /// As [`frame_pointer_fde`].
    pub fn x86_64_frame_pointer(code_len: u32) -> io::Result<CallFrameInfo> {
        Ok(CallFrameInfo::new(
            system_v_cie(),
            frame_pointer_fde(REGION_START, code_len)?,
        ))
    }

    /// Call-frame information for x86-64 code of `code_len` bytes described
    /// by `rows` (see [`CfiRow`] and the module docs for an example).
    ///
    /// # Errors
    ///
    /// As [`fde_from_rows`].
    pub fn x86_64_rows(code_len: u32, rows: &[CfiRow<'_>]) -> io::Result<CallFrameInfo> {
        Ok(CallFrameInfo::new(
            system_v_cie(),
            fde_from_rows(REGION_START, code_len, rows)?,
        ))
    }
}

/// Code alignment factor: instructions are byte-aligned.
const CODE_ALIGNMENT: u8 = 1;
/// Data alignment factor: stack slots are 8 bytes, growing down.
const DATA_ALIGNMENT: i8 = -8;
/// CFA offset from `rsp` at function entry (the return address).
const ENTRY_CFA_OFFSET: i32 = 8;
