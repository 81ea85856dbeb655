//! CPython's perf map trio, with the same names (prefix `perfsupport_`),
//! arguments, semantics and return codes as `PyUnstable_PerfMapState_Init`,
//! `PyUnstable_WritePerfMapEntry` and `PyUnstable_PerfMapState_Fini`:
//!
//! * `perfsupport_perf_map_init()` creates `/tmp/perf-<pid>.map` (0, or -1
//!   when it cannot be opened); calling it again is harmless;
//! * `perfsupport_write_perf_map_entry(addr, size, name)` appends one line,
//!   initialising on first use (then its result is init's);
//! * `perfsupport_perf_map_fini()` closes the file (it stays on disk);
//! * `perfsupport_perf_map_after_fork_child()` gives a forked child its own
//!   map, starting with the parent's lines (CPython 3.13 does the same).
//!
//! All are thread-safe: one process-wide map behind one lock. The file is
//! made by perfsupport's safe creation path (exclusive, no symlinks, 0644,
//! close-on-exec), not by `fopen`.
//!
//! Differences from CPython, on purpose: a name perf would drop or misread
//! is refused with `PERFSUPPORT_EINVAL` rather than written, and a failed
//! write returns `PERFSUPPORT_EIO` rather than going unnoticed. After
//! `fini`, init and writes return `PERFSUPPORT_ESTATE`: CPython would append
//! to the old file again, but perfsupport's safe creation takes a file it
//! finds at the path for a stale one and replaces it, which would lose the
//! lines already written.

use super::cstr;
use super::error::{Error, PERFSUPPORT_EIO, PERFSUPPORT_EOPEN, PERFSUPPORT_ESTATE, guard};
use parking_lot::Mutex;
use ps::{CodeRegion, PerfMap, ProfilerSink};
use std::ffi::{c_char, c_int, c_uint, c_void};

/// The process-wide map of the trio.
static MAP: Mutex<Trio> = Mutex::new(Trio::Unopened);

enum Trio {
    Unopened,
    Open(PerfMap),
    /// After fini, or after a fork the map could not follow.
    Closed(&'static str),
}

/// Opens the map under `slot` if it was never opened.
fn ensure_open(slot: &mut Trio) -> Result<&PerfMap, Error> {
    if let Trio::Unopened = slot {
        let map = PerfMap::new();
        map.open().map_err(|err| {
            // The regions path already writes the map: a conflict of
            // calls, not a file problem.
            let code = if err.kind() == std::io::ErrorKind::ResourceBusy {
                PERFSUPPORT_ESTATE
            } else {
                PERFSUPPORT_EOPEN
            };
            Error::new(code, format!("perf map: {err}"))
        })?;
        *slot = Trio::Open(map);
    }
    match slot {
        Trio::Open(map) => Ok(map),
        Trio::Closed(why) => Err(Error::state(format!("perf map: {why}"))),
        Trio::Unopened => unreachable!("opened above"),
    }
}

/// Creates `/tmp/perf-<pid>.map` if this process has not yet.
///
/// Returns 0; `PERFSUPPORT_EOPEN` (-1) when the file cannot be created
/// (another file of another user is in the way, `/tmp` is read-only, ...);
/// `PERFSUPPORT_ESTATE` after `perfsupport_perf_map_fini`, or when a set
/// opened with `PERFSUPPORT_OUTPUT_PERF_MAP` already writes this
/// process's map (one writer per map). Like CPython, the map is opened on
/// the first write if never initialised.
///
/// Threads: any thread (one process-wide map behind one lock).
#[unsafe(no_mangle)]
pub extern "C" fn perfsupport_perf_map_init() -> c_int {
    guard(|| ensure_open(&mut MAP.lock()).map(|_| ()))
}

/// Appends `"<code_addr> <code_size> <entry_name>\n"` to the map,
/// initialising it first if needed.
///
/// The line is written before the call returns: the name may be freed
/// then; the code must stay where it is while perf may sample it.
///
/// Returns 0; the result of [`perfsupport_perf_map_init`] if the map had to
/// be opened and could not; `PERFSUPPORT_EINVAL` for a NULL or non-UTF-8
/// name, a name perf would drop or misread, or a size of 0;
/// `PERFSUPPORT_EIO` when the write fails.
///
/// Threads: any thread; lines of concurrent calls never interleave.
///
/// # Safety
/// `code_addr` points to `code_size` readable bytes (the live code) and
/// `entry_name` is NULL or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perfsupport_write_perf_map_entry(
    code_addr: *const c_void,
    code_size: c_uint,
    entry_name: *const c_char,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's contract.
        let name = unsafe { cstr::utf8(entry_name, "entry_name") }?;
        // SAFETY: the caller's contract (`code_size` readable bytes).
        let code = unsafe { cstr::slice(code_addr.cast::<u8>(), code_size as usize, "code_addr") }?;
        let region = CodeRegion::new(code, name);
        let mut slot = MAP.lock();
        let map = ensure_open(&mut slot)?;
        map.register(&[region])
            .map_err(|err| Error::io(PERFSUPPORT_EIO, &err))
    })
}

/// Closes the map (the file stays for `perf report`); later writes return
/// `PERFSUPPORT_ESTATE`. Harmless when the map is not open.
///
/// Threads: any thread; later writes from other threads get `PERFSUPPORT_ESTATE`.
#[unsafe(no_mangle)]
pub extern "C" fn perfsupport_perf_map_fini() {
    let _ = guard(|| {
        let mut slot = MAP.lock();
        if let Trio::Open(map) = std::mem::replace(
            &mut *slot,
            Trio::Closed("closed by perfsupport_perf_map_fini"),
        ) {
            // CPython's fini returns nothing either; a failed final sync
            // leaves the lines written so far.
            let _ = map.finish();
        }
        Ok(())
    });
}

/// Call in a forked child right after `fork()`, before it starts threads:
/// later entries go to the child's own `/tmp/perf-<child pid>.map`, which
/// starts with the parent's lines. Does nothing if the map is not open.
///
/// Returns 0, `PERFSUPPORT_EOPEN` if the child's map cannot be made (the
/// child then writes no map), or `PERFSUPPORT_ESTATE` if another thread of
/// the parent held the map's lock when it forked (the map cannot be used
/// in this child).
///
/// Threads: only in the child, on the thread that called `fork`.
#[unsafe(no_mangle)]
pub extern "C" fn perfsupport_perf_map_after_fork_child() -> c_int {
    guard(|| {
        let Some(mut slot) = MAP.try_lock() else {
            return Err(Error::state(
                "perf map: another thread held the lock when the process forked",
            ));
        };
        let Trio::Open(map) = &*slot else {
            return Ok(());
        };
        map.after_fork_child().map_err(|err| {
            *slot = Trio::Closed("it could not follow the fork");
            if err.kind() == std::io::ErrorKind::WouldBlock {
                Error::state(format!("perf map: {err}"))
            } else {
                Error::new(PERFSUPPORT_EOPEN, format!("perf map: {err}"))
            }
        })
    })
}
