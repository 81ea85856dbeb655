//! The C API of [perfsupport](ps): `libperfsupport.so`, `libperfsupport.a`
//! and `include/perfsupport.h` (generated from this crate by cbindgen).
//!
//! A C or C++ VM gets, through plain C calls:
//!
//! | module | calls | what for |
//! |---|---|---|
//! | [`perf_map`] | `perfsupport_perf_map_init` / `_write_perf_map_entry` / `_fini` / `_after_fork_child` | CPython's trio: `/tmp/perf-<pid>.map` |
//! | [`regions`] | `perfsupport_profilers_open` / `_register` / `_register_ex` / `_retire` / `_after_fork_child` / `_finish` | perf map + jitdump with line tables and unwind info + the GDB JIT interface, in batches; packed code |
//! | [`elf_code`] | `perfsupport_code_files_open` / `_dir` / `_close`, `perfsupport_code_chunk_alloc` / `_address` / `_capacity` / `_write` / `_publish` / `_free` | code memory whose code runs from ELF files: native code to every tool (fleet profilers, perf without inject, eu-stack, bpftrace, samply), no profiler-specific call |
//! | [`unwind`] | `perfsupport_unwind` in a region, `perfsupport_reserved_region_size` | DWARF CFI described as a frame-pointer template or a list of steps |
//! | [`vmprof`] | `perfsupport_vmprof_*`, inline `perfsupport_shadow_stack_push/pop` | VMProf-style sampling |
//! | [`error`] | return codes, `perfsupport_last_error` | why a call failed |
//!
//! # Conventions of every call
//!
//! * An `int` result is 0 on success or a negative `PERFSUPPORT_E*` code;
//!   `perfsupport_last_error()` then gives this thread's message.
//! * No Rust panic crosses the boundary: every entry point runs under
//!   `catch_unwind` and turns a panic (a bug) into `PERFSUPPORT_EPANIC`.
//! * Pointers are checked for NULL and strings for UTF-8; what cannot be
//!   checked (that `code` points to `size` readable bytes, that arrays have
//!   the lengths given) is the caller's contract, stated on each call.

// The modules name each other through `super::`, never `crate::`: the
// fuzz target `capi_arguments` compiles this file in as a module (the
// library has no rlib to depend on: its name is perfsupport's).

#![warn(missing_docs)]
// The C names are the API: `perfsupport_region`, not `PerfsupportRegion`.
#![allow(non_camel_case_types)]

pub mod elf_code;
pub mod error;
pub mod perf_map;
pub mod regions;
pub mod unwind;
pub mod vmprof;

mod cstr;

/// The major version of this header and library: the crate's version
/// (tests/header.rs holds them equal).
pub const PERFSUPPORT_VERSION_MAJOR: u32 = 0;
/// The minor version: calls added in a minor version say so in their docs.
pub const PERFSUPPORT_VERSION_MINOR: u32 = 3;
/// The patch version.
pub const PERFSUPPORT_VERSION_PATCH: u32 = 0;
/// `MAJOR * 10000 + MINOR * 100 + PATCH`, for `#if PERFSUPPORT_VERSION >=
/// 300` (0.3.0, which added the `perfsupport_code_*` calls; 0.2.0 added
/// `perfsupport_register_ex` and `PERFSUPPORT_OUTPUT_GDB`). A header
/// without it is 0.1.
pub const PERFSUPPORT_VERSION: u32 =
    PERFSUPPORT_VERSION_MAJOR * 10000 + PERFSUPPORT_VERSION_MINOR * 100 + PERFSUPPORT_VERSION_PATCH;
