//! VMProf-style sampling for C VMs: code registration, enable/disable, and
//! a per-thread shadow stack that C code and generated code push and pop
//! inline (`perfsupport_shadow_stack_push` / `_pop` in the header).
//!
//! # Threads must attach
//!
//! A thread that runs VM code calls [`perfsupport_vmprof_attach_thread`]
//! once; it returns that thread's shadow stack. Only attached threads are
//! sampled. This is what makes the SIGPROF handler signal-safe when
//! `libperfsupport.so` is loaded with `dlopen`:
//!
//! * the handler reads the library's thread-local storage (the shadow
//!   stack, the cached thread id);
//! * for a `dlopen`ed library, glibc allocates a thread's block of that
//!   storage lazily, with `malloc`, in `__tls_get_addr` on the thread's
//!   first access. If that first access happened in the handler and the
//!   signal had interrupted `malloc`, the thread would deadlock or corrupt
//!   the heap;
//! * so the handler first asks [`admit_current_thread`], which uses no
//!   thread-local storage (a `gettid` system call and a scan of a static
//!   table), whether the thread attached. Attaching touches the storage in
//!   an ordinary call, so glibc has allocated it before any signal can use
//!   it. A thread leaves the table when it exits (a thread-local
//!   destructor), before its storage is freed.
//!
//! Linked normally (`-lperfsupport`, or the static `libperfsupport.a`), the
//! storage is static and the gate only costs a scan; the rule is the same.
//!
//! # SIGPROF ownership
//!
//! `perfsupport_vmprof_enable` installs a process-wide `SIGPROF` handler
//! (once; it stays installed, idle, after disable) and starts a CPU clock
//! for each attached thread and the enabling one (a perf event that
//! signals its own thread; where perf events are refused,
//! `setitimer(ITIMER_PROF)` for the process: `perfsupport::vmprof::clock`).
//! While profiling, the process must not use SIGPROF or `ITIMER_PROF` for
//! anything else (no second SIGPROF profiler, no gperftools CPU profiler).
//! Threads should not block SIGPROF if they are to be sampled. One session
//! per process.

use super::cstr;
use super::error::{Error, PERFSUPPORT_EINVAL, PERFSUPPORT_EIO, PERFSUPPORT_EOPEN, guard};
use ps::vmprof::{
    CodeIdCell, EnableOptions, SHADOW_STACK_CAPACITY, SHADOW_STACK_DEPTH_OFFSET,
    SHADOW_STACK_IDS_OFFSET, ShadowStack, VmprofError,
};
use std::ffi::{c_char, c_int};
use std::path::Path;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Duration;

/// Frames a shadow stack stores (deeper frames are counted, not stored).
pub const PERFSUPPORT_SHADOW_STACK_CAPACITY: usize = 1024;
/// The most threads that can be attached at once.
pub const PERFSUPPORT_MAX_ATTACHED_THREADS: usize = 1024;

/// One thread's shadow stack, as the inline push and pop in the header see
/// it. `ids[i]` is the code id of frame `i`, root first; `depth` counts the
/// frames entered and not left (it may exceed the capacity).
#[repr(C)]
pub struct perfsupport_shadow_stack {
    /// Frames entered and not left.
    pub depth: usize,
    /// Code ids, root first.
    pub ids: [usize; PERFSUPPORT_SHADOW_STACK_CAPACITY],
}

// The header's layout is perfsupport's.
const _: () = assert!(PERFSUPPORT_SHADOW_STACK_CAPACITY == SHADOW_STACK_CAPACITY);
const _: () =
    assert!(std::mem::offset_of!(perfsupport_shadow_stack, depth) == SHADOW_STACK_DEPTH_OFFSET);
const _: () =
    assert!(std::mem::offset_of!(perfsupport_shadow_stack, ids) == SHADOW_STACK_IDS_OFFSET);
const _: () = assert!(size_of::<perfsupport_shadow_stack>() == size_of::<ShadowStack>());

/// Thread ids of the attached threads; 0 is a free slot.
static ATTACHED: [AtomicI32; PERFSUPPORT_MAX_ATTACHED_THREADS] =
    [const { AtomicI32::new(0) }; PERFSUPPORT_MAX_ATTACHED_THREADS];

/// The SIGPROF gate (see the module docs): true when the calling thread is
/// attached. Async-signal-safe; no thread-local storage.
extern "C" fn admit_current_thread() -> bool {
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() };
    ATTACHED
        .iter()
        .any(|slot| slot.load(Ordering::Relaxed) == tid)
}

/// Removes the thread from [`ATTACHED`] when it exits.
struct Attachment {
    /// The thread's id (a new one in a forked child).
    tid: std::cell::Cell<i32>,
}

impl Drop for Attachment {
    fn drop(&mut self) {
        ps::vmprof::leave_current_thread();
        for slot in &ATTACHED {
            if slot
                .compare_exchange(self.tid.get(), 0, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
            {
                break;
            }
        }
    }
}

thread_local! {
    // Lazily set by attach (an ordinary call); its destructor detaches.
    static ATTACHMENT: std::cell::OnceCell<Attachment> = const { std::cell::OnceCell::new() };
}

/// Registers [`attached_after_fork`] once per process.
fn follow_forks() {
    static REGISTERED: std::sync::Once = std::sync::Once::new();
    REGISTERED.call_once(|| {
        // SAFETY: a child handler of this library, which stays loaded
        // (glibc drops a closed module's handlers). Failure (no memory)
        // leaves the child with the parent's table, as before.
        unsafe { libc::pthread_atfork(None, None, Some(attached_after_fork)) };
    });
}

/// The child side of `fork`: of the attached threads only the forking one
/// exists in the child, under a new thread id. It stays attached (a host
/// that forks a worker keeps its thread profiled); the parent's other ids
/// are dropped, so a child thread that happens to get one is not let in.
extern "C" fn attached_after_fork() {
    for slot in &ATTACHED {
        slot.store(0, Ordering::Relaxed);
    }
    let _ = ATTACHMENT.try_with(|cell| {
        if let Some(attachment) = cell.get() {
            // SAFETY: gettid has no preconditions.
            let tid = unsafe { libc::gettid() };
            attachment.tid.set(tid);
            ATTACHED[0].store(tid, Ordering::Relaxed);
        }
    });
}

/// Attaches the calling thread (idempotent) and stores its shadow stack in
/// `*out`. The stack stays valid until the thread exits; only this thread
/// may push and pop through it.
///
/// Returns 0, `PERFSUPPORT_EINVAL` for a NULL `out`, or
/// `PERFSUPPORT_ESTATE` when `PERFSUPPORT_MAX_ATTACHED_THREADS` threads are
/// attached.
///
/// Threads: attaches the calling thread only; push and pop its stack only
/// on it (the SIGPROF handler reads it there).
///
/// # Safety
/// `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perfsupport_vmprof_attach_thread(
    out: *mut *mut perfsupport_shadow_stack,
) -> c_int {
    guard(|| {
        if out.is_null() {
            return Err(Error::invalid("out is NULL"));
        }
        // Touch all of the library's thread-local storage first (one block),
        // then let the handler in.
        let stack = ShadowStack::current_ptr();
        ATTACHMENT.with(|cell| {
            if cell.get().is_some() {
                return Ok(());
            }
            // SAFETY: gettid has no preconditions.
            let tid = unsafe { libc::gettid() };
            let free = ATTACHED.iter().find(|slot| {
                slot.compare_exchange(0, tid, Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok()
            });
            if free.is_none() {
                return Err(Error::state(format!(
                    "vmprof: {PERFSUPPORT_MAX_ATTACHED_THREADS} threads are attached already"
                )));
            }
            let _ = cell.set(Attachment {
                tid: std::cell::Cell::new(tid),
            });
            // Its own CPU clock samples it (`ps::vmprof::clock`).
            ps::vmprof::join_current_thread();
            follow_forks();
            Ok(())
        })?;
        // SAFETY: non-null and writable by the caller's contract. The stack
        // is perfsupport's, whose layout the header mirrors (asserted above).
        unsafe { out.write(stack.cast_mut().cast()) };
        Ok(())
    })
}

/// Registers a code object named `class:func_name:line:file` and stores its
/// id (positive, even, unique) in `*id`. Push that id while the code runs.
///
/// Returns 0 or `PERFSUPPORT_EINVAL` (bad class prefix: empty, over 64
/// bytes, a colon or a control character; NULL or non-UTF-8 strings).
///
/// Threads: any thread.
///
/// # Safety
/// The strings are NULL or NUL-terminated; `id` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perfsupport_vmprof_register_code(
    class_prefix: *const c_char,
    func_name: *const c_char,
    line: u32,
    file: *const c_char,
    id: *mut usize,
) -> c_int {
    guard(|| {
        if id.is_null() {
            return Err(Error::invalid("id is NULL"));
        }
        // SAFETY: the caller's contract: each of the three strings is
        // NULL or NUL-terminated.
        let prefix = unsafe { cstr::utf8(class_prefix, "class_prefix") }?;
        // SAFETY: as above.
        let func = unsafe { cstr::utf8(func_name, "func_name") }?;
        // SAFETY: as above.
        let file = unsafe { cstr::utf8(file, "file") }?;
        let class = ps::vmprof::register_code_object_class(prefix).map_err(vmprof_error)?;
        // A fresh cell: C keeps the id itself.
        let code = ps::vmprof::register_code(&CodeIdCell::new(), &class, func, line, file);
        // SAFETY: non-null and writable by the caller's contract.
        unsafe { id.write(code.get()) };
        Ok(())
    })
}

/// Retires the `count` code ids in `ids` (from
/// `perfsupport_vmprof_register_code`): their code objects died. An id is
/// never handed out again; a retired name stays in the profile being
/// recorded (its samples need it) and is left out of every profile started
/// later, so a host that profiles VM after VM gets files that name only the
/// code of the VMs that ran while each was on. Unknown ids are ignored.
///
/// Returns 0 or `PERFSUPPORT_EINVAL` (NULL `ids` with a count).
///
/// Threads: any thread.
///
/// # Safety
/// `ids` points to `count` ids (or `count` is 0).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perfsupport_vmprof_retire_code(ids: *const usize, count: usize) -> c_int {
    guard(|| {
        // SAFETY: the caller's contract.
        let ids = unsafe { cstr::slice(ids, count, "ids") }?;
        ps::vmprof::retire_code(
            ids.iter()
                .filter_map(|&id| ps::vmprof::CodeId::from_raw_id(id)),
        );
        Ok(())
    })
}

/// Starts profiling into a new file at `path` (created safely: no symlink,
/// mode 0644, close-on-exec; a file of ours already there is replaced),
/// with the interpreter name `interp_name` (1 to 255 bytes, not `pypy`)
/// and a sample every `interval_us` microseconds of CPU time (10 to
/// 1000000; 0 means 1000). Attached threads are sampled.
///
/// Returns 0; `PERFSUPPORT_EINVAL` (bad arguments); `PERFSUPPORT_EOPEN`
/// (the file cannot be created); `PERFSUPPORT_ESTATE` (already enabled);
/// `PERFSUPPORT_EIO` (signal or timer set-up failed).
///
/// Threads: any thread; one profile per process at a time.
///
/// # Safety
/// The strings are NULL or NUL-terminated.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perfsupport_vmprof_enable(
    path: *const c_char,
    interp_name: *const c_char,
    interval_us: u32,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's contract: both strings are NULL or
        // NUL-terminated.
        let path = unsafe { cstr::utf8(path, "path") }?;
        // SAFETY: as above.
        let interp = unsafe { cstr::utf8(interp_name, "interp_name") }?;
        if interp.is_empty() {
            return Err(Error::invalid("interp_name is empty"));
        }
        let mut options = EnableOptions::new(interp);
        if interval_us != 0 {
            options.interval = Duration::from_micros(u64::from(interval_us));
        }
        // Before the handler can be installed: it must never run ungated.
        // SAFETY: `admit_current_thread` is async-signal-safe (atomics and
        // a gettid system call), uses no thread-local storage and is part
        // of this library, loaded while it can profile.
        unsafe { ps::vmprof::set_thread_filter(Some(admit_current_thread)) };
        ps::vmprof::enable_path(Path::new(path), &options).map_err(vmprof_error)
    })
}

/// Stops profiling and completes the file; stores the number of samples
/// written in `*samples` if it is not NULL.
///
/// Returns 0, `PERFSUPPORT_ESTATE` (not enabled) or `PERFSUPPORT_EIO` (the
/// file could not be written completely).
///
/// Threads: any thread (not only the one that enabled).
///
/// # Safety
/// `samples` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perfsupport_vmprof_disable(samples: *mut u64) -> c_int {
    guard(|| {
        let summary = ps::vmprof::disable().map_err(vmprof_error)?;
        if !samples.is_null() {
            // SAFETY: non-null and writable by the caller's contract.
            unsafe { samples.write(summary.samples) };
        }
        Ok(())
    })
}

/// Non-zero while a profile is being recorded.
///
/// Threads: any thread.
#[unsafe(no_mangle)]
pub extern "C" fn perfsupport_vmprof_is_enabled() -> c_int {
    std::panic::catch_unwind(ps::vmprof::is_enabled).map_or(0, c_int::from)
}

fn vmprof_error(error: VmprofError) -> Error {
    let code = match &error {
        VmprofError::InvalidClassPrefix(_)
        | VmprofError::InvalidInterval(_)
        | VmprofError::InvalidInterpName(_)
        | VmprofError::DuplicateMetaKey(_) => PERFSUPPORT_EINVAL,
        VmprofError::AlreadyEnabled | VmprofError::NotEnabled => super::error::PERFSUPPORT_ESTATE,
        VmprofError::Io { context, .. } if context.contains("creating") => PERFSUPPORT_EOPEN,
        _ => PERFSUPPORT_EIO,
    };
    Error::new(code, error.to_string())
}
