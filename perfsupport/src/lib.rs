//! VM-agnostic profiler support: tell Linux `perf` (and other profilers)
//! about machine code a VM generates at run time.
//!
//! A VM describes each piece of generated code as a [`CodeRegion`] (live
//! bytes, name, kind, optional DWARF unwind info and line table) and hands
//! batches of them to one or more [`ProfilerSink`]s, usually through the
//! [`Profilers`] fan-out. The crate knows nothing about any particular VM.
//!
//! | module | writes | read by |
//! |---|---|---|
//! | [`perf_map`] | `/tmp/perf-<pid>.map` text lines | `perf report`, `perf script` |
//! | [`jitdump`] | `jit-<pid>.dump` records | `perf inject --jit` |
//! | [`unwind`] | `.eh_frame` / `.eh_frame_hdr` bytes | perf's libunwind, libgcc's `__register_frame` |
//! | [`safe_file`] | nothing itself: symlink-safe creation of the above | |
//! | [`region`], [`sink`] | the shared types | |
//!
//! # How a VM uses this crate
//!
//! 1. **At start-up, before the JIT makes any code executable:** create the
//!    sinks. [`JitDump::create_in`] maps the dump's marker page at once (perf
//!    drops anonymous exec mappings only *after* it); [`PerfMap::open`] creates
//!    `/tmp/perf-<pid>.map` before cranelift-jit appends its own lines there.
//! 2. **When laying out code:** leave
//!    [`unwind::reserved_region_size`] bytes per region (code, pad to 8,
//!    unwind payload, pad to 16) so perf's injected mappings never overlap.
//!    Use anonymous `mmap` memory, not the malloc heap.
//! 3. **After each JIT finalize** (relocations applied, memory `PROT_EXEC`),
//!    before the new code first runs: build one [`CodeRegion`] per function
//!    from the *live* bytes and call [`Profilers::register`] once for the
//!    batch. Print the returned [`SinkFailure`]s; a failed sink is disabled,
//!    the others keep going.
//! 4. **Optionally**, build [`unwind::eh_frame_for_register_frame`] bytes and
//!    pass them to libgcc's `__register_frame` so Rust panics and backtraces
//!    can cross JIT frames.
//! 5. **In a forked child:** call [`PerfMap::after_fork_child`]; create a new
//!    [`JitDump`] rather than using the parent's.
//! 6. **At exit:** [`Profilers::finish`]. The files stay for `perf report`
//!    and `perf inject`.
//!
//! ```
//! use perfsupport::{CodeRegion, JitDump, LineEntry, PerfMap, Profilers, RegionKind};
//!
//! # fn main() -> std::io::Result<()> {
//! # let dir = std::env::temp_dir().join(format!("perfsupport-doc-{}", std::process::id()));
//! # std::fs::create_dir_all(&dir)?;
//! let mut profilers = Profilers::new();
//! let perf_map = PerfMap::in_dir(&dir); // PerfMap::new() for the real /tmp
//! perf_map.open()?;
//! profilers.add(Box::new(perf_map));
//! profilers.add(Box::new(JitDump::create_in(&dir)?));
//!
//! // ... the JIT compiles and finalizes; `code` is the live executable bytes ...
//! # let code: &[u8] = &[0x55, 0x48, 0x89, 0xe5, 0x5d, 0xc3];
//! let lines = [LineEntry { offset: 0, file: "fib.toy", line: 3, column: 1 }];
//! let region = CodeRegion::new(code, "toy::fib", RegionKind::JitCode).with_lines(&lines);
//! for failure in profilers.register(&[region]) {
//!     eprintln!("toyvm: {failure}");
//! }
//!
//! for failure in profilers.finish() {
//!     eprintln!("toyvm: {failure}");
//! }
//! # std::fs::remove_dir_all(&dir)?;
//! # Ok(())
//! # }
//! ```

#![warn(missing_docs)]

pub mod jitdump;
pub mod perf_map;
pub mod region;
pub mod safe_file;
pub mod sink;
pub mod unwind;
pub mod vmprof;

mod os;

pub use jitdump::JitDump;
pub use perf_map::PerfMap;
pub use region::{CodeRegion, LineEntry, RegionKind, UnwindInfo};
pub use sink::{ProfilerSink, Profilers, SinkFailure};
