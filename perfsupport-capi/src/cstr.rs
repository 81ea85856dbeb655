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
/// whatever `ptr` is). A `ptr + len` past the end of the address space is
/// refused, as NULL is: every C API function that takes a pointer and a
/// count reads it through here.
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
    // No `len` elements fit between `ptr` and the end of the address space
    // (or the slice would be over `isize::MAX` bytes): the caller's
    // contract is broken for sure, and building the slice would be
    // undefined behaviour. Refused before anything is read.
    let fits = (len.checked_mul(size_of::<T>()))
        .filter(|&bytes| bytes <= isize::MAX as usize)
        .and_then(|bytes| (ptr as usize).checked_add(bytes));
    if fits.is_none() {
        return Err(Error::invalid(format!(
            "{what} at {ptr:p} with count {len} ends past the end of the address space"
        )));
    }
    // SAFETY: non-null, aligned, and `len` valid elements by the contract.
    Ok(unsafe { std::slice::from_raw_parts(ptr, len) })
}
