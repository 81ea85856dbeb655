//! Unwind information for JIT code: how a VM describes its stack frames,
//! how much room to leave after each region, and the `.eh_frame` section
//! the system unwinder reads. perf's own layout of the same description is
//! the jitdump's business ([`unwind::perf_layout`](crate::unwind::perf_layout)).
//!
//! # Describing frames
//!
//! A region's call-frame information is an [`UnwindInfo`]: a DWARF CIE and
//! FDE as [`gimli::write`] types ([`gimli`] is re-exported, so the versions
//! always match). Where they come from depends on the code generator:
//!
//! * **Cranelift**: `isa.create_systemv_cie()` and
//!   `UnwindInfo::to_fde(REGION_START)`, borrowed as they are.
//! * **Any other x86-64 code generator**: a [`CallFrameInfo`] (an owned CIE +
//!   FDE) from [`x86_64`]: [`CallFrameInfo::x86_64_frame_pointer`] for the
//!   standard `push rbp; mov rbp, rsp` … `pop rbp; ret` function, or
//!   [`CallFrameInfo::x86_64_rows`] for any other prologue, described as a few
//!   "from offset N: CFA = reg + off, reg saved at CFA − k" rows.
//! * **Any other aarch64 code generator**: the same from [`aarch64`]:
//!   [`CallFrameInfo::aarch64_frame_record`] for `stp x29, x30, [sp, #-16]!;
//!   mov x29, sp` … `ldp x29, x30, [sp], #16; ret`, or
//!   [`CallFrameInfo::aarch64_rows`] with the same rows. The `host_*`
//!   functions ([`CallFrameInfo::host_frame_pointer`],
//!   [`CallFrameInfo::host_rows`]) pick the build's architecture.
//! * **No CFI**: leave the region without unwind info. The jitdump then
//!   carries the header-only record
//!   ([`unwind::perf_layout`](crate::unwind::perf_layout)), and
//!   unwinders fall back to the frame-pointer chain, so such code must keep
//!   a frame pointer.
//!
//! ```
//! use perfsupport::unwind::CallFrameInfo;
//! use perfsupport::{CodeRegion};
//!
//! # fn main() -> std::io::Result<()> {
//! let code: &[u8] = &[0x55, 0x48, 0x89, 0xe5, 0x31, 0xc0, 0x5d, 0xc3]; // ... xor eax, eax ...
//! let cfi = CallFrameInfo::x86_64_frame_pointer(code.len() as u32)?;
//! let with_cfi = CodeRegion::new(code, "minijit::zero").with_unwind(&cfi);
//! let without_cfi = CodeRegion::new(code, "minijit::zero_fp");
//! # assert!(with_cfi.validate().is_ok() && without_cfi.validate().is_ok());
//! # Ok(())
//! # }
//! ```
//!
//! # The two layouts
//!
//! Cranelift describes each function's stack frame as a gimli
//! [`CommonInformationEntry`] plus a
//! [`FrameDescriptionEntry`]
//! (see [`UnwindInfo`]). Two consumers want those as bytes, with addresses
//! encoded differently:
//!
//! | layout | builder | FDE `pc_begin` encoding | `.eh_frame_hdr` |
//! |---|---|---|---|
//! | perf's injected ELF (`JIT_CODE_UNWINDING_INFO`) | [`PerfUnwindData::build`](crate::unwind::PerfUnwindData::build) | `DW_EH_PE_pcrel \| sdata4` (0x1b), relative to perf's layout | yes, 20 bytes |
//! | the system unwinder (`__register_frame`) | [`eh_frame_for_register_frame`] | `DW_EH_PE_absptr` (0x00), absolute runtime address | no |
//!
//! Both write CIE + FDE through one private writer that re-bases the FDE's
//! address for the layout and checks the FDE covers exactly the code.
//! [`unwind::perf_layout`](crate::unwind::perf_layout) documents
//! perf's layout byte by byte.
//!
//! # Room after each region
//!
//! perf maps each region's code *and* its unwind payload at the region's
//! address, and libunwind reads the table through that mapping, so the VM
//! leaves [`reserved_region_size`] bytes per region: the code, room for a
//! build-id marker, and perf's payload, padded so the injected ranges never
//! overlap.
//!
//! # The system unwinder's layout
//!
//! libgcc's `__register_frame(ptr)` takes a whole `.eh_frame` section (CIE
//! first, 4-byte zero terminator last) and reads addresses as absolute
//! (`absptr`). The bytes must stay alive and unmoved until
//! `__deregister_frame(ptr)`. LLVM's libunwind instead wants one FDE per call;
//! this crate does not build that form.

pub mod aarch64;
pub mod x86_64;

use crate::eh_frame::{FdeBase, LayoutWriter, align_up, write_cie_fde};
pub mod perf_layout;

pub use perf_layout::{EH_FRAME_HDR_SIZE, MARKER_LEN, PerfUnwindData, perf_unwind_data_size};

use crate::region::{CodeRegion, UnwindInfo};
use gimli::Register;
use gimli::constants::DW_EH_PE_absptr;
use gimli::write::{Address, CallFrameInstruction, CommonInformationEntry, FrameDescriptionEntry};
use std::io;
use x86_64::{CfiRow, SavedRegister};

// ANCHOR: call_frame_info
/// Owned call-frame information for one region: a CIE and an FDE whose
/// address is [`REGION_START`]. Build it with [`CallFrameInfo::x86_64_frame_pointer`],
/// [`CallFrameInfo::x86_64_rows`], their aarch64 twins
/// ([`CallFrameInfo::aarch64_frame_record`], [`CallFrameInfo::aarch64_rows`])
/// or [`CallFrameInfo::new`], keep it as long
/// as the region, and attach it with
/// [`CodeRegion::with_unwind(&cfi)`](CodeRegion::with_unwind).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallFrameInfo {
    cie: CommonInformationEntry,
    fde: FrameDescriptionEntry,
}
// ANCHOR_END: call_frame_info

impl CallFrameInfo {
    /// Wraps a CIE and FDE built with [`gimli::write`] (for example from a
    /// code generator that emits its own); the rules of [`UnwindInfo`] apply.
    pub fn new(cie: CommonInformationEntry, fde: FrameDescriptionEntry) -> CallFrameInfo {
        CallFrameInfo { cie, fde }
    }

    /// The common information entry.
    pub fn cie(&self) -> &CommonInformationEntry {
        &self.cie
    }

    /// The frame description entry.
    pub fn fde(&self) -> &FrameDescriptionEntry {
        &self.fde
    }

    /// Borrows both, as a region carries them.
    pub fn unwind_info(&self) -> UnwindInfo<'_> {
        UnwindInfo {
            cie: &self.cie,
            fde: &self.fde,
        }
    }
}

impl<'a> From<&'a CallFrameInfo> for UnwindInfo<'a> {
    fn from(cfi: &'a CallFrameInfo) -> UnwindInfo<'a> {
        cfi.unwind_info()
    }
}

/// The relocatable FDE address meaning "the start of the region being
/// registered" (symbol 0, addend 0). Passing it to Cranelift's
/// `UnwindInfo::to_fde` lets the VM build unwind info before it knows where
/// the code will live, e.g. to compute [`reserved_region_size`].
pub const REGION_START: Address = Address::Symbol {
    symbol: 0,
    addend: 0,
};

// ANCHOR: reserved_region_size
/// Bytes the VM must reserve for a region so that the range perf maps for it,
/// `[start, start + ALIGN8(dumped_size) + mapped_size)`, never overlaps the
/// next region: `ALIGN16(ALIGN8(code_size + MARKER_LEN) + unwind_data_size)`.
/// The dumped size is the code size, plus
/// [`MARKER_LEN`] for a region whose bytes the
/// jitdump already holds (see [`crate::jitdump`]'s build-id markers); the
/// VM cannot know in advance, so it always reserves the marker.
///
/// The reserved tail (after the code) may hold anything; copying the unwind
/// payload there, as V8 and CPython do, is optional. A VM that cannot pad
/// (it packs functions back to back) still gets exact names: the jitdump
/// writes a region without room header-only, and perf unwinds it by frame
/// pointers (see [`crate::jitdump`]'s packed code and
/// [`UnwindFallbacks`](crate::UnwindFallbacks)).
///
/// # Errors
///
/// As [`PerfUnwindData::build`](crate::unwind::PerfUnwindData::build).
pub fn reserved_region_size(code_size: u64, unwind: Option<UnwindInfo<'_>>) -> io::Result<u64> {
    let unwind_size = perf_unwind_data_size(code_size, unwind)?;
    let unpadded = align_up(code_size + MARKER_LEN as u64, 8) + unwind_size;
    Ok(align_up(unpadded, 16))
}
// ANCHOR_END: reserved_region_size

/// Builds a whole `.eh_frame` section for libgcc's `__register_frame`: for
/// each region that has unwind information, a CIE and an FDE with absolute
/// (`absptr`) addresses, then the 4-byte zero terminator. Regions without
/// unwind information are skipped; with none left, the result is just the
/// terminator, which `__register_frame` ignores.
///
/// The caller must keep the returned bytes alive and unmoved (e.g. leak the
/// `Box<[u8]>` or store it) from `__register_frame` until `__deregister_frame`.
///
/// # Errors
///
/// As [`PerfUnwindData::build`](crate::unwind::PerfUnwindData::build).
pub fn eh_frame_for_register_frame(regions: &[CodeRegion<'_>]) -> io::Result<Vec<u8>> {
    eh_frame_absolute(
        regions
            .iter()
            .filter_map(|r| Some((r.start(), r.size(), r.unwind?))),
    )
}

/// [`eh_frame_for_register_frame`] for `(start, size, unwind)` triples: the
/// form the GDB JIT sink keeps its regions in.
pub(crate) fn eh_frame_absolute<'a>(
    regions: impl IntoIterator<Item = (u64, u64, UnwindInfo<'a>)>,
) -> io::Result<Vec<u8>> {
    let mut writer = LayoutWriter::new(0);
    for (start, size, unwind) in regions {
        writer.rebase(start, size, FdeBase::Runtime(start));
        write_cie_fde(&mut writer, unwind, DW_EH_PE_absptr)?;
    }
    let mut bytes = writer.into_bytes();
    bytes.extend_from_slice(&[0; 4]);
    Ok(bytes)
}

/// The rule set at a function's first instruction, before any row
/// (x86-64: CFA = `rsp` + 8; aarch64: CFA = `sp` + 0), and the size every
/// row offset is a multiple of (1 on x86-64, 4 on aarch64).
#[derive(Clone, Copy, Debug)]
pub(crate) struct EntryRule {
    pub(crate) cfa_register: Register,
    pub(crate) cfa_offset: i32,
    pub(crate) instruction_alignment: u32,
}

/// The FDE that follows `rows` over `code_len` bytes from `entry` on: the
/// shared part of [`x86_64::fde_from_rows`] and [`aarch64::fde_from_rows`].
/// Each row becomes the CFA instructions that change the rule and an
/// `Offset` / `SameValue` for each register newly saved / restored.
pub(crate) fn fde_from_entry_and_rows(
    address: Address,
    code_len: u32,
    entry: EntryRule,
    rows: &[CfiRow<'_>],
) -> io::Result<FrameDescriptionEntry> {
    if code_len == 0 {
        return Err(invalid("call-frame information for 0 bytes of code".into()));
    }
    let alignment = entry.instruction_alignment;
    if !code_len.is_multiple_of(alignment) {
        return Err(invalid(format!(
            "{code_len} bytes of code are not whole {alignment}-byte instructions"
        )));
    }
    let mut fde = FrameDescriptionEntry::new(address, code_len);
    let mut cfa = (entry.cfa_register, entry.cfa_offset);
    let mut saved: &[SavedRegister] = &[];
    let mut previous_offset = None;
    for (index, row) in rows.iter().enumerate() {
        check_row(index, row, code_len, alignment, previous_offset)?;
        previous_offset = Some(row.offset);
        let at = row.offset;
        match (row.cfa_register == cfa.0, row.cfa_offset == cfa.1) {
            (true, true) => {}
            (false, true) => {
                fde.add_instruction(at, CallFrameInstruction::CfaRegister(row.cfa_register))
            }
            (true, false) => {
                fde.add_instruction(at, CallFrameInstruction::CfaOffset(row.cfa_offset))
            }
            (false, false) => fde.add_instruction(
                at,
                CallFrameInstruction::Cfa(row.cfa_register, row.cfa_offset),
            ),
        }
        cfa = (row.cfa_register, row.cfa_offset);
        for slot in row.saved {
            if !saved.contains(slot) {
                fde.add_instruction(
                    at,
                    CallFrameInstruction::Offset(slot.register, slot.cfa_offset),
                );
            }
        }
        for slot in saved {
            if !row.saved.iter().any(|s| s.register == slot.register) {
                fde.add_instruction(at, CallFrameInstruction::SameValue(slot.register));
            }
        }
        saved = row.saved;
    }
    Ok(fde)
}

/// Checks one row against the code size, the instruction alignment and
/// the previous row.
fn check_row(
    index: usize,
    row: &CfiRow<'_>,
    code_len: u32,
    alignment: u32,
    previous_offset: Option<u32>,
) -> io::Result<()> {
    let problem = if row.offset >= code_len {
        Some(format!(
            "offset {} is outside the {code_len} code bytes",
            row.offset
        ))
    } else if !row.offset.is_multiple_of(alignment) {
        Some(format!(
            "offset {} is not at a {alignment}-byte instruction",
            row.offset
        ))
    } else if previous_offset.is_some_and(|previous| row.offset <= previous) {
        Some(format!(
            "offset {} does not follow the previous row's",
            row.offset
        ))
    } else if row.cfa_offset < 0 {
        Some(format!("CFA offset {} is negative", row.cfa_offset))
    } else if let Some(slot) = row
        .saved
        .iter()
        .find(|slot| slot.cfa_offset >= 0 || slot.cfa_offset % 8 != 0)
    {
        Some(format!(
            "register {} is saved at CFA{:+}, not at a negative multiple of 8",
            slot.register.0, slot.cfa_offset
        ))
    } else {
        let repeated = row.saved.iter().enumerate().find_map(|(i, slot)| {
            let repeated = row.saved[..i].iter().any(|s| s.register == slot.register);
            repeated.then_some(slot)
        });
        repeated.map(|slot| format!("register {} is saved twice", slot.register.0))
    };
    match problem {
        Some(problem) => Err(invalid(format!("CFI row {index}: {problem}"))),
        None => Ok(()),
    }
}

/// An `InvalidInput` error.
pub(crate) fn invalid(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, message)
}
