//! The ELF file of one batch of JIT code: what a profiler that reads only
//! native code (the OpenTelemetry eBPF profiler, perf without `perf inject`,
//! eu-stack, bpftrace, samply) needs to unwind and name it.
//!
// ANCHOR: layout
//! ```text
//! file offset = vaddr   contents                          segment
//! 0                     ELF header, program headers       one PT_LOAD R+X, `len`
//! PAGE (the page size)  the chunk's code, as it runs      bytes: the VM maps exactly
//!                       (relocated for its address)       this range over its chunk
//! after the last region .eh_frame_hdr, .eh_frame,         (MAP_FIXED), whose first
//!                       .note.gnu.build-id, zeros to len  page it left for the
//!                                                         headers; PT_GNU_EH_FRAME
//!                                                         and PT_NOTE inside it
//! len                   .debug_info, .debug_line, ...,    (no segment)
//!                       .symtab, .strtab, .shstrtab,
//!                       section headers
//! ```
// ANCHOR_END: layout
//!
//! Why this layout:
//!
//! * The file is `ET_DYN` and every loaded segment has `p_vaddr ==
//!   p_offset`, like a shared library: a tool turns a sampled address into
//!   a file offset with the mapping's start and page offset (`/proc/PID/maps`,
//!   perf's MMAP2 `pgoff`), and that offset is also the ELF address its
//!   symbols and CFI use. The load bias is `chunk start - PAGE`.
//! * One `PT_LOAD` from offset and address 0, headers included, mapped
//!   whole: perf computes a table's runtime address as the mapping's start
//!   plus the table's ELF address, less the mapping's page offset *and* the
//!   lowest `PT_LOAD` address, and libdwfl (eu-stack) takes the lowest
//!   mapping of a file for its first `PT_LOAD`. A code segment at the page
//!   with an unmapped headers segment at 0 broke the first; a code segment
//!   first, at the page, broke the second (perf's DWARF unwinding stopped
//!   at every frame of these files it did not start in). So the VM leaves
//!   the first page of each chunk for the headers.
//! * The unwind tables live in that segment too, in the chunk's spare bytes
//!   after its last region: perf reads `.eh_frame_hdr` and `.eh_frame`
//!   through the sample's mapping and records only executable mappings, so
//!   tables outside the mapped code would not be found.
//! * `.eh_frame` uses `pcrel|sdata4` addresses and `.eh_frame_hdr` a sorted
//!   `datarel|sdata4` table, the encodings every unwinder of shared
//!   libraries reads; every region with unwind info has its FDE.
//! * DWARF after the segment (never mapped, read from the file): a
//!   `DW_TAG_subprogram` per region and the regions' line tables in
//!   `.debug_line`, the rows perf gets through jitdump, so `perf report
//!   --sort srcline`, `perf annotate`, `addr2line`, `eu-stack -s` and a
//!   fleet backend that symbolizes by build-id show Toy source lines.
//!   They cost the file some bytes and the batch the time `gimli::write`
//!   takes (`bench/jit_elf.py`), not a page of memory.
//! * The build-id is the SHA-1 of the file's bytes (the note's descriptor
//!   zeroed; the zeros that pad the headers' page and the segment left
//!   out, as the headers fix them) and a salt (the publisher's pid, file
//!   number and chunk address): two files never share one, since fleet
//!   backends symbolize by build-id.

use crate::dwarf::{self, RegionView};
use crate::eh_frame::{FdeBase, LayoutWriter, write_cie_fde};
use crate::region::CodeRegion;
use gimli::constants::{DW_EH_PE_datarel, DW_EH_PE_pcrel, DW_EH_PE_sdata4, DW_EH_PE_udata4};
use object::Endianness;
use object::elf;
use object::write::elf::{FileHeader, ProgramHeader, SectionHeader, Sym, Writer};
use sha1::{Digest, Sha1};
use std::io;

/// The program headers: PT_LOAD, PT_GNU_EH_FRAME and PT_NOTE.
const PROGRAM_HEADERS: u32 = 3;

/// Bytes of the GNU build-id note: header, "GNU\0", a 20-byte SHA-1.
const NOTE_SIZE: usize = 12 + 4 + 20;

fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, what.to_owned())
}

/// The `.eh_frame_hdr` and `.eh_frame` of `regions`, for a file whose
/// `.text` starts at ELF address `text` and holds the chunk whose bytes
/// start at `base` (where `regions` borrow them) and run at `chunk`; the
/// header at ELF address `at`.
fn unwind_sections(
    text: u64,
    base: u64,
    chunk: u64,
    regions: &[CodeRegion<'_>],
    at: u64,
) -> io::Result<(Vec<u8>, Vec<u8>)> {
    let with_unwind: Vec<_> = regions.iter().filter(|r| r.unwind.is_some()).collect();
    let hdr_size = 12 + 8 * with_unwind.len() as u64;
    let eh_at = (at + hdr_size).next_multiple_of(8);
    let mut writer = LayoutWriter::new(eh_at);
    // (ELF address of the code, offset of its FDE in .eh_frame)
    let mut table: Vec<(u64, u64)> = Vec::with_capacity(with_unwind.len());
    for region in with_unwind {
        let Some(unwind) = region.unwind else {
            continue;
        };
        let offset = region.start() - base;
        let vaddr = text + offset;
        let cie_at = writer.len() as u64;
        // An FDE with a constant address names the code where it runs.
        writer.rebase(vaddr, region.size(), FdeBase::Runtime(chunk + offset));
        write_cie_fde(&mut writer, unwind, DW_EH_PE_pcrel | DW_EH_PE_sdata4)?;
        let bytes = writer.bytes();
        let cie_length = u32::from_le_bytes(
            bytes[cie_at as usize..cie_at as usize + 4]
                .try_into()
                .expect("4 bytes"),
        );
        table.push((vaddr, cie_at + 4 + u64::from(cie_length)));
    }
    let mut eh_frame = writer.into_bytes();
    eh_frame.extend_from_slice(&[0; 4]);
    table.sort_unstable();
    let rel = |to: u64, from: u64| -> io::Result<[u8; 4]> {
        i32::try_from(to as i64 - from as i64)
            .map(i32::to_le_bytes)
            .map_err(|_| invalid("JIT code file: unwind tables farther than 2 GiB from the code"))
    };
    let mut hdr = vec![
        1,
        (DW_EH_PE_pcrel | DW_EH_PE_sdata4).0,
        DW_EH_PE_udata4.0,
        (DW_EH_PE_datarel | DW_EH_PE_sdata4).0,
    ];
    hdr.extend_from_slice(&rel(eh_at, at + 4)?);
    hdr.extend_from_slice(&(table.len() as u32).to_le_bytes());
    for (code, fde) in table {
        hdr.extend_from_slice(&rel(code, at)?);
        hdr.extend_from_slice(&rel(eh_at + fde, at)?);
    }
    hdr.resize((eh_at - at) as usize, 0);
    Ok((hdr, eh_frame))
}

/// The ELF file of a chunk: `mem`, its bytes as they will run at runtime
/// address `chunk` (a first page left for the headers, the regions, which
/// must lie after it, and spare bytes after the last one), mapped from file
/// offset 0. `regions` borrow their code in `mem`, which may be the chunk
/// itself or a copy staged elsewhere; the unwind tables and build-id note in the spare bytes; the
/// DWARF of the regions (relative source paths found from `comp_dir`)
/// after the segment. `salt` goes into the build-id with the file's bytes:
/// identical code published twice still gets two build-ids.
///
/// # Errors
/// A region outside the chunk, or spare bytes too few for the tables.
pub fn build(
    page: u64,
    chunk: u64,
    mem: &[u8],
    regions: &[CodeRegion<'_>],
    comp_dir: &str,
    salt: &[u8],
) -> io::Result<Vec<u8>> {
    const TEXT_ALIGN: u64 = 16;
    let text = 0;
    let len = mem.len() as u64;
    chunk
        .checked_add(len)
        .ok_or_else(|| invalid("JIT code file: the chunk wraps around the address space"))?;
    // Where the regions' bytes are: offsets in the file are from here.
    let base = mem.as_ptr() as u64;
    let end = base + len;
    for r in regions {
        if r.start() < base + page || r.start() + r.size() > end {
            return Err(invalid(&format!(
                "JIT code file: region {:?} lies outside its chunk (or in its first page)",
                r.name
            )));
        }
    }
    // Code starts after the first page (the headers'); a batch of no
    // regions has none, and its tables follow the headers' page.
    let code_end = regions
        .iter()
        .map(|r| r.start() + r.size() - base)
        .max()
        .unwrap_or(page);
    let eh_hdr_at = text + code_end.next_multiple_of(TEXT_ALIGN);
    let (eh_hdr, eh_frame) = unwind_sections(text, base, chunk, regions, eh_hdr_at)?;
    let eh_frame_at = eh_hdr_at + eh_hdr.len() as u64;
    let note_at = (eh_frame_at + eh_frame.len() as u64).next_multiple_of(4);
    let tables_end = note_at + NOTE_SIZE as u64;
    if tables_end > text + len {
        return Err(invalid(&format!(
            "JIT code file: the chunk has {} spare bytes after its code, its unwind tables \
             need {}",
            len - code_end,
            tables_end - text - code_end
        )));
    }

    // The regions at their ELF addresses, for the DWARF.
    let views: Vec<RegionView<'_>> = regions
        .iter()
        .map(|r| RegionView {
            start: text + (r.start() - base),
            ..RegionView::from(r)
        })
        .collect();
    let debug = if views.is_empty() {
        Vec::new()
    } else {
        dwarf::build(&views, comp_dir)?.sections
    };

    let mut out =
        Vec::with_capacity(len as usize + 1024 + debug.iter().map(|(_, b)| b.len()).sum::<usize>());
    let mut w = Writer::new(Endianness::Little, true, &mut out);
    // Reserve, in file order.
    w.reserve_file_header();
    w.reserve_program_headers(PROGRAM_HEADERS);
    w.reserve_until(page);
    w.reserve(len - page, 1);
    let debug_at: Vec<u64> = (debug.iter())
        .map(|(_, b)| w.reserve(b.len() as u64, 1))
        .collect();
    w.reserve_null_section_index();
    let text_name = w.add_section_name(b".text");
    let text_index = w.reserve_section_index();
    let hdr_name = w.add_section_name(b".eh_frame_hdr");
    w.reserve_section_index();
    let eh_name = w.add_section_name(b".eh_frame");
    w.reserve_section_index();
    let note_name = w.add_section_name(b".note.gnu.build-id");
    w.reserve_section_index();
    let debug_names: Vec<_> = (debug.iter())
        .map(|(name, _)| {
            let name = w.add_section_name(name.as_bytes());
            w.reserve_section_index();
            name
        })
        .collect();
    w.reserve_symtab_section_index();
    w.reserve_strtab_section_index();
    w.reserve_shstrtab_section_index();
    w.reserve_null_symbol_index();
    let names: Vec<_> = regions
        .iter()
        .map(|r| w.add_string(r.name.as_bytes()))
        .collect();
    for _ in regions {
        w.reserve_symbol_index(Some(text_index));
    }
    w.reserve_symtab();
    let too_big = |e: object::write::Error| invalid(&format!("JIT code file: {e}"));
    w.reserve_strtab().map_err(too_big)?;
    w.reserve_shstrtab().map_err(too_big)?;
    w.reserve_section_headers();

    // Write.
    w.write_file_header(&FileHeader {
        os_abi: elf::ELFOSABI_NONE,
        abi_version: 0,
        e_type: elf::ET_DYN,
        e_machine: crate::os::elf_machine()?,
        e_entry: 0,
        e_flags: elf::FileFlags(0),
    })
    .map_err(|e| invalid(&format!("JIT code file: {e}")))?;
    w.write_align_program_headers();
    w.write_program_header(&ProgramHeader {
        p_type: elf::PT_LOAD,
        p_flags: elf::PF_R | elf::PF_X,
        p_offset: 0,
        p_vaddr: 0,
        p_paddr: 0,
        p_filesz: len,
        p_memsz: len,
        p_align: page,
    });
    w.write_program_header(&ProgramHeader {
        p_type: elf::PT_GNU_EH_FRAME,
        p_flags: elf::PF_R,
        p_offset: eh_hdr_at,
        p_vaddr: eh_hdr_at,
        p_paddr: eh_hdr_at,
        p_filesz: eh_hdr.len() as u64,
        p_memsz: eh_hdr.len() as u64,
        p_align: 4,
    });
    w.write_program_header(&ProgramHeader {
        p_type: elf::PT_NOTE,
        p_flags: elf::PF_R,
        p_offset: note_at,
        p_vaddr: note_at,
        p_paddr: note_at,
        p_filesz: NOTE_SIZE as u64,
        p_memsz: NOTE_SIZE as u64,
        p_align: 4,
    });
    w.pad_until(page);
    w.write(&mem[page as usize..eh_hdr_at as usize]);
    w.write(&eh_hdr);
    w.write(&eh_frame);
    w.pad_until(note_at);
    let mut note = Vec::with_capacity(NOTE_SIZE);
    note.extend_from_slice(&4u32.to_le_bytes());
    note.extend_from_slice(&20u32.to_le_bytes());
    note.extend_from_slice(&elf::NT_GNU_BUILD_ID.0.to_le_bytes());
    note.extend_from_slice(b"GNU\0");
    note.extend_from_slice(&[0; 20]);
    w.write(&note);
    w.pad_until(text + len);
    for (_, bytes) in &debug {
        w.write(bytes);
    }
    w.write_null_symbol();
    for (r, name) in regions.iter().zip(&names) {
        let st_name = w.string_offset(Some(*name));
        w.write_symbol(&Sym {
            section: Some(text_index.0),
            st_name,
            st_info: elf::STB_GLOBAL | elf::STT_FUNC,
            st_other: elf::STV_DEFAULT.into(),
            st_shndx: elf::SHN_UNDEF,
            st_value: text + (r.start() - base),
            st_size: r.size(),
        });
    }
    w.write_strtab();
    w.write_shstrtab();
    w.write_null_section_header();
    let named: Vec<u32> = [text_name, hdr_name, eh_name, note_name]
        .into_iter()
        .map(|n| w.section_name_offset(Some(n)))
        .collect();
    let section = |sh_name, sh_type, sh_flags, at: u64, size: usize, align| SectionHeader {
        sh_name,
        sh_type,
        sh_flags,
        sh_addr: at,
        sh_offset: at,
        sh_size: size as u64,
        sh_link: 0,
        sh_info: 0,
        sh_addralign: align,
        sh_entsize: 0,
    };
    w.write_section_header(&section(
        named[0],
        elf::SHT_PROGBITS,
        elf::SHF_ALLOC | elf::SHF_EXECINSTR,
        page,
        (code_end - page) as usize,
        TEXT_ALIGN,
    ));
    w.write_section_header(&section(
        named[1],
        elf::SHT_PROGBITS,
        elf::SHF_ALLOC,
        eh_hdr_at,
        eh_hdr.len(),
        4,
    ));
    w.write_section_header(&section(
        named[2],
        elf::SHT_PROGBITS,
        elf::SHF_ALLOC,
        eh_frame_at,
        eh_frame.len(),
        8,
    ));
    w.write_section_header(&section(
        named[3],
        elf::SHT_NOTE,
        elf::SHF_ALLOC,
        note_at,
        NOTE_SIZE,
        4,
    ));
    for ((name, (_, bytes)), at) in debug_names.iter().zip(&debug).zip(&debug_at) {
        // Not loaded: no address, only an offset.
        w.write_section_header(&SectionHeader {
            sh_addr: 0,
            sh_offset: *at,
            ..section(
                w.section_name_offset(Some(*name)),
                elf::SHT_PROGBITS,
                elf::SectionFlags(0),
                0,
                bytes.len(),
                1,
            )
        });
    }
    w.write_symtab_section_header(1);
    w.write_strtab_section_header();
    w.write_shstrtab_section_header();

    // Everything but the padding: a small batch's file is mostly zeros.
    let headers_end = 64 + 56 * PROGRAM_HEADERS as usize;
    debug_assert!(out[headers_end..page as usize].iter().all(|&b| b == 0));
    debug_assert!(
        out[tables_end as usize..len as usize]
            .iter()
            .all(|&b| b == 0)
    );
    let mut hash = Sha1::new();
    hash.update(&out[..headers_end]);
    hash.update(&out[page as usize..tables_end as usize]);
    hash.update(&out[len as usize..]);
    hash.update(salt);
    let id = hash.finalize();
    let desc = note_at as usize + 16;
    out[desc..desc + 20].copy_from_slice(&id);
    Ok(out)
}
