//! The GDB JIT interface itself: the two symbols a debugger looks for and
//! the linked list of in-memory object files they publish. The only unsafe
//! code of [`gdb_jit`](super).
//!
//! The protocol (gdb manual, "JIT Compilation Interface"): the process
//! defines `__jit_debug_descriptor`, a `jit_descriptor` (version 1) heading a
//! doubly linked list of `jit_code_entry`s, each pointing at one object file
//! in memory, and an empty function `__jit_debug_register_code`. To add or
//! remove an entry, the process links or unlinks it, stores it in
//! `relevant_entry`, sets `action_flag` and calls the function. A debugger
//! keeps a breakpoint on that function; when it stops there it reads the
//! descriptor and loads (or drops) the object's symbols, line tables and
//! CFI. A debugger that attaches later walks the whole list once.
//!
//! # Sharing the symbols with another runtime
//!
//! gdb finds the symbols by name, so every JIT in a process (another VM
//! embedded next to this one, an LLVM ORC JIT, wasmtime) should use the same
//! pair. The definitions here follow LLVM's `GDBRegistrationListener` and
//! wasmtime's `jit-debug` crate:
//!
//! * exact C names, `#[no_mangle]`, a `#[inline(never)]` function with an
//!   opaque side effect so neither the compiler nor LTO removes it or folds
//!   calls to it;
//! * entries are only ever linked in at the head and unlinked through their
//!   own `prev`/`next` pointers, so entries added by another runtime are
//!   never touched;
//! * in an executable, exporting the pair to the dynamic symbol table
//!   (toyvm's `build.rs` passes `--export-dynamic-symbol`) makes a shared
//!   library's own definitions bind to ours by ELF symbol interposition, so
//!   there is one list in the process. Where two lists remain (two statically
//!   linked copies), gdb 10 and later reads each object file's descriptor.
//!
//! Within this process every update takes [`LOCK`]. Another runtime that
//! shares the symbols has its own lock, as in LLVM: the protocol offers no
//! common one, so two JITs must not register at the same instant.

use parking_lot::Mutex;
use std::cell::UnsafeCell;
use std::ptr;

/// `jit_code_entry`: one object file in the list.
#[repr(C)]
pub(super) struct JitCodeEntry {
    next_entry: *mut JitCodeEntry,
    prev_entry: *mut JitCodeEntry,
    symfile_addr: *const u8,
    symfile_size: u64,
}

/// `jit_descriptor`, version 1.
#[repr(C)]
pub struct JitDescriptor {
    version: u32,
    action_flag: u32,
    relevant_entry: *mut JitCodeEntry,
    first_entry: *mut JitCodeEntry,
}

/// `jit_actions_t`: what the debugger should do with `relevant_entry`.
const JIT_NOACTION: u32 = 0;
const JIT_REGISTER_FN: u32 = 1;
const JIT_UNREGISTER_FN: u32 = 2;

/// The descriptor's storage: written only under [`LOCK`], read by the
/// debugger while the process is stopped.
#[repr(transparent)]
pub struct DescriptorCell(UnsafeCell<JitDescriptor>);

// SAFETY: the descriptor is only mutated while holding `LOCK` (see
// `publish`), and nothing in the process reads it otherwise.
unsafe impl Sync for DescriptorCell {}

// ANCHOR: symbols
/// The descriptor gdb and lldb read (exact C name and layout).
#[unsafe(no_mangle)]
pub static __jit_debug_descriptor: DescriptorCell =
    DescriptorCell(UnsafeCell::new(JitDescriptor {
        version: 1,
        action_flag: JIT_NOACTION,
        relevant_entry: ptr::null_mut(),
        first_entry: ptr::null_mut(),
    }));

/// The function debuggers keep a breakpoint on (exact C name). It does
/// nothing; it must exist, stay out of line and never be optimised away.
#[unsafe(no_mangle)]
#[inline(never)]
pub extern "C" fn __jit_debug_register_code() {
    // An opaque use of the descriptor: the call cannot be proven useless,
    // so it is neither removed nor merged with another empty function.
    std::hint::black_box(&__jit_debug_descriptor);
}
// ANCHOR_END: symbols

/// Serializes updates of the list made by this process's perfsupport.
static LOCK: Mutex<()> = Mutex::new(());

/// One object file published to debuggers. Dropping it unpublishes it.
pub(super) struct Published {
    /// Boxed so the entry keeps its address while linked.
    entry: Box<JitCodeEntry>,
    /// The object file the entry points at; never moved or changed while
    /// published (a boxed slice has no spare capacity to grow into).
    _image: Box<[u8]>,
}

// SAFETY: the raw pointers in `entry` point into `_image` or at other
// entries of the list, which are only followed under `LOCK`.
unsafe impl Send for Published {}
// SAFETY: as for `Send`; a shared `Published` exposes nothing.
unsafe impl Sync for Published {}

impl Published {
    /// Links `image` (a complete ELF object) at the head of the list and
    /// tells an attached debugger about it.
    pub(super) fn publish(image: Vec<u8>) -> Published {
        let image = image.into_boxed_slice();
        let mut entry = Box::new(JitCodeEntry {
            next_entry: ptr::null_mut(),
            prev_entry: ptr::null_mut(),
            symfile_addr: image.as_ptr(),
            symfile_size: image.len() as u64,
        });
        let entry_ptr: *mut JitCodeEntry = &mut *entry;
        let _guard = LOCK.lock();
        // SAFETY: under `LOCK`, nothing else in this process touches the
        // descriptor or the entries; `entry_ptr` is a live boxed entry that
        // stays at its address until `drop` unlinks it, and `first_entry` is
        // null or a live entry (ours or another runtime's).
        unsafe {
            let descriptor = __jit_debug_descriptor.0.get();
            let first = (*descriptor).first_entry;
            (*entry_ptr).next_entry = first;
            if !first.is_null() {
                (*first).prev_entry = entry_ptr;
            }
            (*descriptor).first_entry = entry_ptr;
            (*descriptor).relevant_entry = entry_ptr;
            (*descriptor).action_flag = JIT_REGISTER_FN;
        }
        __jit_debug_register_code();
        Published {
            entry,
            _image: image,
        }
    }
}

impl Drop for Published {
    fn drop(&mut self) {
        let entry_ptr: *mut JitCodeEntry = &mut *self.entry;
        let _guard = LOCK.lock();
        // SAFETY: under `LOCK`; `entry_ptr` is linked (`publish` linked it
        // and only this `drop` unlinks it), and its neighbours are live
        // entries of the list.
        unsafe {
            let descriptor = __jit_debug_descriptor.0.get();
            let (prev, next) = ((*entry_ptr).prev_entry, (*entry_ptr).next_entry);
            if prev.is_null() {
                (*descriptor).first_entry = next;
            } else {
                (*prev).next_entry = next;
            }
            if !next.is_null() {
                (*next).prev_entry = prev;
            }
            (*descriptor).relevant_entry = entry_ptr;
            (*descriptor).action_flag = JIT_UNREGISTER_FN;
        }
        // The debugger reads the entry (still alive) during this call.
        __jit_debug_register_code();
    }
}

/// How many entries the list holds (all runtimes'), for tests.
#[cfg(test)]
pub(super) fn published_count() -> usize {
    let _guard = LOCK.lock();
    let mut count = 0;
    // SAFETY: under `LOCK`, the list is a well-formed chain of live entries.
    unsafe {
        let mut entry = (*__jit_debug_descriptor.0.get()).first_entry;
        while !entry.is_null() {
            count += 1;
            entry = (*entry).next_entry;
        }
    }
    count
}
