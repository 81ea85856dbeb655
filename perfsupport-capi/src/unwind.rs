//! Unwind information in C form: how a C code generator tells perf where
//! each function's caller frame is, without writing DWARF itself. It is
//! perfsupport's [`ps::unwind::x86_64`] and [`ps::unwind::aarch64`] APIs
//! (`CallFrameInfo::host_frame_pointer` and `CallFrameInfo::host_rows`)
//! with C structs, for the architecture the library was built for.
//!
//! A region's `unwind` field points to a [`perfsupport_unwind`] (or is NULL:
//! no CFI, unwinders fall back to frame pointers). Its `kind` is one of:
//!
//! * [`PERFSUPPORT_UNWIND_FRAME_POINTER`]: the host's standard frame, no
//!   rows. x86-64: `push rbp; mov rbp, rsp` at offset 0 and `pop rbp; ret`
//!   as the last 2 bytes. aarch64: `stp x29, x30, [sp, #-16]!; mov x29, sp`
//!   as the first 2 instructions and `ldp x29, x30, [sp], #16; ret` as the
//!   last 2.
//! * [`PERFSUPPORT_UNWIND_ROWS`]: any other prologue, as a list of
//!   [`perfsupport_cfi_row`]s sorted by offset. Each row gives the whole rule
//!   set from its offset on: CFA = `cfa_register` + `cfa_offset`, and where
//!   each callee-saved register saved so far sits (CFA + its offset).
//!   Before the first row, the state right after a call holds: on x86-64
//!   CFA = rsp + 8, nothing saved; on aarch64 CFA = sp + 0, the return
//!   address in x30, nothing saved (offsets are multiples of 4 there).
//!
//! Registers are DWARF numbers: x86-64 ([`PERFSUPPORT_REG_RBP`] = 6,
//! [`PERFSUPPORT_REG_RSP`] = 7, ...) or aarch64 ([`PERFSUPPORT_REG_X29`] =
//! 29, [`PERFSUPPORT_REG_X30`] = 30, [`PERFSUPPORT_REG_SP`] = 31).

use super::cstr;
use super::error::{Error, PERFSUPPORT_EIO, guard};
use gimli::Register;
use ps::unwind::CallFrameInfo;
use ps::unwind::x86_64::{CfiRow, SavedRegister}; // the same rows on aarch64
use std::ffi::c_int;

/// No CFI (the same as a NULL `unwind` pointer): the jitdump gets the
/// header-only unwind record, and perf unwinds the code by frame pointers.
pub const PERFSUPPORT_UNWIND_NONE: u32 = 0;
/// The host's standard frame, no rows needed.
///
/// x86-64: `push rbp; mov rbp, rsp` as the first 4 bytes, `ret` as the
/// last byte, and one 1-byte instruction before it that restores the
/// caller's `rbp`: `pop rbp`, or `leave` (`mov rsp, rbp; pop rbp`, what C
/// compilers emit). Both are covered: up to that instruction the caller's
/// frame is at `rbp + 16`, at the `ret` at `rsp + 8`. At least 6 bytes.
///
/// aarch64: `stp x29, x30, [sp, #-16]!; mov x29, sp` as the first 2
/// instructions, `ret` as the last, and `ldp x29, x30, [sp], #16` before
/// it: up to the `ret` the caller's frame is at `x29 + 16` (the frame
/// record at CFA - 16), at the `ret` at `sp + 0` with the return address
/// in x30. Whole 4-byte instructions, at least 16 bytes.
///
/// A function that returns early, or whose epilogue differs, is described
/// with `PERFSUPPORT_UNWIND_ROWS`.
pub const PERFSUPPORT_UNWIND_FRAME_POINTER: u32 = 1;
/// A list of CFI rows, from the host's entry state on (x86-64: CFA =
/// rsp + 8; aarch64: CFA = sp + 0, return address in x30).
pub const PERFSUPPORT_UNWIND_ROWS: u32 = 2;

/// DWARF number of `rbx` (x86-64).
pub const PERFSUPPORT_REG_RBX: u16 = 3;
/// DWARF number of `rbp` (x86-64).
pub const PERFSUPPORT_REG_RBP: u16 = 6;
/// DWARF number of `rsp` (x86-64).
pub const PERFSUPPORT_REG_RSP: u16 = 7;
/// DWARF number of `r12` (x86-64; `r13`..`r15` follow).
pub const PERFSUPPORT_REG_R12: u16 = 12;
/// DWARF number of `x29`, the frame pointer (aarch64; `x19`..`x28`, the
/// other callee-saved registers, are 19..28).
pub const PERFSUPPORT_REG_X29: u16 = 29;
/// DWARF number of `x30`, the link register: the return address (aarch64).
pub const PERFSUPPORT_REG_X30: u16 = 30;
/// DWARF number of `sp` (aarch64).
pub const PERFSUPPORT_REG_SP: u16 = 31;

/// A callee-saved register whose caller's value is on the stack.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct perfsupport_saved_register {
    /// DWARF register number.
    pub reg: u16,
    /// The save slot is at CFA + `cfa_offset` (x86-64: -16 for the first
    /// push, ...; aarch64: -16 for x29 of a frame record, -8 for x30).
    pub cfa_offset: i32,
}

/// The unwinding rules from `offset` on, up to the next row.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct perfsupport_cfi_row {
    /// Offset of the first instruction the row covers (the one after the
    /// `push`, `sub rsp` or `mov rbp, rsp` that changed the rules; aarch64:
    /// after the `stp`, `sub sp` or `mov x29, sp`, a multiple of 4).
    pub offset: u32,
    /// The register the CFA is computed from (rsp, or rbp; aarch64: sp, or
    /// x29).
    pub cfa_register: u16,
    /// CFA = `cfa_register` + `cfa_offset`.
    pub cfa_offset: i32,
    /// `saved_count` registers saved so far, or NULL when 0.
    pub saved: *const perfsupport_saved_register,
    /// Number of `saved`.
    pub saved_count: usize,
}

/// How to unwind one region; see the module docs.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct perfsupport_unwind {
    /// One of `PERFSUPPORT_UNWIND_*`.
    pub kind: u32,
    /// For `PERFSUPPORT_UNWIND_ROWS`: `row_count` rows sorted by offset.
    pub rows: *const perfsupport_cfi_row,
    /// Number of `rows`.
    pub row_count: usize,
}

/// Converts `unwind` (NULL or `NONE`: `None`) for a region of `size` bytes;
/// `region` names the region in errors.
///
/// # Safety
/// `unwind` is NULL or valid, and its arrays hold what their counts say.
pub(crate) unsafe fn convert(
    unwind: *const perfsupport_unwind,
    size: usize,
    region: &str,
) -> Result<Option<CallFrameInfo>, Error> {
    // SAFETY: the caller's contract.
    let Some(unwind) = (unsafe { unwind.as_ref() }) else {
        return Ok(None);
    };
    let invalid =
        |problem: String| Error::invalid(format!("code region {region:?}: unwind: {problem}"));
    let length = u32::try_from(size).map_err(|_| invalid("code is larger than 4 GiB".into()))?;
    let built = match unwind.kind {
        PERFSUPPORT_UNWIND_NONE => return Ok(None),
        PERFSUPPORT_UNWIND_FRAME_POINTER => CallFrameInfo::host_frame_pointer(length),
        PERFSUPPORT_UNWIND_ROWS => {
            // SAFETY: the caller's contract.
            let rows = unsafe { cstr::slice(unwind.rows, unwind.row_count, "unwind rows") }
                .map_err(|err| invalid(err.message))?;
            let mut saved = Vec::with_capacity(rows.len());
            for (index, row) in rows.iter().enumerate() {
                // SAFETY: the caller's contract.
                let slots = unsafe { cstr::slice(row.saved, row.saved_count, "saved registers") }
                    .map_err(|err| invalid(format!("CFI row {index}: {}", err.message)))?;
                saved.push(
                    slots
                        .iter()
                        .map(|slot| SavedRegister {
                            register: Register(slot.reg),
                            cfa_offset: slot.cfa_offset,
                        })
                        .collect::<Vec<_>>(),
                );
            }
            let rows: Vec<CfiRow<'_>> = rows
                .iter()
                .zip(&saved)
                .map(|(row, saved)| CfiRow {
                    offset: row.offset,
                    cfa_register: Register(row.cfa_register),
                    cfa_offset: row.cfa_offset,
                    saved,
                })
                .collect();
            CallFrameInfo::host_rows(length, &rows)
        }
        kind => return Err(invalid(format!("unknown kind {kind}"))),
    };
    built.map(Some).map_err(|err| invalid(err.to_string()))
}

/// Stores in `*out` how many bytes to reserve for a region of `code_size`
/// bytes with `unwind` (NULL: none) so that the ranges perf maps for
/// consecutive regions never overlap: code, room for a build-id marker,
/// padding to 8, the unwind payload, padding to 16. Lay regions out at
/// these strides to keep DWARF unwinding in every region; packed regions
/// are registered too, with frame-pointer unwinding where the room is
/// missing (see `perfsupport_register_ex`).
///
/// The smallest region: 1 byte with no unwind info (NULL or
/// `PERFSUPPORT_UNWIND_NONE`); with `PERFSUPPORT_UNWIND_FRAME_POINTER` (its
/// prologue and epilogue) 6 bytes on x86-64, 16 on aarch64; with
/// `PERFSUPPORT_UNWIND_ROWS`, every row's offset inside the code.
///
/// ```c
/// size_t stride;
/// perfsupport_unwind fp = {.kind = PERFSUPPORT_UNWIND_FRAME_POINTER};
/// perfsupport_reserved_region_size(code_size, &fp, &stride); /* next function at code + stride */
/// ```
///
/// Returns 0 or `PERFSUPPORT_EINVAL` (a `code_size` of 0, as a region of
/// no code is invalid everywhere else; a `code_size` below what `unwind`
/// needs; a bad description; NULL `out`).
///
/// Threads: any thread (pure computation).
///
/// # Safety
/// `unwind` is NULL or valid (see `perfsupport_region`); `out` is NULL or
/// writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perfsupport_reserved_region_size(
    code_size: usize,
    unwind: *const perfsupport_unwind,
    out: *mut usize,
) -> c_int {
    guard(|| {
        if out.is_null() {
            return Err(Error::invalid("out is NULL"));
        }
        if code_size == 0 {
            return Err(Error::invalid("code_size is 0: a region holds code"));
        }
        // SAFETY: the caller's contract.
        let cfi = unsafe { convert(unwind, code_size, "(size query)") }?;
        let size = ps::unwind::reserved_region_size(
            code_size as u64,
            cfi.as_ref().map(CallFrameInfo::unwind_info),
        )
        .map_err(|err| Error::io(PERFSUPPORT_EIO, &err))?;
        // SAFETY: non-null and writable by the caller's contract.
        unsafe { out.write(size as usize) };
        Ok(())
    })
}
