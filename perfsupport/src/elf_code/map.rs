//! The memory side of [`ElfCodeFiles`](super::ElfCodeFiles): mapping a code
//! file over the chunk its code was written in. All of this module's
//! `unsafe` is here.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

/// The page size.
pub(super) fn page_size() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if page > 0 { page as u64 } else { 4096 }
}

/// Maps the first `len` bytes of `file` executable at an address of the
/// kernel's choice and unmaps them: fails where code cannot run from files
/// (`noexec`).
pub(super) fn probe_exec(file: &File, len: usize) -> io::Result<()> {
    // SAFETY: a fresh mapping (addr NULL) that aliases no Rust object; it
    // is unmapped right away and never touched.
    let at = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_EXEC,
            libc::MAP_PRIVATE,
            file.as_raw_fd(),
            0,
        )
    };
    if at == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: exactly the mapping made above.
    unsafe { libc::munmap(at, len) };
    Ok(())
}

/// Maps `len` bytes of `file` from offset `offset` read+execute over
/// `[chunk, chunk + len)`, replacing what was mapped there.
///
/// # Safety
///
/// `[chunk, chunk + len)` is a page-aligned range the caller owns (no Rust
/// object lives there and no reference points into it, no code in it runs,
/// nothing writes it from now on); afterwards it shows the file's bytes
/// from `offset`, the code the caller means to run there.
pub(super) unsafe fn map_code(
    file: &File,
    offset: u64,
    chunk: usize,
    len: usize,
) -> io::Result<()> {
    let offset = libc::off_t::try_from(offset)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "file offset too large"))?;
    // SAFETY: MAP_FIXED over a range the caller owns (see above): it
    // replaces whatever was mapped there (read-write pages of the same
    // code, or an untouched reservation) by the file's bytes, read and
    // execute only. A failure in the checks before the mapping (a
    // `noexec` file system, a descriptor not open for reading) leaves the
    // old pages in place.
    let at = unsafe {
        libc::mmap(
            chunk as *mut libc::c_void,
            len,
            libc::PROT_READ | libc::PROT_EXEC,
            libc::MAP_PRIVATE | libc::MAP_FIXED,
            file.as_raw_fd(),
            offset,
        )
    };
    if at == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Maps `len` bytes (a multiple of the page size) of fresh anonymous
/// read-write memory at an address of the kernel's choice.
pub(super) fn map_anonymous(len: usize) -> io::Result<usize> {
    // SAFETY: a fresh private mapping (addr NULL) that aliases nothing.
    let at = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if at == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(at as usize)
}

/// Unmaps `[start, start + len)`.
///
/// # Safety
///
/// The range is a mapping the caller made and owns, and nothing refers to
/// its memory any more (no code in it runs or will be called).
pub(super) unsafe fn unmap(start: usize, len: usize) {
    // SAFETY: the caller's contract. munmap of a range we own fails only
    // for invalid arguments, which the caller's contract excludes.
    unsafe { libc::munmap(start as *mut libc::c_void, len) };
}

/// Copies `bytes` to `at`.
///
/// # Safety
///
/// `[at, at + bytes.len())` is writable memory the caller owns and no
/// Rust reference points into.
pub(super) unsafe fn copy_to(at: usize, bytes: &[u8]) {
    // SAFETY: the caller's contract; `bytes` cannot overlap memory no
    // reference points into.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), at as *mut u8, bytes.len()) };
}
