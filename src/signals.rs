//! Ctrl-C (SIGINT), `kill` (SIGTERM) and a closed terminal (SIGHUP) during
//! `toyvm run`: what the script printed is written out, a `--vmprof` file
//! is completed (trailer and all), and toyvm exits with the shell's
//! convention, 128 + the signal number (130, 143, 129).
//!
//! # Design: handlers that only wake a signal thread
//!
//! A handler runs on top of whatever the interrupted thread was doing; it
//! may only make async-signal-safe calls. Writing out the output buffer
//! from there would need the buffer to be in a consistent state at every
//! instruction of the VM, and completing the profile means stopping the
//! sampler and joining its writer thread, which no handler may do.
//!
//! So the handler (installed by `signal-hook`) only writes a byte to a pipe,
//! and a thread of its own, `toyvm-signals`, reads the pipe and does the
//! work in ordinary code, where it may lock, write and join.
//!
//! The signals are still *delivered*, to a handler, so a debugger sees them:
//! under gdb, Ctrl-C stops the program (gdb shows the signal before the
//! handler runs) instead of ending it. Taking them with `sigwait(2)`, as
//! toyvm once did, dequeues them undelivered: gdb, strace and `perf trace`
//! never saw them. Which thread takes them matters too: they are blocked in
//! every thread but the one that runs the VM (the main thread blocks them
//! before any other thread exists; the VM's thread unblocks them once its
//! `--vmprof` profile, if any, has started; the sampler's and the compiler's threads are
//! [`perfsupport::threads::spawn_helper`] threads), so gdb stops with the
//! VM's thread current and `bt` shows the Toy frames.
//!
//! A signal that was ignored when toyvm started (`nohup`, `trap '' INT`,
//! a background job's SIGINT) stays ignored: no handler is installed for it.
//!
//! On a signal the thread:
//!
//! 1. seals the run's output ([`vm::runtime::PendingOutput::seal`]): waits
//!    until no `print` (interpreted or compiled: both use the same buffer)
//!    is half-way, then keeps the lock, so the VM, which keeps running, can
//!    print nothing more and no byte is written twice;
//! 2. stops the vmprof sampler and lets its writer thread write the last
//!    samples and the trailer (`perfsupport::vmprof::disable`, which may be
//!    called from any thread; "not enabled" when there is no profile);
//! 3. writes the sealed text to stdout;
//! 4. ends the process with `_exit(128 + signal)`: no exit handlers run
//!    concurrently with the VM thread, which is still blocked in `print`.
//!
//! Perf maps and jitdumps need nothing: perfsupport writes each of their
//! records with one `write(2)` as it goes.
//!
//! The VM is never stopped at a "safe point": freezing its output is enough,
//! so compiled code needs no polling. If stdout is a pipe nobody reads, the
//! VM may be stuck writing to it; the seal then gives up after
//! [`SEAL_TIMEOUT`] and toyvm exits without the unwritten text.

use std::io::Write;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use signal_hook::iterator::Signals;

use vm::driver::OutputHook;
use vm::runtime::PendingOutput;

/// The signals that stop a run cleanly.
const STOP_SIGNALS: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// How long the signal thread waits for a write to stdout in progress.
const SEAL_TIMEOUT: Duration = Duration::from_secs(2);

/// Blocks SIGINT, SIGTERM and SIGHUP in this thread (and so in every thread
/// started after it), installs their handlers (except for a signal that is
/// ignored now) and starts the thread that handles them. Returns the hook
/// that the VM's thread calls once its `--vmprof` profile, if any, has
/// started (so a signal always finds the profile to complete): it unblocks
/// the signals there and tells the signal thread which output to complete.
///
/// Call it from the main thread before any other thread exists, and only
/// for `toyvm run` (child processes would inherit the blocked mask).
pub fn stop_cleanly_on_signals() -> std::io::Result<OutputHook> {
    let set = signal_set(&STOP_SIGNALS);
    // SAFETY: `set` is an initialised sigset; pthread_sigmask only changes
    // this thread's mask.
    let error = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    if error != 0 {
        return Err(std::io::Error::from_raw_os_error(error));
    }
    let unblock = || {
        // SAFETY: as above.
        unsafe { libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut()) };
    };
    let handled: Vec<libc::c_int> = STOP_SIGNALS
        .into_iter()
        .filter(|&signal| !ignored(signal))
        .collect();
    let mut signals = match Signals::new(&handled) {
        Ok(signals) => signals,
        Err(e) => {
            unblock();
            return Err(e);
        }
    };
    let output: Arc<OnceLock<PendingOutput>> = Arc::new(OnceLock::new());
    let watched = Arc::clone(&output);
    let spawned = std::thread::Builder::new()
        .name("toyvm-signals".into())
        .spawn(move || {
            if let Some(signal) = signals.forever().next() {
                stop(signal, watched.get());
            }
        });
    if let Err(e) = spawned {
        // Nobody would take the signals: let them act as before.
        for signal in handled {
            // SAFETY: restores the default action of a signal whose handler
            // would only write to a pipe nobody reads.
            unsafe { libc::signal(signal, libc::SIG_DFL) };
        }
        unblock();
        return Err(e);
    }
    Ok(Arc::new(move |pending| {
        let _ = output.set(pending);
        let set = signal_set(&STOP_SIGNALS);
        // SAFETY: as above; this runs on the VM's thread, which is to take
        // the signals from now on.
        unsafe { libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut()) };
    }))
}

/// True if `signal`'s action is SIG_IGN (inherited from whoever started us).
fn ignored(signal: libc::c_int) -> bool {
    // SAFETY: a zeroed sigaction is a valid out value; a null new action
    // only reads the current one.
    unsafe {
        let mut current: libc::sigaction = std::mem::zeroed();
        libc::sigaction(signal, std::ptr::null(), &mut current) == 0
            && current.sa_sigaction == libc::SIG_IGN
    }
}

fn signal_set(signals: &[libc::c_int]) -> libc::sigset_t {
    // SAFETY: sigemptyset initialises the zeroed set; sigaddset only sets
    // bits of valid signal numbers in it.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for &signal in signals {
            libc::sigaddset(&mut set, signal);
        }
        set
    }
}

/// Completes the output and the profile, then ends the process (see the
/// [module docs](self)).
fn stop(signal: libc::c_int, output: Option<&PendingOutput>) -> ! {
    let sealed = output.and_then(|o| o.seal(SEAL_TIMEOUT));
    let _ = perfsupport::vmprof::disable();
    if let Some(text) = &sealed {
        let mut stdout = std::io::stdout().lock();
        let _ = stdout.write_all(text).and_then(|()| stdout.flush());
    }
    // SAFETY: _exit ends the process at once; the lock held in `sealed`
    // keeps the VM thread from printing until then.
    unsafe { libc::_exit(128 + signal) }
}
