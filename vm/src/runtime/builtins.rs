//! Builtins that need more than one instruction's worth of code: parsing,
//! `str(x)`, and the deep copy of `[e; n]`.

use crate::runtime::RuntimeError;
use crate::runtime::heap::{ArrObj, Heap, arr_mut};

/// `parse_int(s)`: Rust's `str::parse::<i64>`: an optional `+`/`-` and
/// decimal digits, nothing else (no surrounding whitespace, no `_`).
pub fn parse_int(s: &str) -> Result<i64, RuntimeError> {
    s.parse::<i64>()
        .map_err(|_| RuntimeError::ParseInt(s.to_string()))
}

/// `parse_float(s)`: Rust's `str::parse::<f64>` (accepts `1`, `-2.5`,
/// `1e9`, `inf`, `NaN`; no surrounding whitespace).
pub fn parse_float(s: &str) -> Result<f64, RuntimeError> {
    s.parse::<f64>()
        .map_err(|_| RuntimeError::ParseFloat(s.to_string()))
}

/// The element count of `[e; n]`, or an error if `n` is negative.
pub fn repeat_count(n: i64) -> Result<usize, RuntimeError> {
    usize::try_from(n).map_err(|_| RuntimeError::NegativeLength(n))
}

/// Heap bytes that `n` deep copies of array `src` (nesting depth `depth`,
/// see [`deep_copy`]) plus an `n`-slot array holding them take: what
/// `[src; n]` allocates. Saturates instead of overflowing.
///
/// # Safety
/// `src` must be a live array reference of that depth.
pub unsafe fn repeat_size(src: u64, depth: u32, n: usize) -> usize {
    let one = if depth == 0 {
        0
    } else {
        // SAFETY: the caller's contract.
        unsafe { deep_copy_size(src, depth) }
    };
    one.saturating_add(8)
        .saturating_mul(n)
        .saturating_add(ARRAY_OBJECT)
}

/// Bytes of one array object besides its elements.
const ARRAY_OBJECT: usize = std::mem::size_of::<ArrObj>();

/// Heap bytes a [`deep_copy`] of `src` allocates (saturating).
///
/// # Safety
/// As for [`deep_copy`].
unsafe fn deep_copy_size(src: u64, depth: u32) -> usize {
    // SAFETY: the caller's contract; `src` is only read.
    let elems = unsafe { &arr_mut(src).elems };
    let own = ARRAY_OBJECT.saturating_add(elems.len().saturating_mul(8));
    if depth <= 1 {
        return own;
    }
    elems.iter().fold(own, |total, &e| {
        // SAFETY: elements of a nested array are live arrays one level
        // shallower.
        total.saturating_add(unsafe { deep_copy_size(e, depth - 1) })
    })
}

/// Deep-copies array `src` whose nesting depth is `depth` (1 for `[int]`,
/// 2 for `[[int]]`, ...): every array level is new, strings are shared
/// (immutable). Fails with [`RuntimeError::OutOfMemory`] when a level does
/// not fit (see [`Heap::new_slots`]).
///
/// # Safety
/// `src` must be a live array reference of that depth. The caller must
/// keep `src` rooted; no collection runs inside (allocation never collects).
pub unsafe fn deep_copy(heap: &mut Heap, src: u64, depth: u32) -> Result<u64, RuntimeError> {
    // SAFETY: caller's contract; `src` stays live and is only read (the
    // copies are new objects, so this borrow aliases none of them).
    let (elems, refs) = unsafe {
        let a = arr_mut(src);
        (&a.elems, a.header.elem_refs)
    };
    let mut copy = heap.new_slots(elems.len())?;
    if depth > 1 {
        for &e in elems {
            // SAFETY: elements of a nested array are live arrays one level
            // shallower, reachable from `src`.
            copy.push(unsafe { deep_copy(heap, e, depth - 1)? });
        }
    } else {
        copy.extend_from_slice(elems);
    }
    Ok(heap.alloc_array(refs, copy))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_int_is_strict_decimal() {
        assert_eq!(parse_int("-42"), Ok(-42));
        assert_eq!(parse_int("+7"), Ok(7));
        assert!(parse_int(" 1").is_err());
        assert!(parse_int("").is_err());
        assert!(parse_int("0x10").is_err());
        assert!(parse_int("9223372036854775808").is_err());
    }

    #[test]
    fn parse_float_follows_rust() {
        assert_eq!(parse_float("2.5e3"), Ok(2500.0));
        assert_eq!(parse_float("1"), Ok(1.0));
        assert!(parse_float("abc").is_err());
    }

    #[test]
    fn deep_copies_are_independent() {
        let mut heap = Heap::default();
        let row = heap.alloc_array(false, vec![1, 2]);
        let grid = heap.alloc_array(true, vec![row]);
        // SAFETY: `grid` is a live [[int]].
        unsafe {
            let copy = deep_copy(&mut heap, grid, 2).unwrap();
            let copied_row = arr_mut(copy).elems[0];
            assert_ne!(copied_row, row);
            arr_mut(copied_row).elems[0] = 9;
            assert_eq!(arr_mut(row).elems[0], 1);
        }
    }

    #[test]
    fn negative_lengths_are_errors() {
        assert_eq!(repeat_count(-3), Err(RuntimeError::NegativeLength(-3)));
        assert_eq!(repeat_count(3), Ok(3));
    }

    #[test]
    fn repeat_size_counts_every_copy() {
        let mut heap = Heap::default();
        let row = heap.alloc_array(false, vec![1, 2]);
        let grid = heap.alloc_array(true, vec![row, row]);
        let arr = std::mem::size_of::<ArrObj>();
        // SAFETY: `row` is a live [int], `grid` a live [[int]].
        unsafe {
            assert_eq!(repeat_size(row, 0, 10), 10 * 8 + arr);
            assert_eq!(repeat_size(row, 1, 10), 10 * (arr + 16 + 8) + arr);
            let grid_copy = arr + 16 + 2 * (arr + 16);
            assert_eq!(repeat_size(grid, 2, 3), 3 * (grid_copy + 8) + arr);
            assert_eq!(repeat_size(grid, 2, usize::MAX), usize::MAX);
        }
    }

    #[test]
    fn deep_copies_over_the_limit_fail_cleanly() {
        let mut heap = Heap::default();
        let row = heap.alloc_array(false, vec![0; 1000]);
        let grid = heap.alloc_array(true, vec![row; 10]);
        heap.set_limit(heap.size() + 5000);
        // SAFETY: `grid` is a live [[int]].
        let copied = unsafe { deep_copy(&mut heap, grid, 2) };
        assert_eq!(copied, Err(RuntimeError::OutOfMemory));
    }
}
