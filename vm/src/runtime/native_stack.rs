//! The native stack limit compiled code checks.
//!
//! The interpreter recurses natively once per Toy call with a small,
//! known frame, so the driver sizes the run thread's stack from
//! `--max-depth` and the depth check alone keeps it in bounds. A compiled
//! frame is larger and its size is Cranelift's choice (spill slots), so
//! compiled code also compares its stack pointer, in every native
//! function's prologue, with [`crate::interp::Vm::set_stack_limit`]: below
//! it, the call fails with the depth error, exactly as if the depth limit
//! had been reached, instead of running off the end of the stack.
//!
//! The limit sits [`HELPER_RESERVE`] bytes above the lowest usable address
//! of the thread's stack: a frame that passes the check starts above the
//! limit, and everything it runs before the next check (its own frame, the
//! runtime helpers and builtins it calls) fits in the reserve.

/// Native stack kept below the limit for what compiled code runs between
/// two checks: one compiled frame (at most a few KB) and the helpers it
/// calls (printing, allocation, the collector).
pub const HELPER_RESERVE: usize = 1 << 20;

/// The limit for code running on the current thread: the lowest address
/// of its stack plus [`HELPER_RESERVE`], or 0 (no limit) if the stack's
/// extent cannot be found.
pub fn limit_for_current_thread() -> usize {
    current_stack_low().map_or(0, |low| low.saturating_add(HELPER_RESERVE))
}

/// The lowest usable address of the current thread's stack (above its
/// guard page), from `pthread_getattr_np`; for the main thread glibc
/// derives it from the current `RLIMIT_STACK`.
fn current_stack_low() -> Option<usize> {
    let mut addr: *mut libc::c_void = std::ptr::null_mut();
    let mut size: libc::size_t = 0;
    // SAFETY: the attribute object is initialised by pthread_getattr_np
    // before pthread_attr_getstack reads it, destroyed exactly once after,
    // and both only write through the pointers we pass.
    let ok = unsafe {
        let mut attr: libc::pthread_attr_t = std::mem::zeroed();
        if libc::pthread_getattr_np(libc::pthread_self(), &mut attr) != 0 {
            return None;
        }
        let got = libc::pthread_attr_getstack(&attr, &mut addr, &mut size);
        libc::pthread_attr_destroy(&mut attr);
        got == 0
    };
    (ok && !addr.is_null() && size > HELPER_RESERVE).then_some(addr as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limit_is_below_this_frame_and_leaves_the_reserve() {
        let here = 0u8;
        let sp = &here as *const u8 as usize;
        let limit = limit_for_current_thread();
        assert!(limit > HELPER_RESERVE, "no stack extent found");
        assert!(limit < sp);
    }

    #[test]
    fn a_thread_of_known_size_gets_its_limit_near_its_bottom() {
        let size = 8 << 20;
        let (sp, limit) = std::thread::Builder::new()
            .stack_size(size)
            .spawn(|| {
                let here = 0u8;
                (&here as *const u8 as usize, limit_for_current_thread())
            })
            .expect("spawn")
            .join()
            .expect("join");
        // The thread's first frame is near the top, the limit one reserve
        // above the bottom: about `size - HELPER_RESERVE` apart.
        let room = sp - limit;
        assert!(room <= size - HELPER_RESERVE, "{room}");
        assert!(room > size - HELPER_RESERVE - (256 << 10), "{room}");
    }
}
