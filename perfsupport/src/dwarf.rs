//! The DWARF of one batch of code regions, written with `gimli::write`: a compile unit per
//! batch with a `DW_TAG_subprogram` per region (`.debug_info`,
//! `.debug_abbrev`, `.debug_str`, `.debug_ranges`), the regions' line
//! tables (`.debug_line`, one sequence per region: the same rows perf gets
//! through jitdump). The call-frame information is the `.eh_frame` that
//! [`crate::unwind`] builds for the system unwinder.
//!
//! Every address is the one [`RegionView::start`] gives: the code's
//! absolute runtime address for the GDB JIT objects (their `.text`
//! sections sit there, so gdb relocates nothing), the ELF address of the
//! code for the files of [`crate::elf_code`]. Both read the same rows.

use crate::region::{CodeRegion, LineEntry, UnwindInfo};
use gimli::write::{
    Address, AttributeValue, DwarfUnit, EndianVec, LineProgram, LineString, Range, RangeList,
    Sections,
};
use gimli::{Encoding, Format, LineEncoding, LittleEndian, constants};
use std::collections::HashMap;
use std::io;

/// The DWARF sections of one batch, by ELF section name.
pub(crate) struct DwarfSections {
    /// (name, bytes) of every non-empty section.
    pub sections: Vec<(&'static str, Vec<u8>)>,
}

/// A region as the DWARF builder reads it: borrowed from a [`CodeRegion`], from
/// a record the GDB JIT sink kept, or placed at an ELF file's address.
#[derive(Clone, Copy)]
pub(crate) struct RegionView<'a> {
    /// Address of the first code byte.
    pub start: u64,
    /// Code size in bytes.
    pub size: u64,
    /// The symbol name (validated: no NUL).
    pub name: &'a str,
    /// The region's CFI, if any.
    pub unwind: Option<UnwindInfo<'a>>,
    /// The line table, sorted by offset.
    pub lines: &'a [LineEntry<'a>],
}

impl<'a> From<&CodeRegion<'a>> for RegionView<'a> {
    fn from(region: &CodeRegion<'a>) -> RegionView<'a> {
        RegionView {
            start: region.start(),
            size: region.size(),
            name: region.name,
            unwind: region.unwind,
            lines: region.lines,
        }
    }
}

/// DWARF 4: read by every gdb and lldb still in use.
const ENCODING: Encoding = Encoding {
    format: Format::Dwarf32,
    version: 4,
    address_size: 8,
};

/// What DWARF names the unit after when no region has a line table.
const UNKNOWN_FILE: &str = "<jit>";

/// Builds the DWARF of `regions` (validated, non-empty). `comp_dir` is the
/// directory relative source paths are found from.
pub(crate) fn build(regions: &[RegionView<'_>], comp_dir: &str) -> io::Result<DwarfSections> {
    let first_file = regions
        .iter()
        .find_map(|r| r.lines.first())
        .map_or(UNKNOWN_FILE, |e| e.file);
    let comp_dir = dwarf_string(comp_dir, ".");
    let mut dwarf = DwarfUnit::new(ENCODING);
    let mut program = LineProgram::new(
        ENCODING,
        LineEncoding::default(),
        LineString::String(comp_dir.clone()),
        None,
        LineString::String(dwarf_string(first_file, UNKNOWN_FILE)),
        None,
    );
    let directory = program.default_directory();
    let mut files = HashMap::new();
    let mut ranges = Vec::with_capacity(regions.len());
    let mut subprograms = Vec::with_capacity(regions.len());
    for region in regions {
        let start = region.start;
        ranges.push(Range::StartLength {
            begin: Address::Constant(start),
            length: region.size,
        });
        // Decl file and line: the region's first row.
        let mut decl = None;
        if !region.lines.is_empty() {
            program.begin_sequence(Some(Address::Constant(start)));
            for entry in region.lines {
                let file = *files.entry(entry.file).or_insert_with(|| {
                    program.add_file(
                        LineString::String(dwarf_string(entry.file, UNKNOWN_FILE)),
                        directory,
                        None,
                    )
                });
                decl.get_or_insert((file, entry.line));
                let row = program.row();
                row.address_offset = u64::from(entry.offset);
                row.file = file;
                row.line = u64::from(entry.line);
                row.column = u64::from(entry.column);
                program.generate_row();
            }
            program.end_sequence(region.size);
        }
        subprograms.push((region, decl));
    }
    dwarf.unit.line_program = program;

    let root = dwarf.unit.root();
    let name = dwarf.strings.add(dwarf_string(first_file, UNKNOWN_FILE));
    let producer = dwarf
        .strings
        .add(concat!("perfsupport ", env!("CARGO_PKG_VERSION")));
    let comp_dir_id = dwarf.strings.add(comp_dir);
    let range_list = dwarf.unit.ranges.add(RangeList(ranges));
    let unit = dwarf.unit.get_mut(root);
    unit.set(constants::DW_AT_name, AttributeValue::StringRef(name));
    unit.set(
        constants::DW_AT_producer,
        AttributeValue::StringRef(producer),
    );
    unit.set(
        constants::DW_AT_comp_dir,
        AttributeValue::StringRef(comp_dir_id),
    );
    // No DWARF code exists for a toy language; C makes gdb print frames and
    // names plainly, without C++ demangling or Rust path rules.
    unit.set(
        constants::DW_AT_language,
        AttributeValue::Language(constants::DW_LANG_C99),
    );
    unit.set(
        constants::DW_AT_low_pc,
        AttributeValue::Address(Address::Constant(0)),
    );
    unit.set(
        constants::DW_AT_ranges,
        AttributeValue::RangeListRef(range_list),
    );
    unit.set(constants::DW_AT_stmt_list, AttributeValue::LineProgramRef);

    for (region, decl) in subprograms {
        let id = dwarf.unit.add(root, constants::DW_TAG_subprogram);
        let name = dwarf.strings.add(dwarf_string(region.name, "<jit>"));
        let sub = dwarf.unit.get_mut(id);
        sub.set(constants::DW_AT_name, AttributeValue::StringRef(name));
        sub.set(constants::DW_AT_external, AttributeValue::Flag(true));
        sub.set(
            constants::DW_AT_low_pc,
            AttributeValue::Address(Address::Constant(region.start)),
        );
        sub.set(constants::DW_AT_high_pc, AttributeValue::Udata(region.size));
        // The canonical frame address: what `info frame` and variable
        // locations would be based on.
        sub.set(
            constants::DW_AT_frame_base,
            AttributeValue::Exprloc(call_frame_cfa()),
        );
        if let Some((file, line)) = decl {
            sub.set(
                constants::DW_AT_decl_file,
                AttributeValue::FileIndex(Some(file)),
            );
            sub.set(
                constants::DW_AT_decl_line,
                AttributeValue::Udata(u64::from(line)),
            );
        }
    }

    let mut sections = Sections::new(EndianVec::new(LittleEndian));
    dwarf
        .write(&mut sections)
        .map_err(|e| invalid(format!("cannot write DWARF: {e}")))?;
    let mut out = Vec::new();
    sections
        .for_each(|id, data| {
            if !data.slice().is_empty() {
                out.push((id.name(), data.slice().to_vec()));
            }
            Ok::<(), gimli::write::Error>(())
        })
        .map_err(|e| invalid(format!("cannot write DWARF: {e}")))?;
    Ok(DwarfSections { sections: out })
}

/// The `DW_OP_call_frame_cfa` expression.
fn call_frame_cfa() -> gimli::write::Expression {
    let mut expr = gimli::write::Expression::new();
    expr.op(constants::DW_OP_call_frame_cfa);
    expr
}

/// `s` with NULs replaced (DWARF strings are NUL-terminated), or `empty`
/// when `s` is empty (gimli rejects empty file names).
fn dwarf_string(s: &str, empty: &str) -> Vec<u8> {
    let s = if s.is_empty() { empty } else { s };
    s.bytes().map(|b| if b == 0 { b'_' } else { b }).collect()
}

fn invalid(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, message)
}

/// Test helper: the line rows of an object's `.debug_line` as (address,
/// file name, line).
#[cfg(test)]
pub(crate) fn line_rows(file: &object::File<'_>) -> Vec<(u64, String, u64)> {
    use object::{Object, ObjectSection};
    let load = |id: gimli::SectionId| -> Result<std::borrow::Cow<'_, [u8]>, gimli::Error> {
        Ok(file
            .section_by_name(id.name())
            .and_then(|s| s.uncompressed_data().ok())
            .unwrap_or_default())
    };
    let owned = gimli::DwarfSections::load(load).unwrap();
    let dwarf = owned.borrow(|s| gimli::EndianSlice::new(s, gimli::LittleEndian));
    let mut rows_out = Vec::new();
    let mut units = dwarf.units();
    while let Some(header) = units.next().unwrap() {
        let unit = dwarf.unit(header).unwrap();
        let program = unit.line_program.clone().unwrap();
        let mut rows = program.rows();
        while let Some((header, row)) = rows.next_row().unwrap() {
            if row.end_sequence() {
                continue;
            }
            let file = row.file(header).unwrap();
            let name = dwarf.attr_string(&unit, file.path_name()).unwrap();
            rows_out.push((
                row.address(),
                name.to_string_lossy().into_owned(),
                row.line().unwrap().get(),
            ));
        }
    }
    rows_out
}
