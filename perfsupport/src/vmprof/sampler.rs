//! The SIGPROF sampler: `enable` / `disable` and the signal handler.
//!
//! # How sampling works
//!
//! `enable` installs a `SIGPROF` handler (once per process, `SA_RESTART`,
//! `SA_SIGINFO` for the interrupted program counter and the signal's
//! origin) and starts the sampling clock ([`super::clock`]): preferably a
//! CPU clock per thread that runs VM code, which signals its thread after
//! each `interval` of that thread's CPU time; else `setitimer(ITIMER_PROF)`,
//! which fires after each `interval` of CPU time used by the process and
//! is delivered to a thread that is using the CPU. The handler copies that
//! thread's
//! [`ShadowStack`] (or the VM's own frame records, if the thread installed
//! a [`FrameView`](super::frame_view)) into the static `SampleRing`; the
//! writer thread (which blocks SIGPROF) turns ring entries into file
//! records.
//!
//! # Weights: sample counts proportional to CPU time
//!
//! With per-thread clocks each signal (`si_code` `POLL_IN`, from the
//! thread's own clock) stands for one interval: weight 1, and any other
//! `SIGPROF` (one sent by `kill`) records nothing.
//!
//! The process timer is checked on scheduler ticks (`CONFIG_HZ`, often
//! 250 Hz), so with a 1 ms interval one signal may stand for 4 ms of CPU.
//! The handler therefore reads the process CPU clock and gives its sample
//! a weight: the number of whole intervals since the last accounted one
//! (the remainder carries over; capped at one second's worth). The writer
//! repeats the record `weight` times, so a profile has one STACKTRACE per
//! interval of CPU time, whatever the kernel's tick. A signal that comes
//! before a full interval has passed (e.g. one sent by `kill`) records
//! nothing.
//!
//! # Async-signal safety
//!
//! The handler may interrupt any code of the thread, including `malloc`, a
//! lock holder, or the VM in the middle of a push. It therefore only:
//!
//! * loads and stores atomics (the ring, the shadow stack, flags);
//! * reads thread-local storage declared with a `const` initialiser and no
//!   destructor (static TLS: an address computation, no lazy setup);
//! * calls `clock_gettime` (async-signal-safe in POSIX) and, once per
//!   thread, `gettid` (a bare system call);
//! * in lines mode, reads the interrupted program counter from the signal's
//!   `ucontext` and walks the published line tables of compiled code
//!   ([`super::code_lines`]: atomic loads and a binary search);
//! * saves and restores `errno`, which those calls may change.
//!
//! It never allocates, locks, blocks or panics (all indexing is bounded by
//! `min`). Two threads may take a signal at once: the ring admits one
//! producer through an atomic claim, and the loser drops its sample and
//! counts it. The same thread cannot re-enter, as the kernel blocks
//! SIGPROF while its handler runs.
//!
//! Reading a stack mid-push is safe because of the shadow stack's protocol:
//! the handler loads the depth first and only then the ids below it, and a
//! push stores its id before the depth (see [`super::shadow_stack`]; a
//! [`FrameView`](super::frame_view) asks the same of the VM's records).
//!
//! # Shutdown
//!
//! `disable` stops the timer, clears the sampling flag, then waits until no
//! handler holds the ring's claim (a handler checks the flag only *after*
//! claiming, so none can start writing later), then lets the writer thread
//! drain the rest and write the trailer. The handler stays installed for
//! the life of the process, doing nothing while sampling is off: restoring
//! the default action could let a late, still-pending SIGPROF kill the
//! process.
//!
//! # Limits
//!
//! * One session per process (`SIGPROF` and `ITIMER_PROF` are per process);
//!   do not combine with another SIGPROF-based profiler.
//! * With per-thread clocks only the threads that run VM code are sampled
//!   (those that joined, see [`super::clock`]), and the enabling thread.
//! * `SA_RESTART` restarts interrupted `read`/`write` (pipes, terminals,
//!   files), so the VM's output is not cut by `EINTR`. Linux never restarts
//!   a few calls (`nanosleep`, `select`, `poll`, `epoll_wait`): they return
//!   `EINTR` as with any signal; `std::thread::sleep` retries by itself.
//! * Do not `fork` while profiling: the child has no timer and no writer
//!   thread, and must not call `disable`.

use std::fs::File;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};
use std::time::Duration;

use super::fork::ForkSafeLock;

use super::VmprofError;
use super::clock::Clock;
use super::format::{
    Encoder, MAX_INTERP_NAME, META_CLOCK, META_CUT_FRAMES_MAX, META_CUT_SAMPLES, META_RECORDS,
    META_SIGNALS, PROFILE_LINES, Timeval,
};
use super::frame_view::with_current_view;
use super::ring::SampleRing;
use super::shadow_stack::{ShadowStack, set_profiling};
use super::writer::{Preamble, ProfileSummary, WriterThread};

/// The default sampling interval: 1 ms of CPU time.
pub const DEFAULT_INTERVAL: Duration = Duration::from_millis(1);
/// The shortest interval `enable` accepts.
pub const MIN_INTERVAL: Duration = Duration::from_micros(10);
/// The longest interval `enable` accepts.
pub const MAX_INTERVAL: Duration = Duration::from_secs(1);
/// The interpreter name written by [`enable`] when none is given.
pub const DEFAULT_INTERP_NAME: &str = "perfsupport";
/// The most CPU time one signal's sample may stand for, in nanoseconds.
const MAX_WEIGHT_NS: u64 = 1_000_000_000;

/// Settings of a profiling session, for [`enable_with`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EnableOptions {
    /// CPU time between samples; [`MIN_INTERVAL`]`..=`[`MAX_INTERVAL`].
    pub interval: Duration,
    /// The interpreter name in the HEADER record, e.g. `toyvm`: at most 255
    /// bytes, and not `pypy` (which switches readers to RPython stacks).
    pub interp_name: String,
    /// Extra META records. Keys must differ from each other and from the
    /// ones always written: `os`, `bits`, `interp`, `start_time`,
    /// `period_us`, and the ones written at the end: the cut-stack ones
    /// ([`META_CUT_SAMPLES`], [`META_CUT_FRAMES_MAX`]) and the clock's
    /// ([`META_CLOCK`], [`META_SIGNALS`], [`META_RECORDS`]).
    pub meta: Vec<(String, String)>,
    /// Lines mode ([`PROFILE_LINES`](super::format::PROFILE_LINES)): every
    /// frame of every sample also records the line it is executing, read
    /// through the installed [`FrameView`](super::FrameView)'s
    /// [`lines`](super::FrameView::lines) (0 without them, and for
    /// shadow-stack samples).
    pub lines: bool,
}

impl EnableOptions {
    /// Options with the default interval and no extra meta records.
    pub fn new(interp_name: &str) -> EnableOptions {
        EnableOptions {
            interval: DEFAULT_INTERVAL,
            interp_name: interp_name.to_owned(),
            meta: Vec::new(),
            lines: false,
        }
    }

    /// Checks the interval, the interpreter name and the META keys.
    pub fn validate(&self) -> Result<(), VmprofError> {
        if !(MIN_INTERVAL..=MAX_INTERVAL).contains(&self.interval) {
            return Err(VmprofError::InvalidInterval(self.interval));
        }
        let interp = self.interp_name.as_str();
        if interp.len() > MAX_INTERP_NAME || interp.eq_ignore_ascii_case("pypy") {
            return Err(VmprofError::InvalidInterpName(interp.to_owned()));
        }
        let mut keys: Vec<&str> = BUILTIN_META_KEYS.to_vec();
        keys.extend([META_CUT_SAMPLES, META_CUT_FRAMES_MAX]);
        keys.extend([META_CLOCK, META_SIGNALS, META_RECORDS]);
        for (key, _) in &self.meta {
            if keys.contains(&key.as_str()) {
                return Err(VmprofError::DuplicateMetaKey(key.clone()));
            }
            keys.push(key);
        }
        Ok(())
    }
}

static RING: SampleRing = SampleRing::new();
/// Whether the handler records; see the module docs' shutdown protocol.
static SAMPLING: AtomicBool = AtomicBool::new(false);
/// Whether samples carry lines (the session's [`EnableOptions::lines`]).
static LINES: AtomicBool = AtomicBool::new(false);
/// The interval in nanoseconds.
static PERIOD_NS: AtomicU64 = AtomicU64::new(1);
/// Process CPU time up to which samples have been weighted.
static ACCOUNTED_CPU_NS: AtomicU64 = AtomicU64::new(0);
/// Set once the handler is installed (under `SESSION`'s lock).
static HANDLER_INSTALLED: AtomicBool = AtomicBool::new(false);
/// The running session, if any.
pub(super) static SESSION: ForkSafeLock<Option<WriterThread>> = ForkSafeLock::new(None);

/// True between a successful `enable` and the matching `disable`.
pub fn is_enabled() -> bool {
    SESSION.lock().is_some()
}

/// Starts profiling into `file` with a sample every `interval` of CPU time
/// and the interpreter name [`DEFAULT_INTERP_NAME`] (PyPy's
/// `rvmprof.enable(fileno, interval)`).
pub fn enable(file: File, interval: Duration) -> Result<(), VmprofError> {
    let mut options = EnableOptions::new(DEFAULT_INTERP_NAME);
    options.interval = interval;
    enable_with(file, &options)
}

/// Starts profiling into `file` with `options`.
///
/// Fails if a profile is already being recorded, or on bad options, or if
/// the signal handler or timer cannot be set up. Write errors on `file`
/// surface at [`disable`].
pub fn enable_with(file: File, options: &EnableOptions) -> Result<(), VmprofError> {
    enable_opening(|| Ok(file), options)
}

/// [`enable_with`] on the file `open` returns, called only once the options
/// are valid and no profile is being recorded (under the session's lock):
/// a refused call creates, truncates or replaces nothing.
pub(crate) fn enable_opening(
    open: impl FnOnce() -> Result<File, VmprofError>,
    options: &EnableOptions,
) -> Result<(), VmprofError> {
    let preamble = encode_preamble(options)?;
    super::fork::follow_forks();
    let mut session = SESSION.lock();
    if session.is_some() {
        return Err(VmprofError::AlreadyEnabled);
    }
    let file = open()?;
    install_handler_once()?;
    let clock = super::clock::choose(options.interval);
    // Code retired during the last profile is named in no later one.
    super::registry::forget_retired();
    // No producer can run (sampling is off) and no consumer exists.
    RING.reset();
    let preamble = Preamble { clock, ..preamble };
    let writer = WriterThread::spawn(file, preamble, &RING).map_err(|source| VmprofError::Io {
        context: "starting the writer thread",
        source,
    })?;
    let period_ns = u64::try_from(options.interval.as_nanos()).unwrap_or(u64::MAX);
    PERIOD_NS.store(period_ns, Ordering::SeqCst);
    ACCOUNTED_CPU_NS.store(process_cpu_ns(), Ordering::SeqCst);
    LINES.store(options.lines, Ordering::SeqCst);
    SAMPLING.store(true, Ordering::SeqCst);
    set_profiling(true);
    if let Err(error) = super::clock::start(clock, options.interval) {
        stop_sampling();
        // The writer still closes the file; its result is moot.
        let _ = writer.finish();
        return Err(error);
    }
    *session = Some(writer);
    Ok(())
}

/// Stops profiling: stops the timer, writes the remaining samples, the
/// names and the trailer, and closes the file. Returns what was written, or
/// the first write error.
pub fn disable() -> Result<ProfileSummary, VmprofError> {
    let mut session = SESSION.lock();
    let writer = session.take().ok_or(VmprofError::NotEnabled)?;
    // Sampling is off below either way, so a stray signal records nothing.
    super::clock::stop();
    stop_sampling();
    match writer.finish() {
        Ok(Ok(summary)) => Ok(summary),
        Ok(Err(source)) => Err(VmprofError::Io {
            context: "writing the profile",
            source,
        }),
        Err(()) => Err(VmprofError::WriterPanicked),
    }
}

/// In a forked child (see `super::fork`): the parent's session is not this
/// process's. Its writer thread does not exist here, so it is forgotten,
/// not joined; sampling is off (the kernel did not copy the timer) and the
/// ring is free and empty for the child's own profile.
pub(super) fn forget_parent_session(session: &mut Option<WriterThread>) {
    if let Some(writer) = session.take() {
        std::mem::forget(writer);
    }
    set_profiling(false);
    SAMPLING.store(false, Ordering::SeqCst);
    // A handler of a thread that is not in the child may have held it.
    RING.release_claim();
    RING.reset();
    // The forking thread has a new thread id in the child.
    THREAD_ID.with(|cached| cached.set(0));
}

/// Clears the flags and waits until no handler can touch the ring.
fn stop_sampling() {
    set_profiling(false);
    SAMPLING.store(false, Ordering::SeqCst);
    // A handler holds the claim for a few microseconds at most.
    while RING.is_claimed() {
        std::thread::yield_now();
    }
}

/// The META keys every profile has, in the order written.
const BUILTIN_META_KEYS: [&str; 5] = ["os", "bits", "interp", "start_time", "period_us"];

fn encode_preamble(options: &EnableOptions) -> Result<Preamble, VmprofError> {
    options.validate()?;
    let interval = options.interval;
    let interp = options.interp_name.as_str();
    let start = Timeval::now();
    let period_us = u64::try_from(interval.as_micros()).unwrap_or(u64::MAX);
    let values = [
        std::env::consts::OS.to_owned(),
        usize::BITS.to_string(),
        interp.to_owned(),
        format!("{}.{:06}", start.sec, start.usec),
        period_us.to_string(),
    ];
    let builtin = BUILTIN_META_KEYS.iter().zip(values);
    let mut encoder = Encoder::new();
    let mode = if options.lines { PROFILE_LINES } else { 0 };
    encoder.header_with_mode(period_us, interp, mode);
    encoder.start_time(start);
    for (key, value) in builtin {
        encoder.meta(key, &value);
    }
    for (key, value) in &options.meta {
        encoder.meta(key, value);
    }
    Ok(Preamble {
        bytes: encoder.bytes().to_vec(),
        // Chosen once the session may start (`enable_opening`).
        clock: Clock::ProcessTimer,
    })
}

fn install_handler_once() -> Result<(), VmprofError> {
    if HANDLER_INSTALLED.load(Ordering::SeqCst) {
        return Ok(());
    }
    // SAFETY: `action` is fully initialised (zeroed, then the handler, an
    // empty mask and the flags); `on_sigprof` has the C signature of an
    // `SA_SIGINFO` handler and is async-signal-safe (see the module docs).
    let result = unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        let handler: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
            on_sigprof;
        action.sa_sigaction = handler as libc::sighandler_t;
        libc::sigemptyset(&mut action.sa_mask);
        action.sa_flags = libc::SA_RESTART | libc::SA_SIGINFO;
        libc::sigaction(libc::SIGPROF, &action, std::ptr::null_mut())
    };
    if result != 0 {
        return Err(VmprofError::Os {
            call: "sigaction(SIGPROF)",
            source: std::io::Error::last_os_error(),
        });
    }
    HANDLER_INSTALLED.store(true, Ordering::SeqCst);
    Ok(())
}

/// CPU time used by the process, in nanoseconds. Async-signal-safe.
fn process_cpu_ns() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid out-parameter; clock_gettime is
    // async-signal-safe.
    let result = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut now) };
    if result != 0 {
        return 0;
    }
    (now.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(now.tv_nsec as u64)
}

thread_local! {
    // Static TLS like the shadow stack: safe to use in the handler.
    static THREAD_ID: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// The OS id of the calling thread, asked once per thread (`gettid`, a bare
/// system call) and cached. Async-signal-safe.
fn current_thread_id() -> usize {
    THREAD_ID.with(|cached| {
        if cached.get() == 0 {
            // SAFETY: gettid has no preconditions.
            cached.set(unsafe { libc::gettid() } as usize);
        }
        cached.get()
    })
}

/// See [`set_thread_filter`]; null means every thread is sampled.
static THREAD_FILTER: AtomicPtr<()> = AtomicPtr::new(std::ptr::null_mut());

/// Makes the SIGPROF handler call `filter` first, before it touches any
/// thread-local storage, and skip the signal when it returns false.
///
/// For a library loaded with `dlopen`, whose thread-local storage glibc
/// allocates (with `malloc`) on a thread's first access: the filter admits
/// only threads that already touched it (perfsupport-capi's attached
/// threads).
///
/// # Safety
/// `filter` runs inside the SIGPROF handler, on whatever thread the signal
/// interrupted, possibly in the middle of `malloc` or while that thread
/// holds a lock. It must be async-signal-safe (no allocation, no lock, no
/// panic), use no thread-local storage of a `dlopen`ed module, and stay
/// callable (its code loaded) for as long as the process may profile.
pub unsafe fn set_thread_filter(filter: Option<extern "C" fn() -> bool>) {
    let raw = filter.map_or(std::ptr::null_mut(), |f| f as *mut ());
    THREAD_FILTER.store(raw, Ordering::Release);
}

// ANCHOR: sigprof_handler
/// The SIGPROF handler. Async-signal-safe; see the module docs.
extern "C" fn on_sigprof(
    _signal: libc::c_int,
    info: *mut libc::siginfo_t,
    context: *mut libc::c_void,
) {
    // SAFETY: __errno_location returns this thread's errno slot, always
    // valid; saving and restoring it keeps the interrupted code's errno.
    let errno = unsafe { *libc::__errno_location() };
    let filter = THREAD_FILTER.load(Ordering::Acquire);
    // SAFETY: a non-null filter was stored by `set_thread_filter` from a
    // valid `extern "C" fn() -> bool`, which its caller promised is
    // async-signal-safe (that function's contract).
    let admitted = filter.is_null()
        || unsafe { std::mem::transmute::<*mut (), extern "C" fn() -> bool>(filter)() };
    if admitted {
        sample_current_thread(info, context);
    }
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
}

fn sample_current_thread(info: *mut libc::siginfo_t, context: *mut libc::c_void) {
    if !RING.try_claim() {
        RING.count_busy_drop();
        return;
    }
    // Checked after claiming, so `stop_sampling` can wait for the claim.
    if SAMPLING.load(Ordering::SeqCst) {
        record_claimed(info, context);
    }
    RING.release_claim();
}

// ANCHOR: interrupted_pc
/// The program counter the signal interrupted, from the `ucontext_t` the
/// kernel passes an `SA_SIGINFO` handler. Async-signal-safe.
fn interrupted_pc(context: *mut libc::c_void) -> Option<usize> {
    let context = context.cast::<libc::ucontext_t>();
    // SAFETY: the kernel passes a valid ucontext_t to an SA_SIGINFO
    // handler (null is checked anyway); only a register is read.
    let context = unsafe { context.as_ref()? };
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    let pc = context.uc_mcontext.gregs[libc::REG_RIP as usize] as usize;
    #[cfg(all(target_os = "linux", target_arch = "aarch64"))]
    let pc = context.uc_mcontext.pc as usize;
    #[cfg(not(all(
        target_os = "linux",
        any(target_arch = "x86_64", target_arch = "aarch64")
    )))]
    let pc = {
        let _ = context;
        return None;
    };
    Some(pc)
}
// ANCHOR_END: interrupted_pc

/// The weight of this signal's sample: how many intervals it stands for
/// (see the module docs), 0 for none. The caller holds the ring's claim,
/// which serialises the process timer's accounting.
fn weight_of(info: *mut libc::siginfo_t) -> u64 {
    match super::clock::running() {
        Some(Clock::ThreadCpu) => {
            // SAFETY: the kernel passes a valid siginfo_t to an SA_SIGINFO
            // handler (null is checked anyway); only `si_code` is read.
            let code = unsafe { info.as_ref() }.map_or(0, |i| i.si_code);
            return u64::from(code == POLL_IN);
        }
        Some(Clock::ProcessTimer) => {}
        None => return 0,
    }
    let period = PERIOD_NS.load(Ordering::Relaxed).max(1);
    let now = process_cpu_ns();
    let accounted = ACCOUNTED_CPU_NS.load(Ordering::Relaxed);
    let elapsed = now.saturating_sub(accounted);
    let periods = elapsed / period;
    if periods == 0 {
        return 0;
    }
    let max_periods = (MAX_WEIGHT_NS / period).max(1);
    let weight = periods.min(max_periods);
    let new_accounted = if periods > max_periods {
        now
    } else {
        accounted + periods * period
    };
    ACCOUNTED_CPU_NS.store(new_accounted, Ordering::Relaxed);
    weight
}

/// `si_code` of a signal from a perf event's file (`POLL_IN`).
const POLL_IN: libc::c_int = linux_raw_sys::general::POLL_IN as libc::c_int;

/// Records the current thread's stack; the caller holds the ring's claim.
fn record_claimed(info: *mut libc::siginfo_t, context: *mut libc::c_void) {
    let weight = weight_of(info) as usize;
    if weight == 0 {
        return;
    }
    let thread_id = current_thread_id();
    let lines = LINES.load(Ordering::Relaxed);
    // Not running VM code (depth 0): no empty samples (readers would count
    // them towards the root). In lines mode each frame is two words, `id,
    // line` (root first: the file gets `line, id` innermost first).
    let push = |frames: usize, cut: usize, frame: &dyn Fn(usize) -> (usize, u32)| {
        if frames == 0 {
            return;
        }
        if lines {
            RING.push_with(weight, thread_id, cut, 2 * frames, |i| {
                let (id, line) = frame(i / 2);
                if i % 2 == 0 { id } else { line as usize }
            });
        } else {
            RING.push_with(weight, thread_id, cut, frames, |i| frame(i).0);
        }
    };
    // The VM's own frame records if it described them, else the shadow
    // stack.
    let pc = if lines { interrupted_pc(context) } else { None };
    let viewed = with_current_view(pc, |sample| {
        push(sample.frames, sample.cut, &|i| sample.frame(i));
    });
    if viewed.is_none() {
        ShadowStack::with_current(|stack| {
            push(stack.stored_depth(), 0, &|i| (stack.id_at(i), 0));
        });
    }
}
// ANCHOR_END: sigprof_handler

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_options_are_rejected_before_anything_starts() {
        let file = || File::open("/dev/null").unwrap();
        let mut options = EnableOptions::new("toyvm");
        options.interval = Duration::from_micros(1);
        assert!(matches!(
            enable_with(file(), &options),
            Err(VmprofError::InvalidInterval(_))
        ));
        options.interval = DEFAULT_INTERVAL;
        options.interp_name = "PyPy".into();
        assert!(matches!(
            enable_with(file(), &options),
            Err(VmprofError::InvalidInterpName(_))
        ));
        options.interp_name = "toyvm".into();
        options.meta = vec![("interp".into(), "x".into())];
        assert!(matches!(
            enable_with(file(), &options),
            Err(VmprofError::DuplicateMetaKey(_))
        ));
        assert!(!is_enabled());
    }
}
