//! Executable memory for Cranelift, one chunk per batch, laid out for perf
//! and freed chunk by chunk.
//!
//! Cranelift 0.135's `SystemMemoryProvider` maps a fresh region per
//! allocation and its `ArenaMemoryProvider` packs functions back to back
//! and frees only everything at once. toyvm wants three things neither
//! gives:
//!
//! * **Room after every function** for the unwind table `perf inject`
//!   maps right behind the code (`[start, start + ALIGN8(size) +
//!   unwind_size)`, see `perfsupport::unwind::reserved_region_size`):
//!   each executable allocation is followed by [`UNWIND_TAIL`] spare bytes.
//! * **No merging of executable mappings**: making a new batch executable
//!   next to an older one would merge the two VMAs, and perf would then see
//!   one big anonymous mapping that hides the older code's jitdump objects.
//!   Every chunk is followed by a `PROT_NONE` guard page ([`arena`]).
//! * **Freeing one batch**: the pipeline sizes a whole batch before any of
//!   it is placed ([`CodeChunks::open`]), so each batch gets a chunk of its
//!   own from the process-wide [`arena`], and a chunk whose code is all
//!   dead goes back on its own ([`CodeChunks::free`]).
//!
//! The provider Cranelift holds ([`CodeMemory`]) and the pipeline share the
//! chunk list ([`CodeChunks`]). `free_memory` (`JITModule::free_memory`,
//! when the JIT is dropped) gives every chunk still held back.
//! Non-executable allocations (Cranelift asks for them only for data
//! objects, which this JIT does not define) are refused.

use std::io;
use std::sync::Arc;

use cranelift_jit::{BranchProtection, JITMemoryKind, JITMemoryProvider};
use cranelift_module::{ModuleError, ModuleResult};
use parking_lot::Mutex;

use super::arena::{self, Chunk};

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

/// Bytes a chunk needs for functions of these (size, alignment) pairs,
/// placed in order.
pub fn chunk_bytes(functions: impl IntoIterator<Item = (usize, usize)>) -> usize {
    let mut next = 0usize;
    for (size, align) in functions {
        let align = align.max(16);
        next = next.div_ceil(align) * align + size + UNWIND_TAIL;
    }
    next
}

/// Identifies a chunk of one [`CodeChunks`].
pub type ChunkId = u64;

/// The chunks one JIT holds, shared by its [`CodeMemory`] (which places
/// code in the open one) and the pipeline (which opens and frees them).
#[derive(Default)]
pub struct CodeChunks {
    /// Chunks holding finalized code, by id.
    held: Vec<(ChunkId, Chunk)>,
    /// The chunk of the batch being placed: its id, where it is, the next
    /// free byte.
    open: Option<(ChunkId, Chunk, usize)>,
    next_id: ChunkId,
    /// Bytes of `held` and `open`.
    bytes: usize,
}

impl CodeChunks {
    /// Bytes of executable memory held (whole pages, guard pages not
    /// counted).
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Opens a writable chunk of at least `bytes` for the next batch.
    ///
    /// # Errors
    /// The arena's, or `mprotect`'s.
    pub fn open(&mut self, bytes: usize) -> io::Result<ChunkId> {
        debug_assert!(self.open.is_none(), "one batch at a time");
        let chunk = arena::take(bytes)?;
        if let Err(e) = protect(chunk, libc::PROT_READ | libc::PROT_WRITE) {
            // SAFETY: nothing was placed in it.
            unsafe { arena::give_back(chunk) };
            return Err(e);
        }
        let id = self.next_id;
        self.next_id += 1;
        self.bytes += chunk.len;
        self.open = Some((id, chunk, 0));
        Ok(id)
    }

    /// Frees chunk `id`.
    ///
    /// # Safety
    /// No code in it runs or is called again, and nothing describes it any
    /// more (see [`arena::give_back`]).
    pub unsafe fn free(&mut self, id: ChunkId) {
        if let Some(i) = self.held.iter().position(|&(c, _)| c == id) {
            let (_, chunk) = self.held.swap_remove(i);
            self.bytes -= chunk.len;
            // SAFETY: the caller's contract.
            unsafe { arena::give_back(chunk) };
        }
    }

    /// Drops the open chunk (its batch was not placed whole).
    pub fn abandon(&mut self) {
        if let Some((_, chunk, _)) = self.open.take() {
            self.bytes -= chunk.len;
            // SAFETY: its code was never made executable.
            unsafe { arena::give_back(chunk) };
        }
    }

    fn allocate(&mut self, size: usize, align: usize) -> io::Result<*mut u8> {
        let full = || io::Error::new(io::ErrorKind::OutOfMemory, "the batch's chunk is full");
        let (_, chunk, next) = self.open.as_mut().ok_or_else(full)?;
        let align = align.max(16);
        let at = next.div_ceil(align) * align;
        let end = (at.checked_add(size))
            .and_then(|e| e.checked_add(UNWIND_TAIL))
            .filter(|&e| e <= chunk.len)
            .ok_or_else(full)?;
        *next = end;
        Ok((chunk.start + at) as *mut u8)
    }

    fn finalize(&mut self) -> io::Result<()> {
        let Some((id, chunk, _)) = self.open.take() else {
            return Ok(());
        };
        // x86-64 keeps instruction caches coherent: mprotect is enough.
        let made = protect(chunk, libc::PROT_READ | libc::PROT_EXEC);
        self.held.push((id, chunk));
        made
    }

    fn free_all(&mut self) {
        self.abandon();
        for (_, chunk) in self.held.drain(..) {
            // SAFETY: `free_memory`'s contract: no code of this JIT runs again.
            unsafe { arena::give_back(chunk) };
        }
        self.bytes = 0;
    }
}

fn protect(chunk: Chunk, prot: libc::c_int) -> io::Result<()> {
    // SAFETY: the chunk is page aligned, inside the arena and ours alone.
    let rc = unsafe { libc::mprotect(chunk.start as *mut libc::c_void, chunk.len, prot) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The provider Cranelift's module allocates from: places code in the open
/// chunk of the shared [`CodeChunks`].
pub struct CodeMemory {
    chunks: Arc<Mutex<CodeChunks>>,
}

impl CodeMemory {
    /// A provider placing code in `chunks`.
    pub fn new(chunks: Arc<Mutex<CodeChunks>>) -> CodeMemory {
        CodeMemory { chunks }
    }
}

impl JITMemoryProvider for CodeMemory {
    fn allocate(&mut self, size: usize, align: u64, kind: JITMemoryKind) -> io::Result<*mut u8> {
        match kind {
            JITMemoryKind::Executable => self.chunks.lock().allocate(size, align as usize),
            JITMemoryKind::Writable | JITMemoryKind::ReadOnly => Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "the JIT defines no data objects",
            )),
        }
    }

    unsafe fn free_memory(&mut self) {
        self.chunks.lock().free_all();
    }

    // ANCHOR: finalize
    fn finalize(&mut self, _branch_protection: BranchProtection) -> ModuleResult<()> {
        (self.chunks.lock().finalize()).map_err(|e| ModuleError::Backend(e.into()))
    }
    // ANCHOR_END: finalize
}
