//! The in-memory ELF object a debugger loads for one batch of regions,
//! written with `object`'s ELF builder.
//!
//! | section | type | contents |
//! |---|---|---|
//! | `.text` (one per region) | `SHT_NOBITS`, `SHF_ALLOC \| SHF_EXECINSTR` | nothing: `sh_addr` and `sh_size` are the live code's address and size |
//! | `.symtab`, `.strtab` | | one `STT_FUNC` symbol per region, value 0 and size = code size in its `.text` |
//! | `.eh_frame` | `SHT_PROGBITS` | CIE + FDE per region, absolute (`absptr`) addresses |
//! | `.debug_info`, `.debug_abbrev`, `.debug_line`, `.debug_str`, `.debug_ranges` | `SHT_PROGBITS` | see [`dwarf`](super::dwarf) |
//!
//! The file is `ET_REL`, like the objects V8 and CPython hand to gdb: gdb
//! takes each allocated section's `sh_addr` as its absolute load address
//! (it relocates nothing), and a relocatable file's symbol values are
//! offsets into their section. The code itself is never copied: `.text` is
//! `SHT_NOBITS`, the debugger reads the bytes from the process.
//!
//! Each region gets its own `.text` so that a batch whose regions are not
//! contiguous never claims addresses between them (they may belong to
//! another batch's object). All are named `.text`: gdb finds an object's
//! text section by that name.

use super::dwarf;
use super::record::RegionView;
use object::build::elf::{Builder, SectionData};
use object::elf;
use object::{Endianness, build::ByteString};
use std::io;

/// Builds the object file for `regions` (validated, non-empty); `comp_dir`
/// is where relative source paths of the line tables are found.
pub(super) fn build(regions: &[RegionView<'_>], comp_dir: &str) -> io::Result<Vec<u8>> {
    let dwarf = dwarf::build(regions, comp_dir)?;
    let eh_frame = crate::unwind::eh_frame_absolute(
        regions
            .iter()
            .filter_map(|r| Some((r.start, r.size, r.unwind?))),
    )?;

    let mut builder = Builder::new(Endianness::Little, true);
    builder.header.e_type = elf::ET_REL;
    builder.header.e_machine = machine()?;
    // ANCHOR: text_sections
    for region in regions {
        let text = builder.sections.add();
        text.name = ByteString::from(".text");
        text.sh_type = elf::SHT_NOBITS;
        text.sh_flags = elf::SHF_ALLOC | elf::SHF_EXECINSTR;
        text.sh_addr = region.start;
        text.sh_addralign = 1;
        text.data = SectionData::UninitializedData(region.size);
        let text_id = text.id();
        let symbol = builder.symbols.add();
        // Validated: the name has no NUL, which would end it in `.strtab`.
        symbol.name = ByteString::from(region.name.as_bytes().to_vec());
        symbol.section = Some(text_id);
        symbol.set_st_info(elf::STB_GLOBAL, elf::STT_FUNC);
        symbol.st_value = 0;
        symbol.st_size = region.size;
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

/// A non-allocated section holding `bytes` (debug info and CFI take no
/// address in the process).
fn add_data_section(builder: &mut Builder<'_>, name: &'static str, bytes: Vec<u8>, align: u64) {
    let section = builder.sections.add();
    section.name = ByteString::from(name);
    section.sh_type = elf::SHT_PROGBITS;
    section.sh_addralign = align;
    section.data = SectionData::Data(bytes.into());
}

/// The ELF machine of the code this process generates.
fn machine() -> io::Result<elf::Machine> {
    if cfg!(target_arch = "x86_64") {
        Ok(elf::EM_X86_64)
    } else if cfg!(target_arch = "aarch64") {
        Ok(elf::EM_AARCH64)
    } else if cfg!(target_arch = "riscv64") {
        Ok(elf::EM_RISCV)
    } else {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "the GDB JIT interface is not supported on this architecture",
        ))
    }
}
