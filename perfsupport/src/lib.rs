//! VM-agnostic profiler support: tell Linux `perf` (and other profilers)
//! about machine code a VM generates at run time, and record VMProf-style
//! profiles of the VM's own call stack. The crate knows nothing about any
//! particular VM or code generator.
//!
//! # Just a perf map
//!
//! The smallest use: `perf report` names samples in JIT code through
//! `/tmp/perf-<pid>.map`, one line per code region.
//!
//! ```no_run
//! use perfsupport::{CodeRegion, PerfMap, ProfilerSink};
//!
//! # fn main() -> std::io::Result<()> {
//! // At start-up, before the JIT makes any code executable.
//! let perf_map = PerfMap::new();
//! perf_map.open()?; // creates /tmp/perf-<pid>.map
//!
//! // After the JIT has finalized a function: its live, executable bytes.
//! # let code: &[u8] = &[0x55, 0x48, 0x89, 0xe5, 0x5d, 0xc3];
//! perf_map.register(&[CodeRegion::new(code, "toy::fib")])?;
//!
//! // At exit; the file stays for `perf report`.
//! perf_map.finish()?;
//! # Ok(())
//! # }
//! ```
//!
//! The rest of the crate adds more outputs for the same regions (unwind
//! tables, source lines, debuggers) and a sampling profiler of its own.
//!
//! # The sink API: describe generated code
//!
//! A VM describes each piece of generated code as a [`CodeRegion`] (live
//! bytes, name, optional [unwind info](unwind) and line table) and hands the
//! regions of each JIT finalize, as one batch, to its [`Profilers`]: a
//! fan-out to [`ProfilerSink`]s that validates the batch once, so every sink
//! accepts or rejects it alike.
//!
//! | sink | writes | read by |
//! |---|---|---|
//! | [`PerfMap`] | `/tmp/perf-<pid>.map` text lines | `perf report`, `perf script` |
//! | [`JitDump`] | `jit-<pid>.dump` records with unwind info and lines | `perf inject --jit` |
//! | [`GdbJit`] | in-memory ELF objects (symbols, DWARF lines, CFI) for the GDB JIT interface | gdb, lldb |
//!
//! [`sink`] walks through the whole life cycle (create the sinks, reserve
//! room, register, fork, finish) with an example; [`unwind`] shows how to
//! describe stack frames, with or without Cranelift. [`gimli`] is
//! re-exported: its `write` types carry call-frame information.
//!
//! # The vmprof API: sample the VM's own stack
//!
//! [`vmprof`] is a second, independent API: register code objects, mark
//! which one runs (a shadow stack, or a view of the VM's own frames), and a
//! `SIGPROF` sampler writes profiles the PyPI `vmprof` tools read. Its module
//! documentation is its guide.
//!
//! # Creating other output files
//!
//! [`create_output_file`] creates a file the way the crate creates its own:
//! never through a symlink, mode 0644, close-on-exec.
//!
//! # Modules
//!
//! | module | holds |
//! |---|---|
//! | [`region`] | [`CodeRegion`], [`UnwindInfo`], [`LineEntry`]: what a VM hands every sink |
//! | [`sink`] | [`ProfilerSink`], [`Profilers`], and the life cycle of the sinks |
//! | [`perf_map`] | [`PerfMap`] |
//! | [`jitdump`] | [`JitDump`]; its byte format ([`jitdump::format`]), build-id markers ([`jitdump::build_id`]) and perf's unwind payload (in [`unwind::perf_layout`]) |
//! | [`gdb_jit`] | [`GdbJit`] |
//! | [`unwind`] | how a VM describes its frames ([`CallFrameInfo`], [`unwind::x86_64`]), the room to leave after each region, the `__register_frame` section |
//! | [`vmprof`] | the vmprof API |
//! | [`threads`] | [`threads::spawn_helper`]: helper threads that leave the host's signals alone |
//! | [`icache`] | new code made visible to instruction fetch on every thread (the i-cache flush and pipeline synchronization aarch64 needs) |
//!
//! Private: `validation` ([`CodeRegion::validate`]; it builds the jitdump's
//! unwind payload, so it sits above both `region` and `jitdump`), `eh_frame`
//! (the CIE + FDE writer both unwind layouts share), `os` and `safe_file`.
//! `unwind` uses `jitdump`, which uses `region`, never the other way round.
//! A module with submodules keeps its root in `<name>/mod.rs`.

#![warn(missing_docs)]

pub mod elf_code;
pub mod gdb_jit;
pub mod icache;
pub mod jitdump;
pub mod perf_map;
pub mod region;
pub mod sink;
pub mod threads;
pub mod unwind;
pub mod vmprof;

mod dwarf;
mod eh_frame;
mod os;
mod safe_file;
mod validation;

pub use gimli;

pub use elf_code::{ChunkRegion, CodeChunk, ElfCodeFiles};
pub use gdb_jit::GdbJit;
pub use jitdump::JitDump;
pub use perf_map::PerfMap;
pub use region::{CodeRegion, LineEntry, UnwindInfo};
pub use safe_file::create_output_file;
pub use sink::{ProfilerSink, Profilers, SinkFailure, UnwindFallbacks};
pub use unwind::CallFrameInfo;
pub use validation::validate_ranges;
