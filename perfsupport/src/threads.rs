//! Helper threads that leave the host's signals alone.
//!
//! A signal sent to a process (Ctrl-C's SIGINT, `kill`'s SIGTERM, a closed
//! terminal's SIGHUP, SIGCHLD, SIGWINCH, ...) is delivered to *one* thread
//! that does not block it, chosen by the kernel. A library thread that
//! leaves them unblocked can be that thread: the host's handler then runs
//! on a thread it knows nothing about, and a debugger stops the process
//! with the library's thread current, not the one the user was looking at.
//!
//! [`spawn_helper`] starts a thread with those signals blocked from its
//! first instruction: it blocks them in the calling thread, spawns (a new
//! thread inherits its creator's mask) and restores the caller's mask.
//! Blocking them inside the new thread instead would leave a window in
//! which it could still take one.
//!
//! Left deliverable: the signals the kernel sends a thread for its own
//! fault (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS), SIGPROF (the
//! vmprof sampler also samples helper threads that attach, such as a JIT's
//! compiler thread) and SIGKILL and SIGSTOP, which nothing can block.

use std::io;
use std::thread::JoinHandle;

/// The signals a helper thread leaves deliverable (see the module docs).
const KEPT: [libc::c_int; 7] = [
    libc::SIGSEGV,
    libc::SIGBUS,
    libc::SIGFPE,
    libc::SIGILL,
    libc::SIGTRAP,
    libc::SIGSYS,
    libc::SIGPROF,
];

/// Spawns a thread named `name` that runs `body` with every asynchronous
/// signal blocked (see the [module docs](self)). The calling thread's mask
/// is unchanged when this returns.
///
/// # Errors
/// The error of [`std::thread::Builder::spawn`].
pub fn spawn_helper<F, T>(name: &str, body: F) -> io::Result<JoinHandle<T>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let blocked = helper_mask();
    let mut previous = empty_set();
    // SAFETY: both sets are initialised; pthread_sigmask only changes the
    // calling thread's mask, and it is restored below on every path.
    let error = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &blocked, &mut previous) };
    if error != 0 {
        return Err(io::Error::from_raw_os_error(error));
    }
    let spawned = std::thread::Builder::new().name(name.into()).spawn(body);
    // SAFETY: `previous` holds the mask read above.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &previous, std::ptr::null_mut()) };
    spawned
}

/// Every signal but those in [`KEPT`].
fn helper_mask() -> libc::sigset_t {
    let mut set = empty_set();
    // SAFETY: `set` is initialised; sigfillset and sigdelset only write its
    // bits, for valid signal numbers.
    unsafe {
        libc::sigfillset(&mut set);
        for signal in KEPT {
            libc::sigdelset(&mut set, signal);
        }
    }
    set
}

fn empty_set() -> libc::sigset_t {
    // SAFETY: an all-zero sigset_t is a valid value, which sigemptyset
    // then initialises properly.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        set
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mask_of_this_thread() -> libc::sigset_t {
        let mut current = empty_set();
        // SAFETY: a null new set only reads the mask into `current`.
        unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut current) };
        current
    }

    fn blocks(set: &libc::sigset_t, signal: libc::c_int) -> bool {
        // SAFETY: `set` is initialised.
        unsafe { libc::sigismember(set, signal) == 1 }
    }

    #[test]
    fn a_helper_blocks_the_stop_signals_and_keeps_faults_and_sigprof() {
        let before = mask_of_this_thread();
        let helper = spawn_helper("mask-probe", mask_of_this_thread)
            .expect("spawn")
            .join()
            .expect("join");
        for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGCHLD] {
            assert!(blocks(&helper, signal), "signal {signal} not blocked");
        }
        for signal in KEPT {
            assert!(!blocks(&helper, signal), "signal {signal} blocked");
        }
        let after = mask_of_this_thread();
        for signal in 1..32 {
            assert_eq!(blocks(&before, signal), blocks(&after, signal), "{signal}");
        }
    }
}
