//! The garbage-collected heap: strings and arrays, and a precise
//! mark-sweep collector.
//!
//! A heap reference is a pointer to an object's [`Header`], stored as the
//! 64 bits of a register or array element (null = 0, only seen in a ref
//! register that has not been written yet). Objects are `#[repr(C)]`
//! structs that start with the header, so the interpreter (and JIT code)
//! can cast a reference straight to [`StrObj`] or [`ArrObj`]: the static
//! types say which one it is, and no run-time check is needed.
//!
//! Collection is driven by the VM (see [`crate::interp::Vm::collect`]): it
//! hands the collector every root (ref registers of live frames, string
//! constants, the argument strings) and the collector traces arrays whose
//! header says their elements are references. Allocation never collects by
//! itself; it only counts bytes, and the interpreter collects after an
//! allocating instruction has stored its result ([`Heap::should_collect`]),
//! so a half-built object is never unrooted.
//!
//! # The byte budget (`--max-heap`)
//!
//! The heap counts the bytes it holds (live at the last collection plus
//! everything allocated since) against a limit ([`Heap::set_limit`]). An
//! instruction about to allocate asks [`Heap::has_room`] first, collecting
//! if it does not fit (see `crate::interp`), and builds its payload with
//! [`Heap::new_slots`] / [`Heap::new_string`] / [`Heap::reserve_push`],
//! which fail with [`RuntimeError::OutOfMemory`] instead of aborting the
//! process: over the budget, or when the system refuses the memory
//! (fallible `try_reserve`). Collections are scheduled so that garbage
//! never takes more than half of the room left under the limit.

use std::ptr::NonNull;

use crate::runtime::RuntimeError;

/// Which Rust struct an object is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum ObjKind {
    /// A [`StrObj`].
    Str,
    /// An [`ArrObj`].
    Array,
}

/// The first field of every heap object.
#[derive(Debug)]
#[repr(C)]
pub struct Header {
    /// Which struct the object is.
    pub kind: ObjKind,
    /// Set during marking, cleared by the sweep.
    marked: bool,
    /// For arrays: the elements are heap references (trace them).
    pub elem_refs: bool,
}

/// An immutable UTF-8 string.
#[derive(Debug)]
#[repr(C)]
pub struct StrObj {
    /// Common header (`kind == Str`).
    pub header: Header,
    /// The text.
    pub text: Box<str>,
}

/// A growable array of 64-bit slots (ints, float bits, bools or refs).
#[derive(Debug)]
#[repr(C)]
pub struct ArrObj {
    /// Common header (`kind == Array`).
    pub header: Header,
    /// The elements.
    pub elems: Vec<u64>,
}

/// Smallest allocation volume between two collections, with room to spare.
const MIN_THRESHOLD: usize = 1 << 20;

/// Smallest allocation volume between two collections near the limit
/// (fewer bytes would make every allocation collect).
const MIN_THRESHOLD_NEAR_LIMIT: usize = 64 << 10;

/// Capacity a full array grows by on `push`: it doubles (at least 4).
fn push_growth(capacity: usize) -> usize {
    capacity.max(4)
}

/// Bytes that pushing one element onto `elems` (an array's elements)
/// allocates: 0 unless the array is full (see [`Heap::reserve_push`]).
pub fn push_growth_bytes(elems: &Vec<u64>) -> usize {
    if elems.len() < elems.capacity() {
        0
    } else {
        push_growth(elems.capacity()).saturating_mul(8)
    }
}

/// Owner of every heap object.
#[derive(Debug)]
pub struct Heap {
    objects: Vec<NonNull<Header>>,
    /// Bytes allocated since the last collection.
    allocated: usize,
    /// Bytes of the objects that survived the last collection.
    live: usize,
    /// Most bytes the heap may hold (`--max-heap`; unlimited by default).
    limit: usize,
    /// Collect once `allocated` reaches this (about the live size after
    /// the last collection: the heap may grow to ~2x before collecting).
    threshold: usize,
    /// Collect after every allocation (see [`Heap::set_stress`]).
    stress: bool,
    /// In stress mode, unreachable objects are poisoned and kept here
    /// instead of freed, so a use after "free" reads poison, reliably.
    graveyard: Vec<NonNull<Header>>,
    /// Number of collections so far (for tests and statistics).
    pub collections: u64,
}

impl Default for Heap {
    fn default() -> Self {
        Heap {
            objects: Vec::new(),
            allocated: 0,
            live: 0,
            limit: usize::MAX,
            threshold: MIN_THRESHOLD,
            stress: false,
            graveyard: Vec::new(),
            collections: 0,
        }
    }
}

fn str_size(text: &str) -> usize {
    std::mem::size_of::<StrObj>() + text.len()
}

fn array_size(elems: &Vec<u64>) -> usize {
    std::mem::size_of::<ArrObj>() + elems.capacity() * 8
}

impl Heap {
    /// Makes every allocation start a collection, and poisons unreachable
    /// objects (strings become `#…#`, arrays empty) instead of freeing
    /// them, so a missing root shows up as wrong output (tests use it to
    /// check the root maps).
    pub fn set_stress(&mut self) {
        self.stress = true;
        self.threshold = 0;
    }

    /// Bounds the bytes the heap may hold (`--max-heap`).
    pub fn set_limit(&mut self, bytes: usize) {
        self.limit = bytes;
        self.threshold = self.next_threshold();
    }

    /// The limit set by [`Heap::set_limit`] (`usize::MAX` if none).
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Bytes held: live at the last collection plus allocated since (some
    /// of which may be garbage by now).
    pub fn size(&self) -> usize {
        self.live.saturating_add(self.allocated)
    }

    /// True if `bytes` more fit under the limit.
    #[inline]
    pub fn has_room(&self, bytes: usize) -> bool {
        self.size()
            .checked_add(bytes)
            .is_some_and(|total| total <= self.limit)
    }

    /// True if a collection could free something: bytes were allocated
    /// since the last one.
    pub fn may_have_garbage(&self) -> bool {
        self.allocated > 0
    }

    fn room(&self, bytes: usize) -> Result<(), RuntimeError> {
        if self.has_room(bytes) {
            Ok(())
        } else {
            Err(RuntimeError::OutOfMemory)
        }
    }

    /// An empty `Vec` with room for exactly `n` slots, to become an array's
    /// elements ([`Heap::alloc_array`] accounts for them). Fails if they
    /// would not fit under the limit or the system has no memory for them.
    pub fn new_slots(&self, n: usize) -> Result<Vec<u64>, RuntimeError> {
        self.room(n.saturating_mul(8))?;
        let mut v = Vec::new();
        v.try_reserve_exact(n)
            .map_err(|_| RuntimeError::OutOfMemory)?;
        Ok(v)
    }

    /// An empty `String` with room for exactly `bytes`, to become a string
    /// object ([`Heap::alloc_str`] accounts for it). Fails like
    /// [`Heap::new_slots`].
    pub fn new_string(&self, bytes: usize) -> Result<String, RuntimeError> {
        self.room(bytes)?;
        let mut s = String::new();
        s.try_reserve_exact(bytes)
            .map_err(|_| RuntimeError::OutOfMemory)?;
        Ok(s)
    }

    /// Makes room for one more element in `elems` (an array's elements),
    /// doubling a full array and accounting for the growth. Fails like
    /// [`Heap::new_slots`]. Returns true if the array grew (the caller
    /// then offers a collection point).
    pub fn reserve_push(&mut self, elems: &mut Vec<u64>) -> Result<bool, RuntimeError> {
        if elems.len() < elems.capacity() {
            return Ok(false);
        }
        let extra = push_growth(elems.capacity());
        self.room(extra.saturating_mul(8))?;
        elems
            .try_reserve_exact(extra)
            .map_err(|_| RuntimeError::OutOfMemory)?;
        self.allocated += extra * 8;
        Ok(true)
    }

    /// True when enough was allocated since the last collection.
    #[inline]
    pub fn should_collect(&self) -> bool {
        self.allocated >= self.threshold
    }

    /// How much may be allocated before the next collection: about the
    /// live size (the heap grows to ~2x), but at most half the room left
    /// under the limit, so garbage alone never exhausts it.
    fn next_threshold(&self) -> usize {
        if self.stress {
            return 0;
        }
        let room = self.limit.saturating_sub(self.live);
        self.live
            .max(MIN_THRESHOLD)
            .min((room / 2).max(MIN_THRESHOLD_NEAR_LIMIT))
    }

    /// Number of live (not yet swept) objects.
    pub fn object_count(&self) -> usize {
        self.objects.len()
    }

    fn register(&mut self, header: NonNull<Header>, size: usize) -> u64 {
        self.objects.push(header);
        self.allocated += size;
        header.as_ptr() as u64
    }

    /// Allocates a string and returns its reference.
    pub fn alloc_str(&mut self, text: impl Into<Box<str>>) -> u64 {
        let text = text.into();
        let size = str_size(&text);
        let obj = Box::new(StrObj {
            header: Header {
                kind: ObjKind::Str,
                marked: false,
                elem_refs: false,
            },
            text,
        });
        self.register(NonNull::from(Box::leak(obj)).cast(), size)
    }

    /// Allocates an array holding `elems` and returns its reference.
    pub fn alloc_array(&mut self, elem_refs: bool, elems: Vec<u64>) -> u64 {
        let size = array_size(&elems);
        let obj = Box::new(ArrObj {
            header: Header {
                kind: ObjKind::Array,
                marked: false,
                elem_refs,
            },
            elems,
        });
        self.register(NonNull::from(Box::leak(obj)).cast(), size)
    }

    /// Marks everything reachable from `roots` (null roots are skipped)
    /// and frees the rest.
    ///
    /// # Safety
    /// Every non-null root must be a reference returned by this heap that
    /// has not been freed (the VM's root invariant).
    pub unsafe fn collect(&mut self, roots: impl Iterator<Item = u64>) {
        let mut work: Vec<NonNull<Header>> = roots
            .filter_map(|r| NonNull::new(r as *mut Header))
            .collect();
        while let Some(obj) = work.pop() {
            // SAFETY: `obj` is a live object of this heap: a root (caller's
            // contract) or an element of a live array with `elem_refs`,
            // whose non-null elements are live references by the same
            // invariant. Nothing else accesses the heap during collection.
            unsafe {
                let header = &mut *obj.as_ptr();
                if header.marked {
                    continue;
                }
                header.marked = true;
                if header.kind == ObjKind::Array && header.elem_refs {
                    let arr = &*obj.as_ptr().cast::<ArrObj>();
                    work.extend(
                        arr.elems
                            .iter()
                            .filter_map(|&e| NonNull::new(e as *mut Header)),
                    );
                }
            }
        }
        let mut live_bytes = 0;
        let stress = self.stress;
        let graveyard = &mut self.graveyard;
        self.objects.retain(|&obj| {
            // SAFETY: every pointer in `objects` is a live object owned by
            // this heap; unmarked ones are unreachable, so freeing them
            // cannot leave a dangling reference anywhere the VM looks.
            unsafe {
                if (*obj.as_ptr()).marked {
                    (*obj.as_ptr()).marked = false;
                    live_bytes += object_size(obj);
                    true
                } else if stress {
                    poison(obj);
                    graveyard.push(obj);
                    false
                } else {
                    free_object(obj);
                    false
                }
            }
        });
        self.allocated = 0;
        self.live = live_bytes;
        self.threshold = self.next_threshold();
        self.collections += 1;
    }
}

/// # Safety
/// `obj` must be a live object of a heap.
unsafe fn object_size(obj: NonNull<Header>) -> usize {
    // SAFETY: caller's contract; the kind says which struct it is.
    unsafe {
        match (*obj.as_ptr()).kind {
            ObjKind::Str => str_size(&(*obj.as_ptr().cast::<StrObj>()).text),
            ObjKind::Array => array_size(&(*obj.as_ptr().cast::<ArrObj>()).elems),
        }
    }
}

/// # Safety
/// `obj` must be a live object of a heap, unreachable from now on.
unsafe fn free_object(obj: NonNull<Header>) {
    // SAFETY: objects are created by `Box::leak` of the struct their kind
    // names, so rebuilding that Box frees them exactly once.
    unsafe {
        match (*obj.as_ptr()).kind {
            ObjKind::Str => drop(Box::from_raw(obj.as_ptr().cast::<StrObj>())),
            ObjKind::Array => drop(Box::from_raw(obj.as_ptr().cast::<ArrObj>())),
        }
    }
}

/// Overwrites an unreachable object so that any later use is visible.
///
/// # Safety
/// `obj` must be a live object of a heap.
unsafe fn poison(obj: NonNull<Header>) {
    // SAFETY: caller's contract; the kind says which struct it is.
    unsafe {
        match (*obj.as_ptr()).kind {
            ObjKind::Str => {
                let s = &mut *obj.as_ptr().cast::<StrObj>();
                s.text = "#".repeat(s.text.len().max(1)).into();
            }
            ObjKind::Array => (*obj.as_ptr().cast::<ArrObj>()).elems = Vec::new(),
        }
    }
}

impl Drop for Heap {
    fn drop(&mut self) {
        for &obj in self.objects.iter().chain(&self.graveyard) {
            // SAFETY: the heap owns every object in its list; nothing uses
            // references after the heap (and its VM) are gone.
            unsafe { free_object(obj) };
        }
    }
}

/// Borrows the string a reference points at.
///
/// # Safety
/// `r` must be a live `str` reference, and the string must not be freed
/// while the borrow lasts (no collection in between).
#[inline]
pub unsafe fn str_ref<'a>(r: u64) -> &'a str {
    // SAFETY: caller's contract.
    unsafe { &(*(r as *const StrObj)).text }
}

/// Borrows the array a reference points at, mutably.
///
/// # Safety
/// `r` must be a live array reference, with no other borrow of the same
/// array alive while this one is.
#[inline]
pub unsafe fn arr_mut<'a>(r: u64) -> &'a mut ArrObj {
    // SAFETY: caller's contract.
    unsafe { &mut *(r as *mut ArrObj) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unreachable_objects_are_freed_and_reachable_ones_kept() {
        let mut heap = Heap::default();
        let s = heap.alloc_str("kept");
        let inner = heap.alloc_array(true, vec![s]);
        let outer = heap.alloc_array(true, vec![inner, 0]);
        heap.alloc_str("garbage");
        heap.alloc_array(false, vec![1, 2, 3]);
        assert_eq!(heap.object_count(), 5);
        // SAFETY: `outer` is live.
        unsafe { heap.collect([outer].into_iter()) };
        assert_eq!(heap.object_count(), 3);
        // SAFETY: all three survived.
        unsafe {
            let o = arr_mut(outer);
            let i = arr_mut(o.elems[0]);
            assert_eq!(str_ref(i.elems[0]), "kept");
        }
        // SAFETY: no roots: everything goes.
        unsafe { heap.collect(std::iter::empty()) };
        assert_eq!(heap.object_count(), 0);
    }

    #[test]
    fn scalar_arrays_are_not_traced() {
        let mut heap = Heap::default();
        let s = heap.alloc_str("x");
        // The element bits equal a live object's address, but the array
        // holds ints, so it must not keep the string alive.
        let arr = heap.alloc_array(false, vec![s]);
        // SAFETY: `arr` is live.
        unsafe { heap.collect([arr].into_iter()) };
        assert_eq!(heap.object_count(), 1);
    }
}
