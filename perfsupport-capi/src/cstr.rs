//! Reading C strings and arrays handed to the API, with the checks that
//! turn bad input into `PERFSUPPORT_EINVAL` instead of undefined behaviour
//! where a check is possible (NULL, invalid UTF-8).

use super::error::Error;
use std::ffi::{CStr, c_char};

/// The UTF-8 text of the NUL-terminated string `ptr`; `what` names the
/// argument in the error.
///
/// # Safety
/// `ptr` is NULL or points to a NUL-terminated string that outlives `'a`.
pub(crate) unsafe fn utf8<'a>(ptr: *const c_char, what: &str) -> Result<&'a str, Error> {
    if ptr.is_null() {
        return Err(Error::invalid(format!("{what} is NULL")));
    }
    // SAFETY: non-null, and NUL-terminated by the caller's contract.
    let bytes = unsafe { CStr::from_ptr(ptr) };
    bytes
        .to_str()
        .map_err(|_| Error::invalid(format!("{what} is not valid UTF-8")))
}

/// The slice of `len` elements at `ptr` (an empty slice for `len == 0`,
/// whatever `ptr` is).
///
/// # Safety
/// For `len > 0`, `ptr` is NULL or points to `len` initialised elements
/// that outlive `'a`.
pub(crate) unsafe fn slice<'a, T>(ptr: *const T, len: usize, what: &str) -> Result<&'a [T], Error> {
    if len == 0 {
        return Ok(&[]);
    }
    if ptr.is_null() {
        return Err(Error::invalid(format!(
            "{what} is NULL but its count is {len}"
        )));
    }
    if !ptr.is_aligned() {
        return Err(Error::invalid(format!("{what} is misaligned")));
    }
    // SAFETY: non-null, aligned, and `len` valid elements by the contract.
    Ok(unsafe { std::slice::from_raw_parts(ptr, len) })
}
