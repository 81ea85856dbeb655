//! Making freshly written code visible to instruction fetch: what every
//! code generator must do between writing code and running it, for the
//! toyvm JIT (`jit/src/codegen/icache.rs`) and for C JITs' code chunks
//! ([`crate::elf_code::CodeChunk::publish`]) alike. All of this module's
//! `unsafe` is here.
//!
//! x86-64 keeps its instruction caches coherent with data writes, so code
//! written and then made executable (`mprotect`) runs as written. aarch64
//! does not: the bytes may still sit in the data cache while the
//! instruction cache holds stale lines for the same addresses, so each
//! range of new code is cleaned to the point of unification and the
//! instruction cache invalidated for it (`__clear_cache`, libgcc's and
//! compiler-rt's, which does `dc cvau` / `ic ivau` / `dsb` / `isb` per
//! cache line). A thread that runs the code is not the one that wrote it
//! when the compiler thread compiles: it may have fetched older
//! instructions into its pipeline, so the writer also makes every thread
//! of the process execute a context-synchronizing event
//! (`membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE)`), registered
//! once.
//!
//! Code that runs from a file mapping (`--jit-elf`, [`crate::elf_code`])
//! needs no flush: the kernel makes a page-cache page coherent when it
//! maps it executable. The threads are synchronized all the same: an
//! address may have held other code before.
//! qemu-user cannot show a missing flush (it translates code from memory
//! as written), so only real hardware tests this.

// ANCHOR: prepare_to_run
/// Makes `[start, start + len)`, just written, safe to execute on every
/// thread: its instruction cache lines refreshed (aarch64; nothing to do
/// on x86-64), then every thread's pipeline synchronized. `from_file`:
/// the range is a fresh file mapping, which the kernel made coherent.
///
/// # Safety
/// `[start, start + len)` is memory this process has mapped (cache
/// maintenance on an unmapped address faults).
pub unsafe fn prepare_to_run(start: usize, len: usize, from_file: bool) {
    if !from_file {
        clear_cache(start, len);
    }
    sync_all_threads();
}
// ANCHOR_END: prepare_to_run

/// `dc cvau` then `ic ivau` over every cache line of the range, as
/// compiler-rt's `__clear_cache` does for aarch64.
#[cfg(target_arch = "aarch64")]
fn clear_cache(start: usize, len: usize) {
    if len == 0 {
        return;
    }
    let end = start + len;
    let ctr: u64;
    // SAFETY: reading CTR_EL0 (cache type) is allowed at EL0 on Linux.
    unsafe { std::arch::asm!("mrs {}, ctr_el0", out(reg) ctr, options(nomem, nostack)) };
    // CTR_EL0.IDC (bit 28): the data cache need not be cleaned for the
    // instruction cache to see the bytes; DIC (bit 29): the instruction
    // cache need not be invalidated.
    if ctr & (1 << 28) == 0 {
        let line = 4usize << ((ctr >> 16) & 0xf);
        let mut at = start & !(line - 1);
        while at < end {
            // SAFETY: cleaning a cache line of memory this process mapped
            // and just wrote has no effect on its contents.
            unsafe { std::arch::asm!("dc cvau, {}", in(reg) at, options(nostack)) };
            at += line;
        }
    }
    // SAFETY: barriers only order memory accesses.
    unsafe { std::arch::asm!("dsb ish", options(nostack)) };
    if ctr & (1 << 29) == 0 {
        let line = 4usize << (ctr & 0xf);
        let mut at = start & !(line - 1);
        while at < end {
            // SAFETY: invalidating instruction cache lines of our own
            // mapping only makes later fetches read memory.
            unsafe { std::arch::asm!("ic ivau, {}", in(reg) at, options(nostack)) };
            at += line;
        }
    }
    // SAFETY: barriers only order memory accesses and instruction fetch.
    unsafe { std::arch::asm!("dsb ish", "isb", options(nostack)) };
}

/// x86-64 (and others this JIT does not target): caches are coherent.
#[cfg(not(target_arch = "aarch64"))]
fn clear_cache(_start: usize, _len: usize) {}

/// `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE)`: every thread of
/// the process executes a context-synchronizing instruction before it
/// returns to user space, so none runs instructions it fetched before the
/// code was written. Registered on first use; where the kernel (or an
/// emulator) refuses it, the threads synchronize anyway when they next
/// enter the kernel, as they do when they learn of new code (the compiler
/// hands code over through a lock). Not needed on x86-64.
#[cfg(target_arch = "aarch64")]
pub fn sync_all_threads() {
    const REGISTER_PRIVATE_EXPEDITED_SYNC_CORE: libc::c_int = 1 << 6;
    const PRIVATE_EXPEDITED_SYNC_CORE: libc::c_int = 1 << 5;
    static USABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let usable = *USABLE.get_or_init(|| {
        // SAFETY: membarrier takes integers and touches no memory of ours.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_membarrier,
                REGISTER_PRIVATE_EXPEDITED_SYNC_CORE,
                0,
                0,
            )
        };
        rc == 0
    });
    if usable {
        // SAFETY: as above.
        unsafe { libc::syscall(libc::SYS_membarrier, PRIVATE_EXPEDITED_SYNC_CORE, 0, 0) };
    }
}

/// x86-64: a new code address reached through a lock needs no more.
#[cfg(not(target_arch = "aarch64"))]
pub fn sync_all_threads() {}
