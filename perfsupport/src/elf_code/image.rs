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
//!   They cost the file some bytes and the batch the time the hand-written writer
//!   takes (`bench/jit_elf.py`), not a page of memory.
//! * The build-id is the SHA-1 of the file's bytes (the note's descriptor
//!   zeroed; the zeros that pad the headers' page and the segment left
//!   out, as the headers fix them) and a salt (the publisher's pid, file
//!   number and chunk address): two files never share one, since fleet
//!   backends symbolize by build-id.
//! * Written byte by byte: the layout is fixed (three program headers,
//!   four loaded sections, the DWARF's, three tables), and `object`'s
//!   general ELF writer (string tables with suffix merging, index
//!   bookkeeping) cost a one-line batch several microseconds of its
//!   ~140 us compile; `object` reads every file back in the tests, and
//!   readelf and eu-elflint find nothing to complain about.

use crate::dwarf::{self, RegionView};
use crate::eh_frame::{FdeBase, LayoutWriter, write_cie_fde};
use crate::region::CodeRegion;
use gimli::constants::{DW_EH_PE_datarel, DW_EH_PE_pcrel, DW_EH_PE_sdata4, DW_EH_PE_udata4};
use object::elf;
use sha1::{Digest, Sha1};
use std::io;

/// The program headers: PT_LOAD, PT_GNU_EH_FRAME and PT_NOTE.
const PROGRAM_HEADERS: u16 = 3;
/// Bytes of an ELF64 file header, program header, section header, symbol.
const FILE_HEADER_SIZE: u64 = 64;
const PROGRAM_HEADER_SIZE: u64 = 56;
const SECTION_HEADER_SIZE: u64 = 64;
const SYM_SIZE: u64 = 24;

fn put16(out: &mut Vec<u8>, value: u16) {
    out.extend_from_slice(&value.to_le_bytes());
}

fn put32(out: &mut Vec<u8>, value: u32) {
    out.extend_from_slice(&value.to_le_bytes());
}

fn put64(out: &mut Vec<u8>, value: u64) {
    out.extend_from_slice(&value.to_le_bytes());
}

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
/// A page size that is not a power of two of at least 4096 bytes, a chunk
/// not a whole number of pages, a region outside the chunk, or spare bytes
/// too few for the tables.
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
    if !page.is_power_of_two() || page < 4096 || len < page || !len.is_multiple_of(page) {
        return Err(invalid(&format!(
            "JIT code file: a chunk of {len} bytes is not whole pages of {page} bytes \
             (a power of two, at least 4096)"
        )));
    }
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

    // The section header string table and each section's name in it.
    let mut shstrtab = vec![0u8];
    let mut name = |n: &str| {
        let at = shstrtab.len() as u32;
        shstrtab.extend_from_slice(n.as_bytes());
        shstrtab.push(0);
        at
    };
    let fixed_names = [".text", ".eh_frame_hdr", ".eh_frame", ".note.gnu.build-id"].map(&mut name);
    let debug_names: Vec<u32> = debug.iter().map(|(n, _)| name(n)).collect();
    let [symtab_name, strtab_name, shstrtab_name] =
        [".symtab", ".strtab", ".shstrtab"].map(&mut name);
    // The symbol string table: the regions' names (validated: no NUL).
    let mut strtab = vec![0u8];
    let name_at: Vec<u32> = regions
        .iter()
        .map(|r| {
            let at = strtab.len() as u32;
            strtab.extend_from_slice(r.name.as_bytes());
            strtab.push(0);
            at
        })
        .collect();

    // Where everything goes, in file order after the segment: the DWARF,
    // .symtab (8-aligned), .strtab, .shstrtab, the section headers
    // (8-aligned).
    let mut at = len;
    let debug_at: Vec<u64> = (debug.iter())
        .map(|(_, b)| {
            let here = at;
            at += b.len() as u64;
            here
        })
        .collect();
    let symtab_at = at.next_multiple_of(8);
    let symtab_size = SYM_SIZE * (1 + regions.len() as u64);
    let strtab_at = symtab_at + symtab_size;
    let shstrtab_at = strtab_at + strtab.len() as u64;
    let sections_at = (shstrtab_at + shstrtab.len() as u64).next_multiple_of(8);
    // null, .text, .eh_frame_hdr, .eh_frame, the note, the DWARF, .symtab,
    // .strtab, .shstrtab.
    let sections = 5 + debug.len() as u64 + 3;
    let (symtab_index, strtab_index) = (5 + debug.len() as u32, 6 + debug.len() as u32);
    let file_len = sections_at + SECTION_HEADER_SIZE * sections;
    let too_big = || invalid("JIT code file: over 4 GiB of sections or names");
    let sections16 = u16::try_from(sections).map_err(|_| too_big())?;
    if file_len > u64::from(u32::MAX) {
        return Err(too_big());
    }

    let mut out = Vec::with_capacity(file_len as usize);
    // ELF header: 64-bit, little-endian, current version, no OS ABI.
    out.extend_from_slice(&[0x7f, b'E', b'L', b'F', 2, 1, 1, 0]);
    out.extend_from_slice(&[0; 8]);
    put16(&mut out, elf::ET_DYN.0);
    put16(&mut out, crate::os::elf_machine()?.0);
    put32(&mut out, 1); // e_version
    put64(&mut out, 0); // e_entry
    put64(&mut out, FILE_HEADER_SIZE); // e_phoff
    put64(&mut out, sections_at); // e_shoff
    put32(&mut out, 0); // e_flags
    put16(&mut out, FILE_HEADER_SIZE as u16);
    put16(&mut out, PROGRAM_HEADER_SIZE as u16);
    put16(&mut out, PROGRAM_HEADERS);
    put16(&mut out, SECTION_HEADER_SIZE as u16);
    put16(&mut out, sections16);
    put16(&mut out, sections16 - 1); // e_shstrndx: the last one
    // Program headers: (type, flags, offset = address, size, alignment).
    for (p_type, flags, at, size, align) in [
        (elf::PT_LOAD.0, elf::PF_R.0 | elf::PF_X.0, 0, len, page),
        (
            elf::PT_GNU_EH_FRAME.0,
            elf::PF_R.0,
            eh_hdr_at,
            eh_hdr.len() as u64,
            4,
        ),
        (elf::PT_NOTE.0, elf::PF_R.0, note_at, NOTE_SIZE as u64, 4),
    ] {
        put32(&mut out, p_type);
        put32(&mut out, flags);
        for field in [at, at, at, size, size, align] {
            put64(&mut out, field);
        }
    }
    // The segment: headers' page, code, tables, build-id note, zeros.
    out.resize(page as usize, 0);
    out.extend_from_slice(&mem[page as usize..eh_hdr_at as usize]);
    out.extend_from_slice(&eh_hdr);
    out.extend_from_slice(&eh_frame);
    out.resize(note_at as usize, 0);
    put32(&mut out, 4); // name size
    put32(&mut out, 20); // descriptor size
    put32(&mut out, elf::NT_GNU_BUILD_ID.0);
    out.extend_from_slice(b"GNU\0");
    out.extend_from_slice(&[0; 20]); // the build-id, set below
    out.resize(len as usize, 0);
    // After the segment, never mapped.
    for (_, bytes) in &debug {
        out.extend_from_slice(bytes);
    }
    out.resize(symtab_at as usize, 0);
    out.extend_from_slice(&[0; SYM_SIZE as usize]);
    for (r, &st_name) in regions.iter().zip(&name_at) {
        put32(&mut out, st_name);
        out.push((elf::STB_GLOBAL.0 << 4) | elf::STT_FUNC.0); // st_info
        out.push(elf::STV_DEFAULT.0); // st_other
        put16(&mut out, 1); // st_shndx: .text
        put64(&mut out, text + (r.start() - base));
        put64(&mut out, r.size());
    }
    out.extend_from_slice(&strtab);
    out.extend_from_slice(&shstrtab);
    out.resize(sections_at as usize, 0);
    // Section headers: (name, type, flags, address, offset, size, link,
    // info, alignment, entry size). Loaded sections have address = offset.
    let alloc = elf::SHF_ALLOC.0 as u64;
    let mut headers = vec![
        (0, 0, 0, 0, 0, 0, 0, 0, 0, 0),
        (
            fixed_names[0],
            elf::SHT_PROGBITS.0,
            alloc | elf::SHF_EXECINSTR.0 as u64,
            page,
            page,
            code_end - page,
            0,
            0,
            TEXT_ALIGN,
            0,
        ),
        (
            fixed_names[1],
            elf::SHT_PROGBITS.0,
            alloc,
            eh_hdr_at,
            eh_hdr_at,
            eh_hdr.len() as u64,
            0,
            0,
            4,
            0,
        ),
        (
            fixed_names[2],
            elf::SHT_PROGBITS.0,
            alloc,
            eh_frame_at,
            eh_frame_at,
            eh_frame.len() as u64,
            0,
            0,
            8,
            0,
        ),
        (
            fixed_names[3],
            elf::SHT_NOTE.0,
            alloc,
            note_at,
            note_at,
            NOTE_SIZE as u64,
            0,
            0,
            4,
            0,
        ),
    ];
    for ((name, (_, bytes)), &at) in debug_names.iter().zip(&debug).zip(&debug_at) {
        headers.push((
            *name,
            elf::SHT_PROGBITS.0,
            0,
            0,
            at,
            bytes.len() as u64,
            0,
            0,
            1,
            0,
        ));
    }
    // .symtab: linked to .strtab; one local symbol (the null one) first.
    headers.push((
        symtab_name,
        elf::SHT_SYMTAB.0,
        0,
        0,
        symtab_at,
        symtab_size,
        strtab_index,
        1,
        8,
        SYM_SIZE,
    ));
    headers.push((
        strtab_name,
        elf::SHT_STRTAB.0,
        0,
        0,
        strtab_at,
        strtab.len() as u64,
        0,
        0,
        1,
        0,
    ));
    headers.push((
        shstrtab_name,
        elf::SHT_STRTAB.0,
        0,
        0,
        shstrtab_at,
        shstrtab.len() as u64,
        0,
        0,
        1,
        0,
    ));
    debug_assert_eq!(headers.len() as u64, sections);
    debug_assert_eq!(symtab_index as usize, headers.len() - 3);
    for (name, sh_type, flags, addr, offset, size, link, info, align, entsize) in headers {
        put32(&mut out, name);
        put32(&mut out, sh_type);
        put64(&mut out, flags);
        put64(&mut out, addr);
        put64(&mut out, offset);
        put64(&mut out, size);
        put32(&mut out, link);
        put32(&mut out, info);
        put64(&mut out, align);
        put64(&mut out, entsize);
    }
    debug_assert_eq!(out.len() as u64, file_len);

    // Everything but the padding: a small batch's file is mostly zeros.
    let headers_end =
        (FILE_HEADER_SIZE + PROGRAM_HEADER_SIZE * u64::from(PROGRAM_HEADERS)) as usize;
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
