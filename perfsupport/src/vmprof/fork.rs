//! vmprof across `fork(2)`.
//!
//! Only the forking thread exists in the child; everything else is a copy
//! of the parent's memory at that instant. Left alone, the child would
//! inherit a profile it cannot finish (its writer thread is not there:
//! `disable` would join a thread that does not exist), locks that the
//! writer thread or another thread of the parent held (any later
//! registration would wait for them forever) and counters of signal
//! handlers that were running elsewhere.
//!
//! What the child gets instead, from `pthread_atfork` handlers registered
//! the first time the process registers code or enables profiling:
//!
//! * profiling is off: `is_enabled()` is false, `disable` says "not
//!   enabled", and `enable` starts a new profile (the parent's file is the
//!   parent's; the child names its own). The profiling timer is not
//!   inherited (the kernel resets it), so no sample arrives before that;
//! * the registered code names stay (the child runs the same code);
//! * every lock is free: `prepare` takes them all before the fork, in the
//!   order the rest of the crate takes them (session, names, line tables),
//!   so no thread is inside one when the process is copied; `parent` and
//!   `child` release them.
//!
//! These locks are `std::sync::Mutex`es rather than `parking_lot`'s: in the
//! child, releasing a `parking_lot` lock that a now vanished thread was
//! waiting for goes through its global table of parked threads, which a
//! vanished thread may have held; `std`'s futex lock only makes a system
//! call.
//!
//! The C API adds its own part (which threads are attached) in
//! `perfsupport-capi`.

use std::cell::RefCell;
use std::sync::{Mutex, MutexGuard, Once, PoisonError};

/// A lock that `fork` leaves usable in the child (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct ForkSafeLock<T>(Mutex<T>);

impl<T> ForkSafeLock<T> {
    pub(crate) const fn new(value: T) -> ForkSafeLock<T> {
        ForkSafeLock(Mutex::new(value))
    }

    /// Locks; a panic while it was held does not poison it (the data of
    /// every such lock stays consistent between statements).
    pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Registers the fork handlers once per process.
pub(crate) fn follow_forks() {
    static REGISTERED: Once = Once::new();
    REGISTERED.call_once(|| {
        // SAFETY: the three handlers are `extern "C" fn()`s of this crate,
        // which stay loaded: glibc's `pthread_atfork` (linked statically
        // into each module) unregisters them if a `dlopen`ed copy of the
        // library is closed. It only fails for lack of memory; the child
        // then inherits the parent's state, as it did before.
        unsafe { libc::pthread_atfork(Some(prepare), Some(parent), Some(child)) };
    });
}

/// The locks held across the fork, by the forking thread.
struct Held {
    session: MutexGuard<'static, Option<super::writer::WriterThread>>,
    threads: MutexGuard<'static, super::clock::Threads>,
    names: MutexGuard<'static, Vec<super::registry::Entry>>,
    lines: MutexGuard<'static, ()>,
}

thread_local! {
    static HELD: RefCell<Option<Held>> = const { RefCell::new(None) };
}

extern "C" fn prepare() {
    let held = Held {
        session: super::sampler::SESSION.lock(),
        threads: super::clock::THREADS.lock(),
        names: super::registry::NAMES.lock(),
        lines: super::code_lines::PUBLISH.lock(),
    };
    // A fork from a thread whose storage is being torn down keeps nothing:
    // the guards drop here, and the child inherits the state unguarded.
    let _ = HELD.try_with(|slot| *slot.borrow_mut() = Some(held));
}

fn take_held() -> Option<Held> {
    HELD.try_with(|slot| slot.borrow_mut().take())
        .ok()
        .flatten()
}

extern "C" fn parent() {
    // Dropping the guards releases the locks, in reverse order.
    drop(take_held());
}

extern "C" fn child() {
    let Some(mut held) = take_held() else {
        return;
    };
    super::sampler::forget_parent_session(&mut held.session);
    super::clock::forget_parent_threads(&mut held.threads);
    super::code_lines::forget_parent_readers();
    let Held {
        session,
        threads,
        names,
        lines,
    } = held;
    drop((lines, names, threads, session));
}
