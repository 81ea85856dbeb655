//! Ctrl-C (SIGINT), `kill` (SIGTERM) and a closed terminal (SIGHUP) during
//! `toyvm run`: what the script printed is written out, a `--vmprof` file
//! is completed (trailer and all), and toyvm exits with the shell's
//! convention, 128 + the signal number (130, 143, 129).
//!
//! # Design: a signal thread, not a signal handler
//!
//! A handler runs on top of whatever the interrupted thread was doing; it
//! may only make async-signal-safe calls. Writing out the output buffer
//! from there would need the buffer to be in a consistent state at every
//! instruction of the VM, and completing the profile means stopping the
//! sampler and joining its writer thread, which no handler may do.
//!
//! Instead the three signals are *blocked* in every thread (the mask is set
//! here, on the main thread, before any other thread exists; threads
//! inherit it) and one thread takes them with `sigwait(2)`. It runs ordinary
//! code, so it may lock, write and join. On a signal it:
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

use vm::driver::OutputHook;
use vm::runtime::PendingOutput;

/// The signals that stop a run cleanly.
const STOP_SIGNALS: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// How long the signal thread waits for a write to stdout in progress.
const SEAL_TIMEOUT: Duration = Duration::from_secs(2);

/// Blocks SIGINT, SIGTERM and SIGHUP in this thread (and so in every thread
/// started after it) and starts the thread that handles them. Returns the
/// hook that tells that thread which output to complete.
///
/// Call it from the main thread before any other thread exists, and only
/// for `toyvm run` (child processes would inherit the blocked mask).
pub fn stop_cleanly_on_signals() -> std::io::Result<OutputHook> {
    let set = stop_signal_set();
    // SAFETY: `set` is an initialised sigset; pthread_sigmask only changes
    // this thread's mask.
    let error = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    if error != 0 {
        return Err(std::io::Error::from_raw_os_error(error));
    }
    let output: Arc<OnceLock<PendingOutput>> = Arc::new(OnceLock::new());
    let watched = Arc::clone(&output);
    let spawned = std::thread::Builder::new()
        .name("toyvm-signals".into())
        .spawn(move || {
            let signal = wait_for_stop_signal(&set);
            stop(signal, watched.get());
        });
    if let Err(e) = spawned {
        // Nobody would take the signals: let them act as before.
        // SAFETY: as above.
        unsafe { libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut()) };
        return Err(e);
    }
    Ok(Arc::new(move |pending| {
        let _ = output.set(pending);
    }))
}

fn stop_signal_set() -> libc::sigset_t {
    // SAFETY: sigemptyset initialises the zeroed set; sigaddset only sets
    // bits of valid signal numbers in it.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for signal in STOP_SIGNALS {
            libc::sigaddset(&mut set, signal);
        }
        set
    }
}

/// Waits until one of the blocked stop signals is pending and takes it.
fn wait_for_stop_signal(set: &libc::sigset_t) -> libc::c_int {
    loop {
        let mut signal: libc::c_int = 0;
        // SAFETY: `set` is initialised and `signal` is a valid out pointer.
        if unsafe { libc::sigwait(set, &mut signal) } == 0 {
            return signal;
        }
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
