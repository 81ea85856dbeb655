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
//! | [`gdb_jit`] | in-memory ELF objects (symbols, DWARF lines, CFI) | gdb, lldb |
//! | [`unwind`] | `.eh_frame` / `.eh_frame_hdr` bytes | perf's libunwind, libgcc's `__register_frame` |
//! | [`vmprof`] | VMProf-style profiles of the VM's own call stack | `vmprof`, `vmprofshow` |
//! | [`safe_file`] | nothing itself: symlink-safe creation of the above | |
//! | [`region`], [`sink`] | the shared types | |
//!
//! Start with [`sink`]: it explains, step by step, how a VM uses the crate.

#![warn(missing_docs)]

pub mod gdb_jit;
pub mod jitdump;
pub mod perf_map;
pub mod region;
pub mod safe_file;
pub mod sink;
pub mod unwind;
pub mod vmprof;

mod os;

pub use gdb_jit::GdbJit;
pub use jitdump::JitDump;
pub use perf_map::PerfMap;
pub use region::{CodeRegion, LineEntry, RegionKind, UnwindInfo};
pub use sink::{ProfilerSink, Profilers, SinkFailure};
