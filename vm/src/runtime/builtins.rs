//! Builtins that need more than one instruction's worth of code: parsing,
//! `str(x)`, and the deep copy of `[e; n]`.

use crate::runtime::RuntimeError;
use crate::runtime::heap::{Heap, arr_mut};

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

/// A new `Vec` of `n` slots, or an error if `n` is negative or too big.
pub fn slots(n: i64) -> Result<Vec<u64>, RuntimeError> {
    if n < 0 {
        return Err(RuntimeError::NegativeLength(n));
    }
    let mut v = Vec::new();
    v.try_reserve_exact(n as usize)
        .map_err(|_| RuntimeError::OutOfMemory)?;
    Ok(v)
}

/// Deep-copies array `src` whose nesting depth is `depth` (1 for `[int]`,
/// 2 for `[[int]]`, ...): every array level is new, strings are shared
/// (immutable).
///
/// # Safety
/// `src` must be a live array reference of that depth. The caller must
/// keep `src` rooted; no collection runs inside (allocation never collects).
pub unsafe fn deep_copy(heap: &mut Heap, src: u64, depth: u32) -> Result<u64, RuntimeError> {
    // SAFETY: caller's contract; `src` stays live and is only read.
    let (elems, refs) = unsafe {
        let a = arr_mut(src);
        (a.elems.clone(), a.header.elem_refs)
    };
    let mut copy = slots(elems.len() as i64)?;
    if depth > 1 {
        for e in elems {
            // SAFETY: elements of a nested array are live arrays one level
            // shallower, reachable from `src`.
            copy.push(unsafe { deep_copy(heap, e, depth - 1)? });
        }
    } else {
        copy.extend_from_slice(&elems);
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
        assert_eq!(slots(-3), Err(RuntimeError::NegativeLength(-3)));
    }
}
