//! Executable memory for Cranelift: one anonymous `mmap` reservation, laid
//! out for perf.
//!
//! Cranelift 0.135's `SystemMemoryProvider` maps a fresh region per
//! allocation and its `ArenaMemoryProvider` packs functions back to back.
//! perf wants two things neither gives:
//!
//! * **Room after every function** for the unwind table `perf inject`
//!   maps right behind the code (`[start, start + ALIGN8(size) +
//!   unwind_size)`, see `perfsupport::unwind::reserved_region_size`):
//!   each executable allocation is followed by [`UNWIND_TAIL`] spare bytes.
//! * **No merging of executable mappings**: making a new batch executable
//!   next to an older one would merge the two VMAs, and perf would then see
//!   one big anonymous mapping that hides the older code's jitdump objects.
//!   Every finalized batch is therefore followed by one `PROT_NONE` guard
//!   page that stays untouched.
//!
//! The memory is returned only by `free_memory` (`JITModule::free_memory`),
//! which unmaps the whole reservation: the pipeline calls it when the JIT
//! is dropped, after withdrawing everything that points into the code
//! (`pipeline::CodeGen`'s drop). A provider dropped without it keeps its
//! memory mapped.
//! Non-executable allocations (Cranelift asks for them only for data
//! objects, which this JIT does not define) come from the same reservation.

use std::io;

use cranelift_jit::{BranchProtection, JITMemoryKind, JITMemoryProvider};
use cranelift_module::{ModuleError, ModuleResult};

/// Spare bytes after each executable allocation: more than the perf unwind
/// payload of any function Cranelift emits (CIE 24 + FDE < 100 + header 20).
/// Every region is checked against it before it is published
/// ([`room_from_start`], `pipeline`).
pub const UNWIND_TAIL: usize = 256;

/// Bytes from the start of a function of `code_size` bytes that belong to
/// it alone: its code and the [`UNWIND_TAIL`] after it. What perf maps for
/// the region (`perfsupport::unwind::reserved_region_size`) must fit.
pub fn room_from_start(code_size: usize) -> usize {
    code_size + UNWIND_TAIL
}

/// Virtual address space reserved for code (nothing is committed until used).
const RESERVATION: usize = 1 << 30;

/// A bump allocator over one `PROT_NONE` reservation (see the module docs).
pub struct CodeMemory {
    start: *mut u8,
    size: usize,
    page: usize,
    /// Next free byte.
    next: usize,
    /// Start of the batch not finalized yet (page aligned).
    batch_start: usize,
    /// End of the pages already made writable in this batch.
    writable_end: usize,
}

// SAFETY: the provider owns its reservation exclusively; the raw pointer is
// only an address, used by whichever thread owns the JIT module.
unsafe impl Send for CodeMemory {}

impl CodeMemory {
    /// Reserves the address space.
    ///
    /// # Errors
    /// The `mmap` error.
    pub fn new() -> io::Result<CodeMemory> {
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        // SAFETY: an anonymous private mapping at an address of the
        // kernel's choosing touches no existing memory.
        let start = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                RESERVATION,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if start == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(CodeMemory {
            start: start.cast(),
            size: RESERVATION,
            page,
            next: 0,
            batch_start: 0,
            writable_end: 0,
        })
    }

    fn protect(&self, from: usize, to: usize, prot: libc::c_int) -> io::Result<()> {
        if from == to {
            return Ok(());
        }
        // SAFETY: `[from, to)` is page aligned and inside our reservation,
        // which no one else uses.
        let rc = unsafe { libc::mprotect(self.start.add(from).cast(), to - from, prot) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    fn align_page(&self, n: usize) -> usize {
        n.div_ceil(self.page) * self.page
    }
}

impl JITMemoryProvider for CodeMemory {
    fn allocate(&mut self, size: usize, align: u64, kind: JITMemoryKind) -> io::Result<*mut u8> {
        let tail = match kind {
            JITMemoryKind::Executable => UNWIND_TAIL,
            JITMemoryKind::Writable | JITMemoryKind::ReadOnly => 0,
        };
        let align = (align as usize).max(16);
        let at = self.next.div_ceil(align) * align;
        let end = at
            .checked_add(size)
            .and_then(|e| e.checked_add(tail))
            .filter(|&e| e <= self.size)
            .ok_or_else(|| io::Error::new(io::ErrorKind::OutOfMemory, "JIT code memory is full"))?;
        let new_writable = self.align_page(end);
        if new_writable > self.writable_end {
            let from = self.writable_end.max(self.batch_start);
            self.protect(from, new_writable, libc::PROT_READ | libc::PROT_WRITE)?;
            self.writable_end = new_writable;
        }
        self.next = end;
        // SAFETY: `at < size` of the reservation.
        Ok(unsafe { self.start.add(at) })
    }

    unsafe fn free_memory(&mut self) {
        if self.size == 0 {
            return;
        }
        // SAFETY: `[start, start + size)` is our reservation, mapped by
        // `new`; the caller guarantees that no code in it runs or is called
        // again (the trait's contract). Unmapping cannot fail for a whole
        // mapping we own, and if it did, the memory would only stay mapped.
        unsafe { libc::munmap(self.start.cast(), self.size) };
        // Nothing is left to allocate from.
        self.size = 0;
        self.next = 0;
        self.batch_start = 0;
        self.writable_end = 0;
    }

    // ANCHOR: finalize
    fn finalize(&mut self, _branch_protection: BranchProtection) -> ModuleResult<()> {
        if self.writable_end == self.batch_start {
            return Ok(());
        }
        // x86-64 keeps instruction caches coherent: mprotect is enough.
        self.protect(
            self.batch_start,
            self.writable_end,
            libc::PROT_READ | libc::PROT_EXEC,
        )
        .map_err(|e| ModuleError::Backend(e.into()))?;
        // Skip one guard page so the next batch's mapping never merges
        // with this one.
        self.batch_start = self.writable_end + self.page;
        self.writable_end = self.batch_start;
        self.next = self.batch_start;
        Ok(())
    }
    // ANCHOR_END: finalize
}
