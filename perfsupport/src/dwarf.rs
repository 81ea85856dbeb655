//! The DWARF of one batch of code regions: a compile unit per batch with a
//! `DW_TAG_subprogram` per region (`.debug_info`, `.debug_abbrev`,
//! `.debug_ranges`), the regions' line tables (`.debug_line`, one sequence
//! per region: the same rows perf gets through jitdump). The call-frame
//! information is the `.eh_frame` that [`crate::unwind`] builds for the
//! system unwinder.
//!
//! Every address is the one [`RegionView::start`] gives: the code's
//! absolute runtime address for the GDB JIT objects (their `.text`
//! sections sit there, so gdb relocates nothing), the ELF address of the
//! code for the files of [`crate::elf_code`]. Both read the same rows.
//!
//! Written byte by byte, not with `gimli::write` (which wrote it until
//! 2026-11): the unit is always the same shape (three abbreviations, one
//! line program header), and `gimli::write` spent 9-12 us of a one-line
//! batch's 40 us publish under `--jit-elf` building the general structures
//! it needs (string tables, abbreviation sets, offsets), about a quarter
//! of what a file costs a small batch (`bench/RESULTS.md`, "The files'
//! DWARF by hand"). The tests read every section back with `gimli::read`.

use crate::region::{CodeRegion, LineEntry, UnwindInfo};
use gimli::{constants, leb128};
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
const VERSION: u16 = 4;

/// What DWARF names the unit after when no region has a line table.
const UNKNOWN_FILE: &str = "<jit>";

// ANCHOR: abbreviations
/// The abbreviation codes of `.debug_abbrev` (see [`abbreviations`]).
const UNIT: u64 = 1;
/// A region with a line table: its first row is its declaration.
const SUBPROGRAM_DECLARED: u64 = 2;
/// A region without one.
const SUBPROGRAM: u64 = 3;

/// `.debug_abbrev`: the shape of every DIE this module writes. Strings are
/// inline (`DW_FORM_string`), so there is no `.debug_str`.
fn abbreviations() -> io::Result<Vec<u8>> {
    use constants::*;
    let unit: &[(DwAt, DwForm)] = &[
        (DW_AT_name, DW_FORM_string),
        (DW_AT_producer, DW_FORM_string),
        (DW_AT_comp_dir, DW_FORM_string),
        (DW_AT_language, DW_FORM_data2),
        // 0: the ranges' addresses are absolute.
        (DW_AT_low_pc, DW_FORM_addr),
        (DW_AT_ranges, DW_FORM_sec_offset),
        (DW_AT_stmt_list, DW_FORM_sec_offset),
    ];
    let subprogram: &[(DwAt, DwForm)] = &[
        (DW_AT_name, DW_FORM_string),
        (DW_AT_external, DW_FORM_flag_present),
        (DW_AT_low_pc, DW_FORM_addr),
        // DWARF 4: a constant high_pc is the length.
        (DW_AT_high_pc, DW_FORM_udata),
        // The canonical frame address: what `info frame` and variable
        // locations would be based on.
        (DW_AT_frame_base, DW_FORM_exprloc),
    ];
    let declared = [
        subprogram,
        &[
            (DW_AT_decl_file, DW_FORM_udata),
            (DW_AT_decl_line, DW_FORM_udata),
        ],
    ]
    .concat();
    let mut out = Vec::with_capacity(64);
    for (code, tag, children, attributes) in [
        (UNIT, DW_TAG_compile_unit, DW_CHILDREN_yes, unit),
        (
            SUBPROGRAM_DECLARED,
            DW_TAG_subprogram,
            DW_CHILDREN_no,
            &declared[..],
        ),
        (SUBPROGRAM, DW_TAG_subprogram, DW_CHILDREN_no, subprogram),
    ] {
        uleb(&mut out, code)?;
        uleb(&mut out, tag.0.into())?;
        out.push(children.0);
        for (name, form) in attributes {
            uleb(&mut out, name.0.into())?;
            uleb(&mut out, form.0.into())?;
        }
        out.extend_from_slice(&[0, 0]);
    }
    out.push(0);
    Ok(out)
}
// ANCHOR_END: abbreviations

/// Builds the DWARF of `regions` (validated, non-empty). `comp_dir` is the
/// directory relative source paths are found from.
pub(crate) fn build(regions: &[RegionView<'_>], comp_dir: &str) -> io::Result<DwarfSections> {
    let first_file = regions
        .iter()
        .find_map(|r| r.lines.first())
        .map_or(UNKNOWN_FILE, |e| e.file);
    let mut lines = LineProgram::new(regions.iter().map(|r| r.lines.len()).sum());
    let mut decls = Vec::with_capacity(regions.len());
    for region in regions {
        decls.push(lines.add_sequence(region)?);
    }
    let debug_line = lines.finish()?;

    // .debug_ranges: the unit's address ranges, (begin, end) pairs ending
    // with (0, 0).
    let mut ranges = Vec::with_capacity(16 * regions.len() + 16);
    for region in regions {
        let end = region.start.checked_add(region.size).ok_or_else(|| {
            invalid(format!(
                "region {:?} wraps around the address space",
                region.name
            ))
        })?;
        ranges.extend_from_slice(&region.start.to_le_bytes());
        ranges.extend_from_slice(&end.to_le_bytes());
    }
    ranges.extend_from_slice(&[0; 16]);

    // .debug_info: the unit header, the unit's DIE, a DIE per region.
    let mut info = Vec::with_capacity(128 + 64 * regions.len());
    info.extend_from_slice(&[0; 4]); // unit_length, set below
    info.extend_from_slice(&VERSION.to_le_bytes());
    info.extend_from_slice(&0u32.to_le_bytes()); // debug_abbrev_offset
    info.push(8); // address_size
    uleb(&mut info, UNIT)?;
    string(&mut info, first_file, UNKNOWN_FILE);
    string(
        &mut info,
        concat!("perfsupport ", env!("CARGO_PKG_VERSION")),
        "perfsupport",
    );
    string(&mut info, comp_dir, ".");
    // No DWARF code exists for a toy language; C makes gdb print frames and
    // names plainly, without C++ demangling or Rust path rules.
    info.extend_from_slice(&constants::DW_LANG_C99.0.to_le_bytes());
    info.extend_from_slice(&0u64.to_le_bytes()); // low_pc
    info.extend_from_slice(&0u32.to_le_bytes()); // ranges: offset 0
    info.extend_from_slice(&0u32.to_le_bytes()); // stmt_list: offset 0
    for (region, decl) in regions.iter().zip(decls) {
        uleb(
            &mut info,
            if decl.is_some() {
                SUBPROGRAM_DECLARED
            } else {
                SUBPROGRAM
            },
        )?;
        string(&mut info, region.name, "<jit>");
        info.extend_from_slice(&region.start.to_le_bytes());
        uleb(&mut info, region.size)?;
        info.extend_from_slice(&[1, constants::DW_OP_call_frame_cfa.0]);
        if let Some((file, line)) = decl {
            uleb(&mut info, file)?;
            uleb(&mut info, line.into())?;
        }
    }
    info.push(0); // the unit's children end
    set_unit_length(&mut info)?;

    Ok(DwarfSections {
        sections: vec![
            (".debug_abbrev", abbreviations()?),
            (".debug_info", info),
            (".debug_ranges", ranges),
            (".debug_line", debug_line),
        ],
    })
}

// ANCHOR: line_program
/// `.debug_line`: one program for the unit, a sequence per region with
/// rows. Rows use special opcodes where they fit, the standard
/// `advance_line`, `advance_pc`, `copy` otherwise.
struct LineProgram<'a> {
    /// The file names, in the order of their numbers (1, 2, ... in DWARF 4).
    files: Vec<&'a str>,
    numbers: HashMap<&'a str, u64>,
    program: Vec<u8>,
}

/// The line program's parameters (those `gimli::LineEncoding` defaults
/// to): rows one address unit apart, special opcodes for line steps -5 to
/// 8.
const LINE_BASE: i64 = -5;
const LINE_RANGE: u8 = 14;
const OPCODE_BASE: u8 = 13;
/// The number of LEB128 operands of standard opcodes 1 to 12.
const STANDARD_OPCODE_LENGTHS: [u8; 12] = [0, 1, 1, 1, 1, 0, 0, 0, 1, 0, 0, 1];

impl<'a> LineProgram<'a> {
    fn new(rows: usize) -> LineProgram<'a> {
        LineProgram {
            files: Vec::new(),
            numbers: HashMap::new(),
            program: Vec::with_capacity(24 + 4 * rows),
        }
    }

    /// The number of `file` (its first use gives it the next one).
    fn file(&mut self, file: &'a str) -> u64 {
        if self.files.last() == Some(&file) {
            return self.files.len() as u64;
        }
        *self.numbers.entry(file).or_insert_with(|| {
            self.files.push(file);
            self.files.len() as u64
        })
    }

    /// Adds the rows of `region` (none if it has no line table); returns
    /// the file number and line of its first row.
    fn add_sequence(&mut self, region: &RegionView<'a>) -> io::Result<Option<(u64, u32)>> {
        use constants::*;
        let Some(first) = region.lines.first() else {
            return Ok(None);
        };
        let p = &mut self.program;
        p.extend_from_slice(&[0, 9, DW_LNE_set_address.0]);
        p.extend_from_slice(&region.start.to_le_bytes());
        // The state machine's registers at the start of a sequence.
        let (mut address, mut file, mut line, mut column) = (0u64, 1u64, 1i64, 0u64);
        let decl = (self.file(first.file), first.line);
        for entry in region.lines {
            let number = self.file(entry.file);
            let p = &mut self.program;
            if number != file {
                p.push(DW_LNS_set_file.0);
                uleb(p, number)?;
                file = number;
            }
            if u64::from(entry.column) != column {
                column = entry.column.into();
                p.push(DW_LNS_set_column.0);
                uleb(p, column)?;
            }
            let to = u64::from(entry.offset);
            let address_step = to.checked_sub(address).ok_or_else(|| {
                invalid(format!("{:?}: line rows not sorted by offset", region.name))
            })?;
            let line_step = i64::from(entry.line) - line;
            // A special opcode when the line step is in range and the sum
            // fits in a byte (computed only then: no overflow).
            let special = (LINE_BASE..LINE_BASE + i64::from(LINE_RANGE))
                .contains(&line_step)
                .then(|| {
                    ((line_step - LINE_BASE) as u64)
                        .checked_add(address_step.checked_mul(u64::from(LINE_RANGE))?)?
                        .checked_add(u64::from(OPCODE_BASE))
                })
                .flatten()
                .and_then(|op| u8::try_from(op).ok());
            if let Some(opcode) = special {
                p.push(opcode);
            } else {
                if line_step != 0 {
                    p.push(DW_LNS_advance_line.0);
                    sleb(p, line_step)?;
                }
                if address_step != 0 {
                    p.push(DW_LNS_advance_pc.0);
                    uleb(p, address_step)?;
                }
                p.push(DW_LNS_copy.0);
            }
            address = to;
            line = entry.line.into();
        }
        let p = &mut self.program;
        let rest = region
            .size
            .checked_sub(address)
            .ok_or_else(|| invalid(format!("{:?}: a line row lies past the code", region.name)))?;
        if rest != 0 {
            p.push(DW_LNS_advance_pc.0);
            uleb(p, rest)?;
        }
        p.extend_from_slice(&[0, 1, DW_LNE_end_sequence.0]);
        Ok(Some(decl))
    }

    /// The section: the program's header (DWARF 4: no directories but the
    /// unit's `comp_dir`, number 0; the files in it), then the program.
    fn finish(self) -> io::Result<Vec<u8>> {
        let names: usize = self.files.iter().map(|f| f.len() + 4).sum();
        let mut out = Vec::with_capacity(48 + names + self.program.len());
        out.extend_from_slice(&[0; 4]); // unit_length, set below
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&[0; 4]); // header_length, set below
        let header_start = out.len();
        // minimum_instruction_length, maximum_operations_per_instruction,
        // default_is_stmt, line_base, line_range, opcode_base
        out.extend_from_slice(&[1, 1, 1, LINE_BASE as u8, LINE_RANGE, OPCODE_BASE]);
        out.extend_from_slice(&STANDARD_OPCODE_LENGTHS);
        out.push(0); // include_directories: none
        for file in &self.files {
            string(&mut out, file, UNKNOWN_FILE);
            // directory 0 (comp_dir), no modification time, no length
            out.extend_from_slice(&[0, 0, 0]);
        }
        out.push(0);
        let header_length = u32::try_from(out.len() - header_start)
            .map_err(|_| invalid("DWARF: line program header over 4 GiB".into()))?;
        out[6..10].copy_from_slice(&header_length.to_le_bytes());
        out.extend_from_slice(&self.program);
        set_unit_length(&mut out)?;
        Ok(out)
    }
}
// ANCHOR_END: line_program

/// Sets the 32-bit `unit_length` at the start of `unit`: the bytes after it.
fn set_unit_length(unit: &mut [u8]) -> io::Result<()> {
    let length = u32::try_from(unit.len() - 4)
        .ok()
        .filter(|&l| l < 0xffff_fff0)
        .ok_or_else(|| invalid("DWARF: a unit over 4 GiB".into()))?;
    unit[..4].copy_from_slice(&length.to_le_bytes());
    Ok(())
}

fn uleb(out: &mut Vec<u8>, value: u64) -> io::Result<()> {
    leb128::write::unsigned(out, value).map(drop)
}

fn sleb(out: &mut Vec<u8>, value: i64) -> io::Result<()> {
    leb128::write::signed(out, value).map(drop)
}

/// `s` as a NUL-terminated string (NULs in it replaced), or `empty` when
/// `s` is empty (an empty file name means none to DWARF readers).
fn string(out: &mut Vec<u8>, s: &str, empty: &str) {
    let s = if s.is_empty() { empty } else { s };
    out.extend(s.bytes().map(|b| if b == 0 { b'_' } else { b }));
    out.push(0);
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Every row, file and column survives the hand-written encoding, through
    /// special opcodes and the standard ones (long steps, a step back in
    /// lines, a row at the same address, several files, an empty name), and
    /// the subprograms carry their names, addresses and declarations.
    #[test]
    fn rows_and_subprograms_read_back_with_gimli() {
        let entry = |offset, file, line, column| LineEntry {
            offset,
            file,
            line,
            column,
        };
        let first = [
            entry(0, "a.toy", 10, 1),
            entry(3, "a.toy", 9, 1),
            entry(3, "b.toy", 30, 7),
            entry(200, "a.toy", 2, 0),
            entry(5000, "", 1_000_000, 3),
        ];
        let second = [entry(0, "b.toy", 4, 2), entry(17, "b.toy", 4, 5)];
        let regions = [
            RegionView {
                start: 0x10_0000,
                size: 6000,
                name: "toy:jit:one",
                unwind: None,
                lines: &first,
            },
            RegionView {
                start: 0x20_0000,
                size: 40,
                name: "toy:jit:two",
                unwind: None,
                lines: &second,
            },
            RegionView {
                start: 0x30_0000,
                size: 8,
                name: "no\0lines",
                unwind: None,
                lines: &[],
            },
        ];
        let built = build(&regions, "/src").expect("DWARF");
        let section = |id: gimli::SectionId| -> Result<&[u8], gimli::Error> {
            Ok(built
                .sections
                .iter()
                .find(|(name, _)| *name == id.name())
                .map_or(&[][..], |(_, b)| &b[..]))
        };
        let dwarf = gimli::Dwarf::load(|id| {
            section(id).map(|b| gimli::EndianSlice::new(b, gimli::LittleEndian))
        })
        .expect("sections");
        let header = dwarf.units().next().expect("read").expect("a unit");
        let unit = dwarf.unit(header).expect("unit");
        let program = unit.line_program.clone().expect("a line program");
        let mut rows = program.rows();
        let mut got = Vec::new();
        while let Some((header, row)) = rows.next_row().expect("row") {
            let file = row.file(header).expect("file");
            let name = dwarf.attr_string(&unit, file.path_name()).expect("name");
            let column = match row.column() {
                gimli::ColumnType::LeftEdge => 0,
                gimli::ColumnType::Column(c) => c.get(),
            };
            got.push((
                row.address(),
                name.to_string_lossy().into_owned(),
                row.line().map_or(0, |l| l.get()),
                column,
                row.end_sequence(),
            ));
        }
        let row =
            |address, file: &str, line, column, end| (address, file.to_owned(), line, column, end);
        assert_eq!(
            got,
            [
                row(0x10_0000, "a.toy", 10, 1, false),
                row(0x10_0003, "a.toy", 9, 1, false),
                row(0x10_0003, "b.toy", 30, 7, false),
                row(0x10_00c8, "a.toy", 2, 0, false),
                row(0x10_1388, "<jit>", 1_000_000, 3, false),
                row(0x10_1770, "<jit>", 1_000_000, 3, true),
                row(0x20_0000, "b.toy", 4, 2, false),
                row(0x20_0011, "b.toy", 4, 5, false),
                row(0x20_0028, "b.toy", 4, 5, true),
            ]
        );

        let mut subprograms = Vec::new();
        let mut entries = unit.entries();
        while let Some(die) = entries.next_dfs().expect("DIE") {
            if die.tag() != constants::DW_TAG_subprogram {
                continue;
            }
            let name = die.attr_value(constants::DW_AT_name).expect("name");
            let name = dwarf
                .attr_string(&unit, name)
                .expect("string")
                .to_string_lossy()
                .into_owned();
            let low = match die.attr_value(constants::DW_AT_low_pc) {
                Some(gimli::AttributeValue::Addr(a)) => a,
                other => panic!("low_pc {other:?}"),
            };
            let size = die
                .attr_value(constants::DW_AT_high_pc)
                .and_then(|v| v.udata_value());
            let line = die
                .attr_value(constants::DW_AT_decl_line)
                .and_then(|v| v.udata_value());
            subprograms.push((name, low, size, line));
        }
        assert_eq!(
            subprograms,
            [
                ("toy:jit:one".to_owned(), 0x10_0000, Some(6000), Some(10)),
                ("toy:jit:two".to_owned(), 0x20_0000, Some(40), Some(4)),
                ("no_lines".to_owned(), 0x30_0000, Some(8), None),
            ]
        );
        let mut ranges = dwarf.unit_ranges(&unit).expect("ranges");
        let mut all = Vec::new();
        while let Some(r) = ranges.next().expect("range") {
            all.push((r.begin, r.end));
        }
        assert_eq!(
            all,
            [
                (0x10_0000, 0x10_1770),
                (0x20_0000, 0x20_0028),
                (0x30_0000, 0x30_0008)
            ]
        );
    }

    /// Rows out of order are an error, not a panic or a wrapped address.
    #[test]
    fn unsorted_rows_are_refused() {
        let lines = [
            LineEntry {
                offset: 8,
                file: "a.toy",
                line: 1,
                column: 0,
            },
            LineEntry {
                offset: 4,
                file: "a.toy",
                line: 2,
                column: 0,
            },
        ];
        let region = RegionView {
            start: 0x1000,
            size: 16,
            name: "f",
            unwind: None,
            lines: &lines,
        };
        let err = build(&[region], "/").err().expect("refused");
        assert!(err.to_string().contains("not sorted"), "{err}");
    }
}
