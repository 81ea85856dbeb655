//! Byte offsets of the heap-object fields compiled code reads inline
//! (array length and element pointer), so `a[i]` on ints and floats is a
//! bounds check plus one load, with no call.
//!
//! An array is an `ArrObj` whose `elems` is a `Vec<u64>`. `offset_of!` gives
//! where `elems` sits, but Rust does not promise the order of a `Vec`'s own
//! fields (pointer, capacity, length), so it is measured once, on a vector
//! with three distinct values, in [`ArrayLayout::probe`].

use vm::abi::heap::ArrObj;

/// Where compiled code finds an array's element pointer and length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArrayLayout {
    /// Offset of the element pointer (`*mut u64`) from the object start.
    pub data: i32,
    /// Offset of the element count (`usize`) from the object start.
    pub len: i32,
}

impl ArrayLayout {
    /// Measures the layout of `Vec<u64>` in this build. `None` if it is not
    /// three words holding the pointer, capacity and length (then the JIT
    /// would not be able to inline array accesses and refuses to start).
    pub fn probe() -> Option<ArrayLayout> {
        const WORDS: usize = 3;
        if std::mem::size_of::<Vec<u64>>() != WORDS * 8 {
            return None;
        }
        let mut v: Vec<u64> = Vec::with_capacity(5);
        v.extend_from_slice(&[1, 2]);
        let ptr = v.as_ptr() as usize;
        // SAFETY: `Vec<u64>` is exactly three machine words (checked
        // above), every bit pattern is a valid `[usize; 3]`, and we only
        // read a copy; `v` stays owned and is dropped normally.
        let words: [usize; WORDS] = unsafe { std::mem::transmute_copy(&v) };
        let find = |value: usize| words.iter().position(|&w| w == value);
        let (data, len) = (find(ptr)?, find(v.len())?);
        let cap = find(v.capacity())?;
        if data == len || len == cap || data == cap {
            return None;
        }
        let base = std::mem::offset_of!(ArrObj, elems);
        Some(ArrayLayout {
            data: (base + data * 8) as i32,
            len: (base + len * 8) as i32,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_finds_the_fields_of_a_real_array() {
        let layout = ArrayLayout::probe().expect("Vec layout");
        let mut heap = vm::abi::heap::Heap::default();
        let r = heap.alloc_array(false, vec![7, 8, 9]);
        // SAFETY: `r` is a live array; the offsets come from the probe.
        unsafe {
            let obj = r as *const u8;
            let len = *(obj.add(layout.len as usize) as *const usize);
            let data = *(obj.add(layout.data as usize) as *const *const u64);
            assert_eq!(len, 3);
            assert_eq!(*data.add(2), 9);
        }
    }
}
