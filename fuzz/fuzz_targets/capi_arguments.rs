//! The C API's argument checking: a sequence of C calls chosen by the
//! bytes (`perfsupport_profilers_open`, `_register`, `_retire`,
//! `_reserved_region_size`, the perf map trio, the vmprof calls, the code
//! files: `perfsupport_code_files_*`, `perfsupport_code_chunk_*`), with
//! arbitrary flags, names, sizes, counts, unwind rows and line tables, and
//! NULL where a pointer may be NULL. Within each call's documented contract
//! (a pointer is NULL or points to what its count says, a string is
//! NUL-terminated): what cannot be checked is not fuzzed, everything else is.
//! Ranges are checked too: code whose `code + size` runs past the end of
//! the address space (which no valid pointer can) and dead-code ranges of
//! any numbers (0 bytes, `start + size` overflowing) must be
//! `PERFSUPPORT_EINVAL`, never a read or a silent success; so must a
//! chunk's write past its capacity and a published region whose code is
//! not inside its chunk.
//!
//! Every call returns 0 or one of the documented codes and leaves a
//! message; `PERFSUPPORT_EPANIC` (a panic caught at the boundary) is a bug
//! and crashes the target.
//!
//! The library has no rlib (its name is perfsupport's), so its source is
//! compiled in here as a module; its modules name each other through
//! `super::` for that reason.
#![no_main]

extern crate perfsupport as ps;

#[allow(dead_code, clippy::all)]
#[path = "../../perfsupport-capi/src/lib.rs"]
mod capi;

use std::ffi::{CStr, CString, c_char, c_int};
use std::path::PathBuf;
use std::sync::OnceLock;

use arbitrary::Arbitrary;
use capi::elf_code::*;
use capi::error::*;
use capi::regions::*;
use capi::unwind::*;
use capi::vmprof::*;
use libfuzzer_sys::fuzz_target;

/// A string argument: NULL, or the bytes up to the first NUL.
#[derive(Arbitrary, Debug)]
enum Text {
    Null,
    Bytes(Vec<u8>),
}

impl Text {
    fn c_string(&self) -> Option<CString> {
        match self {
            Text::Null => None,
            Text::Bytes(bytes) => {
                let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
                Some(CString::new(&bytes[..end]).expect("no NUL"))
            }
        }
    }
}

fn ptr(text: &Option<CString>) -> *const c_char {
    text.as_ref().map_or(std::ptr::null(), |t| t.as_ptr())
}

#[derive(Arbitrary, Debug)]
struct Row {
    offset: u32,
    cfa_register: u16,
    cfa_offset: i32,
    saved: Vec<(u16, i32)>,
}

#[derive(Arbitrary, Debug)]
struct Unwind {
    kind: u8,
    rows: Vec<Row>,
}

#[derive(Arbitrary, Debug)]
struct Line {
    offset: u32,
    file: Text,
    line: u32,
    column: u32,
}

#[derive(Arbitrary, Debug)]
struct Region {
    start: u16,
    size: u16,
    /// `Some(n)`: the code pointer is `n` bytes before the end of the
    /// address space and the size runs past it (refused before any read).
    wraps: Option<u16>,
    name: Text,
    unwind: Option<Unwind>,
    lines: Vec<Line>,
}

/// A range given to `perfsupport_retire`, which never reads the memory.
#[derive(Arbitrary, Debug)]
enum DeadRange {
    /// Inside the fuzzer's code.
    InCode(u16, u16),
    /// Any numbers: 0 bytes, or `start + size` past the address space.
    Raw(usize, usize),
}

/// Where a jitdump or a profile may go: never outside the scratch
/// directory (the fuzzer runs as whoever runs it).
#[derive(Arbitrary, Debug)]
enum Place {
    Scratch,
    Missing,
    Empty,
    Null,
}

#[derive(Arbitrary, Debug)]
enum Call {
    Open { outputs: u32, dir: Place, keep: bool },
    Register { handle: u8, regions: Vec<Region>, report: bool },
    Retire { handle: u8, ranges: Vec<DeadRange>, null: bool },
    AfterForkChild { handle: u8 },
    Finish { handle: u8 },
    ReservedSize { code_size: usize, unwind: Option<Unwind>, null_out: bool },
    MapEntry { start: u16, size: u32, name: Text },
    MapInit,
    RegisterCode { prefix: Text, func: Text, line: u32, file: Text, null_id: bool },
    RetireCode { ids: Vec<usize>, null: bool },
    Enable { path: Place, interp: Text, interval_us: u32 },
    Disable { null: bool },
    Attach { null: bool },
    FilesOpen { dir: Place, name: Text, keep: bool },
    FilesClose { files: u8 },
    ChunkAlloc { files: u8, code_size: u16, region_count: u8, keep: bool },
    ChunkWrite { chunk: u8, offset: usize, size: u16, null: bool },
    ChunkPublish { chunk: u8, files: u8, regions: Vec<ChunkRegion> },
    ChunkFree { chunk: u8 },
}

/// A region given to `perfsupport_code_chunk_publish`: `offset` bytes into
/// its chunk, or (`elsewhere`) in the fuzzer's own code, outside any chunk.
#[derive(Arbitrary, Debug)]
struct ChunkRegion {
    offset: u16,
    size: u16,
    elsewhere: bool,
    name: Text,
    unwind: Option<Unwind>,
}

/// The code the regions point into.
static CODE: [u8; 4096] = [0x90; 4096];

fn scratch() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("toyvm-fuzz-capi-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("scratch dir");
        dir
    })
}

fn place(place: &Place, file: &str) -> Option<CString> {
    let path = match place {
        Place::Scratch => scratch().join(file),
        Place::Missing => scratch().join("missing").join(file),
        Place::Empty => PathBuf::new(),
        Place::Null => return None,
    };
    Some(CString::new(path.into_os_string().into_encoded_bytes()).expect("no NUL"))
}

/// At exit (libFuzzer ends with `exit`): the scratch directory and this
/// process's perf map go.
extern "C" fn clean_up() {
    let _ = std::fs::remove_dir_all(scratch());
    let _ = std::fs::remove_file(format!("/tmp/perf-{}.map", std::process::id()));
}

/// Checks a call's result: a documented code, never a caught panic.
fn check(rc: c_int, call: &Call) {
    assert!(
        [
            PERFSUPPORT_OK,
            PERFSUPPORT_EOPEN,
            PERFSUPPORT_EINVAL,
            PERFSUPPORT_EIO,
            PERFSUPPORT_ESTATE
        ]
        .contains(&rc),
        "{call:?} returned {rc}: {:?}",
        // SAFETY: perfsupport_last_error returns a NUL-terminated string
        // that stays valid until this thread's next call.
        unsafe { CStr::from_ptr(capi::error::perfsupport_last_error()) }
    );
}

/// True if `call` names a range no output may take: code running past
/// the end of the address space, or a dead range of 0 bytes or whose
/// `start + size` overflows.
fn refused_for_its_ranges(call: &Call) -> bool {
    match call {
        Call::Register { regions, .. } => regions.iter().any(|r| r.wraps.is_some()),
        Call::Retire { ranges, .. } => ranges.iter().any(|r| match *r {
            DeadRange::Raw(start, size) => size == 0 || start.checked_add(size).is_none(),
            DeadRange::InCode(..) => false,
        }),
        _ => false,
    }
}

/// The C form of `unwind`, with the arrays it points to kept alive.
struct CUnwind {
    _saved: Vec<Vec<perfsupport_saved_register>>,
    _rows: Vec<perfsupport_cfi_row>,
    unwind: perfsupport_unwind,
}

fn c_unwind(unwind: &Unwind) -> Box<CUnwind> {
    let saved: Vec<Vec<perfsupport_saved_register>> = unwind
        .rows
        .iter()
        .map(|row| {
            (row.saved.iter())
                .map(|&(reg, cfa_offset)| perfsupport_saved_register { reg, cfa_offset })
                .collect()
        })
        .collect();
    let rows: Vec<perfsupport_cfi_row> = unwind
        .rows
        .iter()
        .zip(&saved)
        .map(|(row, saved)| perfsupport_cfi_row {
            offset: row.offset,
            cfa_register: row.cfa_register,
            cfa_offset: row.cfa_offset,
            saved: if saved.is_empty() { std::ptr::null() } else { saved.as_ptr() },
            saved_count: saved.len(),
        })
        .collect();
    let unwind = perfsupport_unwind {
        kind: u32::from(unwind.kind % 4),
        rows: if rows.is_empty() { std::ptr::null() } else { rows.as_ptr() },
        row_count: rows.len(),
    };
    Box::new(CUnwind { _saved: saved, _rows: rows, unwind })
}

fn code_at(start: u16, size: usize) -> (*const u8, usize) {
    let start = usize::from(start) % CODE.len();
    (CODE[start..].as_ptr(), size.min(CODE.len() - start))
}

fuzz_target!(
    init: {
        // A NULL jitdump directory means $JITDUMPDIR: keep it in scratch.
        // SAFETY: before the fuzzer starts, with no thread of ours running.
        unsafe { std::env::set_var("JITDUMPDIR", scratch()) };
        // SAFETY: `clean_up` is a plain function of this program.
        unsafe { libc::atexit(clean_up) };
    },
    |calls: Vec<Call>| {
    let mut handles: Vec<*mut perfsupport_profilers> = Vec::new();
    let mut files: Vec<*mut perfsupport_code_files> = Vec::new();
    let mut chunks: Vec<*mut perfsupport_code_chunk> = Vec::new();
    for call in &calls {
        let handle = |h: &u8| handles.get(usize::from(*h)).copied().unwrap_or(std::ptr::null_mut());
        let files_at = |f: &u8| files.get(usize::from(*f)).copied().unwrap_or(std::ptr::null_mut());
        let chunk_at = |c: &u8| chunks.get(usize::from(*c)).copied().unwrap_or(std::ptr::null_mut());
        // A write past a chunk's capacity, a region outside its chunk:
        // refused (EINVAL, or ESTATE for a published chunk), never done.
        let mut must_fail = false;
        // SAFETY (every call below): arguments are NULL or point to what
        // their counts say, strings are NUL-terminated (the contract the
        // header states); handles come from `perfsupport_profilers_open`
        // and are not used after `perfsupport_profilers_finish`.
        let rc = unsafe {
            match call {
                Call::Open { outputs, dir, keep } => {
                    let dir = place(dir, "");
                    let mut out: *mut perfsupport_profilers = std::ptr::null_mut();
                    let out_ptr = if *keep { &mut out as *mut _ } else { std::ptr::null_mut() };
                    let rc = perfsupport_profilers_open(outputs % 16, ptr(&dir), out_ptr);
                    if !out.is_null() {
                        handles.push(out);
                    }
                    rc
                }
                Call::Register { handle: h, regions, report } => {
                    let names: Vec<Option<CString>> =
                        regions.iter().map(|r| r.name.c_string()).collect();
                    let files: Vec<Vec<Option<CString>>> = (regions.iter())
                        .map(|r| r.lines.iter().map(|l| l.file.c_string()).collect())
                        .collect();
                    let lines: Vec<Vec<perfsupport_line>> = (regions.iter().zip(&files))
                        .map(|(r, files)| {
                            (r.lines.iter().zip(files))
                                .map(|(l, file)| perfsupport_line {
                                    offset: l.offset,
                                    file: ptr(file),
                                    line: l.line,
                                    column: l.column,
                                })
                                .collect()
                        })
                        .collect();
                    let unwinds: Vec<Option<Box<CUnwind>>> =
                        regions.iter().map(|r| r.unwind.as_ref().map(c_unwind)).collect();
                    let c_regions: Vec<perfsupport_region> = (0..regions.len())
                        .map(|i| {
                            let size = usize::from(regions[i].size);
                            let (code, size) = match regions[i].wraps {
                                None => code_at(regions[i].start, size),
                                Some(n) => {
                                    let n = usize::from(n);
                                    ((usize::MAX - n) as *const u8, n + 1 + size)
                                }
                            };
                            perfsupport_region {
                                code: code.cast(),
                                size,
                                name: ptr(&names[i]),
                                unwind: unwinds[i]
                                    .as_ref()
                                    .map_or(std::ptr::null(), |u| &u.unwind as *const _),
                                lines: if lines[i].is_empty() {
                                    std::ptr::null()
                                } else {
                                    lines[i].as_ptr()
                                },
                                line_count: lines[i].len(),
                            }
                        })
                        .collect();
                    if *report {
                        let mut fallbacks = perfsupport_unwind_fallbacks::default();
                        let rc = perfsupport_register_ex(
                            handle(h),
                            c_regions.as_ptr(),
                            c_regions.len(),
                            &mut fallbacks,
                        );
                        // A region falls back at most once per batch, and
                        // a rewrite needs an earlier region.
                        assert!(fallbacks.header_only <= c_regions.len(), "{fallbacks:?}");
                        rc
                    } else {
                        perfsupport_register(handle(h), c_regions.as_ptr(), c_regions.len())
                    }
                }
                Call::Retire { handle: h, ranges, null } => {
                    let ranges: Vec<perfsupport_code_range> = (ranges.iter())
                        .map(|range| match *range {
                            DeadRange::InCode(start, size) => {
                                let (code, size) = code_at(start, usize::from(size));
                                perfsupport_code_range { start: code as usize, size }
                            }
                            DeadRange::Raw(start, size) => perfsupport_code_range { start, size },
                        })
                        .collect();
                    let at = if *null { std::ptr::null() } else { ranges.as_ptr() };
                    perfsupport_retire(handle(h), at, ranges.len())
                }
                Call::AfterForkChild { handle: h } => {
                    // Not a forked child: the perf map of this process goes
                    // on in the same file, the jitdump stops.
                    perfsupport_profilers_after_fork_child(handle(h))
                }
                Call::Finish { handle: h } => {
                    let index = usize::from(*h);
                    if index < handles.len() {
                        perfsupport_profilers_finish(handles.swap_remove(index))
                    } else {
                        perfsupport_profilers_finish(std::ptr::null_mut())
                    }
                }
                Call::ReservedSize { code_size, unwind, null_out } => {
                    let unwind = unwind.as_ref().map(c_unwind);
                    let mut out = 0usize;
                    let out_ptr = if *null_out { std::ptr::null_mut() } else { &mut out as *mut _ };
                    let at = unwind.as_ref().map_or(std::ptr::null(), |u| &u.unwind as *const _);
                    perfsupport_reserved_region_size(*code_size, at, out_ptr)
                }
                Call::MapEntry { start, size, name } => {
                    let name = name.c_string();
                    let (code, size) = code_at(*start, *size as usize);
                    capi::perf_map::perfsupport_write_perf_map_entry(
                        code.cast(),
                        size as u32,
                        ptr(&name),
                    )
                }
                Call::MapInit => capi::perf_map::perfsupport_perf_map_init(),
                Call::RegisterCode { prefix, func, line, file, null_id } => {
                    let (prefix, func, file) = (prefix.c_string(), func.c_string(), file.c_string());
                    let mut id = 0usize;
                    let id_ptr = if *null_id { std::ptr::null_mut() } else { &mut id as *mut _ };
                    perfsupport_vmprof_register_code(ptr(&prefix), ptr(&func), *line, ptr(&file), id_ptr)
                }
                Call::RetireCode { ids, null } => {
                    let at = if *null { std::ptr::null() } else { ids.as_ptr() };
                    perfsupport_vmprof_retire_code(at, ids.len())
                }
                Call::Enable { path, interp, interval_us } => {
                    let path = place(path, "fuzz.prof");
                    let interp = interp.c_string();
                    perfsupport_vmprof_enable(ptr(&path), ptr(&interp), *interval_us)
                }
                Call::Disable { null } => {
                    let mut samples = 0u64;
                    let at = if *null { std::ptr::null_mut() } else { &mut samples as *mut _ };
                    perfsupport_vmprof_disable(at)
                }
                Call::Attach { null } => {
                    let mut stack = std::ptr::null_mut();
                    let at = if *null { std::ptr::null_mut() } else { &mut stack as *mut _ };
                    perfsupport_vmprof_attach_thread(at)
                }
                Call::FilesOpen { dir, name, keep } => {
                    // Never the current directory: "" is scratch here.
                    let dir = match dir {
                        Place::Empty => place(&Place::Scratch, ""),
                        other => place(other, ""),
                    };
                    let name = name.c_string();
                    let mut out: *mut perfsupport_code_files = std::ptr::null_mut();
                    let out_ptr = if *keep { &mut out as *mut _ } else { std::ptr::null_mut() };
                    let rc = perfsupport_code_files_open(ptr(&dir), ptr(&name), out_ptr);
                    if !out.is_null() {
                        files.push(out);
                    }
                    rc
                }
                Call::FilesClose { files: f } => {
                    let index = usize::from(*f);
                    if index < files.len() {
                        perfsupport_code_files_close(files.swap_remove(index))
                    } else {
                        perfsupport_code_files_close(std::ptr::null_mut())
                    }
                }
                Call::ChunkAlloc { files: f, code_size, region_count, keep } => {
                    let mut out: *mut perfsupport_code_chunk = std::ptr::null_mut();
                    let out_ptr = if *keep { &mut out as *mut _ } else { std::ptr::null_mut() };
                    let rc = perfsupport_code_chunk_alloc(
                        files_at(f),
                        usize::from(*code_size),
                        usize::from(*region_count),
                        out_ptr,
                    );
                    if !out.is_null() {
                        chunks.push(out);
                    }
                    rc
                }
                Call::ChunkWrite { chunk: c, offset, size, null } => {
                    let bytes = if *null { std::ptr::null() } else { CODE.as_ptr() };
                    let size = usize::from(*size).min(CODE.len());
                    let capacity = perfsupport_code_chunk_capacity(chunk_at(c));
                    must_fail |= offset.checked_add(size).is_none_or(|end| end > capacity);
                    perfsupport_code_chunk_write(chunk_at(c), *offset, bytes.cast(), size)
                }
                Call::ChunkPublish { chunk: c, files: f, regions } => {
                    let chunk = chunk_at(c);
                    let base = perfsupport_code_chunk_address(chunk) as usize;
                    let capacity = perfsupport_code_chunk_capacity(chunk);
                    let names: Vec<Option<CString>> =
                        regions.iter().map(|r| r.name.c_string()).collect();
                    let unwinds: Vec<Option<Box<CUnwind>>> =
                        regions.iter().map(|r| r.unwind.as_ref().map(c_unwind)).collect();
                    let c_regions: Vec<perfsupport_region> = (regions.iter().enumerate())
                        .map(|(i, r)| {
                            let (offset, size) = (usize::from(r.offset), usize::from(r.size));
                            let code = if r.elsewhere || base == 0 {
                                code_at(r.offset, size).0 as usize
                            } else {
                                base + offset
                            };
                            must_fail |= base == 0
                                || r.elsewhere
                                || offset.checked_add(size).is_none_or(|end| end > capacity);
                            perfsupport_region {
                                code: code as *const _,
                                size,
                                name: ptr(&names[i]),
                                unwind: unwinds[i]
                                    .as_ref()
                                    .map_or(std::ptr::null(), |u| &u.unwind as *const _),
                                lines: std::ptr::null(),
                                line_count: 0,
                            }
                        })
                        .collect();
                    perfsupport_code_chunk_publish(
                        chunk,
                        files_at(f),
                        c_regions.as_ptr(),
                        c_regions.len(),
                    )
                }
                Call::ChunkFree { chunk: c } => {
                    let index = usize::from(*c);
                    if index < chunks.len() {
                        perfsupport_code_chunk_free(chunks.swap_remove(index))
                    } else {
                        perfsupport_code_chunk_free(std::ptr::null_mut())
                    }
                }
            }
        };
        check(rc, call);
        if must_fail {
            assert_ne!(rc, PERFSUPPORT_OK, "{call:?}");
        }
        if refused_for_its_ranges(call) {
            assert_eq!(rc, PERFSUPPORT_EINVAL, "{call:?}");
        }
    }
    // Each input starts from a clean state: no handle, no chunk, no profile.
    for chunk in chunks {
        // SAFETY: made by perfsupport_code_chunk_alloc, not freed yet; no
        // code of it ever ran.
        check(unsafe { perfsupport_code_chunk_free(chunk) }, &Call::MapInit);
    }
    for f in files {
        // SAFETY: made by perfsupport_code_files_open, not closed yet.
        check(unsafe { perfsupport_code_files_close(f) }, &Call::MapInit);
    }
    for handle in handles {
        // SAFETY: made by perfsupport_profilers_open, not finished yet.
        check(unsafe { perfsupport_profilers_finish(handle) }, &Call::MapInit);
    }
    // SAFETY: NULL is allowed.
    let _ = unsafe { perfsupport_vmprof_disable(std::ptr::null_mut()) };
    }
);
