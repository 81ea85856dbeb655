//! A compile that panics must not take the program down. A bug in
//! Cranelift or in our IR builders panics inside a compile, and compiles
//! run on the interpreter's thread under `interp_entry` and the runtime
//! helpers, which are `extern "C"`: a panic unwinding into one of those
//! aborts the process ("panic in a function that cannot unwind"). So every
//! region's build and compile runs under [`catching`]: a panic there
//! becomes that region's compile error, and the function stays
//! interpreted, as for any other failed compile (`--jit-stats` and one
//! warning say so).
//!
//! The panic's message goes into the error, not to stderr: a hook wraps
//! the process's panic hook (once) and keeps the message for the thread
//! that is catching; other panics reach the previous hook as before.

use std::cell::{Cell, RefCell};
use std::panic::{AssertUnwindSafe, PanicHookInfo};
use std::sync::Once;

thread_local! {
    /// True while this thread runs a [`catching`] closure.
    static CATCHING: Cell<bool> = const { Cell::new(false) };
    /// The message of the panic caught on this thread.
    static CAUGHT: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Installs the hook that keeps a catching thread's panic message.
fn install_hook() {
    static INSTALLED: Once = Once::new();
    INSTALLED.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info: &PanicHookInfo<'_>| {
            if CATCHING.with(Cell::get) {
                CAUGHT.with(|caught| *caught.borrow_mut() = Some(message(info)));
            } else {
                previous(info);
            }
        }));
    });
}

/// "MESSAGE (at FILE:LINE:COLUMN)".
fn message(info: &PanicHookInfo<'_>) -> String {
    let payload = info.payload();
    let text = (payload.downcast_ref::<&str>().copied())
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("a panic with no message");
    match info.location() {
        Some(at) => format!("{text} (at {at})"),
        None => text.to_string(),
    }
}

/// Runs `work`; a panic in it is returned as `Err` with its message
/// instead of unwinding further. The caller must not use state `work` left
/// half-changed: [`CodeGen::define`](super::pipeline::CodeGen::define)
/// resets its compile contexts after a caught panic.
///
/// # Errors
/// "the compiler panicked: MESSAGE (at FILE:LINE:COLUMN)".
pub fn catching<T>(work: impl FnOnce() -> T) -> Result<T, String> {
    install_hook();
    let outer = CATCHING.with(|c| c.replace(true));
    // AssertUnwindSafe: on a panic the caller resets what `work` touched.
    let result = std::panic::catch_unwind(AssertUnwindSafe(work));
    CATCHING.with(|c| c.set(outer));
    result.map_err(|_| {
        let caught = CAUGHT.with(|caught| caught.borrow_mut().take());
        format!(
            "the compiler panicked: {}",
            caught.as_deref().unwrap_or("a panic with no message")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::catching;

    #[test]
    fn a_panic_becomes_an_error_with_its_message_and_work_goes_on() {
        let err = catching(|| -> u32 { panic!("bad IR in {}", "f") }).expect_err("caught");
        assert!(
            err.starts_with("the compiler panicked: bad IR in f (at ") && err.contains(".rs:"),
            "{err}"
        );
        assert_eq!(catching(|| 42), Ok(42));
        // Nested: the inner catch does not end the outer one.
        let outer = catching(|| {
            let inner = catching(|| -> () { panic!("inner") });
            assert!(inner.is_err());
            panic!("outer")
        });
        assert!(outer.expect_err("caught").contains("outer"), "nested");
    }
}
