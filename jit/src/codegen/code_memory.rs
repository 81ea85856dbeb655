//! Executable memory for compiled code, one chunk per batch, laid out for
//! perf and freed chunk by chunk.
//!
//! Cranelift 0.135's `SystemMemoryProvider` maps a fresh region per
//! allocation and its `ArenaMemoryProvider` packs functions back to back
//! and frees only everything at once. toyvm wants three things neither
//! gives:
//!
//! * **Room after every function** for the unwind table `perf inject`
//!   maps right behind the code (`[start, start + ALIGN8(size) +
//!   unwind_size)`, see `perfsupport::unwind::reserved_region_size`):
//!   each executable allocation is followed by its tail: at least
//!   [`UNWIND_TAIL`] spare bytes, more for a longer table.
//! * **No merging of executable mappings**: making a new batch executable
//!   next to an older one would merge the two VMAs, and perf would then see
//!   one big anonymous mapping that hides the older code's jitdump objects.
//!   Every chunk is followed by a `PROT_NONE` guard page ([`arena`]).
//! * **Freeing one batch**: the pipeline sizes a whole batch before any of
//!   it is placed ([`CodeChunks::open_after`]), so each batch gets a chunk of its
//!   own from the process-wide [`arena`], and a chunk whose code is all
//!   dead goes back on its own ([`CodeChunks::free`]).
//!
//! The pipeline places each batch itself ([`CodeChunks::open_after`], then
//! [`CodeChunks::allocate`] and [`CodeChunks::write`] per region, code
//! already relocated for its address, then [`CodeChunks::finalize`]);
//! under `--jit-elf` the batch is staged in ordinary memory instead
//! ([`CodeChunks::open_staged`]) and [`CodeChunks::finalize_from`] hands it
//! to the code files, which map it over the chunk's untouched pages;
//! [`CodeChunks::free_all`] gives every chunk still held back when the JIT
//! is dropped. Nothing of it goes through cranelift-jit's memory provider.

use std::io;

use super::arena::{self, Chunk};

/// Spare bytes after each executable allocation, at least: more than the
/// perf unwind payload of a function with a few returns (CIE 24 + FDE +
/// header 20). The pipeline leaves more after a function whose table is
/// longer (`pipeline`, `unwind_tail`).
pub const UNWIND_TAIL: usize = 256;

/// Bytes a chunk needs for functions of these (size, alignment, tail)
/// triples, placed in order.
pub fn chunk_bytes(functions: impl IntoIterator<Item = (usize, usize, usize)>) -> usize {
    let mut next = 0usize;
    for (size, align, tail) in functions {
        let align = align.max(16);
        next = next.div_ceil(align) * align + size + tail;
    }
    next
}

/// Identifies a chunk of one [`CodeChunks`].
pub type ChunkId = u64;

/// The chunks one JIT holds: the open one, which the batch being placed
/// fills, and those holding finalized code.
#[derive(Default)]
pub struct CodeChunks {
    /// Chunks holding finalized code, by id.
    held: Vec<(ChunkId, Chunk)>,
    /// The chunk of the batch being placed.
    open: Option<Open>,
    next_id: ChunkId,
    /// Bytes of `held` and `open`.
    bytes: usize,
}

/// The chunk of the batch being placed.
struct Open {
    id: ChunkId,
    chunk: Chunk,
    /// Offset of the next free byte.
    next: usize,
    /// The chunk's bytes, when they are staged here rather than written in
    /// the chunk ([`CodeChunks::open_staged`]).
    staged: Option<Vec<u8>>,
}

impl CodeChunks {
    /// Bytes of executable memory held (whole pages, guard pages not
    /// counted).
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Opens a writable chunk for the next batch: `bytes` of code after
    /// the chunk's first `lead` bytes, which stay free (`--jit-elf` puts its
    /// file's headers there; 0 otherwise).
    ///
    /// # Errors
    /// The arena's, or `mprotect`'s.
    pub fn open_after(&mut self, lead: usize, bytes: usize) -> io::Result<ChunkId> {
        debug_assert!(self.open.is_none(), "one batch at a time");
        let chunk = arena::take(lead + bytes)?;
        if let Err(e) = protect(chunk, libc::PROT_READ | libc::PROT_WRITE) {
            // SAFETY: nothing was placed in it.
            unsafe { arena::give_back(chunk) };
            return Err(e);
        }
        Ok(self.opened(chunk, lead, None))
    }

    /// Opens a chunk for the next batch as [`open_after`](Self::open_after)
    /// does, but its bytes are staged in ordinary memory until
    /// [`finalize_from`](Self::finalize_from) hands them to a publisher
    /// that maps them at the chunk (`--jit-elf`): the chunk's pages stay as
    /// the arena reserved them, never writable and never touched, so the
    /// file's mapping replaces nothing (no `mprotect`, no page fault, no
    /// TLB flush on the other CPUs).
    ///
    /// # Errors
    /// The arena's.
    pub fn open_staged(&mut self, lead: usize, bytes: usize) -> io::Result<ChunkId> {
        debug_assert!(self.open.is_none(), "one batch at a time");
        let chunk = arena::take(lead + bytes)?;
        Ok(self.opened(chunk, lead, Some(vec![0; chunk.len])))
    }

    fn opened(&mut self, chunk: Chunk, lead: usize, staged: Option<Vec<u8>>) -> ChunkId {
        let id = self.next_id;
        self.next_id += 1;
        self.bytes += chunk.len;
        self.open = Some(Open {
            id,
            chunk,
            next: lead,
            staged,
        });
        id
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
        if let Some(Open { chunk, .. }) = self.open.take() {
            self.bytes -= chunk.len;
            // SAFETY: its code was never made executable.
            unsafe { arena::give_back(chunk) };
        }
    }

    /// The address of the next `size` bytes aligned to `align` (at least
    /// 16) in the open chunk, followed by `tail` spare bytes.
    ///
    /// # Errors
    /// The open chunk is missing or full (its batch was sized wrong).
    pub fn allocate(&mut self, size: usize, align: usize, tail: usize) -> io::Result<usize> {
        let full = || io::Error::new(io::ErrorKind::OutOfMemory, "the batch's chunk is full");
        let Open { chunk, next, .. } = self.open.as_mut().ok_or_else(full)?;
        let align = align.max(16);
        let at = next.div_ceil(align) * align;
        let end = (at.checked_add(size))
            .and_then(|e| e.checked_add(tail))
            .filter(|&e| e <= chunk.len)
            .ok_or_else(full)?;
        *next = end;
        Ok(chunk.start + at)
    }

    /// Copies `bytes` to address `at`, which must lie with all of them in
    /// the open chunk (still writable, not executable yet), or to where the
    /// chunk's bytes are staged.
    ///
    /// # Errors
    /// The range is not inside the open chunk.
    pub fn write(&mut self, at: usize, bytes: &[u8]) -> io::Result<()> {
        let inside = |open: &&mut Open| {
            at >= open.chunk.start
                && at
                    .checked_add(bytes.len())
                    .is_some_and(|end| end <= open.chunk.start + open.chunk.len)
        };
        let Some(open) = self.open.as_mut().filter(inside) else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} bytes at {at:#x} are not in the open chunk", bytes.len()),
            ));
        };
        if let Some(staged) = &mut open.staged {
            let from = at - open.chunk.start;
            staged[from..from + bytes.len()].copy_from_slice(bytes);
            return Ok(());
        }
        // SAFETY: the range is inside the open chunk, which is mapped
        // read+write (`open_after`), ours alone and holds no code that can
        // run (it becomes executable only in `finalize`); `bytes` is a
        // separate allocation, so the two cannot overlap.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), at as *mut u8, bytes.len()) };
        Ok(())
    }

    /// Makes the open chunk's code executable (and no longer writable)
    /// where it is.
    ///
    /// # Errors
    /// `mprotect`'s.
    pub fn finalize(&mut self) -> io::Result<()> {
        match self.open.take() {
            Some(open) => self.in_place(open),
            None => Ok(()),
        }
    }

    // ANCHOR: finalize
    /// Makes `open`'s code executable in its own pages: a staged chunk's
    /// bytes are copied in first. Held either way, so that `free` gives
    /// it back.
    fn in_place(
        &mut self,
        Open {
            id, chunk, staged, ..
        }: Open,
    ) -> io::Result<()> {
        let made = match &staged {
            Some(bytes) => copy_in(chunk, bytes),
            None => Ok(()),
        }
        .and_then(|()| protect(chunk, libc::PROT_READ | libc::PROT_EXEC));
        // aarch64 does not keep the instruction cache coherent with the
        // bytes just written (x86-64 does): see `icache`.
        // SAFETY: the chunk is mapped (the arena's) and ours.
        unsafe { super::icache::prepare_to_run(chunk.start, chunk.len, false) };
        self.held.push((id, chunk));
        made
    }
    // ANCHOR_END: finalize

    /// Makes the open chunk's code executable by `publish(start, staged)`,
    /// which maps the staged bytes at the chunk from a file (`--jit-elf`,
    /// a chunk from [`open_staged`](Self::open_staged)); if that fails, or
    /// the chunk was not staged, as [`finalize`](Self::finalize) does, and
    /// says why (`Ok(Some(..))`).
    ///
    /// # Errors
    /// `mprotect`'s, when the fallback fails too.
    pub fn finalize_from(
        &mut self,
        publish: impl FnOnce(usize, &[u8]) -> io::Result<()>,
    ) -> io::Result<Option<io::Error>> {
        let Some(open) = self.open.take() else {
            return Ok(None);
        };
        let published = match &open.staged {
            Some(bytes) => publish(open.chunk.start, bytes),
            None => Err(io::Error::other("the batch's chunk was not staged")),
        };
        match published {
            Ok(()) => {
                // SAFETY: the chunk is mapped (from the file) and ours.
                unsafe { super::icache::prepare_to_run(open.chunk.start, open.chunk.len, true) };
                self.held.push((open.id, open.chunk));
                Ok(None)
            }
            Err(why) => self.in_place(open).map(|()| Some(why)),
        }
    }

    /// Gives every chunk back (the JIT is dropped).
    ///
    /// # Safety
    /// No code of this JIT runs or is called again.
    pub unsafe fn free_all(&mut self) {
        self.abandon();
        for (_, chunk) in self.held.drain(..) {
            // SAFETY: the caller's contract: no code of this JIT runs again.
            unsafe { arena::give_back(chunk) };
        }
        self.bytes = 0;
    }
}

/// Writes `staged` (the chunk's bytes) into `chunk`, which is left
/// read-write.
fn copy_in(chunk: Chunk, staged: &[u8]) -> io::Result<()> {
    protect(chunk, libc::PROT_READ | libc::PROT_WRITE)?;
    // SAFETY: the chunk is page aligned, inside the arena, ours alone and
    // mapped read-write just now, holds no code that can run, and the copy
    // stays inside both it and `staged`, a separate allocation.
    unsafe {
        std::ptr::copy_nonoverlapping(
            staged.as_ptr(),
            chunk.start as *mut u8,
            chunk.len.min(staged.len()),
        )
    };
    Ok(())
}

fn protect(chunk: Chunk, prot: libc::c_int) -> io::Result<()> {
    // SAFETY: the chunk is page aligned, inside the arena and ours alone.
    let rc = unsafe { libc::mprotect(chunk.start as *mut libc::c_void, chunk.len, prot) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codegen::icache::recorder;

    /// Every byte written into a chunk is in a range prepared for
    /// execution (`icache`) before the chunk's code can run: after
    /// `finalize`, and after `finalize_from` whether the file's mapping
    /// was made or not.
    #[test]
    fn every_written_byte_is_prepared_to_run_before_it_runs() {
        for published in [None, Some(true), Some(false)] {
            let mut chunks = CodeChunks::default();
            match published {
                None => chunks.open_after(0, 3000).expect("a chunk"),
                Some(_) => chunks.open_staged(0, 3000).expect("a chunk"),
            };
            let mut written = Vec::new();
            for (size, align) in [(100, 16), (700, 32), (1200, 16)] {
                let at = chunks.allocate(size, align, UNWIND_TAIL).expect("room");
                chunks.write(at, &vec![0xc3; size]).expect("inside");
                written.push((at, size));
            }
            recorder::take();
            match published {
                None => chunks.finalize().expect("mprotect"),
                Some(ok) => {
                    let made = chunks.finalize_from(|_, _| match ok {
                        // No file here: what matters is what is recorded.
                        true => Ok(()),
                        false => Err(io::Error::other("no file")),
                    });
                    made.expect("finalized");
                }
            }
            let prepared = recorder::take();
            assert!(!prepared.is_empty(), "{published:?}: nothing prepared");
            for &(at, size) in &written {
                assert!(
                    (prepared.iter()).any(|&(s, l)| s <= at && at + size <= s + l),
                    "{published:?}: {size} bytes at {at:#x} not prepared: {prepared:x?}"
                );
                if published != Some(true) {
                    // Written in place, or copied in when the file failed.
                    // SAFETY: the chunk is mapped read+exec and holds these bytes.
                    let code = unsafe { std::slice::from_raw_parts(at as *const u8, size) };
                    assert!(code.iter().all(|&b| b == 0xc3), "{published:?}");
                }
            }
            // SAFETY: nothing of these chunks runs.
            unsafe { chunks.free_all() };
        }
    }
}
