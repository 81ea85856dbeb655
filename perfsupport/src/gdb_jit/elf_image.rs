//! The in-memory ELF object a debugger loads for one batch of regions,
//! written with `object`'s ELF builder.
//!
//! | section | type | contents |
//! |---|---|---|
//! | `.text` (one per run of regions, see below) | `SHT_NOBITS`, `SHF_ALLOC \| SHF_EXECINSTR` | nothing: `sh_addr` and `sh_size` are the live code's address and size |
//! | `.symtab`, `.strtab` | | one `STT_FUNC` symbol per region, value 0 and size = code size in its `.text` |
//! | `.eh_frame` | `SHT_PROGBITS` | CIE + FDE per region, absolute (`absptr`) addresses |
//! | `.debug_info`, `.debug_abbrev`, `.debug_line`, `.debug_ranges` | `SHT_PROGBITS` | see [`crate::dwarf`] |
//!
//! The file is `ET_REL`, like the objects V8 and CPython hand to gdb: gdb
//! takes each allocated section's `sh_addr` as its absolute load address
//! (it relocates nothing), and a relocatable file's symbol values are
//! offsets into their section. The code itself is never copied: `.text` is
//! `SHT_NOBITS`, the debugger reads the bytes from the process.
//!
//! Regions that lie one after the other share one `.text`: gdb keeps a map
//! of every section of every object and rebuilds it (sorting all sections)
//! whenever an object comes or goes, so a section per region made each
//! registration cost time in proportion to all regions registered before
//! (5,000 functions compiled one at a time: 144 s under gdb; 8 s with a
//! section per run). A run never spans a gap that holds another region of
//! the sink (it may belong to another object) or more than [`MAX_GAP`]
//! bytes (it may hold code of another runtime). All sections are named
//! `.text`: gdb finds an object's text section by that name.

use crate::dwarf::{self, RegionView};
use object::build::elf::{Builder, SectionData};
use object::elf;
use object::{Endianness, build::ByteString};
use std::io;

/// The widest gap between two regions that one `.text` section spans:
/// a JIT's padding, unwind tails and guard pages, not a foreign mapping.
pub(super) const MAX_GAP: u64 = 64 * 1024;

/// Builds the object file for `regions` (validated, non-empty); `comp_dir`
/// is where relative source paths of the line tables are found.
/// `gap_is_free(end, start)` says whether `[end, start)`, between two of
/// these regions, holds no region of another object.
pub(super) fn build(
    regions: &[RegionView<'_>],
    comp_dir: &str,
    gap_is_free: impl Fn(u64, u64) -> bool,
) -> io::Result<Vec<u8>> {
    let dwarf = dwarf::build(regions, comp_dir)?;
    let eh_frame = crate::unwind::eh_frame_absolute(
        regions
            .iter()
            .filter_map(|r| Some((r.start, r.size, r.unwind?))),
    )?;

    let mut builder = Builder::new(Endianness::Little, true);
    builder.header.e_type = elf::ET_REL;
    builder.header.e_machine = crate::os::elf_machine()?;
    // ANCHOR: text_sections
    for run in runs(regions, gap_is_free) {
        let (first, last) = (run[0], run[run.len() - 1]);
        let text = builder.sections.add();
        text.name = ByteString::from(".text");
        text.sh_type = elf::SHT_NOBITS;
        text.sh_flags = elf::SHF_ALLOC | elf::SHF_EXECINSTR;
        text.sh_addr = first.start;
        text.sh_addralign = 1;
        text.data = SectionData::UninitializedData(last.start + last.size - first.start);
        let text_id = text.id();
        for region in run {
            let symbol = builder.symbols.add();
            // Validated: the name has no NUL, which would end it in `.strtab`.
            symbol.name = ByteString::from(region.name.as_bytes().to_vec());
            symbol.section = Some(text_id);
            symbol.set_st_info(elf::STB_GLOBAL, elf::STT_FUNC);
            // A relocatable file's symbol value is an offset in its section.
            symbol.st_value = region.start - first.start;
            symbol.st_size = region.size;
        }
    }
    // ANCHOR_END: text_sections
    // Only a terminator means no region has call-frame information.
    if eh_frame.len() > 4 {
        add_data_section(&mut builder, ".eh_frame", eh_frame, 8);
    }
    for (name, bytes) in dwarf.sections {
        add_data_section(&mut builder, name, bytes, 1);
    }
    let symtab = builder.sections.add();
    symtab.name = ByteString::from(".symtab");
    symtab.sh_type = elf::SHT_SYMTAB;
    symtab.sh_addralign = 8;
    symtab.data = SectionData::Symbol;
    let strtab = builder.sections.add();
    strtab.name = ByteString::from(".strtab");
    strtab.sh_type = elf::SHT_STRTAB;
    strtab.sh_addralign = 1;
    strtab.data = SectionData::String;
    let shstrtab = builder.sections.add();
    shstrtab.name = ByteString::from(".shstrtab");
    shstrtab.sh_type = elf::SHT_STRTAB;
    shstrtab.sh_addralign = 1;
    shstrtab.data = SectionData::SectionString;

    let mut image = Vec::new();
    builder
        .write(&mut image)
        .map_err(|e| io::Error::other(format!("cannot write the ELF object: {e}")))?;
    Ok(image)
}

/// `regions` in address order, cut into runs that one `.text` can cover
/// (see the module docs).
fn runs<'r, 'a>(
    regions: &'r [RegionView<'a>],
    gap_is_free: impl Fn(u64, u64) -> bool,
) -> Vec<Vec<&'r RegionView<'a>>> {
    let mut sorted: Vec<&RegionView<'a>> = regions.iter().collect();
    sorted.sort_by_key(|r| r.start);
    let mut runs: Vec<Vec<&RegionView<'a>>> = Vec::new();
    for region in sorted {
        match runs.last_mut() {
            Some(run) => {
                let end = run.last().map_or(0, |r| r.start + r.size);
                let joins = region.start >= end
                    && region.start - end <= MAX_GAP
                    && gap_is_free(end, region.start);
                if joins {
                    run.push(region);
                } else {
                    runs.push(vec![region]);
                }
            }
            None => runs.push(vec![region]),
        }
    }
    runs
}

/// A non-allocated section holding `bytes` (debug info and CFI take no
/// address in the process).
fn add_data_section(builder: &mut Builder<'_>, name: &'static str, bytes: Vec<u8>, align: u64) {
    let section = builder.sections.add();
    section.name = ByteString::from(name);
    section.sh_type = elf::SHT_PROGBITS;
    section.sh_addralign = align;
    section.data = SectionData::Data(bytes.into());
}
