//! The jitdump byte format, record by record, as perf 6.1 reads it.
//!
//! Reference: `tools/perf/Documentation/jitdump-specification.txt` and, where
//! the two disagree, perf's code (`tools/perf/util/jitdump.c`, `genelf.c`).
//! All fields are in host byte order (little-endian on x86-64 and AArch64).
//! The file is a [header](HEADER_SIZE) followed by records; every record starts
//! with the 16-byte [record header](RECORD_HEADER_SIZE).
//!
//! Records need no alignment: perf reads them with `fread`. DEBUG_INFO and
//! UNWINDING_INFO are padded to 8 bytes like V8 and CPython do; CODE_LOAD is
//! **never** padded, because perf takes the code as the last `code_size`
//! bytes of the record.
//!
//! For each region the writer emits DEBUG_INFO (if the region has a line
//! table), UNWINDING_INFO, then CODE_LOAD: perf attaches the pending
//! DEBUG_INFO and UNWINDING_INFO records to the **next** CODE_LOAD.

use crate::region::CodeRegion;
use crate::unwind::perf_layout::{EH_FRAME_HDR_SIZE, PerfUnwindData};

/// File header size, and the value of its `total_size` field.
///
/// | off | type | field | value |
/// |---|---|---|---|
/// | 0 | u32 | magic | [`MAGIC`] (bytes `44 54 69 4A` on little-endian) |
/// | 4 | u32 | version | [`VERSION`] |
/// | 8 | u32 | total_size | 40 (perf's code for larger headers is broken) |
/// | 12 | u32 | elf_mach | [`ELF_MACHINE`] |
/// | 16 | u32 | pad1 | 0 |
/// | 20 | u32 | pid | `getpid()` |
/// | 24 | u64 | timestamp | CLOCK_MONOTONIC ns when the file was created |
/// | 32 | u64 | flags | 0 (bit 0 would mean TSC timestamps) |
pub const HEADER_SIZE: u32 = 40;

/// `"JiTD"` read as a host-order u32; a reader that sees `0x4454694A`
/// knows the file has the other byte order.
pub const MAGIC: u32 = 0x4A69_5444;

/// The version every known writer uses (the spec document calls itself
/// version 2; perf does not check the field).
pub const VERSION: u32 = 1;

/// ELF `e_machine` of the host (62 = x86-64, 183 = AArch64, 243 = RISC-V),
/// informational: perf's generated ELF always uses the host architecture.
pub const ELF_MACHINE: u32 = if cfg!(target_arch = "x86_64") {
    62
} else if cfg!(target_arch = "aarch64") {
    183
} else if cfg!(target_arch = "riscv64") {
    243
} else {
    0
};

/// Size of the header that starts every record.
///
/// | off | type | field | notes |
/// |---|---|---|---|
/// | 0 | u32 | id | a [`RecordId`] |
/// | 4 | u32 | total_size | bytes of the record including this header |
/// | 8 | u64 | timestamp | CLOCK_MONOTONIC ns; must match `perf record -k 1` |
pub const RECORD_HEADER_SIZE: u32 = 16;

/// Record type ids.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum RecordId {
    /// `JIT_CODE_LOAD`: a region's address, size, unique index, name and code.
    ///
    /// | off | type | field | notes |
    /// |---|---|---|---|
    /// | 16 | u32 | pid | process id (tgid); perf injects the mapping for it |
    /// | 20 | u32 | tid | kernel thread id of the registering thread |
    /// | 24 | u64 | vma | = code_addr |
    /// | 32 | u64 | code_addr | runtime start address |
    /// | 40 | u64 | code_size | bytes of code |
    /// | 48 | u64 | code_index | unique per process: perf writes `jitted-<pid>-<code_index>.so` |
    /// | 56 | char[] | name | NUL-terminated; becomes the ELF symbol |
    /// | … | u8 × code_size | code | the live bytes, then a build-id marker for repeated bytes (see [`build_id`](super::build_id)) |
    ///
    /// `total_size = 56 + strlen(name) + 1 + code_size`, no padding.
    CodeLoad = 0,
    /// `JIT_CODE_MOVE`: not written; a moved region gets a new CODE_LOAD.
    CodeMove = 1,
    /// `JIT_CODE_DEBUG_INFO`: the line table of the next CODE_LOAD.
    ///
    /// | off | type | field |
    /// |---|---|---|
    /// | 16 | u64 | code_addr (region start) |
    /// | 24 | u64 | nr_entry |
    /// | 32 | entry × nr_entry | entries, each: |
    /// | +0 | u64 | addr: **absolute** address of the row's first instruction |
    /// | +8 | u32 | line (1-based) |
    /// | +12 | u32 | discrim: we store the column; perf ignores it |
    /// | +16 | char[] | file name, NUL-terminated |
    ///
    /// perf ends the line program at the last entry, so the writer appends a
    /// sentinel entry at `code_addr + code_size` repeating the last row.
    /// The record is padded to 8 bytes.
    DebugInfo = 2,
    /// `JIT_CODE_CLOSE`: header only, written by
    /// [`finish`](crate::ProfilerSink::finish). perf treats end of file the same.
    Close = 3,
    /// `JIT_CODE_UNWINDING_INFO`: `.eh_frame` + `.eh_frame_hdr` of the next
    /// CODE_LOAD (see [`unwind::perf_layout`](crate::unwind::perf_layout) for their
    /// layout).
    ///
    /// | off | type | field | notes |
    /// |---|---|---|---|
    /// | 16 | u64 | unwind_data_size | bytes of `.eh_frame` + `.eh_frame_hdr` |
    /// | 24 | u64 | eh_frame_hdr_size | 20; the header is at the **end** of the data |
    /// | 32 | u64 | mapped_size | = unwind_data_size with an FDE, 0 for the header-only form |
    /// | 40 | u8[] | data | `.eh_frame`, then `.eh_frame_hdr`; record padded to 8 |
    UnwindingInfo = 4,
}

/// Bytes of CODE_LOAD before the name.
const CODE_LOAD_FIXED_SIZE: usize = 56;

/// Appends the 40-byte file header.
pub(crate) fn put_header(out: &mut Vec<u8>, pid: u32, timestamp: u64) {
    put_u32(out, MAGIC);
    put_u32(out, VERSION);
    put_u32(out, HEADER_SIZE);
    put_u32(out, ELF_MACHINE);
    put_u32(out, 0);
    put_u32(out, pid);
    put_u64(out, timestamp);
    put_u64(out, 0);
}

// ANCHOR: put_debug_info
/// Appends a DEBUG_INFO record for `region` (which must have line entries).
pub(crate) fn put_debug_info(out: &mut Vec<u8>, region: &CodeRegion<'_>, timestamp: u64) {
    let start = out.len();
    put_record_header(out, RecordId::DebugInfo, timestamp);
    put_u64(out, region.start());
    put_u64(out, region.lines.len() as u64 + 1);
    for entry in region.lines {
        put_debug_entry(
            out,
            region.start() + u64::from(entry.offset),
            entry.line,
            entry.column,
            entry.file,
        );
    }
    if let Some(last) = region.lines.last() {
        let end = region.start() + region.size();
        put_debug_entry(out, end, last.line, last.column, last.file);
    }
    finish_record(out, start, 8);
}
// ANCHOR_END: put_debug_info

fn put_debug_entry(out: &mut Vec<u8>, address: u64, line: u32, column: u32, file: &str) {
    put_u64(out, address);
    put_u32(out, line);
    put_u32(out, column);
    out.extend_from_slice(file.as_bytes());
    out.push(0);
}

/// Appends an UNWINDING_INFO record.
pub(crate) fn put_unwinding_info(out: &mut Vec<u8>, unwind: &PerfUnwindData, timestamp: u64) {
    let start = out.len();
    put_record_header(out, RecordId::UnwindingInfo, timestamp);
    put_u64(out, unwind.bytes().len() as u64);
    put_u64(out, EH_FRAME_HDR_SIZE as u64);
    put_u64(out, unwind.mapped_size());
    out.extend_from_slice(unwind.bytes());
    finish_record(out, start, 8);
}

/// The per-region fields of a CODE_LOAD record.
pub(crate) struct CodeLoad<'a> {
    pub(crate) pid: u32,
    pub(crate) tid: u32,
    pub(crate) code_index: u64,
    /// Appended after the code when its bytes were dumped before (see
    /// [`super::build_id`]).
    pub(crate) build_id_marker: Option<[u8; super::build_id::MARKER_LEN]>,
    /// Runtime address of the first code byte.
    pub(crate) start: u64,
    pub(crate) name: &'a str,
    /// The live code (or, for a region written again, its bytes as the
    /// dump first held them).
    pub(crate) code: &'a [u8],
}

// ANCHOR: put_code_load
/// Appends a CODE_LOAD record: the live code as it is, then the build-id
/// marker if there is one (`code_size` counts it).
pub(crate) fn put_code_load(out: &mut Vec<u8>, load: &CodeLoad<'_>, timestamp: u64) {
    let start = out.len();
    let marker: &[u8] = load.build_id_marker.as_ref().map_or(&[], |m| &m[..]);
    put_record_header(out, RecordId::CodeLoad, timestamp);
    put_u32(out, load.pid);
    put_u32(out, load.tid);
    put_u64(out, load.start);
    put_u64(out, load.start);
    put_u64(out, load.code.len() as u64 + marker.len() as u64);
    put_u64(out, load.code_index);
    debug_assert_eq!(out.len() - start, CODE_LOAD_FIXED_SIZE);
    out.extend_from_slice(load.name.as_bytes());
    out.push(0);
    out.extend_from_slice(load.code);
    out.extend_from_slice(marker);
    finish_record(out, start, 1);
}
// ANCHOR_END: put_code_load

/// The name and the dumped code (with any marker) of a CODE_LOAD record as
/// [`put_code_load`] wrote it; `None` if `record` is not one.
pub(crate) fn code_load_parts(record: &[u8]) -> Option<(&str, &[u8])> {
    let field = |at: usize| -> Option<u64> {
        Some(u64::from_ne_bytes(record.get(at..at + 8)?.try_into().ok()?))
    };
    let id = u32::from_ne_bytes(record.get(..4)?.try_into().ok()?);
    if id != RecordId::CodeLoad as u32 {
        return None;
    }
    let code_size = usize::try_from(field(40)?).ok()?;
    let rest = record.get(CODE_LOAD_FIXED_SIZE..)?;
    let name_len = rest.iter().position(|&b| b == 0)?;
    let name = std::str::from_utf8(&rest[..name_len]).ok()?;
    let code = rest.get(name_len + 1..)?;
    (code.len() == code_size).then_some((name, code))
}

/// Appends a copy of `record` (a whole record this module wrote) with a
/// new timestamp.
pub(crate) fn put_copy(out: &mut Vec<u8>, record: &[u8], timestamp: u64) {
    let start = out.len();
    out.extend_from_slice(record);
    if out.len() >= start + RECORD_HEADER_SIZE as usize {
        out[start + 8..start + 16].copy_from_slice(&timestamp.to_ne_bytes());
    }
}

/// Appends a CLOSE record.
pub(crate) fn put_close(out: &mut Vec<u8>, timestamp: u64) {
    let start = out.len();
    put_record_header(out, RecordId::Close, timestamp);
    finish_record(out, start, 1);
}

fn put_record_header(out: &mut Vec<u8>, id: RecordId, timestamp: u64) {
    put_u32(out, id as u32);
    put_u32(out, 0); // total_size, patched by finish_record
    put_u64(out, timestamp);
}

/// Pads the record starting at `start` to `align` and patches its size.
fn finish_record(out: &mut Vec<u8>, start: usize, align: usize) {
    let padded = (out.len() - start).div_ceil(align) * align;
    out.resize(start + padded, 0);
    // Region sizes are validated below 2 GiB, names and line tables are small.
    let size = u32::try_from(padded).unwrap_or(u32::MAX);
    out[start + 4..start + 8].copy_from_slice(&size.to_ne_bytes());
}

fn put_u32(out: &mut Vec<u8>, value: u32) {
    out.extend_from_slice(&value.to_ne_bytes());
}

fn put_u64(out: &mut Vec<u8>, value: u64) {
    out.extend_from_slice(&value.to_ne_bytes());
}
