//! How values are written by `print` and `str`.
//!
//! ints in decimal; floats as Rust's `{:?}` for `f64` (`1.0`, `0.1`,
//! `1e100`, `NaN`, `inf`); bools `true`/`false`; strs raw at the top level.
//! Arrays print as `[1, 2, 3]`; a str element is quoted and escaped like
//! Rust's `{:?}` for `str` (`"a\"b"`, `"\n"`), so the output is unambiguous;
//! nested arrays print the same way.

use std::fmt::Write;

use crate::runtime::heap::{arr_mut, str_ref};
use crate::types::Type;

/// Appends the text of a scalar (`int`, `float`, `bool`) to `out`.
pub fn write_scalar(out: &mut String, bits: u64, ty: &Type) {
    // Writing to a String cannot fail.
    let _ = match ty {
        Type::Int => write!(out, "{}", bits as i64),
        Type::Float => write!(out, "{:?}", f64::from_bits(bits)),
        Type::Bool => write!(out, "{}", bits != 0),
        _ => Ok(()),
    };
}

/// Appends the `print` text of a value of type `ty` to `out` (no newline).
///
/// # Safety
/// If `ty` is a reference type, `bits` must be a live reference of that
/// type (arrays: their elements live references of the element type).
pub unsafe fn write_value(out: &mut String, bits: u64, ty: &Type) {
    match ty {
        // SAFETY: caller's contract.
        Type::Str => out.push_str(unsafe { str_ref(bits) }),
        // SAFETY: caller's contract.
        Type::Array(elem) => unsafe { write_array(out, bits, elem) },
        _ => write_scalar(out, bits, ty),
    }
}

/// # Safety
/// `bits` must be a live array reference whose elements have type `elem`.
unsafe fn write_array(out: &mut String, bits: u64, elem: &Type) {
    out.push('[');
    // SAFETY: caller's contract; printing does not allocate on the heap or
    // mutate arrays, so the borrow stays valid.
    let arr = unsafe { arr_mut(bits) };
    for (i, &e) in arr.elems.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        match elem {
            Type::Str => {
                // SAFETY: elements of a `[str]` are live string references.
                let text = unsafe { str_ref(e) };
                let _ = write!(out, "{text:?}");
            }
            Type::Array(inner) => {
                // SAFETY: elements of a `[[T]]` are live arrays of `T`.
                unsafe { write_array(out, e, inner) }
            }
            _ => write_scalar(out, e, elem),
        }
    }
    out.push(']');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::heap::Heap;

    fn show(bits: u64, ty: &Type) -> String {
        let mut s = String::new();
        // SAFETY: the tests pass live references of the right type.
        unsafe { write_value(&mut s, bits, ty) };
        s
    }

    #[test]
    fn scalars() {
        assert_eq!(show(-5i64 as u64, &Type::Int), "-5");
        assert_eq!(show(1.0f64.to_bits(), &Type::Float), "1.0");
        assert_eq!(show(0.1f64.to_bits(), &Type::Float), "0.1");
        assert_eq!(show(1e100f64.to_bits(), &Type::Float), "1e100");
        assert_eq!(show(f64::NAN.to_bits(), &Type::Float), "NaN");
        assert_eq!(show(f64::NEG_INFINITY.to_bits(), &Type::Float), "-inf");
        assert_eq!(show(1, &Type::Bool), "true");
    }

    #[test]
    fn arrays_quote_strings_and_nest() {
        let mut heap = Heap::default();
        let a = heap.alloc_str("a");
        let q = heap.alloc_str("q\"\n");
        let strs = heap.alloc_array(true, vec![a, q]);
        let str_ty = Type::Array(Box::new(Type::Str));
        assert_eq!(show(strs, &str_ty), r#"["a", "q\"\n"]"#);
        let row1 = heap.alloc_array(false, vec![1, 2]);
        let row2 = heap.alloc_array(false, vec![]);
        let grid = heap.alloc_array(true, vec![row1, row2]);
        let grid_ty = Type::Array(Box::new(Type::Array(Box::new(Type::Int))));
        assert_eq!(show(grid, &grid_ty), "[[1, 2], []]");
        assert_eq!(show(a, &Type::Str), "a");
    }
}
