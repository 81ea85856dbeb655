//! Unwind information for JIT code: how a VM describes its stack frames,
//! and the `.eh_frame` / `.eh_frame_hdr` bytes built from that description in
//! the two layouts consumers need.
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
//! * **No CFI**: leave the region without unwind info. The jitdump then
//!   carries the header-only record (below), and unwinders fall back to the
//!   frame-pointer chain, so such code must keep a frame pointer.
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
//! | perf's injected ELF (`JIT_CODE_UNWINDING_INFO`) | [`PerfUnwindData::build`] | `DW_EH_PE_pcrel \| sdata4` (0x1b), relative to perf's layout | yes, 20 bytes |
//! | the system unwinder (`__register_frame`) | [`eh_frame_for_register_frame`] | `DW_EH_PE_absptr` (0x00), absolute runtime address | no |
//!
//! Both share one private helper: clone the CIE with the layout's pointer
//! encoding, write CIE + FDE with `gimli::write` through a writer that
//! re-bases the FDE's address, and check the FDE covers exactly the code.
//!
//! # perf's layout
//!
//! `perf inject --jit` writes each region to `jitted-<pid>-<index>.so` with
//! `.text` at T, then `.eh_frame` at E = T + ALIGN8(code_size), then
//! `.eh_frame_hdr` at H = E + eh_frame_size, and maps
//! `[T, T + ALIGN8(code_size) + mapped_size)` at the region's runtime address.
//! The payload of the jitdump record is `.eh_frame` **first**, then the
//! header (perf's code does this; the jitdump spec text says the opposite):
//!
//! ```text
//! T                     E = T + ALIGN8(size)                H = E + eh_frame_size
//! | code | pad to 8      | CIE | FDE | 00 00 00 00          | .eh_frame_hdr (20 bytes) |
//! ```
//!
//! Because libunwind reads the table through that mapping, the VM must keep
//! `[T, T + ALIGN16(ALIGN8(size) + unwind_data_size))` free of other regions
//! (see [`reserved_region_size`]). Every pc-relative value depends only on
//! the code size, never on the runtime address, so the same bytes work
//! wherever the code lives.
//!
//! ## `.eh_frame_hdr` (20 bytes, offsets relative to H)
//!
//! | off | type | value |
//! |---|---|---|
//! | 0 | u8 | version = 1 |
//! | 1 | u8 | `eh_frame_ptr_enc` = 0x1b (pcrel, sdata4) |
//! | 2 | u8 | `fde_count_enc` = 0x03 (udata4) |
//! | 3 | u8 | `table_enc` = 0x3b (datarel, sdata4) |
//! | 4 | i32 | `eh_frame_ptr` = E − (H + 4) = −(eh_frame_size + 4) |
//! | 8 | u32 | `fde_count` = 1 |
//! | 12 | i32 | `initial_loc` = T − H = −(ALIGN8(size) + eh_frame_size) |
//! | 16 | i32 | `fde_addr` = E + fde_offset − H = −(eh_frame_size − fde_offset) |
//!
//! A region **without** call-frame information gets the header-only form
//! (`01 1b 03 3b`, `eh_frame_ptr` 0, `fde_count` 0, 8 zero bytes) with
//! `mapped_size` 0: libunwind then reports "no info" for the region and falls
//! back to the frame-pointer chain, so such code must keep a standard
//! `push rbp; mov rbp, rsp` frame. Without any unwinding record, perf's
//! DWARF unwinder stops at the region instead.
//!
//! ## The FDE
//!
//! | field | encoding | value |
//! |---|---|---|
//! | length | u32 | bytes after this field |
//! | CIE pointer | u32 | distance back to the CIE |
//! | `pc_begin` | sdata4, pcrel | T − (E + offset of this field) = −(ALIGN8(size) + offset) |
//! | `pc_range` | sdata4 | code size |
//! | augmentation length | uleb128 | 0 |
//! | instructions | | Cranelift's CFA program |
//!
//! # The system unwinder's layout
//!
//! libgcc's `__register_frame(ptr)` takes a whole `.eh_frame` section (CIE
//! first, 4-byte zero terminator last) and reads addresses as absolute
//! (`absptr`). The bytes must stay alive and unmoved until
//! `__deregister_frame(ptr)`. LLVM's libunwind instead wants one FDE per call;
//! this crate does not build that form.

pub mod x86_64;

use crate::region::{CodeRegion, UnwindInfo};
use gimli::LittleEndian;
use gimli::constants::{
    DW_EH_PE_absptr, DW_EH_PE_datarel, DW_EH_PE_pcrel, DW_EH_PE_sdata4, DW_EH_PE_udata4, DwEhPe,
};
use gimli::write::{
    Address, CommonInformationEntry, EhFrame, EndianVec, FrameDescriptionEntry, FrameTable, Writer,
};
use std::io;

// ANCHOR: call_frame_info
/// Owned call-frame information for one region: a CIE and an FDE whose
/// address is [`REGION_START`]. Build it with [`CallFrameInfo::x86_64_frame_pointer`],
/// [`CallFrameInfo::x86_64_rows`] or [`CallFrameInfo::new`], keep it as long
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

/// Size of the `.eh_frame_hdr` this crate writes (one table entry, or the
/// header-only form, which is padded to the same size because perf reads a
/// fixed 20-byte struct).
pub const EH_FRAME_HDR_SIZE: usize = 20;

/// `DW_EH_PE_pcrel | DW_EH_PE_sdata4`: 4-byte signed, relative to the field.
const PCREL_SDATA4: DwEhPe = DwEhPe(DW_EH_PE_pcrel.0 | DW_EH_PE_sdata4.0);
/// `DW_EH_PE_datarel | DW_EH_PE_sdata4`: 4-byte signed, relative to the header.
const DATAREL_SDATA4: DwEhPe = DwEhPe(DW_EH_PE_datarel.0 | DW_EH_PE_sdata4.0);

/// The unwinding payload of one region for perf's injected ELF: `.eh_frame`
/// followed by `.eh_frame_hdr` (see the [module documentation](self)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PerfUnwindData {
    bytes: Vec<u8>,
    mapped_size: u64,
}

impl PerfUnwindData {
    /// Builds the payload for a region of `code_size` bytes.
    ///
    /// With `unwind` it is a CIE + FDE + terminator and a one-entry header,
    /// `mapped_size` = payload size. Without, it is the 20-byte header-only
    /// form with `mapped_size` 0. `runtime_start` gives meaning to an FDE made
    /// with `Address::Constant(start)`; it does not change the bytes.
    ///
    /// # Errors
    ///
    /// `InvalidInput` if the CIE has a personality or LSDA, the FDE address is
    /// neither the region start nor [`REGION_START`], the FDE length differs
    /// from `code_size`, or the region is too large for 32-bit offsets.
    pub fn build(
        code_size: u64,
        unwind: Option<UnwindInfo<'_>>,
        runtime_start: u64,
    ) -> io::Result<PerfUnwindData> {
        build_perf(
            code_size,
            code_size,
            unwind,
            FdeBase::Runtime(runtime_start),
        )
    }

    /// The payload for `region` dumped as `dumped_size` bytes (its code plus
    /// a build-id marker, see [`crate::jitdump`]): perf places `.eh_frame`
    /// after the dumped bytes, while the FDE still covers only the code.
    pub(crate) fn for_dumped_region(
        region: &CodeRegion<'_>,
        dumped_size: u64,
    ) -> io::Result<PerfUnwindData> {
        build_perf(
            region.size(),
            dumped_size,
            region.unwind,
            FdeBase::Runtime(region.start()),
        )
    }

    /// Builds the payload for `region` (its start and size).
    ///
    /// # Errors
    ///
    /// As [`PerfUnwindData::build`].
    pub fn for_region(region: &CodeRegion<'_>) -> io::Result<PerfUnwindData> {
        Self::build(region.size(), region.unwind, region.start())
    }

    /// The whole payload: `.eh_frame`, then `.eh_frame_hdr`.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The `.eh_frame` part (empty for the header-only form).
    pub fn eh_frame(&self) -> &[u8] {
        &self.bytes[..self.bytes.len() - EH_FRAME_HDR_SIZE]
    }

    /// The `.eh_frame_hdr` part (always [`EH_FRAME_HDR_SIZE`] bytes).
    pub fn eh_frame_hdr(&self) -> &[u8] {
        &self.bytes[self.bytes.len() - EH_FRAME_HDR_SIZE..]
    }

    /// The jitdump `mapped_size`: the payload size when the region has an
    /// FDE, 0 for the header-only form.
    pub fn mapped_size(&self) -> u64 {
        self.mapped_size
    }
}

/// Size in bytes of the perf unwinding payload for a region of `code_size`
/// bytes: `unwind_data_size` in `JIT_CODE_UNWINDING_INFO`.
///
/// Works before the code has an address when the FDE was made with
/// [`REGION_START`] (an FDE with an absolute address is accepted too: the
/// size does not depend on it).
///
/// # Errors
///
/// As [`PerfUnwindData::build`].
pub fn perf_unwind_data_size(code_size: u64, unwind: Option<UnwindInfo<'_>>) -> io::Result<u64> {
    let data = build_perf(code_size, code_size, unwind, FdeBase::AnyAddress)?;
    Ok(data.bytes.len() as u64)
}

// ANCHOR: reserved_region_size
/// Bytes the VM must reserve for a region so that the range perf maps for it,
/// `[start, start + ALIGN8(dumped_size) + mapped_size)`, never overlaps the
/// next region: `ALIGN16(ALIGN8(code_size + MARKER_LEN) + unwind_data_size)`.
/// The dumped size is the code size, plus
/// [`MARKER_LEN`](crate::jitdump::MARKER_LEN) for a region whose bytes the
/// jitdump already holds (see [`crate::jitdump`]'s build-id markers); the
/// VM cannot know in advance, so it always reserves the marker.
///
/// The reserved tail (after the code) may hold anything; copying the unwind
/// payload there, as V8 and CPython do, is optional. If the VM cannot pad
/// (Cranelift packs functions back to back), overlapping injected ranges make
/// libunwind read a neighbour's bytes as the table: call chains through that
/// region may then be cut or wrong, while symbols still resolve.
///
/// # Errors
///
/// As [`PerfUnwindData::build`].
pub fn reserved_region_size(code_size: u64, unwind: Option<UnwindInfo<'_>>) -> io::Result<u64> {
    let unwind_size = perf_unwind_data_size(code_size, unwind)?;
    let unpadded = align_up(code_size + crate::jitdump::MARKER_LEN as u64, 8) + unwind_size;
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
/// As [`PerfUnwindData::build`].
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
    let mut bytes = writer.out.into_vec();
    bytes.extend_from_slice(&[0; 4]);
    Ok(bytes)
}

/// How an FDE's `Address::Constant` is interpreted.
#[derive(Clone, Copy, Debug)]
enum FdeBase {
    /// The constant is a runtime address; the region starts at this address.
    Runtime(u64),
    /// Only the size of the output matters: accept any constant.
    AnyAddress,
}

// ANCHOR: build_perf
/// Builds the perf payload (see [`PerfUnwindData::build`]) for `code_size`
/// bytes of code dumped as `text_size` bytes (the code and any build-id
/// marker): perf's `.text` is the dumped bytes.
fn build_perf(
    code_size: u64,
    text_size: u64,
    unwind: Option<UnwindInfo<'_>>,
    base: FdeBase,
) -> io::Result<PerfUnwindData> {
    if text_size > i32::MAX as u64 || code_size > text_size {
        return Err(invalid("code regions of 2 GiB or more are not supported"));
    }
    let Some(unwind) = unwind else {
        return Ok(header_only());
    };
    // Virtual addresses of perf's layout: the dumped bytes at 0, .eh_frame
    // right after them padded to 8.
    let code_padded = align_up(text_size, 8);
    let mut writer = LayoutWriter::new(code_padded);
    writer.rebase(0, code_size, base);
    write_cie_fde(&mut writer, unwind, PCREL_SDATA4)?;
    let mut bytes = writer.out.into_vec();
    bytes.extend_from_slice(&[0; 4]);

    let eh_frame_size = bytes.len() as u64;
    let cie_length = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
    if cie_length == u32::MAX {
        return Err(invalid("64-bit DWARF CIEs are not supported"));
    }
    let fde_offset = 4 + u64::from(cie_length);
    let eh_frame_ptr = to_i32(-(eh_frame_size as i64 + 4))?;
    let initial_loc = to_i32(-((code_padded + eh_frame_size) as i64))?;
    let fde_addr = to_i32(fde_offset as i64 - eh_frame_size as i64)?;
    bytes.extend_from_slice(&[1, PCREL_SDATA4.0, DW_EH_PE_udata4.0, DATAREL_SDATA4.0]);
    bytes.extend_from_slice(&eh_frame_ptr.to_le_bytes());
    bytes.extend_from_slice(&1u32.to_le_bytes());
    bytes.extend_from_slice(&initial_loc.to_le_bytes());
    bytes.extend_from_slice(&fde_addr.to_le_bytes());
    let mapped_size = bytes.len() as u64;
    Ok(PerfUnwindData { bytes, mapped_size })
}
// ANCHOR_END: build_perf

// ANCHOR: header_only
/// The V8-style header with no FDE: unwinders fall back to frame pointers.
fn header_only() -> PerfUnwindData {
    let mut bytes = vec![0; EH_FRAME_HDR_SIZE];
    bytes[..4].copy_from_slice(&[1, PCREL_SDATA4.0, DW_EH_PE_udata4.0, DATAREL_SDATA4.0]);
    PerfUnwindData {
        bytes,
        mapped_size: 0,
    }
}
// ANCHOR_END: header_only

/// Writes one CIE and one FDE with the FDE address encoded as
/// `fde_encoding`, appending to `writer` (shared by both layouts).
fn write_cie_fde(
    writer: &mut LayoutWriter,
    unwind: UnwindInfo<'_>,
    fde_encoding: DwEhPe,
) -> io::Result<()> {
    if unwind.cie.personality.is_some()
        || unwind.cie.lsda_encoding.is_some()
        || unwind.fde.lsda.is_some()
    {
        return Err(invalid(
            "CIEs with a personality routine or LSDA are not supported",
        ));
    }
    let mut cie = unwind.cie.clone();
    cie.fde_address_encoding = fde_encoding;
    let mut table = FrameTable::default();
    let cie_id = table.add_cie(cie);
    table.add_fde(cie_id, unwind.fde.clone());
    let mut eh_frame = EhFrame(std::mem::replace(writer, LayoutWriter::new(0)));
    let result = table.write_eh_frame(&mut eh_frame);
    *writer = eh_frame.0;
    result.map_err(|err| invalid(&format!("cannot write .eh_frame: {err}")))?;
    let Some((position, width)) = writer.fde_length_at else {
        return Err(invalid("gimli wrote no FDE address"));
    };
    let Some(field) = writer.out.slice().get(position..position + width) else {
        return Err(invalid("the FDE is truncated"));
    };
    if width > 8 {
        return Err(invalid(
            "FDE addresses wider than 8 bytes are not supported",
        ));
    }
    let mut length = [0u8; 8];
    length[..width].copy_from_slice(field);
    let length = u64::from_le_bytes(length);
    if length != writer.code_size {
        return Err(invalid(&format!(
            "the FDE covers {length} bytes but the code has {}",
            writer.code_size
        )));
    }
    Ok(())
}

/// A `gimli::write::Writer` that encodes FDE addresses for one layout.
///
/// gimli's default writer cannot express "pc-relative to wherever this buffer
/// will sit in perf's ELF": it computes pc-relative values against the
/// offset in the buffer. This writer knows the layout's address of the
/// buffer's first byte (`section_address`) and of the code (`code_address`),
/// and resolves [`REGION_START`] or a runtime-address constant to the code.
#[derive(Debug)]
struct LayoutWriter {
    out: EndianVec<LittleEndian>,
    /// Layout address of byte 0 of `out`.
    section_address: u64,
    /// Layout address of the region's first code byte.
    code_address: u64,
    /// Code size of the region currently being written.
    code_size: u64,
    /// How to read `Address::Constant` FDE addresses.
    base: FdeBase,
    /// Where (and how wide) gimli wrote the current FDE's `pc_range`, which
    /// directly follows the FDE address; checked against `code_size`.
    fde_length_at: Option<(usize, usize)>,
}

impl LayoutWriter {
    fn new(section_address: u64) -> Self {
        LayoutWriter {
            out: EndianVec::new(LittleEndian),
            section_address,
            code_address: 0,
            code_size: 0,
            base: FdeBase::AnyAddress,
            fde_length_at: None,
        }
    }

    /// Prepares for the next region's FDE.
    fn rebase(&mut self, code_address: u64, code_size: u64, base: FdeBase) {
        self.code_address = code_address;
        self.code_size = code_size;
        self.base = base;
        self.fde_length_at = None;
    }

    /// The layout address `address` stands for.
    fn resolve(&self, address: Address) -> gimli::write::Result<u64> {
        match (address, self.base) {
            (Address::Symbol { symbol: 0, addend }, _) => {
                Ok(self.code_address.wrapping_add(addend as u64))
            }
            (Address::Constant(_), FdeBase::AnyAddress) => Ok(self.code_address),
            (Address::Constant(value), FdeBase::Runtime(start)) => {
                let offset = value.wrapping_sub(start);
                if offset <= self.code_size {
                    Ok(self.code_address.wrapping_add(offset))
                } else {
                    Err(gimli::write::Error::InvalidAddress)
                }
            }
            (Address::Symbol { .. }, _) => Err(gimli::write::Error::InvalidAddress),
        }
    }
}

impl Writer for LayoutWriter {
    type Endian = LittleEndian;

    fn endian(&self) -> LittleEndian {
        LittleEndian
    }

    fn len(&self) -> usize {
        self.out.len()
    }

    fn write(&mut self, bytes: &[u8]) -> gimli::write::Result<()> {
        self.out.write(bytes)
    }

    fn write_at(&mut self, offset: usize, bytes: &[u8]) -> gimli::write::Result<()> {
        self.out.write_at(offset, bytes)
    }

    // ANCHOR: write_eh_pointer
    fn write_eh_pointer(
        &mut self,
        address: Address,
        eh_pe: DwEhPe,
        size: u8,
    ) -> gimli::write::Result<()> {
        let target = self.resolve(address)?;
        let application = eh_pe.application();
        let value = if application == DW_EH_PE_absptr {
            target
        } else if application == DW_EH_PE_pcrel {
            let here = self.section_address + self.len() as u64;
            target.wrapping_sub(here)
        } else {
            return Err(gimli::write::Error::UnsupportedPointerEncoding(eh_pe));
        };
        // sdata4 must not silently wrap (the ±2 GiB pitfall).
        if eh_pe.format() == DW_EH_PE_sdata4 && i32::try_from(value as i64).is_err() {
            return Err(gimli::write::Error::ValueTooLarge);
        }
        self.write_eh_pointer_data(value, eh_pe.format(), size)?;
        // gimli writes `pc_range` next, with the same 4-byte format.
        self.fde_length_at = Some((self.len(), 4));
        Ok(())
    }
    // ANCHOR_END: write_eh_pointer

    /// gimli uses this instead of `write_eh_pointer` when the CIE's FDE
    /// encoding is `absptr` (the `__register_frame` layout).
    fn write_address(&mut self, address: Address, size: u8) -> gimli::write::Result<()> {
        let target = self.resolve(address)?;
        self.write_udata(target, size)?;
        // gimli writes `pc_range` next, as a `size`-byte unsigned value.
        self.fde_length_at = Some((self.len(), usize::from(size)));
        Ok(())
    }
}

fn align_up(value: u64, align: u64) -> u64 {
    value.div_ceil(align) * align
}

fn to_i32(value: i64) -> io::Result<i32> {
    i32::try_from(value).map_err(|_| invalid("unwind offsets do not fit in 32 bits"))
}

fn invalid(message: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, message.to_string())
}
