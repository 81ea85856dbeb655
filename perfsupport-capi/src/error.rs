//! Return codes, the thread-local error message, and the guard that keeps
//! Rust panics from crossing into C.

use std::cell::RefCell;
use std::ffi::{CString, c_char, c_int};
use std::io;
use std::panic::{AssertUnwindSafe, catch_unwind};

/// Success.
pub const PERFSUPPORT_OK: c_int = 0;
/// A file could not be opened or created (CPython's `-1` of
/// `PyUnstable_PerfMapState_Init`).
pub const PERFSUPPORT_EOPEN: c_int = -1;
/// A lock could not be made (CPython's `-2`). perfsupport's locks are
/// static and cannot fail, so no call returns it today; it is reserved so
/// that CPython-style callers can keep their checks.
pub const PERFSUPPORT_ELOCK: c_int = -2;
/// An argument is invalid (NULL, not UTF-8, a malformed region, a name perf
/// would drop, ...). Nothing was written.
pub const PERFSUPPORT_EINVAL: c_int = -3;
/// Writing an output failed; that output is now disabled.
pub const PERFSUPPORT_EIO: c_int = -4;
/// The call does not fit the current state (already enabled, not enabled,
/// finished, ...).
pub const PERFSUPPORT_ESTATE: c_int = -5;
/// A bug in perfsupport (a Rust panic, caught at the boundary).
pub const PERFSUPPORT_EPANIC: c_int = -6;

/// An error on its way to C: a code and the message for
/// `perfsupport_last_error`.
#[derive(Debug)]
pub(crate) struct Error {
    pub code: c_int,
    pub message: String,
}

impl Error {
    pub fn new(code: c_int, message: impl Into<String>) -> Error {
        Error {
            code,
            message: message.into(),
        }
    }

    pub fn invalid(message: impl Into<String>) -> Error {
        Error::new(PERFSUPPORT_EINVAL, message)
    }

    pub fn state(message: impl Into<String>) -> Error {
        Error::new(PERFSUPPORT_ESTATE, message)
    }

    /// Maps an I/O error: `InvalidInput` to EINVAL, everything else to `code`.
    pub fn io(code: c_int, error: &io::Error) -> Error {
        let code = if error.kind() == io::ErrorKind::InvalidInput {
            PERFSUPPORT_EINVAL
        } else {
            code
        };
        Error::new(code, error.to_string())
    }
}

thread_local! {
    // Touched only by ordinary calls, never by the SIGPROF handler.
    static LAST_ERROR: RefCell<Option<CString>> = const { RefCell::new(None) };
}

fn set_last_error(message: &str) {
    // A NUL inside the message would cut it: show it as `\0`.
    let text = CString::new(message.replace('\0', "\\0")).unwrap_or_default();
    // `try_with`: during thread teardown the slot may be gone; the code
    // still tells the caller what happened.
    let _ = LAST_ERROR.try_with(|slot| *slot.borrow_mut() = Some(text));
}

/// Runs an entry point's body: `Ok(())` becomes 0, an error its code (and
/// the thread's message), a panic `PERFSUPPORT_EPANIC`.
pub(crate) fn guard(body: impl FnOnce() -> Result<(), Error>) -> c_int {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => PERFSUPPORT_OK,
        Ok(Err(error)) => {
            set_last_error(&error.message);
            error.code
        }
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".to_string());
            set_last_error(&format!("perfsupport: internal error (a bug): {what}"));
            PERFSUPPORT_EPANIC
        }
    }
}

/// The message of the last failed call on this thread ("" if none). The
/// string stays valid until the next failing call on this thread; copy it
/// to keep it.
///
/// Threads: any thread; each thread has its own message.
#[unsafe(no_mangle)]
pub extern "C" fn perfsupport_last_error() -> *const c_char {
    let result = catch_unwind(|| {
        LAST_ERROR
            .try_with(|slot| slot.borrow().as_ref().map_or(c"".as_ptr(), |m| m.as_ptr()))
            .unwrap_or(c"".as_ptr())
    });
    result.unwrap_or(c"".as_ptr())
}

impl Error {
    /// The same error with `"<what>: "` before its message.
    pub fn prefixed(self, what: &str) -> Error {
        Error::new(self.code, format!("{what}: {}", self.message))
    }
}
