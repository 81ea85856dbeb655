//! Regions with line tables and unwind info, registered in batches with a
//! set of outputs (perf map, jitdump, the GDB JIT interface): the C form
//! of [`ps::Profilers`] and [`ps::CodeRegion`].
//!
//! ```c
//! perfsupport_profilers *prof;
//! perfsupport_profilers_open(PERFSUPPORT_OUTPUT_PERF_MAP | PERFSUPPORT_OUTPUT_JITDUMP, NULL, &prof);
//! /* ... emit code, mprotect it executable ... */
//! perfsupport_register(prof, regions, n);   /* before the code first runs */
//! perfsupport_retire(prof, ranges, m);      /* when code dies */
//! perfsupport_profilers_finish(prof);       /* at exit; frees prof */
//! ```
//!
//! # Threads
//!
//! `perfsupport_register`, `perfsupport_register_ex` and
//! `perfsupport_retire` may be called from any thread, also at once on one
//! `perfsupport_profilers` (each output locks; a batch is written whole).
//! `perfsupport_profilers_open` too. `perfsupport_profilers_finish` must be
//! the last call on its handle, with no other thread using it.
//!
//! A batch is validated as a whole first: a malformed region rejects the
//! batch in every output alike (`PERFSUPPORT_EINVAL`, nothing written). An
//! output whose write fails is switched off and reported once
//! (`PERFSUPPORT_EIO`); the others keep going.

use super::cstr;
use super::error::{
    Error, PERFSUPPORT_EINVAL, PERFSUPPORT_EIO, PERFSUPPORT_EOPEN, PERFSUPPORT_ESTATE, guard,
};
use super::unwind::perfsupport_unwind;
use ps::unwind::CallFrameInfo;
use ps::{
    CodeRegion, GdbJit, JitDump, LineEntry, PerfMap, Profilers, SinkFailure, UnwindFallbacks,
};
use std::ffi::{c_char, c_int, c_void};
use std::path::PathBuf;

/// Output: `/tmp/perf-<pid>.map`. One writer per process: not with the
/// perf map trio, not in two open sets (`PERFSUPPORT_ESTATE`).
pub const PERFSUPPORT_OUTPUT_PERF_MAP: u32 = 1;
/// Output: `<jitdump_dir>/jit-<pid>.dump` for `perf inject --jit`. One
/// per process (`PERFSUPPORT_ESTATE` for a second open set with it).
pub const PERFSUPPORT_OUTPUT_JITDUMP: u32 = 2;
/// Output: the GDB JIT interface (`__jit_debug_register_code`): gdb and
/// lldb name the regions, show their lines and unwind through them with
/// their unwind info (frame pointers without). `perfsupport_retire`
/// takes dead code out of the debugger. Any number of open sets may have
/// it.
pub const PERFSUPPORT_OUTPUT_GDB: u32 = 4;

/// One row of a line table: from `offset` on, the code belongs to
/// `file:line`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct perfsupport_line {
    /// Offset from the region start; rows sorted by offset, inside the code.
    pub offset: u32,
    /// Source file name (NUL-terminated UTF-8).
    pub file: *const c_char,
    /// 1-based line.
    pub line: u32,
    /// 1-based column, or 0.
    pub column: u32,
}

/// One region of live machine code. Everything it points to is read
/// during the call that takes it and copied: the caller may free or reuse
/// the name, the unwind description and the line table when the call
/// returns. The code itself must stay (see `perfsupport_register`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct perfsupport_region {
    /// The first byte of the live, final, executable code.
    pub code: *const c_void,
    /// Code size in bytes.
    pub size: usize,
    /// Symbol name, e.g. `minijit::fib` (NUL-terminated UTF-8).
    pub name: *const c_char,
    /// How to unwind it, or NULL for no CFI. NULL still writes an unwind
    /// record to the jitdump, the header-only form (no FDE): it is what
    /// makes perf's DWARF unwinder fall back to the frame-pointer chain in
    /// this code. Without any record the walk would stop here. So code
    /// without CFI must keep frame pointers for full stacks (`rbp` frames on
    /// x86-64, frame records in `x29` on aarch64).
    pub unwind: *const perfsupport_unwind,
    /// `line_count` rows, or NULL when `line_count` is 0.
    pub lines: *const perfsupport_line,
    /// Number of `lines`.
    pub line_count: usize,
}

/// A set of outputs; opaque to C.
pub struct perfsupport_profilers {
    profilers: Profilers,
}

/// Creates the outputs in `outputs` (`PERFSUPPORT_OUTPUT_*` bits) and stores
/// the handle in `*out`. Call at VM start-up, before any generated code is
/// executable: the jitdump must be mapped first for `perf inject`.
/// `jitdump_dir` NULL means `$JITDUMPDIR` if set and not empty, else
/// `/tmp` (toyvm's default too); it must not start with `/tmp/perf-`.
///
/// Returns 0; `PERFSUPPORT_EINVAL` (no output, unknown bits, NULL `out`,
/// bad directory name); `PERFSUPPORT_EOPEN` (a file cannot be created:
/// missing or read-only directory, another user's file in the way, a
/// `noexec` mount for the jitdump); `PERFSUPPORT_ESTATE` (this process
/// already writes that perf map or jitdump: the trio or another open set).
/// Nothing stays open after a failure.
///
/// ```c
/// perfsupport_profilers *prof;
/// int rc = perfsupport_profilers_open(PERFSUPPORT_OUTPUT_JITDUMP | PERFSUPPORT_OUTPUT_GDB,
///                                     NULL, &prof);
/// if (rc) fprintf(stderr, "perfsupport: %s\n", perfsupport_last_error());
/// ```
///
/// Threads: any thread.
///
/// # Safety
/// `jitdump_dir` is NULL or a NUL-terminated string; `out` is NULL or
/// writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perfsupport_profilers_open(
    outputs: u32,
    jitdump_dir: *const c_char,
    out: *mut *mut perfsupport_profilers,
) -> c_int {
    guard(|| {
        if out.is_null() {
            return Err(Error::invalid("out is NULL"));
        }
        let known =
            PERFSUPPORT_OUTPUT_PERF_MAP | PERFSUPPORT_OUTPUT_JITDUMP | PERFSUPPORT_OUTPUT_GDB;
        if outputs == 0 || outputs & !known != 0 {
            return Err(Error::invalid(format!(
                "outputs {outputs:#x}: give PERFSUPPORT_OUTPUT_PERF_MAP, _JITDUMP and/or _GDB"
            )));
        }
        let dir = if jitdump_dir.is_null() {
            JitDump::default_dir()
        } else {
            // SAFETY: the caller's contract.
            PathBuf::from(unsafe { cstr::utf8(jitdump_dir, "jitdump_dir") }?)
        };
        let open_error = |sink: &str, err: std::io::Error| {
            // Another writer of this process holds the path: a conflict of
            // calls, not a file problem.
            let code = if err.kind() == std::io::ErrorKind::ResourceBusy {
                PERFSUPPORT_ESTATE
            } else {
                PERFSUPPORT_EOPEN
            };
            Error::io(code, &err).prefixed(sink)
        };
        // The jitdump first: its directory is the caller's and may be
        // wrong. A perf map opened before a failure is dropped unwritten,
        // which gives its path back for the next open (or the trio).
        let mut profilers = Profilers::new();
        if outputs & PERFSUPPORT_OUTPUT_JITDUMP != 0 {
            let dump = JitDump::create_in(&dir).map_err(|err| open_error("jitdump", err))?;
            profilers.add(Box::new(dump));
        }
        if outputs & PERFSUPPORT_OUTPUT_PERF_MAP != 0 {
            let map = PerfMap::new();
            map.open().map_err(|err| open_error("perf map", err))?;
            profilers.add(Box::new(map));
        }
        if outputs & PERFSUPPORT_OUTPUT_GDB != 0 {
            profilers.add(Box::new(GdbJit::new()));
        }
        let handle = Box::new(perfsupport_profilers { profilers });
        // SAFETY: non-null and writable by the caller's contract.
        unsafe { out.write(Box::into_raw(handle)) };
        Ok(())
    })
}

/// The regions of one batch, converted and owned: `CodeRegion`s borrow this.
pub(super) struct Batch<'c> {
    pub(super) items: Vec<BatchItem<'c>>,
}

pub(super) struct BatchItem<'c> {
    pub(super) code: &'c [u8],
    pub(super) name: &'c str,
    pub(super) unwind: Option<CallFrameInfo>,
    pub(super) lines: Vec<LineEntry<'c>>,
}

impl<'c> Batch<'c> {
    /// # Safety
    /// Every region satisfies `perfsupport_register`'s contract.
    pub(super) unsafe fn convert(regions: &[perfsupport_region]) -> Result<Batch<'c>, Error> {
        let mut items = Vec::with_capacity(regions.len());
        for (index, region) in regions.iter().enumerate() {
            // SAFETY: the caller's contract, for each pointer below.
            let name = unsafe { cstr::utf8(region.name, &format!("region {index}: name")) }?;
            let what = |problem: String| Error::invalid(format!("code region {name:?}: {problem}"));
            // SAFETY: the caller's contract: `size` readable bytes of code.
            let code = unsafe { cstr::slice(region.code.cast::<u8>(), region.size, "code") }
                .map_err(|err| what(err.message))?;
            // SAFETY: the caller's contract: `unwind` is NULL or valid.
            let unwind = unsafe { super::unwind::convert(region.unwind, region.size, name) }?;
            // SAFETY: the caller's contract: `line_count` rows at `lines`.
            let rows = unsafe { cstr::slice(region.lines, region.line_count, "lines") }
                .map_err(|err| what(err.message))?;
            let mut lines = Vec::with_capacity(rows.len());
            for (row_index, row) in rows.iter().enumerate() {
                // SAFETY: the caller's contract: each row's file is a
                // NUL-terminated string.
                let file = unsafe { cstr::utf8(row.file, &format!("line {row_index}: file")) }
                    .map_err(|err| what(err.message))?;
                lines.push(LineEntry {
                    offset: row.offset,
                    file,
                    line: row.line,
                    column: row.column,
                });
            }
            items.push(BatchItem {
                code,
                name,
                unwind,
                lines,
            });
        }
        Ok(Batch { items })
    }

    fn regions(&self) -> Vec<CodeRegion<'_>> {
        self.items
            .iter()
            .map(|item| {
                let region = CodeRegion::new(item.code, item.name).with_lines(&item.lines);
                match &item.unwind {
                    Some(unwind) => region.with_unwind(unwind.unwind_info()),
                    None => region,
                }
            })
            .collect()
    }
}

/// One error for all failed outputs: the first one's code, every message.
fn failures_to_error(failures: Vec<SinkFailure>) -> Result<(), Error> {
    let Some(first) = failures.first() else {
        return Ok(());
    };
    let code = if first.disabled {
        PERFSUPPORT_EIO
    } else {
        PERFSUPPORT_EINVAL
    };
    let message = failures
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ");
    Err(Error::new(code, message))
}

/// Describes a batch of `count` regions that just became executable, to
/// every output. Call after the code is final and before it first runs;
/// the code must stay readable and unchanged until `perfsupport_retire`
/// says it died (or `perfsupport_profilers_finish`). Everything else the
/// regions point to is copied during the call.
///
/// Regions placed back to back are fine: see `perfsupport_register_ex`,
/// which also says what became of their unwind info. Regions of one batch
/// must not share a code byte.
///
/// Returns 0; `PERFSUPPORT_EINVAL` if a region is malformed (among others:
/// `size` 0, or `code + size` past the end of the address space) or two
/// regions of the batch overlap (no output wrote anything of the batch; the
/// message names the region); `PERFSUPPORT_EIO` if an output failed to
/// write (it is switched off; the message names it).
///
/// # Safety
/// `profilers` comes from `perfsupport_profilers_open` and is not finished;
/// `regions` points to `count` regions (or `count` is 0); each region's
/// `code` points to `size` readable bytes, its strings are NUL-terminated,
/// and its `unwind` and `lines` are NULL or point to what their counts say.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perfsupport_register(
    profilers: *const perfsupport_profilers,
    regions: *const perfsupport_region,
    count: usize,
) -> c_int {
    // SAFETY: the caller's contract, which is register_ex's with no report.
    unsafe { perfsupport_register_ex(profilers, regions, count, std::ptr::null_mut()) }
}

// ANCHOR: unwind_fallbacks
/// What became of the unwind info of a batch (see
/// `perfsupport_register_ex`). Both kinds of region unwind by the
/// frame-pointer chain under `perf record --call-graph dwarf`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct perfsupport_unwind_fallbacks {
    /// Regions of the batch with unwind info that had no room for it and
    /// were written header-only (their unwind info is not in the jitdump).
    pub header_only: usize,
    /// Regions registered before that were written to the jitdump again,
    /// header-only, each time code of this batch took their room (or the
    /// 8-byte build-id marker the jitdump appends to code it already holds
    /// covered their start).
    pub rewritten: usize,
}
// ANCHOR_END: unwind_fallbacks

/// `perfsupport_register`, and stores in `*fallbacks` (if not NULL) which
/// regions lost their DWARF unwind info in the jitdump because code is
/// packed.
///
/// `perf inject --jit` maps each region over its code *and* the unwind
/// tables after it: `ALIGN8(size) + unwind bytes`, the size
/// `perfsupport_reserved_region_size` gives (rounded up to 16). If other
/// code sits in that room, the mappings overlap, and perf would lose the
/// unwind tables (0% full stacks) or name the wrong function. So:
///
/// - a region whose room holds the start of another region of its batch,
///   or of live code registered before, is written **header-only**: perf
///   unwinds it by frame pointers (`fallbacks->header_only`);
/// - when a region of this batch lands in the room of a region registered
///   earlier with its unwind info, that region is first written again
///   header-only, so perf's later mapping of it ends with its code
///   (`fallbacks->rewritten`);
/// - dead code (`perfsupport_retire`) and code overwritten by a new region
///   take no room.
///
/// Frame pointers give full stacks only through code that keeps them:
/// `push rbp; mov rbp, rsp` on entry, `rbp` untouched until the epilogue
/// (aarch64: `stp x29, x30, [sp, #-16]!; mov x29, sp`, `x29` untouched).
/// To keep DWARF unwinding (code without frame pointers, or a stack
/// through the prologue), lay regions out at the strides of
/// `perfsupport_reserved_region_size`, or register each function with
/// its unwind info only once its neighbour's place is known.
///
/// ```c
/// perfsupport_unwind_fallbacks fb;
/// if (perfsupport_register_ex(prof, &region, 1, &fb) == PERFSUPPORT_OK && fb.header_only)
///     note("packed: frame-pointer unwinding for %s", region.name);
/// ```
///
/// Returns as `perfsupport_register`; `*fallbacks` is set only on success.
/// New in version 0.2 (`PERFSUPPORT_VERSION >= 200`).
///
/// Threads: any thread, also several at once on one set (each output
/// locks; a batch is written whole).
///
/// # Safety
/// As `perfsupport_register`; `fallbacks` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perfsupport_register_ex(
    profilers: *const perfsupport_profilers,
    regions: *const perfsupport_region,
    count: usize,
    fallbacks: *mut perfsupport_unwind_fallbacks,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's contract.
        let profilers =
            unsafe { profilers.as_ref() }.ok_or_else(|| Error::invalid("profilers is NULL"))?;
        // SAFETY: the caller's contract.
        let regions = unsafe { cstr::slice(regions, count, "regions") }?;
        // SAFETY: the caller's contract.
        let batch = unsafe { Batch::convert(regions) }?;
        let mut counted = UnwindFallbacks::default();
        failures_to_error(
            (profilers.profilers).register_reporting(&batch.regions(), &mut counted),
        )?;
        if !fallbacks.is_null() {
            let report = perfsupport_unwind_fallbacks {
                header_only: counted.header_only,
                rewritten: counted.rewritten,
            };
            // SAFETY: non-null and writable by the caller's contract.
            unsafe { fallbacks.write(report) };
        }
        Ok(())
    })
}

/// A range of generated code that died: `size` bytes at `start`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct perfsupport_code_range {
    /// Address of the first byte (a region's `code`).
    pub start: usize,
    /// Its size in bytes (the region's `size`).
    pub size: usize,
}

/// Says that the code in `count` ranges is dead: it will not run again, and
/// once this returns its addresses may hold new code. Call it after the
/// last use of the code and before the memory is reused.
///
/// What each output can know when code dies, and what the VM must do (the
/// book's "When code dies" chapter):
///
/// - **perf map**: nothing. A map has no timestamps and no way to take a
///   line back, so perf cannot tell two owners of one address apart. While
///   a map is written, never give a freed range to code with another name:
///   keep the addresses reserved (for example `mmap` them `PROT_NONE` again,
///   which returns the memory) or reuse them only for the same function,
///   at the same start, no larger.
/// - **jitdump**: nothing is written (the format has no unload record).
///   Reusing the addresses is exact as long as the new code is registered
///   (`perfsupport_register`: a new `JIT_CODE_LOAD`) before it first runs;
///   `perf inject --jit` resolves each sample by time (record with
///   `perf record -k 1`).
/// - **vmprof**: samples name code ids, not addresses: retire the ids of
///   code objects that died with `perfsupport_vmprof_retire_code`.
///
/// Returns 0; `PERFSUPPORT_EINVAL` (NULL `profilers`, NULL `ranges` with a
/// count, a range of 0 bytes, or one whose `start + size` overflows: no
/// output forgets anything then); `PERFSUPPORT_EIO` if an output failed
/// (it is switched off).
///
/// Threads: any thread, as `perfsupport_register`.
///
/// # Safety
/// `profilers` comes from `perfsupport_profilers_open` and is not finished;
/// `ranges` points to `count` ranges (or `count` is 0).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perfsupport_retire(
    profilers: *const perfsupport_profilers,
    ranges: *const perfsupport_code_range,
    count: usize,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's contract.
        let profilers =
            unsafe { profilers.as_ref() }.ok_or_else(|| Error::invalid("profilers is NULL"))?;
        // SAFETY: the caller's contract.
        let ranges = unsafe { cstr::slice(ranges, count, "ranges") }?;
        let ranges: Vec<(usize, usize)> = ranges.iter().map(|r| (r.start, r.size)).collect();
        // Checked here too, not only by the outputs: a set whose outputs
        // all failed must still refuse a bad range.
        ps::validate_ranges(&ranges).map_err(|err| Error::invalid(err.to_string()))?;
        failures_to_error(profilers.profilers.retire(&ranges))
    })
}

/// Call in a forked child right after `fork()`: the perf map continues in
/// the child's own file, the jitdump stops (open a new set in the child if
/// it will generate code). Returns 0 or the first failure's code.
///
/// Threads: only in the child, on the thread that called `fork`.
///
/// # Safety
/// `profilers` comes from `perfsupport_profilers_open` and is not finished.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perfsupport_profilers_after_fork_child(
    profilers: *const perfsupport_profilers,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's contract.
        let profilers =
            unsafe { profilers.as_ref() }.ok_or_else(|| Error::invalid("profilers is NULL"))?;
        failures_to_error(profilers.profilers.after_fork_child())
    })
}

/// Flushes and closes every output (the files stay for `perf report` and
/// `perf inject`) and frees `profilers`, even when an output fails. NULL
/// does nothing. Returns 0 or the first failure's code.
///
/// Threads: any thread, as the last call on `profilers`.
///
/// # Safety
/// `profilers` is NULL or comes from `perfsupport_profilers_open`, is not
/// finished, and no other thread uses it during or after this call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perfsupport_profilers_finish(
    profilers: *mut perfsupport_profilers,
) -> c_int {
    guard(|| {
        if profilers.is_null() {
            return Ok(());
        }
        // SAFETY: made by Box::into_raw in open, not freed yet (contract).
        let profilers = unsafe { Box::from_raw(profilers) };
        failures_to_error(profilers.profilers.finish())
    })
}
