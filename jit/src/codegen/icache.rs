//! Making freshly written code visible to instruction fetch, for the
//! JIT's code memory: perfsupport's [`perfsupport::icache`] (the i-cache
//! flush on aarch64, and the pipeline synchronization of every thread),
//! and a test hook that records each range.

/// Makes `[start, start + len)`, just written, safe to execute on every
/// thread ([`perfsupport::icache::prepare_to_run`]).
///
/// # Safety
/// As perfsupport's: the range is mapped memory of this process.
pub unsafe fn prepare_to_run(start: usize, len: usize, from_file: bool) {
    #[cfg(test)]
    recorder::record(start, len);
    // SAFETY: the caller's contract.
    unsafe { perfsupport::icache::prepare_to_run(start, len, from_file) };
}

/// Test hook: the ranges [`prepare_to_run`] was called for, in this thread.
#[cfg(test)]
pub mod recorder {
    use std::cell::RefCell;

    thread_local! {
        static RANGES: RefCell<Vec<(usize, usize)>> = const { RefCell::new(Vec::new()) };
    }

    pub(super) fn record(start: usize, len: usize) {
        RANGES.with(|r| r.borrow_mut().push((start, len)));
    }

    /// The ranges recorded so far, and forgets them.
    pub fn take() -> Vec<(usize, usize)> {
        RANGES.with(|r| std::mem::take(&mut *r.borrow_mut()))
    }
}
