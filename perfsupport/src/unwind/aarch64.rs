//! Call-frame information for aarch64 code from any code generator: the
//! standard frame-record function in one call.
//!
//! On aarch64 a call leaves the return address in the link register `x30`,
//! not on the stack: at a function's first instruction the CFA (the
//! caller's `sp`) is `sp` itself and the return address is `x30`'s value.
//! A function that calls others saves `x29` (the frame pointer) and `x30`
//! as a *frame record* on the stack; that record is also the chain
//! frame-pointer unwinders follow.
//!
//! ```
//! use perfsupport::unwind::CallFrameInfo;
//! use perfsupport::CodeRegion;
//!
//! # fn main() -> std::io::Result<()> {
//! // stp x29, x30, [sp, #-16]!; mov x29, sp; mov w0, #42; ldp x29, x30, [sp], #16; ret
//! let code: &[u8] = &[
//!     0xfd, 0x7b, 0xbf, 0xa9, 0xfd, 0x03, 0x00, 0x91, 0x40, 0x05, 0x80, 0x52,
//!     0xfd, 0x7b, 0xc1, 0xa8, 0xc0, 0x03, 0x5f, 0xd6,
//! ];
//! let cfi = CallFrameInfo::aarch64_frame_record(code.len() as u32)?;
//! let region = CodeRegion::new(code, "minijit::answer").with_unwind(&cfi);
//! assert!(region.validate().is_ok());
//! # Ok(())
//! # }
//! ```
//!
//! Registers are DWARF register numbers ([`gimli::AArch64`]: `x0`-`x30`
//! 0-30, `sp` 31).

use super::{CallFrameInfo, REGION_START};
use gimli::write::{Address, CallFrameInstruction, CommonInformationEntry, FrameDescriptionEntry};
use gimli::{AArch64, Encoding, Format};
use std::io;

/// Code alignment factor: every instruction is 4 bytes.
const CODE_ALIGNMENT: u8 = 4;
/// Data alignment factor: stack slots are 8 bytes, growing down.
const DATA_ALIGNMENT: i8 = -8;

/// The AAPCS64 CIE, the same as Cranelift's `isa.create_systemv_cie()` for
/// aarch64: CFI version 1, code alignment 4, data alignment -8, return
/// address in register 30 (`x30`, the link register); at function entry
/// CFA = `sp` + 0 and the return address is still in `x30`.
pub fn aapcs64_cie() -> CommonInformationEntry {
    let encoding = Encoding {
        address_size: 8,
        format: Format::Dwarf32,
        version: 1,
    };
    let mut cie =
        CommonInformationEntry::new(encoding, CODE_ALIGNMENT, DATA_ALIGNMENT, AArch64::X30);
    cie.add_instruction(CallFrameInstruction::Cfa(AArch64::SP, 0));
    cie
}

// ANCHOR: frame_record_rows
/// The FDE of a standard frame-record function of `code_len` bytes (a
/// multiple of 4, at least 16) for [`aapcs64_cie`]:
///
/// | offset | instruction | CFA | `x29`, `x30` |
/// |---|---|---|---|
/// | 0 | `stp x29, x30, [sp, #-16]!` | `sp` + 0 | caller's (return address in `x30`) |
/// | 4 | `mov x29, sp` | `sp` + 16 | at CFA - 16, CFA - 8 |
/// | 8 | body ... `ldp x29, x30, [sp], #16` | `x29` + 16 | at CFA - 16, CFA - 8 |
/// | `code_len` - 4 | `ret` (the last instruction) | `sp` + 0 | caller's again |
///
/// The last row assumes the function's only epilogue ends it.
///
/// # Errors
///
/// `InvalidInput` if `code_len` is below 16 or not a multiple of 4.
pub fn frame_record_fde(address: Address, code_len: u32) -> io::Result<FrameDescriptionEntry> {
    if code_len < 16 || !code_len.is_multiple_of(4) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "a frame-record function is whole 4-byte instructions, at least 16 bytes \
                 (stp; mov x29, sp; ldp; ret), not {code_len}"
            ),
        ));
    }
    let mut fde = FrameDescriptionEntry::new(address, code_len);
    fde.add_instruction(4, CallFrameInstruction::CfaOffset(16));
    fde.add_instruction(4, CallFrameInstruction::Offset(AArch64::X29, -16));
    fde.add_instruction(4, CallFrameInstruction::Offset(AArch64::X30, -8));
    fde.add_instruction(8, CallFrameInstruction::CfaRegister(AArch64::X29));
    let ret = code_len - 4;
    fde.add_instruction(ret, CallFrameInstruction::Cfa(AArch64::SP, 0));
    fde.add_instruction(ret, CallFrameInstruction::SameValue(AArch64::X29));
    fde.add_instruction(ret, CallFrameInstruction::SameValue(AArch64::X30));
    Ok(fde)
}
// ANCHOR_END: frame_record_rows

impl CallFrameInfo {
    /// Call-frame information for a standard aarch64 frame-record function
    /// of `code_len` bytes, `stp x29, x30, [sp, #-16]!; mov x29, sp` ...
    /// `ldp x29, x30, [sp], #16; ret` (see [`frame_record_fde`]).
    ///
    /// # Errors
    ///
    /// As [`frame_record_fde`].
    pub fn aarch64_frame_record(code_len: u32) -> io::Result<CallFrameInfo> {
        Ok(CallFrameInfo::new(
            aapcs64_cie(),
            frame_record_fde(REGION_START, code_len)?,
        ))
    }

    /// Call-frame information for the host architecture's standard
    /// frame-pointer function of `code_len` bytes: `x86_64_frame_pointer`
    /// on x86-64, [`aarch64_frame_record`](Self::aarch64_frame_record) on
    /// aarch64.
    ///
    /// # Errors
    ///
    /// As the architecture's function; `Unsupported` on other hosts.
    pub fn host_frame_pointer(code_len: u32) -> io::Result<CallFrameInfo> {
        if cfg!(target_arch = "aarch64") {
            CallFrameInfo::aarch64_frame_record(code_len)
        } else if cfg!(target_arch = "x86_64") {
            CallFrameInfo::x86_64_frame_pointer(code_len)
        } else {
            Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "no standard frame-pointer CFI for this architecture",
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gimli::{BaseAddresses, EhFrame, LittleEndian, UnwindContext, UnwindSection};

    /// The rows a DWARF reader sees, at each instruction of a 20-byte function.
    #[test]
    fn every_instruction_has_the_frame_record_rule() {
        let fde = frame_record_fde(Address::Constant(0x1000), 20).expect("fde");
        let mut table = gimli::write::FrameTable::default();
        let cie = table.add_cie(aapcs64_cie());
        table.add_fde(cie, fde);
        let mut out = gimli::write::EhFrame(gimli::write::EndianVec::new(LittleEndian));
        table.write_eh_frame(&mut out).expect("eh_frame");
        let bytes = out.0.into_vec();
        let eh = EhFrame::new(&bytes, LittleEndian);
        let bases = BaseAddresses::default();
        let mut ctx = UnwindContext::new();
        let mut rule = |pc: u64| {
            let row = eh
                .unwind_info_for_address(&bases, &mut ctx, 0x1000 + pc, EhFrame::cie_from_offset)
                .expect("a row");
            let cfa = match row.cfa() {
                gimli::CfaRule::RegisterAndOffset { register, offset } => (register.0, *offset),
                other => panic!("{other:?}"),
            };
            let saved = |r| match row.register(r) {
                Some(gimli::RegisterRule::Offset(o)) => Some(o),
                _ => None,
            };
            (cfa, saved(AArch64::X29), saved(AArch64::X30))
        };
        assert_eq!(rule(0), ((31, 0), None, None));
        assert_eq!(rule(4), ((31, 16), Some(-16), Some(-8)));
        assert_eq!(rule(8), ((29, 16), Some(-16), Some(-8)));
        assert_eq!(rule(12), ((29, 16), Some(-16), Some(-8)));
        assert_eq!(rule(16), ((31, 0), None, None));
        assert!(CallFrameInfo::aarch64_frame_record(18).is_err());
        assert!(CallFrameInfo::aarch64_frame_record(12).is_err());
    }
}
