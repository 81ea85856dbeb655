//! The `JIT_CODE_UNWINDING_INFO` payload: a region's `.eh_frame` and
//! `.eh_frame_hdr` laid out as `perf inject --jit` places them in the ELF
//! object it writes for the region. A VM describes its frames with
//! [`crate::unwind`]; this module turns that description into perf's bytes
//! (the jitdump writes them, [`crate::jitdump`]; every sink's validation
//! checks that they can be built, [`crate::validation`]: both use this
//! module, which uses neither).
//!
//! # The layout
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
//! (see [`reserved_region_size`](crate::unwind::reserved_region_size)).
//! Every pc-relative value depends only on the code size, never on the
//! runtime address, so the same bytes work wherever the code lives.
//!
//! # `.eh_frame_hdr` (20 bytes, offsets relative to H)
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
//! # The FDE
//!
//! | field | encoding | value |
//! |---|---|---|
//! | length | u32 | bytes after this field |
//! | CIE pointer | u32 | distance back to the CIE |
//! | `pc_begin` | sdata4, pcrel | T − (E + offset of this field) = −(ALIGN8(size) + offset) |
//! | `pc_range` | sdata4 | code size |
//! | augmentation length | uleb128 | 0 |
//! | instructions | | Cranelift's CFA program |

use crate::eh_frame::{FdeBase, LayoutWriter, align_up, invalid, write_cie_fde};
use crate::region::{CodeRegion, UnwindInfo};
use gimli::constants::{
    DW_EH_PE_datarel, DW_EH_PE_pcrel, DW_EH_PE_sdata4, DW_EH_PE_udata4, DwEhPe,
};
use std::io;

/// Bytes of the build-id marker the jitdump may append to a region's code
/// in the dump (see `jitdump::build_id`): perf places `.eh_frame` after the
/// dumped bytes, so the room a region needs counts them
/// ([`reserved_region_size`](crate::unwind::reserved_region_size)).
pub const MARKER_LEN: usize = 8;

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
    /// neither the region start nor
    /// [`REGION_START`](crate::unwind::REGION_START), the FDE length differs
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
/// [`REGION_START`](crate::unwind::REGION_START) (an FDE with an absolute
/// address is accepted too: the size does not depend on it).
///
/// # Errors
///
/// As [`PerfUnwindData::build`].
pub fn perf_unwind_data_size(code_size: u64, unwind: Option<UnwindInfo<'_>>) -> io::Result<u64> {
    let data = build_perf(code_size, code_size, unwind, FdeBase::AnyAddress)?;
    Ok(data.bytes.len() as u64)
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
    let mut bytes = writer.into_bytes();
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
pub(crate) fn header_only() -> PerfUnwindData {
    let mut bytes = vec![0; EH_FRAME_HDR_SIZE];
    bytes[..4].copy_from_slice(&[1, PCREL_SDATA4.0, DW_EH_PE_udata4.0, DATAREL_SDATA4.0]);
    PerfUnwindData {
        bytes,
        mapped_size: 0,
    }
}
// ANCHOR_END: header_only

fn to_i32(value: i64) -> io::Result<i32> {
    i32::try_from(value).map_err(|_| invalid("unwind offsets do not fit in 32 bits"))
}
