//! A large zeroed memory region that never moves: the value stack and the
//! frame records live in these.
//!
//! The memory comes from an anonymous `mmap` with `MAP_NORESERVE`, so the
//! OS hands out zero pages lazily: a stack sized for 10000 frames costs
//! only the pages a script actually touches. The region is never
//! reallocated, so pointers into it (frame bases) stay valid.

use std::ptr::NonNull;

/// Types for which all bits zero is a valid value, so a fresh mapping is
/// an array of them. (No drop glue either: `Copy`.)
///
/// # Safety
/// Implement only for types whose all-zero bit pattern is a valid value.
pub unsafe trait Zeroable: Copy {}

// SAFETY: every bit pattern is a valid `u64`.
unsafe impl Zeroable for u64 {}

/// An owned, zero-initialised, page-aligned array of `len` `T`s.
pub struct Region<T> {
    ptr: NonNull<T>,
    len: usize,
}

impl<T: Zeroable> Region<T> {
    /// Maps room for `len` values, all zero; `None` if the size overflows
    /// (or `T` has size 0) or the OS refuses.
    pub fn zeroed(len: usize) -> Option<Region<T>> {
        let bytes = len.max(1).checked_mul(std::mem::size_of::<T>())?;
        if bytes == 0 {
            return None;
        }
        // SAFETY: an anonymous private mapping with no address hint has no
        // preconditions; the result is checked against MAP_FAILED.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return None;
        }
        Some(Region {
            ptr: NonNull::new(ptr.cast())?,
            len: len.max(1),
        })
    }

    /// The first element.
    pub fn as_ptr(&self) -> *mut T {
        self.ptr.as_ptr()
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True if the region has no elements (never: at least one is mapped).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl<T> Drop for Region<T> {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` describe exactly the mapping made in `zeroed`,
        // unmapped once here; nothing points into it after its owner (the
        // VM) is dropped.
        unsafe {
            libc::munmap(
                self.ptr.as_ptr().cast(),
                self.len * std::mem::size_of::<T>(),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regions_are_zeroed_and_writable() {
        let r = Region::<u64>::zeroed(1 << 20).expect("mmap");
        // SAFETY: both indexes are inside the region.
        unsafe {
            assert_eq!(*r.as_ptr().add(12345), 0);
            *r.as_ptr().add(r.len() - 1) = 7;
            assert_eq!(*r.as_ptr().add(r.len() - 1), 7);
        }
    }

    #[test]
    fn absurd_sizes_fail_cleanly() {
        assert!(Region::<u64>::zeroed(usize::MAX / 4).is_none());
    }
}
