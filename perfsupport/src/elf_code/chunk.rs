//! [`CodeChunk`]: code memory a VM owns through perfsupport, from its
//! allocation to its death: written while it is read-write, published
//! from a file (read+execute, never writable again), unmapped when dropped.
//! It is [`ElfCodeFiles::publish`] with the memory rules kept by the type,
//! so a VM (and the C API) needs no `unsafe` of its own.
//!
//! ```no_run
//! # fn main() -> std::io::Result<()> {
//! use perfsupport::elf_code::{ChunkRegion, ElfCodeFiles};
//! let files = ElfCodeFiles::create(std::path::Path::new("/tmp"), "myvm")?;
//! let mut chunk = files.allocate(4096, 1)?;
//! // `ret`, at the address it will run at: chunk.code_address().
//! chunk.write(0, &[0xc3])?;
//! chunk.publish(&files, &[ChunkRegion::new(0, 1, "myvm:nothing")])?;
//! // SAFETY: the chunk holds a complete function at its code address.
//! let f: extern "C" fn() = unsafe { std::mem::transmute(chunk.code_address()) };
//! f();
//! drop(chunk); // unmapped: the code is dead, its addresses free
//! # Ok(()) }
//! ```

use super::{ElfCodeFiles, map, spare_bytes_needed};
use crate::region::{CodeRegion, LineEntry, UnwindInfo};
use std::io;
use std::path::PathBuf;

/// One region of a chunk for [`CodeChunk::publish`]: where its code is
/// (an offset from [`CodeChunk::code_address`]) and what describes it.
#[derive(Clone, Copy, Debug)]
pub struct ChunkRegion<'a> {
    /// Offset of the first code byte from the chunk's code address.
    pub offset: usize,
    /// Code size in bytes.
    pub size: usize,
    /// The symbol name.
    pub name: &'a str,
    /// Call-frame information, if any (`.eh_frame`).
    pub unwind: Option<UnwindInfo<'a>>,
    /// The line table, rows sorted by offset from the region's start.
    pub lines: &'a [LineEntry<'a>],
}

impl<'a> ChunkRegion<'a> {
    /// A region with no unwind information and no line table.
    pub fn new(offset: usize, size: usize, name: &'a str) -> Self {
        ChunkRegion {
            offset,
            size,
            name,
            unwind: None,
            lines: &[],
        }
    }

    /// The same region with call-frame information.
    pub fn with_unwind(self, unwind: impl Into<UnwindInfo<'a>>) -> Self {
        ChunkRegion {
            unwind: Some(unwind.into()),
            ..self
        }
    }

    /// The same region with a line table.
    pub fn with_lines(self, lines: &'a [LineEntry<'a>]) -> Self {
        ChunkRegion { lines, ..self }
    }
}

/// Memory for one batch of code: read-write until
/// [`publish`](Self::publish), then a read+execute mapping of the batch's
/// file; unmapped when dropped (drop it only when none of its code runs or
/// will be called again).
#[derive(Debug)]
pub struct CodeChunk {
    /// The mapping: a page for the file's headers, then the code.
    start: usize,
    len: usize,
    page: usize,
    /// Bytes of code the caller may write.
    capacity: usize,
    published: Option<PathBuf>,
}

impl ElfCodeFiles {
    /// A chunk for up to `code_bytes` bytes of code in up to `regions`
    /// regions: read-write, zeroed, at an address that does not change
    /// (code may be relocated for [`CodeChunk::code_address`] as it is
    /// written).
    ///
    /// # Errors
    /// `code_bytes` of 0 or too large; the mapping fails.
    pub fn allocate(&self, code_bytes: usize, regions: usize) -> io::Result<CodeChunk> {
        let page = self.page as usize;
        let len = (code_bytes.checked_add(spare_bytes_needed(regions.max(1))))
            .and_then(|n| n.checked_next_multiple_of(page))
            .and_then(|n| n.checked_add(page))
            .filter(|_| code_bytes > 0 && code_bytes <= isize::MAX as usize / 2)
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("JIT code chunk: {code_bytes} bytes of code"),
                )
            })?;
        let start = map::map_anonymous(len)?;
        Ok(CodeChunk {
            start,
            len,
            page,
            capacity: code_bytes,
            published: None,
        })
    }
}

impl CodeChunk {
    /// The address the code's byte 0 runs at.
    pub fn code_address(&self) -> usize {
        self.start + self.page
    }

    /// How many bytes of code the chunk takes.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The file the code runs from, once published.
    pub fn file(&self) -> Option<&std::path::Path> {
        self.published.as_deref()
    }

    /// Copies `bytes` to code offset `offset`.
    ///
    /// # Errors
    /// The chunk is published (its code is final), or the bytes do not fit.
    pub fn write(&mut self, offset: usize, bytes: &[u8]) -> io::Result<()> {
        if self.published.is_some() {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "JIT code chunk: published code is never written again",
            ));
        }
        if offset
            .checked_add(bytes.len())
            .is_none_or(|end| end > self.capacity)
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "JIT code chunk: {} bytes at offset {offset} do not fit in {}",
                    bytes.len(),
                    self.capacity
                ),
            ));
        }
        // SAFETY: inside the chunk's read-write code bytes (checked above),
        // which only this chunk owns; `&mut self` means no slice of them
        // is alive.
        unsafe { map::copy_to(self.code_address() + offset, bytes) };
        Ok(())
    }

    /// Writes the chunk's code and `regions` into a new file of `files`
    /// and runs the code from it: read+execute from now on, never written
    /// again. Returns the file's path.
    ///
    /// # Errors
    /// Already published; a region outside the code bytes, malformed, or
    /// overlapping another; the file cannot be written or mapped (the
    /// chunk is then still read-write, and the caller may make it
    /// executable by other means or drop it).
    pub fn publish(
        &mut self,
        files: &ElfCodeFiles,
        regions: &[ChunkRegion<'_>],
    ) -> io::Result<PathBuf> {
        if self.published.is_some() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "JIT code chunk: published twice",
            ));
        }
        if files.page as usize != self.page {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "JIT code chunk: published with files of another page size",
            ));
        }
        let code = self.code_address();
        // Inside the code bytes; the rest (sizes, names, overlaps) is
        // what `ElfCodeFiles::publish` checks of every batch.
        for r in regions {
            if r.offset
                .checked_add(r.size)
                .is_none_or(|end| end > self.capacity)
            {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "JIT code chunk: region {:?} ({} bytes at offset {}) is outside the \
                         chunk's {} bytes of code",
                        r.name, r.size, r.offset, self.capacity
                    ),
                ));
            }
        }
        let path = {
            let code_regions: Vec<CodeRegion<'_>> = regions
                .iter()
                .map(|r| {
                    // SAFETY: inside the chunk's code bytes (checked
                    // above), mapped and owned by the chunk; nothing
                    // writes them while the slices live (publish holds
                    // `&mut self`, and the file's mapping shows the same
                    // bytes).
                    let bytes = unsafe {
                        std::slice::from_raw_parts((code + r.offset) as *const u8, r.size)
                    };
                    let region = CodeRegion::new(bytes, r.name).with_lines(r.lines);
                    match r.unwind {
                        Some(unwind) => region.with_unwind(unwind),
                        None => region,
                    }
                })
                .collect();
            // SAFETY: the chunk is a private read-write mapping only this
            // value owns, page-aligned, its first page free (code starts
            // after it); nothing writes it during the call.
            unsafe { files.publish(self.start, self.len, &code_regions) }?
        };
        // The file mapping is coherent with instruction fetch; a thread
        // other than this one may run the code next, at an address that
        // held other code before: every thread synchronizes (aarch64).
        crate::icache::sync_all_threads();
        self.published = Some(path.clone());
        Ok(path)
    }
}

impl Drop for CodeChunk {
    fn drop(&mut self) {
        // SAFETY: the mapping is this value's alone; dropping it is the
        // owner's word that none of its code runs or will be called.
        unsafe { map::unmap(self.start, self.len) };
    }
}
