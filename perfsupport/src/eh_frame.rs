//! The `.eh_frame` writer both unwind layouts share: perf's injected ELF
//! ([`crate::unwind::perf_layout`]) and the system unwinder's
//! `__register_frame` section ([`crate::unwind::eh_frame_for_register_frame`]).
//!
//! [`write_cie_fde`] clones the CIE with the layout's pointer encoding,
//! writes CIE + FDE with `gimli::write` through a [`LayoutWriter`] that
//! re-bases the FDE's address, and checks the FDE covers exactly the code.
//! Each layout decides where the section sits and what follows it.

use crate::region::UnwindInfo;
use gimli::LittleEndian;
use gimli::constants::{DW_EH_PE_absptr, DW_EH_PE_pcrel, DW_EH_PE_sdata4, DwEhPe};
use gimli::write::{Address, EhFrame, EndianVec, FrameTable, Writer};
use std::io;

/// How an FDE's `Address::Constant` is interpreted.
#[derive(Clone, Copy, Debug)]
pub(crate) enum FdeBase {
    /// The constant is a runtime address; the region starts at this address.
    Runtime(u64),
    /// Only the size of the output matters: accept any constant.
    AnyAddress,
}

/// Writes one CIE and one FDE with the FDE address encoded as
/// `fde_encoding`, appending to `writer` (shared by both layouts).
pub(crate) fn write_cie_fde(
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
/// and resolves [`REGION_START`](crate::unwind::REGION_START) or a
/// runtime-address constant to the code.
#[derive(Debug)]
pub(crate) struct LayoutWriter {
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
    /// A writer for a section whose first byte sits at `section_address`
    /// in the layout.
    pub(crate) fn new(section_address: u64) -> Self {
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
    pub(crate) fn rebase(&mut self, code_address: u64, code_size: u64, base: FdeBase) {
        self.code_address = code_address;
        self.code_size = code_size;
        self.base = base;
        self.fde_length_at = None;
    }

    /// The bytes written so far.
    /// The bytes written so far.
    pub(crate) fn bytes(&self) -> &[u8] {
        self.out.slice()
    }

    /// How many bytes are written.
    pub(crate) fn len(&self) -> usize {
        self.out.len()
    }

    pub(crate) fn into_bytes(self) -> Vec<u8> {
        self.out.into_vec()
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

/// Rounds `value` up to a multiple of `align`.
pub(crate) fn align_up(value: u64, align: u64) -> u64 {
    value.div_ceil(align) * align
}

/// An `InvalidInput` error with `message`.
pub(crate) fn invalid(message: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, message.to_string())
}
