//! Call-frame information for aarch64 code from any code generator: the
//! standard frame-record function in one call, any other prologue as a
//! short list of [`CfiRow`]s (the same rows as on x86-64).
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
//! # Any other prologue, row by row
//!
//! As on x86-64 (see [`x86_64`](super::x86_64)), each [`CfiRow`] gives the
//! whole rule set from its offset on. Before the first row the entry state
//! holds: CFA = `sp` + 0, the return address in `x30`, nothing saved. Row
//! offsets are multiples of 4. A leaf that never saves `x30`
//! (`sub sp, sp, #32` ... `add sp, sp, #32; ret`):
//!
//! ```
//! use perfsupport::gimli::AArch64;
//! use perfsupport::unwind::aarch64::CfiRow;
//! use perfsupport::unwind::CallFrameInfo;
//!
//! # fn main() -> std::io::Result<()> {
//! let rows = [
//!     // after `sub sp, sp, #32`
//!     CfiRow { offset: 4, cfa_register: AArch64::SP, cfa_offset: 32, saved: &[] },
//!     // after `add sp, sp, #32`, at the `ret` (offset 12)
//!     CfiRow { offset: 12, cfa_register: AArch64::SP, cfa_offset: 0, saved: &[] },
//! ];
//! let cfi = CallFrameInfo::aarch64_rows(16, &rows)?;
//! # let _ = cfi;
//! # Ok(())
//! # }
//! ```
//!
//! Registers are DWARF register numbers ([`gimli::AArch64`]: `x0`-`x30`
//! 0-30, `sp` 31).

use super::{CallFrameInfo, EntryRule, REGION_START};
use gimli::write::{Address, CallFrameInstruction, CommonInformationEntry, FrameDescriptionEntry};
use gimli::{AArch64, Encoding, Format};
use std::io;

/// The rows are the same as x86-64's; only the entry rule differs.
pub use super::x86_64::{CfiRow, SavedRegister};

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

/// The FDE for [`aapcs64_cie`] that follows `rows` over `code_len` bytes
/// (a multiple of 4), starting at `address` (usually [`REGION_START`]).
/// Before the first row: CFA = `sp` + 0, return address in `x30`.
///
/// # Errors
///
/// `InvalidInput` naming the row, as
/// [`x86_64::fde_from_rows`](super::x86_64::fde_from_rows), and also if
/// `code_len` or a row's offset is not a multiple of 4.
pub fn fde_from_rows(
    address: Address,
    code_len: u32,
    rows: &[CfiRow<'_>],
) -> io::Result<FrameDescriptionEntry> {
    super::fde_from_entry_and_rows(
        address,
        code_len,
        EntryRule {
            cfa_register: AArch64::SP,
            cfa_offset: 0,
            instruction_alignment: 4,
        },
        rows,
    )
}

impl CallFrameInfo {
    /// Call-frame information for aarch64 code of `code_len` bytes
    /// described by `rows` (see [`CfiRow`] and the module docs for an
    /// example).
    ///
    /// # Errors
    ///
    /// As [`fde_from_rows`].
    pub fn aarch64_rows(code_len: u32, rows: &[CfiRow<'_>]) -> io::Result<CallFrameInfo> {
        Ok(CallFrameInfo::new(
            aapcs64_cie(),
            fde_from_rows(REGION_START, code_len, rows)?,
        ))
    }

    /// Call-frame information from `rows` for the host architecture:
    /// [`x86_64_rows`](Self::x86_64_rows) on x86-64 (entry CFA = `rsp` +
    /// 8), [`aarch64_rows`](Self::aarch64_rows) on aarch64 (entry CFA =
    /// `sp` + 0, return address in `x30`).
    ///
    /// # Errors
    ///
    /// As the architecture's function; `Unsupported` on other hosts.
    pub fn host_rows(code_len: u32, rows: &[CfiRow<'_>]) -> io::Result<CallFrameInfo> {
        if cfg!(target_arch = "aarch64") {
            CallFrameInfo::aarch64_rows(code_len, rows)
        } else if cfg!(target_arch = "x86_64") {
            CallFrameInfo::x86_64_rows(code_len, rows)
        } else {
            Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "no CFI rows for this architecture",
            ))
        }
    }

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
    use gimli::{BaseAddresses, EhFrame, LittleEndian, Register, UnwindContext, UnwindSection};

    /// `fde` as `.eh_frame` bytes, with [`aapcs64_cie`].
    fn eh_frame(fde: FrameDescriptionEntry) -> Vec<u8> {
        let mut table = gimli::write::FrameTable::default();
        let cie = table.add_cie(aapcs64_cie());
        table.add_fde(cie, fde);
        let mut out = gimli::write::EhFrame(gimli::write::EndianVec::new(LittleEndian));
        table.write_eh_frame(&mut out).expect("eh_frame");
        out.0.into_vec()
    }

    /// The CFA rule at `address` in `.eh_frame` `bytes` (register, offset),
    /// and where each of `registers` is saved (CFA + offset; `None`: in
    /// itself, the caller's value).
    fn rule_at(
        bytes: &[u8],
        address: u64,
        registers: &[Register],
    ) -> ((u16, i64), Vec<Option<i64>>) {
        let eh = EhFrame::new(bytes, LittleEndian);
        let mut ctx = UnwindContext::new();
        let row = eh
            .unwind_info_for_address(
                &BaseAddresses::default(),
                &mut ctx,
                address,
                EhFrame::cie_from_offset,
            )
            .expect("a row");
        let cfa = match row.cfa() {
            gimli::CfaRule::RegisterAndOffset { register, offset } => (register.0, *offset),
            other => panic!("{other:?}"),
        };
        let saved = (registers.iter())
            .map(|&r| match row.register(r) {
                Some(gimli::RegisterRule::Offset(o)) => Some(o),
                Some(gimli::RegisterRule::SameValue) | None => None,
                other => panic!("{other:?}"),
            })
            .collect();
        (cfa, saved)
    }

    /// The rows a DWARF reader sees, at each instruction of a 20-byte function.
    #[test]
    fn every_instruction_has_the_frame_record_rule() {
        let bytes = eh_frame(frame_record_fde(Address::Constant(0x1000), 20).expect("fde"));
        let rule = |pc: u64| {
            let (cfa, saved) = rule_at(&bytes, 0x1000 + pc, &[AArch64::X29, AArch64::X30]);
            (cfa, saved[0], saved[1])
        };
        assert_eq!(rule(0), ((31, 0), None, None));
        assert_eq!(rule(4), ((31, 16), Some(-16), Some(-8)));
        assert_eq!(rule(8), ((29, 16), Some(-16), Some(-8)));
        assert_eq!(rule(12), ((29, 16), Some(-16), Some(-8)));
        assert_eq!(rule(16), ((31, 0), None, None));
        assert!(CallFrameInfo::aarch64_frame_record(18).is_err());
        assert!(CallFrameInfo::aarch64_frame_record(12).is_err());
    }

    /// A leaf (`sub sp, sp, #32` ... `add sp, sp, #32; ret`) and a function
    /// saving `x19` below its frame record, read back with gimli: the entry
    /// rule before the first row, each row from its offset on.
    #[test]
    fn rows_read_back_with_the_entry_rule_first() {
        let record = [
            SavedRegister {
                register: AArch64::X29,
                cfa_offset: -32,
            },
            SavedRegister {
                register: AArch64::X30,
                cfa_offset: -24,
            },
        ];
        let with_x19 = [
            record[0],
            record[1],
            SavedRegister {
                register: AArch64::X19,
                cfa_offset: -16,
            },
        ];
        // stp x29, x30, [sp, #-32]!; str x19, [sp, #16]; mov x29, sp;
        // body (3 instructions); ldr x19, [sp, #16]; ldp x29, x30, [sp], #32; ret
        let rows = [
            CfiRow {
                offset: 4,
                cfa_register: AArch64::SP,
                cfa_offset: 32,
                saved: &record,
            },
            CfiRow {
                offset: 8,
                cfa_register: AArch64::SP,
                cfa_offset: 32,
                saved: &with_x19,
            },
            CfiRow {
                offset: 12,
                cfa_register: AArch64::X29,
                cfa_offset: 32,
                saved: &with_x19,
            },
            CfiRow {
                offset: 28,
                cfa_register: AArch64::SP,
                cfa_offset: 32,
                saved: &record,
            },
            CfiRow {
                offset: 32,
                cfa_register: AArch64::SP,
                cfa_offset: 0,
                saved: &[],
            },
        ];
        let bytes = eh_frame(fde_from_rows(Address::Constant(0x2000), 36, &rows).expect("fde"));
        let rule = |pc: u64| {
            let registers = [AArch64::X29, AArch64::X30, AArch64::X19];
            let (cfa, saved) = rule_at(&bytes, 0x2000 + pc, &registers);
            (cfa, saved[0], saved[1], saved[2])
        };
        assert_eq!(rule(0), ((31, 0), None, None, None));
        assert_eq!(rule(4), ((31, 32), Some(-32), Some(-24), None));
        assert_eq!(rule(8), ((31, 32), Some(-32), Some(-24), Some(-16)));
        assert_eq!(rule(12), ((29, 32), Some(-32), Some(-24), Some(-16)));
        assert_eq!(rule(24), ((29, 32), Some(-32), Some(-24), Some(-16)));
        assert_eq!(rule(28), ((31, 32), Some(-32), Some(-24), None));
        assert_eq!(rule(32), ((31, 0), None, None, None));

        // The leaf: x30 never leaves the link register.
        let leaf = [
            CfiRow {
                offset: 4,
                cfa_register: AArch64::SP,
                cfa_offset: 32,
                saved: &[],
            },
            CfiRow {
                offset: 12,
                cfa_register: AArch64::SP,
                cfa_offset: 0,
                saved: &[],
            },
        ];
        let cfi = CallFrameInfo::aarch64_rows(16, &leaf).expect("leaf");
        assert_eq!(cfi.cie(), &aapcs64_cie());

        // Offsets and sizes are whole instructions.
        let odd = [CfiRow {
            offset: 2,
            cfa_register: AArch64::SP,
            cfa_offset: 16,
            saved: &[],
        }];
        let err = CallFrameInfo::aarch64_rows(16, &odd).expect_err("offset 2");
        assert!(err.to_string().contains("CFI row 0"), "{err}");
        assert!(CallFrameInfo::aarch64_rows(18, &leaf).is_err());
        assert!(CallFrameInfo::aarch64_rows(12, &leaf).is_err());
        // x86-64 rows still take any byte offset.
        assert!(CallFrameInfo::x86_64_rows(16, &odd).is_ok());
    }
}
