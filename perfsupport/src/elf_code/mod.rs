//! JIT code that runs from ELF files: code every native tool can read
//! without being told about it.
//!
//! Fleet profilers built on the OpenTelemetry eBPF profiler read neither
//! perf maps nor jitdumps: they drop samples in anonymous executable
//! memory, and unwind and symbolize only executable mappings of real ELF
//! files (not memfd), from the file's `.eh_frame`, identified by device and
//! inode, symbolized by build-id. [`ElfCodeFiles::publish`] gives a batch of
//! finished code exactly that: it writes the batch (its bytes as they run,
//! `.eh_frame` and `.eh_frame_hdr` for every region with unwind info, a
//! symbol per region, a GNU build-id) into a new file, and maps the file's
//! code read+execute over the memory the code was written in, at the same
//! address. The file is complete before it is mapped and never written
//! again; the next batch gets the next file. perf (without `perf inject`),
//! eu-stack, bpftrace and samply read the same files.
//!
//! The layout of a file is in [`image`]; the mapping in [`map`]; the
//! files made ahead of the batches that will fill them, by a helper thread
//! (`perfsupport-files`), in [`ahead`]: naming a new file is the slowest
//! step of publishing a small batch, and it does not depend on the batch.
//!
//! A VM that lets perfsupport own its code memory takes a [`CodeChunk`]
//! ([`ElfCodeFiles::allocate`]), writes it, publishes it and drops it when
//! the code dies: no `unsafe` on its side. A VM with its own code memory
//! (toyvm's JIT) calls [`publish`](ElfCodeFiles::publish) itself.
//!
//! The order of work for a VM: write and relocate the batch's code in
//! read-write memory (page-aligned chunks of its own, nothing else in their
//! pages), call [`publish`](ElfCodeFiles::publish) (no page is ever
//! writable and executable at once), run the code; when the code dies,
//! map the chunk away (a new anonymous mapping over it is enough). Code
//! placed again at a freed address comes from a new file.
//!
//! Faster for small batches (toyvm's JIT does it): reserve the chunk
//! (`PROT_NONE`) but never touch it, write the batch's bytes, relocated
//! for the chunk, into ordinary memory, and call
//! [`publish_staged`](ElfCodeFiles::publish_staged). The file's mapping
//! then replaces pages that were never populated: no `mprotect`, no page
//! fault, and no TLB flush on the other CPUs, which for a one-line
//! function was about 20 us of a 140 us compile (`bench/RESULTS.md`).

mod ahead;
mod chunk;
pub mod image;
mod map;

pub use chunk::{ChunkRegion, CodeChunk};

use crate::region::CodeRegion;
use crate::safe_file::{WriteMode, create_replacing_stale};
use ahead::{Ahead, Naming, NewFile};
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The directory a process's code files go to, and the files written so
/// far.
#[derive(Debug)]
pub struct ElfCodeFiles {
    /// Where relative source paths of line tables are found (the
    /// directory the process started in): the files' DWARF says so.
    comp_dir: String,
    page: u64,
    /// Names the files; the helper thread makes the next ones before
    /// batches need them.
    ahead: Ahead,
}

/// Mode of the per-process directory: others may read the files (a
/// profiler may run as another user), nobody else may add or remove any.
const DIR_MODE: u32 = 0o755;
/// Mode of every code file: read-only once written (it is never written
/// again), readable by every profiler.
const FILE_MODE: u32 = 0o444;

impl ElfCodeFiles {
    /// Makes `parent/PREFIX-PID/` (a new directory; an old one left by a
    /// process with the same pid is reused only if we own it) and checks
    /// that code can run from files there: a `noexec` mount, a read-only or
    /// full file system gives an error that names the directory.
    pub fn create(parent: &Path, prefix: &str) -> io::Result<ElfCodeFiles> {
        if prefix.is_empty() || prefix.contains(['/', '\0']) || prefix.starts_with('.') {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("JIT code files: {prefix:?} cannot start a directory name"),
            ));
        }
        let dir = parent.join(format!("{prefix}-{}", std::process::id()));
        let context = |e: io::Error| {
            io::Error::new(
                e.kind(),
                format!("JIT code files in {}: {e}", dir.display()),
            )
        };
        make_own_dir(&dir).map_err(context)?;
        let comp_dir = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
        let page = map::page_size();
        probe(&dir, page).map_err(context)?;
        Ok(ElfCodeFiles {
            comp_dir: comp_dir.to_string_lossy().into_owned(),
            page,
            ahead: Ahead::start(Arc::new(Naming::new(dir)), page as usize),
        })
    }

    /// The directory the files go to.
    pub fn dir(&self) -> &Path {
        self.ahead.dir()
    }

    /// The page size the files are laid out for: chunks given to
    /// [`publish`](Self::publish) start and end on a multiple of it, and
    /// leave their first page free for the file's headers.
    pub fn page_size(&self) -> u64 {
        self.page
    }

    /// Removes the files made ahead for the next batches that no batch
    /// took (zeros only, never mapped); the next
    /// [`publish`](Self::publish) makes its own file and wakes the helper
    /// again.
    /// For a VM that stops compiling while the files live on (toyvm's are
    /// the process's, shared by its VMs, and never dropped); dropping the
    /// files does the same.
    pub fn discard_prepared(&self) {
        self.ahead.discard();
    }

    /// Publishes a batch: writes `dir/code-N.so` (the next file made
    /// ahead, or a new one) for the chunk of code that
    /// starts at `chunk` and is `len` bytes long (page-aligned, the batch's
    /// final bytes, relocated for that address) and the `regions` in it,
    /// then maps the file read+execute over the chunk. The chunk's first
    /// page ([`page_size`](Self::page_size)) must be left free for the
    /// file's headers, and its bytes after its last region must be spare:
    /// the unwind tables and the build-id go there ([`spare_bytes_needed`]
    /// says how many). Returns the file's path.
    ///
    /// # Errors
    ///
    /// An unaligned chunk, a region outside it, a region name the ELF
    /// cannot hold, a failed write or mapping: the chunk is then unchanged
    /// (still read-write) and the caller makes it executable as before.
    ///
    /// # Safety
    ///
    /// `[chunk, chunk + len)` must be memory the caller mapped (read-write,
    /// private) and owns: nothing else lives in those pages, nothing writes
    /// them during the call, and `regions` borrow code inside it. On
    /// success the pages are a read-only, executable mapping of the file
    /// with the same contents.
    pub unsafe fn publish(
        &self,
        chunk: usize,
        len: usize,
        regions: &[CodeRegion<'_>],
    ) -> io::Result<PathBuf> {
        self.check_chunk(chunk, len)?;
        crate::validation::validate_batch(regions)?;
        let image = {
            // SAFETY: the caller guarantees [chunk, chunk + len) is mapped,
            // readable and not written during the call; the slice is gone
            // before the mapping replaces those bytes.
            let code = unsafe { std::slice::from_raw_parts(chunk as *const u8, len) };
            self.image(chunk, code, regions)?
        };
        // SAFETY: the caller's contract.
        unsafe { self.write_and_map(image, chunk, len) }
    }

    /// Publishes a batch whose bytes were staged in ordinary memory, not
    /// written at the addresses where they will run: as
    /// [`publish`](Self::publish), with the chunk's bytes (its first page
    /// left free, then the code relocated for `chunk`, then spare bytes)
    /// read from `staged`, and `regions` borrowing their code in `staged`.
    /// The chunk's pages need not be readable or ever have been touched: a
    /// VM that stages its batches never maps them writable, so no page of
    /// the chunk is populated before the file's mapping replaces it (no
    /// `mprotect`, no page fault, and no TLB flush on other CPUs when the
    /// mapping replaces it).
    ///
    /// # Errors
    ///
    /// As [`publish`](Self::publish); the chunk is then unchanged.
    ///
    /// # Safety
    ///
    /// `[chunk, chunk + staged.len())` must be memory the caller mapped
    /// (with any protection) and owns: nothing else lives in those pages,
    /// no code in them runs, and `staged` lies elsewhere. On success the
    /// pages are a read-only, executable mapping of the file with
    /// `staged`'s contents.
    pub unsafe fn publish_staged(
        &self,
        chunk: usize,
        staged: &[u8],
        regions: &[CodeRegion<'_>],
    ) -> io::Result<PathBuf> {
        self.check_chunk(chunk, staged.len())?;
        crate::validation::validate_batch(regions)?;
        let image = self.image(chunk, staged, regions)?;
        // SAFETY: the caller's contract.
        unsafe { self.write_and_map(image, chunk, staged.len()) }
    }

    /// A chunk starts and ends on a page boundary and is a valid range.
    fn check_chunk(&self, chunk: usize, len: usize) -> io::Result<()> {
        if !(chunk as u64).is_multiple_of(self.page)
            || !(len as u64).is_multiple_of(self.page)
            || len == 0
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "JIT code files: a chunk must start and end on a page boundary",
            ));
        }
        crate::validation::validate_ranges(&[(chunk, len)])
    }

    /// The next file, and the image of the chunk whose bytes are `mem`
    /// (see [`image::build`]) to write into it.
    fn image(
        &self,
        chunk: usize,
        mem: &[u8],
        regions: &[CodeRegion<'_>],
    ) -> io::Result<(NewFile, Vec<u8>)> {
        let new = match self.ahead.take() {
            Some(prepared) => prepared,
            None => self.ahead.create()?,
        };
        let salt = [
            u64::from(std::process::id()).to_le_bytes(),
            new.number.to_le_bytes(),
            (chunk as u64).to_le_bytes(),
        ]
        .concat();
        match image::build(self.page, chunk as u64, mem, regions, &self.comp_dir, &salt) {
            Ok(bytes) => Ok((new, bytes)),
            Err(e) => {
                // Nothing was written: the file is not worth keeping.
                drop(new.file);
                let _ = std::fs::remove_file(&new.path);
                Err(e)
            }
        }
    }

    /// Writes `image` into its file and maps the file's first `len` bytes
    /// read+execute at `chunk`.
    ///
    /// # Safety
    /// As [`publish_staged`](Self::publish_staged), the image being the
    /// chunk's.
    unsafe fn write_and_map(
        &self,
        (new, bytes): (NewFile, Vec<u8>),
        chunk: usize,
        len: usize,
    ) -> io::Result<PathBuf> {
        let NewFile { path, file, .. } = new;
        // At offset 0: a file made ahead already holds zeros (see `ahead`).
        let result = file.write_all_at(&bytes, 0).and_then(|()| {
            // SAFETY: the caller's contract; the file's first `len` bytes
            // are the chunk's code as the caller staged or wrote it (the
            // headers' page and the tables in the spare bytes aside).
            unsafe { map::map_code(&file, 0, chunk, len) }
        });
        drop(file);
        if let Err(e) = result {
            let _ = std::fs::remove_file(&path);
            return Err(io::Error::new(
                e.kind(),
                format!("JIT code file {}: {e}", path.display()),
            ));
        }
        Ok(path)
    }
}

/// Spare bytes a chunk needs after its last region for `regions` regions
/// (each with unwind info of a usual size: a CIE and an FDE of up to 112
/// bytes): [`ElfCodeFiles::publish`] refuses a chunk with fewer than it
/// needs, and the caller runs that batch from anonymous memory.
pub fn spare_bytes_needed(regions: usize) -> usize {
    16 + 12 + 8 * regions + 128 * regions + 4 + 36
}

/// Spare bytes a chunk needs after its last region for regions with
/// unwind info, each given by the bytes perf maps after it for its table
/// ([`reserved_region_size`](crate::unwind::reserved_region_size) minus the
/// code size, which holds the region's CIE and FDE and more), whatever
/// their size (a function with many returns has a long FDE): an upper
/// bound of the `.eh_frame_hdr`, the `.eh_frame` and the build-id note,
/// with their alignment.
pub fn spare_bytes_for(unwind_bytes: impl IntoIterator<Item = usize>) -> usize {
    let fixed = 16 + 12 + 8 + 4 + 4 + 36;
    fixed + unwind_bytes.into_iter().map(|b| 8 + b).sum::<usize>()
}

/// Writes a one-page file in `dir` and maps it executable, once: what
/// fails on a `noexec` mount or a full disk fails here, before any code
/// depends on it.
fn probe(dir: &Path, page: u64) -> io::Result<()> {
    let path = dir.join("probe");
    let mut file = create_replacing_stale(&path, FILE_MODE, WriteMode::ReadWrite)?;
    let written = file.write_all(&vec![0u8; page as usize]);
    let mapped = written.and_then(|()| map::probe_exec(&file, page as usize));
    drop(file);
    let _ = std::fs::remove_file(&path);
    mapped
}

/// Creates `dir` (mode [`DIR_MODE`]), or takes an existing one that is a
/// real directory (not a symlink) owned by us.
fn make_own_dir(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    match std::fs::DirBuilder::new().mode(DIR_MODE).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            let meta = std::fs::symlink_metadata(dir)?;
            // SAFETY: geteuid has no preconditions.
            let me = unsafe { libc::geteuid() };
            if !meta.file_type().is_dir() || meta.uid() != me {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    "exists and is not a directory of ours",
                ));
            }
        }
        Err(e) => return Err(e),
    }
    // The umask may have narrowed the mode; others must not write.
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(DIR_MODE))
}

#[cfg(test)]
mod tests;
