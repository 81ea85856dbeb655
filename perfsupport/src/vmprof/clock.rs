//! The sampling clock: what sends the sampler its `SIGPROF`s.
//!
//! # Per-thread CPU clocks (preferred)
//!
//! Each thread that runs VM code gets a Linux perf event of its own: the
//! software `task-clock` (the thread's CPU time, in nanoseconds) with a
//! sample period of one interval, counting user space only
//! (`exclude_kernel`, which `perf_event_paranoid` 2 allows without
//! privileges, as async-profiler uses it). The event's file is set to
//! signal its own thread (`F_SETOWN_EX` with `F_OWNER_TID`, `F_SETSIG`
//! `SIGPROF`, `O_ASYNC`), so every interval of that thread's CPU time
//! sends that thread one signal, which the handler sees with `si_code`
//! `POLL_IN`. The kernel runs these clocks on high-resolution timers, not
//! the scheduler tick: 100 µs means about 10,000 signals per CPU second,
//! and each signal is one record.
//!
//! A thread *joins* ([`join_current_thread`]) when it installs a
//! [`FrameView`](super::FrameView) or attaches through the C API, and
//! leaves when that ends; joined threads get their event when a profile
//! starts, and a thread that joins during a profile (an embedder's new
//! thread) gets one at once. The events are closed when the profile ends
//! or the thread leaves.
//!
//! # The process timer (fallback)
//!
//! Where `perf_event_open` is refused (a seccomp filter, a container,
//! `perf_event_paranoid` 3, a kernel without perf events), the sampler
//! falls back to `setitimer(ITIMER_PROF)`: one process-wide CPU timer
//! that Linux checks on scheduler ticks (`CONFIG_HZ`, often 250 Hz), so
//! one signal can stand for several intervals and its record is repeated
//! (see the sampler's weights). `PERFSUPPORT_VMPROF_CLOCK=itimer` forces
//! it (for tests and comparisons).
//!
//! The profile says which clock ran (META `clock`: [`Clock::name`]) and how
//! many signals made how many records (META `signals`, `records`).

use std::cell::Cell;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use perf_event_open_sys::bindings::{
    PERF_COUNT_SW_TASK_CLOCK, PERF_FLAG_FD_CLOEXEC, PERF_TYPE_SOFTWARE, perf_event_attr,
};

use super::VmprofError;
use super::fork::ForkSafeLock;

/// The environment variable that forces the process timer.
pub const CLOCK_ENV: &str = "PERFSUPPORT_VMPROF_CLOCK";

/// Which clock sends the samples.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Clock {
    /// A perf-event CPU clock per joined thread (see the module docs).
    ThreadCpu,
    /// `setitimer(ITIMER_PROF)`, checked on the kernel's tick.
    ProcessTimer,
}

impl Clock {
    /// The clock's name in the profile's META `clock` record.
    pub fn name(self) -> &'static str {
        match self {
            Clock::ThreadCpu => "perf-task-clock",
            Clock::ProcessTimer => "itimer-prof",
        }
    }
}

/// The running profile's clock: 0 none, else [`Clock`] + 1. Read by the
/// signal handler (an atomic load).
static RUNNING: AtomicU8 = AtomicU8::new(0);

/// The clock of the running profile, if any. Async-signal-safe.
pub(super) fn running() -> Option<Clock> {
    match RUNNING.load(Ordering::Acquire) {
        1 => Some(Clock::ThreadCpu),
        2 => Some(Clock::ProcessTimer),
        _ => None,
    }
}

/// A joined thread (its joins are counted in its own `JOINS`): its id, and
/// its clock while a profile with per-thread clocks runs.
struct Joined {
    tid: libc::pid_t,
    event: Option<OwnedFd>,
}

/// The joined threads and the running profile's interval.
pub(super) struct Threads {
    joined: Vec<Joined>,
    /// The interval of the running per-thread profile, else `None`.
    period: Option<Duration>,
    /// The thread that started the running profile, and its clock while
    /// it has not joined (a joined thread's clock is in `joined`: one
    /// clock per thread, or its samples would count twice).
    enabler: Option<Joined>,
}

/// Taken after the session's lock, before anything else (see `fork`).
pub(super) static THREADS: ForkSafeLock<Threads> = ForkSafeLock::new(Threads {
    joined: Vec::new(),
    period: None,
    enabler: None,
});

thread_local! {
    /// Joins the calling thread holds (it is in [`THREADS`] when above 0).
    static JOINS: Cell<usize> = const { Cell::new(0) };
}

/// Counts the calling thread as running VM code: a profile samples it
/// from now on (see the module docs). Joins nest; each needs a
/// [`leave_current_thread`].
pub fn join_current_thread() {
    let first = JOINS.with(|j| {
        j.set(j.get() + 1);
        j.get() == 1
    });
    if !first {
        return;
    }
    let tid = current_tid();
    let mut threads = THREADS.lock();
    let period = threads.period;
    // The enabling thread already has its clock: it moves. Another
    // thread whose clock cannot be opened (no file descriptors left) is
    // not sampled; the others are.
    let event = match threads.enabler.as_mut().filter(|e| e.tid == tid) {
        Some(enabler) => enabler.event.take(),
        None => period.and_then(|period| open(tid, period).ok()),
    };
    threads.joined.push(Joined { tid, event });
}

/// Undoes one [`join_current_thread`]; the last one closes the thread's
/// clock. (Also from thread-local destructors: `JOINS` has none.)
pub fn leave_current_thread() {
    let last = JOINS
        .try_with(|j| {
            j.set(j.get().saturating_sub(1));
            j.get() == 0
        })
        .unwrap_or(true);
    if !last {
        return;
    }
    let tid = current_tid();
    let mut threads = THREADS.lock();
    let Some(at) = threads.joined.iter().position(|t| t.tid == tid) else {
        return;
    };
    let left = threads.joined.swap_remove(at);
    // The enabling thread is sampled until the profile stops, joined or
    // not.
    if let Some(enabler) = threads.enabler.as_mut().filter(|e| e.tid == tid) {
        enabler.event = left.event;
    }
}

/// The clock a profile sampling every `interval` will use: per-thread
/// clocks if this process may open one (a probe on the calling thread),
/// unless [`CLOCK_ENV`] says `itimer`; else the process timer.
pub(super) fn choose(interval: Duration) -> Clock {
    let forced = std::env::var(CLOCK_ENV).is_ok_and(|v| v == "itimer");
    if !forced && open(current_tid(), interval).is_ok() {
        Clock::ThreadCpu
    } else {
        Clock::ProcessTimer
    }
}

/// Starts `clock` (from [`choose`]): a clock for every joined thread and
/// for the calling (enabling) thread, or the process timer. Called under
/// the session's lock, with sampling on.
pub(super) fn start(clock: Clock, interval: Duration) -> Result<(), VmprofError> {
    match clock {
        Clock::ThreadCpu => {
            let mut threads = THREADS.lock();
            threads.period = Some(interval);
            let me = current_tid();
            for entry in &mut threads.joined {
                entry.event = open(entry.tid, interval).ok();
            }
            let joined = threads.joined.iter().any(|t| t.tid == me);
            threads.enabler = Some(Joined {
                tid: me,
                event: (!joined).then(|| open(me, interval).ok()).flatten(),
            });
        }
        Clock::ProcessTimer => set_process_timer(interval)?,
    }
    RUNNING.store(clock as u8 + 1, Ordering::Release);
    Ok(())
}

/// Stops the clock [`start`] started.
pub(super) fn stop() {
    let was = running();
    RUNNING.store(0, Ordering::Release);
    if was == Some(Clock::ProcessTimer) {
        // Cannot fail with valid arguments; sampling is off by now anyway.
        let _ = set_process_timer(Duration::ZERO);
    }
    let mut threads = THREADS.lock();
    threads.period = None;
    threads.enabler = None;
    for entry in &mut threads.joined {
        // Closing the file stops the event and its signals.
        entry.event = None;
    }
}

/// In a forked child, under the lock `fork` took: the parent's threads and
/// clocks are not this process's. The forking thread keeps its joins, as
/// itself (its id is new).
pub(super) fn forget_parent_threads(threads: &mut Threads) {
    RUNNING.store(0, Ordering::Release);
    // The child's copies of the parent's event files: closing them does
    // not stop the parent's clocks.
    threads.joined.clear();
    threads.period = None;
    threads.enabler = None;
    if JOINS.try_with(Cell::get).unwrap_or(0) > 0 {
        threads.joined.push(Joined {
            tid: current_tid(),
            event: None,
        });
    }
}

/// `fcntl` commands and the owner kind that send an event's signal to one
/// thread (the same numbers on every Linux architecture this crate builds
/// for; `libc` does not have them for glibc targets).
const F_SETSIG: libc::c_int = linux_raw_sys::general::F_SETSIG as libc::c_int;
const F_SETOWN_EX: libc::c_int = linux_raw_sys::general::F_SETOWN_EX as libc::c_int;

// ANCHOR: open_thread_clock
/// Opens thread `tid`'s CPU clock, set to send it `SIGPROF` every
/// `period` of its user-space CPU time.
fn open(tid: libc::pid_t, period: Duration) -> io::Result<OwnedFd> {
    // SAFETY: perf_event_attr is plain data (integers and bit fields), for
    // which all zeroes is the documented "unset" value of every field.
    let mut attr: perf_event_attr = unsafe { std::mem::zeroed() };
    attr.type_ = PERF_TYPE_SOFTWARE;
    attr.size = size_of::<perf_event_attr>() as u32;
    attr.config = u64::from(PERF_COUNT_SW_TASK_CLOCK);
    attr.__bindgen_anon_1.sample_period = u64::try_from(period.as_nanos()).unwrap_or(u64::MAX);
    attr.set_disabled(1);
    attr.set_exclude_kernel(1);
    attr.set_exclude_hv(1);
    // SAFETY: `attr` is a valid, fully initialised attribute block of the
    // size it states; `tid` is a thread of this process, -1 any CPU, no
    // group. The kernel only reads `attr` (and may write its `size` on
    // E2BIG, which it owns for the call).
    let fd = unsafe {
        perf_event_open_sys::perf_event_open(
            &mut attr,
            tid,
            -1,
            -1,
            libc::c_ulong::from(PERF_FLAG_FD_CLOEXEC),
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by the kernel and is owned by nobody
    // else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let raw = fd.as_raw_fd();
    let owner = linux_raw_sys::general::f_owner_ex {
        type_: linux_raw_sys::general::F_OWNER_TID as _,
        pid: tid,
    };
    // SAFETY: fcntl on a descriptor we own, with the argument each
    // command takes (a pointer to a valid f_owner_ex, an int, flags); the
    // ioctl enables the event and takes no pointer.
    let failed = unsafe {
        libc::fcntl(raw, F_SETOWN_EX, &owner) != 0
            || libc::fcntl(raw, F_SETSIG, libc::SIGPROF) != 0
            || libc::fcntl(raw, libc::F_SETFL, libc::O_ASYNC | libc::O_NONBLOCK) != 0
            || perf_event_open_sys::ioctls::ENABLE(raw, 0) != 0
    };
    if failed {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}
// ANCHOR_END: open_thread_clock

/// Arms `ITIMER_PROF` with `interval` (zero disarms it).
fn set_process_timer(interval: Duration) -> Result<(), VmprofError> {
    let tv = libc::timeval {
        // At most 1 s (MAX_INTERVAL): both fields fit any C type.
        tv_sec: interval.as_secs() as libc::time_t,
        tv_usec: interval.subsec_micros() as libc::suseconds_t,
    };
    let timer = libc::itimerval {
        it_interval: tv,
        it_value: tv,
    };
    // SAFETY: `timer` is a valid itimerval; the old value is not requested.
    let result = unsafe { libc::setitimer(libc::ITIMER_PROF, &timer, std::ptr::null_mut()) };
    if result != 0 {
        return Err(VmprofError::Os {
            call: "setitimer(ITIMER_PROF)",
            source: io::Error::last_os_error(),
        });
    }
    Ok(())
}

/// The calling thread's id.
fn current_tid() -> libc::pid_t {
    crate::os::current_tid() as libc::pid_t
}
