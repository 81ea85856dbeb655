//! The few operating-system calls the sinks need that `std` does not offer:
//! the CLOCK_MONOTONIC clock, the thread id, a descriptor's access mode, and
//! the jitdump marker mapping.
//! All `unsafe` FFI of the crate lives here, one function per concern.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

// ANCHOR: monotonic_ns
/// Current CLOCK_MONOTONIC time in nanoseconds.
///
/// jitdump timestamps must use the clock `perf record -k 1` (CLOCK_MONOTONIC)
/// uses, or `perf inject` matches every JIT sample against the wrong mapping.
pub(crate) fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always exists
    // on Linux, so the call cannot fail.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts.tv_nsec as u64)
}
// ANCHOR_END: monotonic_ns

/// True if `file` was opened for reading (`O_RDONLY` or `O_RDWR`).
pub(crate) fn opened_for_reading(file: &File) -> bool {
    // SAFETY: F_GETFL on a descriptor `file` owns reads its flags; it has
    // no other effect and no memory argument.
    let flags = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GETFL) };
    flags >= 0 && matches!(flags & libc::O_ACCMODE, libc::O_RDONLY | libc::O_RDWR)
}

/// Kernel thread id of the calling thread (what jitdump's `tid` field means).
pub(crate) fn current_tid() -> u32 {
    // SAFETY: gettid has no preconditions and cannot fail.
    unsafe { libc::gettid() as u32 }
}

/// The jitdump marker: one page of the dump file mapped `PROT_READ | PROT_EXEC`,
/// `MAP_PRIVATE`.
///
/// `perf record` logs executable mappings in `perf.data`; the MMAP2 event for
/// `…/jit-<pid>.dump` is how `perf inject --jit` finds the dump. The mapping is
/// deliberately never unmapped: it must outlive every JIT region, and the
/// process ending unmaps it. Only the address is kept, for diagnostics.
#[derive(Debug)]
pub(crate) struct MarkerMapping {
    address: usize,
}

impl MarkerMapping {
    // ANCHOR: marker_map
    /// Maps the first page of `file` (which must be open for reading).
    pub(crate) fn map(file: &File) -> io::Result<MarkerMapping> {
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        let len = if page > 0 { page as usize } else { 4096 };
        // SAFETY: a fresh mapping (addr NULL) of an open descriptor; it does
        // not alias any Rust object, and we never read or write through it.
        let address = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_EXEC,
                libc::MAP_PRIVATE,
                file.as_raw_fd(),
                0,
            )
        };
        if address == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(MarkerMapping {
            address: address as usize,
        })
    }
    // ANCHOR_END: marker_map

    /// Where the marker page is mapped.
    pub(crate) fn address(&self) -> usize {
        self.address
    }
}

/// The ELF machine of the host: the code this crate describes in ELF
/// images (the GDB JIT interface's, the JIT code files) is the host's.
pub(crate) fn elf_machine() -> io::Result<object::elf::Machine> {
    use object::elf;
    if cfg!(target_arch = "x86_64") {
        Ok(elf::EM_X86_64)
    } else if cfg!(target_arch = "aarch64") {
        Ok(elf::EM_AARCH64)
    } else if cfg!(target_arch = "riscv64") {
        Ok(elf::EM_RISCV)
    } else {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "no ELF machine for this architecture: ELF images of JIT code are not supported",
        ))
    }
}
