//! JIT code that runs from ELF files: the C form of
//! [`ps::elf_code`]. Code published this way is native code to every tool,
//! with no profiler-specific call at all: perf without a perf map or
//! `perf inject`, eu-stack, bpftrace, samply, and fleet profilers built on
//! the OpenTelemetry eBPF profiler, which read only executable mappings
//! of ELF files.
//!
//! ```c
//! perfsupport_code_files *files;
//! perfsupport_code_files_open(NULL, "myvm", &files);   /* /tmp/myvm-PID/ */
//! perfsupport_code_chunk *chunk;
//! perfsupport_code_chunk_alloc(files, code_size, 3, &chunk);
//! uint8_t *at = perfsupport_code_chunk_address(chunk); /* where it will run */
//! /* ... emit code for `at` into a buffer ... */
//! perfsupport_code_chunk_write(chunk, 0, buffer, code_size);
//! perfsupport_code_chunk_publish(chunk, files, regions, 3); /* names, unwind, lines */
//! /* ... run it ... */
//! perfsupport_code_chunk_free(chunk);                  /* the code died */
//! perfsupport_code_files_close(files);
//! ```
//!
//! A chunk is read-write until published, then a read+execute mapping of
//! its own new file (`code-N.so` in the directory), never written again:
//! no page is ever writable and executable at once. Freeing a chunk unmaps
//! it; code placed later at its addresses comes from a new file. The files
//! stay after the process exits (`perf record` reads them after the
//! program ends): remove the directory when the profile is done.
//!
//! # Threads
//!
//! An open `perfsupport_code_files` has a helper thread of its own
//! (`perfsupport-files`) that makes the next files before batches need
//! them: up to 16 files holding three pages of zeros each, removed by
//! `perfsupport_code_files_close` (which waits for a file being made); a
//! process that exits without it leaves them. After `fork` the child makes
//! its own files (`code-PID-N.so`); it inherits descriptors of the
//! parent's prepared files (close-on-exec) and never writes them.
//!
//! `perfsupport_code_files_open`, `_alloc` and `_publish` may be called
//! from any thread, also at once on one `perfsupport_code_files`. A chunk
//! is used by one thread at a time. `perfsupport_code_files_close` is the
//! last call on its handle; chunks allocated from it stay valid (they
//! cannot be published any more), and each is freed with
//! `perfsupport_code_chunk_free`.

use super::cstr;
use super::error::{Error, PERFSUPPORT_EINVAL, PERFSUPPORT_EIO, PERFSUPPORT_EOPEN, guard};
use super::regions::{Batch, perfsupport_region};
use ps::elf_code::{ChunkRegion, CodeChunk, ElfCodeFiles};
use std::ffi::{CString, c_char, c_int, c_void};
use std::path::PathBuf;

/// The directory of a process's code files; opaque to C.
pub struct perfsupport_code_files {
    files: ElfCodeFiles,
    dir: CString,
}

/// One chunk of code memory; opaque to C.
pub struct perfsupport_code_chunk {
    chunk: CodeChunk,
}

/// Creates the directory `DIR/NAME-PID/` for this process's code files and
/// checks that code can run from files there (a `noexec` mount, a
/// read-only or full file system fail here, not later). `dir` NULL means
/// the jitdump's default (`$JITDUMPDIR` if set and not empty, else
/// `/tmp`); `name` names the VM (no `/`, not starting with `.`).
///
/// Returns 0; `PERFSUPPORT_EINVAL` (NULL `name` or `out`, a bad name);
/// `PERFSUPPORT_EOPEN` (the directory cannot be made or code cannot run
/// from it: the message names it; run the code from anonymous memory
/// then). New in 0.3 (`PERFSUPPORT_VERSION >= 300`).
///
/// Threads: any thread.
///
/// # Safety
/// `dir` is NULL or a NUL-terminated string; `name` is a NUL-terminated
/// string; `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perfsupport_code_files_open(
    dir: *const c_char,
    name: *const c_char,
    out: *mut *mut perfsupport_code_files,
) -> c_int {
    guard(|| {
        if out.is_null() {
            return Err(Error::invalid("out is NULL"));
        }
        // SAFETY: the caller's contract.
        let name = unsafe { cstr::utf8(name, "name") }?;
        let parent = if dir.is_null() {
            ps::JitDump::default_dir()
        } else {
            // SAFETY: the caller's contract.
            PathBuf::from(unsafe { cstr::utf8(dir, "dir") }?)
        };
        let files =
            ElfCodeFiles::create(&parent, name).map_err(|e| Error::io(PERFSUPPORT_EOPEN, &e))?;
        let dir = CString::new(files.dir().as_os_str().as_encoded_bytes())
            .map_err(|_| Error::invalid("the directory's name holds a NUL"))?;
        let handle = Box::new(perfsupport_code_files { files, dir });
        // SAFETY: non-null and writable by the caller's contract.
        unsafe { out.write(Box::into_raw(handle)) };
        Ok(())
    })
}

/// The directory the files go to (`DIR/NAME-PID`), valid until
/// `perfsupport_code_files_close`; NULL for a NULL handle.
///
/// # Safety
/// `files` is NULL or an open handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perfsupport_code_files_dir(
    files: *const perfsupport_code_files,
) -> *const c_char {
    // SAFETY: the caller's contract.
    unsafe { files.as_ref() }.map_or(std::ptr::null(), |f| f.dir.as_ptr())
}

/// Frees `files` (NULL does nothing) and stops its helper thread. The
/// code files stay on disk (the empty ones made ahead are removed), and
/// chunks allocated from it stay valid until freed. Returns 0.
///
/// # Safety
/// `files` is NULL or an open handle that no other thread uses during or
/// after this call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perfsupport_code_files_close(files: *mut perfsupport_code_files) -> c_int {
    guard(|| {
        if !files.is_null() {
            // SAFETY: made by Box::into_raw in open, not freed yet (contract).
            drop(unsafe { Box::from_raw(files) });
        }
        Ok(())
    })
}

/// Allocates a chunk for up to `code_size` bytes of code in up to
/// `region_count` functions: read-write and zeroed, at an address that
/// never changes (`perfsupport_code_chunk_address`), so code can be
/// relocated for it as it is emitted.
///
/// Returns 0; `PERFSUPPORT_EINVAL` (NULL argument, `code_size` 0 or too
/// large); `PERFSUPPORT_EIO` (no memory). New in 0.3.
///
/// Threads: any thread.
///
/// # Safety
/// `files` is NULL or an open handle; `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perfsupport_code_chunk_alloc(
    files: *const perfsupport_code_files,
    code_size: usize,
    region_count: usize,
    out: *mut *mut perfsupport_code_chunk,
) -> c_int {
    guard(|| {
        if out.is_null() {
            return Err(Error::invalid("out is NULL"));
        }
        // SAFETY: the caller's contract.
        let files = unsafe { files.as_ref() }.ok_or_else(|| Error::invalid("files is NULL"))?;
        let chunk = (files.files)
            .allocate(code_size, region_count)
            .map_err(|e| Error::io(PERFSUPPORT_EIO, &e))?;
        let handle = Box::new(perfsupport_code_chunk { chunk });
        // SAFETY: non-null and writable by the caller's contract.
        unsafe { out.write(Box::into_raw(handle)) };
        Ok(())
    })
}

/// The address the chunk's code byte 0 runs at (NULL for a NULL chunk).
/// Before the chunk is published its `capacity` bytes may also be written
/// through this pointer; after, they are read+execute only.
///
/// # Safety
/// `chunk` is NULL or a chunk not freed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perfsupport_code_chunk_address(
    chunk: *const perfsupport_code_chunk,
) -> *mut c_void {
    // SAFETY: the caller's contract.
    unsafe { chunk.as_ref() }.map_or(std::ptr::null_mut(), |c| {
        c.chunk.code_address() as *mut c_void
    })
}

/// How many bytes of code the chunk holds (the `code_size` it was
/// allocated with; 0 for a NULL chunk).
///
/// # Safety
/// `chunk` is NULL or a chunk not freed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perfsupport_code_chunk_capacity(
    chunk: *const perfsupport_code_chunk,
) -> usize {
    // SAFETY: the caller's contract.
    unsafe { chunk.as_ref() }.map_or(0, |c| c.chunk.capacity())
}

/// Copies `size` bytes from `bytes` to code offset `offset` of the chunk.
///
/// Returns 0; `PERFSUPPORT_EINVAL` (NULL argument, or the bytes do not fit
/// in the chunk's capacity: nothing is written); `PERFSUPPORT_ESTATE` (the
/// chunk is published: its code is final). New in 0.3.
///
/// # Safety
/// `chunk` is NULL or a chunk not freed, used by no other thread during
/// the call; `bytes` points to `size` readable bytes (or `size` is 0).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perfsupport_code_chunk_write(
    chunk: *mut perfsupport_code_chunk,
    offset: usize,
    bytes: *const c_void,
    size: usize,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's contract.
        let chunk = unsafe { chunk.as_mut() }.ok_or_else(|| Error::invalid("chunk is NULL"))?;
        // SAFETY: the caller's contract.
        let bytes = unsafe { cstr::slice(bytes.cast::<u8>(), size, "bytes") }?;
        if chunk.chunk.file().is_some() {
            return Err(Error::state("the chunk is published: its code is final"));
        }
        (chunk.chunk)
            .write(offset, bytes)
            .map_err(|e| Error::io(PERFSUPPORT_EINVAL, &e))
    })
}

/// Publishes the chunk: writes its code and the `count` regions (names,
/// unwind descriptions, line tables, as `perfsupport_register` takes them)
/// into a new file of `files` and maps the file read+execute over the
/// chunk, at the same address. From now on the code runs from the file and
/// is never written again. Each region's `code` must lie inside the
/// chunk's `capacity` bytes (checked before anything is read); regions
/// must not overlap.
///
/// Returns 0; `PERFSUPPORT_EINVAL` (NULL argument, a region outside the
/// chunk, malformed or overlapping another: nothing is written);
/// `PERFSUPPORT_ESTATE` (already published); `PERFSUPPORT_EIO` (the file
/// could not be written or mapped: the chunk is still read-write; run it
/// from anonymous memory instead or free it). New in 0.3.
///
/// Threads: any thread, as long as no other thread uses `chunk`.
///
/// # Safety
/// `chunk` is NULL or a chunk not freed; `files` is NULL or an open
/// handle; `regions` points to `count` regions (or `count` is 0) whose
/// strings are NUL-terminated and whose `unwind` and `lines` are NULL or
/// point to what their counts say.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perfsupport_code_chunk_publish(
    chunk: *mut perfsupport_code_chunk,
    files: *const perfsupport_code_files,
    regions: *const perfsupport_region,
    count: usize,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's contract.
        let chunk = unsafe { chunk.as_mut() }.ok_or_else(|| Error::invalid("chunk is NULL"))?;
        // SAFETY: the caller's contract.
        let files = unsafe { files.as_ref() }.ok_or_else(|| Error::invalid("files is NULL"))?;
        if chunk.chunk.file().is_some() {
            return Err(Error::state("the chunk is already published"));
        }
        // SAFETY: the caller's contract.
        let raw = unsafe { cstr::slice(regions, count, "regions") }?;
        // Every region's code inside the chunk before any of it is read.
        let base = chunk.chunk.code_address();
        let end = base + chunk.chunk.capacity();
        let mut offsets = Vec::with_capacity(raw.len());
        for (index, region) in raw.iter().enumerate() {
            let start = region.code as usize;
            let inside = (base..end).contains(&start) && region.size <= end - start;
            if !inside {
                return Err(Error::invalid(format!(
                    "region {index}: {} bytes at {:p} are not inside the chunk \
                     ({:#x}..{end:#x})",
                    region.size, region.code, base
                )));
            }
            offsets.push(start - base);
        }
        // SAFETY: the caller's contract for names, unwind and lines; the
        // code ranges are inside the chunk's mapping (checked above).
        let batch = unsafe { Batch::convert(raw) }?;
        let regions: Vec<ChunkRegion<'_>> = (batch.items.iter().zip(&offsets))
            .map(|(item, &offset)| {
                let region =
                    ChunkRegion::new(offset, item.code.len(), item.name).with_lines(&item.lines);
                match &item.unwind {
                    Some(unwind) => region.with_unwind(unwind.unwind_info()),
                    None => region,
                }
            })
            .collect();
        (chunk.chunk)
            .publish(&files.files, &regions)
            .map(|_| ())
            .map_err(|e| Error::io(PERFSUPPORT_EIO, &e))
    })
}

/// Frees the chunk: unmaps its memory (NULL does nothing). Call when none
/// of its code runs or will be called again; its addresses may then hold
/// other code, which comes from another file. Returns 0. New in 0.3.
///
/// # Safety
/// `chunk` is NULL or a chunk not freed, used by no other thread during or
/// after the call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perfsupport_code_chunk_free(chunk: *mut perfsupport_code_chunk) -> c_int {
    guard(|| {
        if !chunk.is_null() {
            // SAFETY: made by Box::into_raw in alloc, not freed yet (contract).
            drop(unsafe { Box::from_raw(chunk) });
        }
        Ok(())
    })
}
