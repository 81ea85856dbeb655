//! The shadow stack: the ids of the code objects the current thread is
//! running, kept by the VM (and by JIT code) for the sampler to copy.
//!
//! # Layout (for JIT authors)
//!
//! One [`ShadowStack`] per thread, in thread-local storage, at a fixed
//! address for the thread's life ([`ShadowStack::current_ptr`]).
//!
//! | offset                         | size                         | field   | meaning                                     |
//! |--------------------------------|------------------------------|---------|---------------------------------------------|
//! | [`SHADOW_STACK_DEPTH_OFFSET`] (0) | 8 (`usize`)               | `depth` | frames entered and not left, may exceed the capacity |
//! | [`SHADOW_STACK_IDS_OFFSET`] (8)   | 8 × [`SHADOW_STACK_CAPACITY`] | `ids` | `ids[i]` is the code id of frame `i`, root first |
//!
//! Inline push of id `ID` (the constant from [`super::get_unique_id`]),
//! with `S` the stack's address:
//!
//! ```text
//! d = load  [S + DEPTH_OFFSET]
//! if d < CAPACITY:                      ; unsigned compare
//!     store [S + IDS_OFFSET + 8*d], ID  ; 1. publish the id ...
//! store [S + DEPTH_OFFSET], d + 1       ; 2. ... then the depth
//! ```
//!
//! Inline pop: `store [S + DEPTH_OFFSET], load [S + DEPTH_OFFSET] - 1`.
//!
//! `S` differs per thread. A single-threaded VM may embed it in the code as
//! a constant; a multi-threaded one keeps it in its per-thread VM context
//! and loads it from there. Code that pushed must pop on every exit path
//! (returns and unwinding), or later samples carry a stale frame.
//!
//! Plain 8-byte loads and stores suffice, with no atomic instructions or
//! fences in the machine code: the sampler runs as a signal handler **on the
//! same thread** (see [`super::sampler`]), which sees that thread's memory in
//! program order. The only requirement is that the compiler keeps the order
//! *store id, then store depth* (Cranelift emits stores in program order;
//! Rust code here uses a compiler fence), so a handler that interrupts a
//! push between the two stores sees the old depth and never an unwritten
//! slot. A pop is a single store, so the handler sees either depth.
//!
//! # Memory
//!
//! Each thread of the process has its stack in static TLS: 8 KiB of
//! zero-initialised `.tbss`, whether or not it ever runs VM code.
//!
//! # Cost when profiling is off
//!
//! The VM pushes only while profiling is on: [`super::vmprof_execute_code`]
//! checks [`is_profiling`] (one relaxed load of a global `bool`, whose address
//! [`profiling_flag`] gives to JIT code), or a JIT can compile different entry
//! code depending on the flag at compile time.

use std::cell::Cell;
use std::marker::PhantomData;
use std::mem::offset_of;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering, compiler_fence};

use super::CodeId;

/// How many frames a shadow stack stores. Deeper frames are counted in
/// `depth` but not stored; samples then hold the outermost
/// `SHADOW_STACK_CAPACITY` frames.
pub const SHADOW_STACK_CAPACITY: usize = 1024;
/// Byte offset of `depth` in [`ShadowStack`].
pub const SHADOW_STACK_DEPTH_OFFSET: usize = offset_of!(ShadowStack, depth);
/// Byte offset of `ids[0]` in [`ShadowStack`]; `ids[i]` is at `+ 8 i`.
pub const SHADOW_STACK_IDS_OFFSET: usize = offset_of!(ShadowStack, ids);

// ANCHOR: shadow_stack_struct
/// One thread's stack of running code ids; see the module docs for the
/// layout and the push/pop protocol.
#[repr(C)]
pub struct ShadowStack {
    depth: AtomicUsize,
    ids: [AtomicUsize; SHADOW_STACK_CAPACITY],
}
// ANCHOR_END: shadow_stack_struct

// The layout JIT code relies on.
const _: () = assert!(SHADOW_STACK_DEPTH_OFFSET == 0);
const _: () = assert!(SHADOW_STACK_IDS_OFFSET == size_of::<usize>());

thread_local! {
    // A const initialiser and no `Drop`: the slot is plain static TLS, with
    // no lazy initialisation or destructor registration, so the signal
    // handler may touch it (see `sampler`).
    static CURRENT: ShadowStack = const { ShadowStack::new() };
}

/// Whether profiling is on, i.e. whether the VM should push and pop.
static PROFILING: AtomicBool = AtomicBool::new(false);

/// True while a profile is being recorded. One relaxed load: cheap enough to
/// test on every call.
#[inline]
pub fn is_profiling() -> bool {
    PROFILING.load(Ordering::Relaxed)
}

/// The flag behind [`is_profiling`], for JIT code that tests it inline
/// (a one-byte load, non-zero means on).
pub fn profiling_flag() -> &'static AtomicBool {
    &PROFILING
}

pub(crate) fn set_profiling(on: bool) {
    PROFILING.store(on, Ordering::SeqCst);
}

impl ShadowStack {
    const fn new() -> ShadowStack {
        ShadowStack {
            depth: AtomicUsize::new(0),
            ids: [const { AtomicUsize::new(0) }; SHADOW_STACK_CAPACITY],
        }
    }

    /// Runs `f` with the current thread's shadow stack.
    #[inline]
    pub fn with_current<R>(f: impl FnOnce(&ShadowStack) -> R) -> R {
        CURRENT.with(f)
    }

    /// The address of the current thread's shadow stack, for JIT code. Valid
    /// until the thread exits; only that thread may push and pop through it.
    pub fn current_ptr() -> *const ShadowStack {
        CURRENT.with(|stack| stack as *const ShadowStack)
    }

    // ANCHOR: push_pop
    /// Enters a frame running code `id`.
    #[inline]
    pub fn push(&self, id: CodeId) {
        let depth = self.depth.load(Ordering::Relaxed);
        if let Some(slot) = self.ids.get(depth) {
            slot.store(id.get(), Ordering::Relaxed);
        }
        // The id must be in place before the depth covers it (a signal
        // handler on this thread may run between any two instructions).
        compiler_fence(Ordering::SeqCst);
        self.depth.store(depth + 1, Ordering::Relaxed);
    }

    /// Leaves the innermost frame. A pop on an empty stack does nothing.
    #[inline]
    pub fn pop(&self) {
        let depth = self.depth.load(Ordering::Relaxed);
        self.depth.store(depth.saturating_sub(1), Ordering::Relaxed);
    }
    // ANCHOR_END: push_pop

    /// Frames entered and not left (may exceed [`SHADOW_STACK_CAPACITY`]).
    pub fn depth(&self) -> usize {
        self.depth.load(Ordering::Relaxed)
    }

    /// How many frames are stored: `min(depth, SHADOW_STACK_CAPACITY)`.
    ///
    /// Async-signal-safe. A reader loads this first and then only the ids
    /// below it ([`ShadowStack::id_at`]), which the push protocol guarantees
    /// are written.
    #[inline]
    pub fn stored_depth(&self) -> usize {
        let depth = self
            .depth
            .load(Ordering::Relaxed)
            .min(SHADOW_STACK_CAPACITY);
        // Keep the ids' loads after the depth's.
        compiler_fence(Ordering::SeqCst);
        depth
    }

    /// The id of frame `index` (0 is the root), or 0 past the capacity.
    /// Async-signal-safe.
    #[inline]
    pub fn id_at(&self, index: usize) -> usize {
        self.ids
            .get(index)
            .map_or(0, |slot| slot.load(Ordering::Relaxed))
    }

    /// The stored frames, root first (allocates; not for signal handlers).
    pub fn to_vec(&self) -> Vec<usize> {
        (0..self.stored_depth()).map(|i| self.id_at(i)).collect()
    }
}

// ANCHOR: execute_code
/// Marks the current thread as running code `id` until the guard drops:
/// the Rust form of PyPy's `vmprof_execute_code` decorator.
///
/// Pushes only while profiling is on; the guard pops exactly what it pushed,
/// so enabling or disabling in the middle of a call keeps the stack balanced.
/// Frames entered before `enable` are not on the stack: enable before
/// running the program's outermost code.
#[inline]
pub fn vmprof_execute_code(id: CodeId) -> ExecuteCodeGuard {
    let pushed = is_profiling();
    if pushed {
        CURRENT.with(|stack| stack.push(id));
    }
    ExecuteCodeGuard {
        pushed,
        _not_send: PhantomData,
    }
}
// ANCHOR_END: execute_code

/// Pops the frame pushed by [`vmprof_execute_code`] when dropped. Bound to
/// the thread that created it.
#[must_use = "the frame is popped when the guard drops"]
pub struct ExecuteCodeGuard {
    pushed: bool,
    _not_send: PhantomData<Cell<*const ()>>,
}

impl Drop for ExecuteCodeGuard {
    #[inline]
    fn drop(&mut self) {
        if self.pushed {
            CURRENT.with(ShadowStack::pop);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: usize) -> CodeId {
        // Tests build ids directly; real ones come from the registry.
        CodeId::from_raw(n)
    }

    #[test]
    fn push_pop_and_overflow_stay_in_bounds() {
        let stack = ShadowStack::new();
        for i in 0..SHADOW_STACK_CAPACITY + 10 {
            stack.push(id(8 + 4 * i));
        }
        assert_eq!(stack.depth(), SHADOW_STACK_CAPACITY + 10);
        let v = stack.to_vec();
        assert_eq!(v.len(), SHADOW_STACK_CAPACITY);
        assert_eq!(v[0], 8);
        for _ in 0..SHADOW_STACK_CAPACITY + 10 {
            stack.pop();
        }
        assert_eq!(stack.depth(), 0);
        stack.pop();
        assert_eq!(stack.depth(), 0);
    }

    #[test]
    fn id_at_past_the_capacity_is_zero() {
        let stack = ShadowStack::new();
        stack.push(id(8));
        assert_eq!(stack.id_at(0), 8);
        assert_eq!(stack.id_at(SHADOW_STACK_CAPACITY), 0);
    }

    #[test]
    fn guard_does_not_push_when_profiling_is_off() {
        // PROFILING is only set by `enable`, which unit tests never call.
        let before = ShadowStack::with_current(ShadowStack::depth);
        let _guard = vmprof_execute_code(id(8));
        assert_eq!(ShadowStack::with_current(ShadowStack::depth), before);
    }
}
