//! Unwind information in C form: how a C code generator tells perf where
//! each function's caller frame is, without writing DWARF itself.
//!
//! A region's `unwind` field points to a [`perfsupport_unwind`] (or is NULL:
//! no CFI, unwinders fall back to frame pointers). Its `kind` is one of:
//!
//! * [`PERFSUPPORT_UNWIND_FRAME_POINTER`]: the standard x86-64 frame, with
//!   `push rbp` (1 byte) and `mov rbp, rsp` (3 bytes) at offset 0 and one
//!   epilogue `pop rbp; ret` as the last 2 bytes of the region. No steps.
//! * [`PERFSUPPORT_UNWIND_STEPS`]: any other prologue, as a list of
//!   [`perfsupport_cfi_step`]s sorted by offset ("from offset N on, CFA =
//!   reg + off", "reg is saved at CFA + k", "reg is restored"). Every
//!   region starts in the state right after a `call`: CFA = rsp + 8, the
//!   return address saved at CFA - 8.
//!
//! Registers are DWARF x86-64 numbers ([`PERFSUPPORT_REG_RBP`] = 6,
//! [`PERFSUPPORT_REG_RSP`] = 7, ...).
//!
//! The description becomes a gimli CIE and FDE, and perfsupport's own
//! unwind builders lay them out for perf (`.eh_frame` + `.eh_frame_hdr` in
//! each jitdump UNWINDING_INFO record).

use crate::cstr;
use crate::error::{Error, PERFSUPPORT_EIO, guard};
use gimli::write::{CallFrameInstruction, CommonInformationEntry, FrameDescriptionEntry};
use gimli::{Encoding, Format, Register, X86_64};
use std::ffi::c_int;

/// No CFI (the same as a NULL `unwind` pointer).
pub const PERFSUPPORT_UNWIND_NONE: u32 = 0;
/// The standard frame-pointer prologue and epilogue; see the module docs.
pub const PERFSUPPORT_UNWIND_FRAME_POINTER: u32 = 1;
/// A list of CFI steps.
pub const PERFSUPPORT_UNWIND_STEPS: u32 = 2;

/// Step: from `offset` on, CFA = `reg` + `value`.
pub const PERFSUPPORT_CFI_DEF_CFA: u32 = 0;
/// Step: from `offset` on, CFA = (the same register) + `value`.
pub const PERFSUPPORT_CFI_DEF_CFA_OFFSET: u32 = 1;
/// Step: from `offset` on, `reg`'s caller value is saved at CFA + `value`.
pub const PERFSUPPORT_CFI_SAVED_AT: u32 = 2;
/// Step: from `offset` on, `reg` holds its caller's value again.
pub const PERFSUPPORT_CFI_RESTORED: u32 = 3;

/// DWARF number of `rbx`.
pub const PERFSUPPORT_REG_RBX: u16 = 3;
/// DWARF number of `rbp`.
pub const PERFSUPPORT_REG_RBP: u16 = 6;
/// DWARF number of `rsp`.
pub const PERFSUPPORT_REG_RSP: u16 = 7;
/// DWARF number of `r12` (`r13`..`r15` follow).
pub const PERFSUPPORT_REG_R12: u16 = 12;
/// DWARF number of the return address column.
pub const PERFSUPPORT_REG_RA: u16 = 16;

/// One CFI step; see the `PERFSUPPORT_CFI_*` operations.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct perfsupport_cfi_step {
    /// Code offset from the region start where the rule starts to hold
    /// (the offset of the instruction *after* the one that changed it).
    pub offset: u32,
    /// One of `PERFSUPPORT_CFI_*`.
    pub op: u32,
    /// A DWARF register number (ignored by `DEF_CFA_OFFSET`).
    pub reg: u16,
    /// The offset of the rule, in bytes.
    pub value: i32,
}

/// How to unwind one region; see the module docs.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct perfsupport_unwind {
    /// One of `PERFSUPPORT_UNWIND_*`.
    pub kind: u32,
    /// For `PERFSUPPORT_UNWIND_STEPS`: `step_count` steps sorted by offset.
    pub steps: *const perfsupport_cfi_step,
    /// Number of `steps`.
    pub step_count: usize,
}

/// A region's CFI as gimli entries, owned (regions borrow them).
pub(crate) struct OwnedUnwind {
    pub cie: CommonInformationEntry,
    pub fde: FrameDescriptionEntry,
}

impl OwnedUnwind {
    pub fn as_info(&self) -> ps::UnwindInfo<'_> {
        ps::UnwindInfo {
            cie: &self.cie,
            fde: &self.fde,
        }
    }
}

/// The x86-64 System V CIE: CFA = rsp + 8, return address at CFA - 8.
fn x86_64_cie() -> CommonInformationEntry {
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

/// Converts `unwind` (NULL or `NONE`: `None`) for a region of `size` bytes;
/// `region` names the region in errors.
///
/// # Safety
/// `unwind` is NULL or valid, and its `steps` hold `step_count` elements.
pub(crate) unsafe fn convert(
    unwind: *const perfsupport_unwind,
    size: u64,
    region: &str,
) -> Result<Option<OwnedUnwind>, Error> {
    // SAFETY: the caller's contract.
    let Some(unwind) = (unsafe { unwind.as_ref() }) else {
        return Ok(None);
    };
    let invalid =
        |problem: String| Error::invalid(format!("code region {region:?}: unwind: {problem}"));
    let length = u32::try_from(size).map_err(|_| invalid("code is larger than 4 GiB".into()))?;
    let mut fde = FrameDescriptionEntry::new(ps::unwind::REGION_START, length);
    match unwind.kind {
        PERFSUPPORT_UNWIND_NONE => return Ok(None),
        PERFSUPPORT_UNWIND_FRAME_POINTER => {
            if size < 6 {
                return Err(invalid(format!(
                    "a frame-pointer region needs at least 6 bytes (push rbp; mov rbp, rsp; pop rbp; ret), it has {size}"
                )));
            }
            fde.add_instruction(1, CallFrameInstruction::CfaOffset(16));
            fde.add_instruction(1, CallFrameInstruction::Offset(X86_64::RBP, -16));
            fde.add_instruction(4, CallFrameInstruction::CfaRegister(X86_64::RBP));
            // After `pop rbp`, only `ret` is left.
            fde.add_instruction(length - 1, CallFrameInstruction::Cfa(X86_64::RSP, 8));
            fde.add_instruction(length - 1, CallFrameInstruction::SameValue(X86_64::RBP));
        }
        PERFSUPPORT_UNWIND_STEPS => {
            // SAFETY: the caller's contract.
            let steps = unsafe { cstr::slice(unwind.steps, unwind.step_count, "unwind steps") }
                .map_err(|err| invalid(err.message))?;
            let mut previous = 0;
            for (index, step) in steps.iter().enumerate() {
                if step.offset < previous {
                    return Err(invalid(format!("step {index}: offsets are not sorted")));
                }
                if u64::from(step.offset) >= size {
                    return Err(invalid(format!(
                        "step {index}: offset {} is outside the {size} code bytes",
                        step.offset
                    )));
                }
                if step.reg > PERFSUPPORT_REG_RA {
                    return Err(invalid(format!(
                        "step {index}: register {} is not an x86-64 general register (0..=16)",
                        step.reg
                    )));
                }
                previous = step.offset;
                let reg = Register(step.reg);
                let instruction = match step.op {
                    PERFSUPPORT_CFI_DEF_CFA => CallFrameInstruction::Cfa(reg, step.value),
                    PERFSUPPORT_CFI_DEF_CFA_OFFSET => CallFrameInstruction::CfaOffset(step.value),
                    PERFSUPPORT_CFI_SAVED_AT => CallFrameInstruction::Offset(reg, step.value),
                    PERFSUPPORT_CFI_RESTORED => CallFrameInstruction::SameValue(reg),
                    op => return Err(invalid(format!("step {index}: unknown operation {op}"))),
                };
                fde.add_instruction(step.offset, instruction);
            }
        }
        kind => return Err(invalid(format!("unknown kind {kind}"))),
    }
    Ok(Some(OwnedUnwind {
        cie: x86_64_cie(),
        fde,
    }))
}

/// Stores in `*out` how many bytes to reserve for a region of `code_size`
/// bytes with `unwind` (NULL: none) so that the ranges perf maps for
/// consecutive regions never overlap: code, padding to 8, the unwind
/// payload, padding to 16. Lay regions out at these strides.
///
/// Returns 0 or `PERFSUPPORT_EINVAL` (bad description, NULL `out`).
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
        // SAFETY: the caller's contract.
        let owned = unsafe { convert(unwind, code_size as u64, "(size query)") }?;
        let size = ps::unwind::reserved_region_size(
            code_size as u64,
            owned.as_ref().map(OwnedUnwind::as_info),
        )
        .map_err(|err| Error::io(PERFSUPPORT_EIO, &err))?;
        // SAFETY: non-null and writable by the caller's contract.
        unsafe { out.write(size as usize) };
        Ok(())
    })
}
