//! The tiny "VM" of perfsupport's end-to-end test as a program: two
//! hand-written x86-64 functions JIT-compiled into anonymous memory and
//! registered with a perf map and a jitdump, run for half a second.
//!
//! ```console
//! $ cargo run --release -p perfsupport --example e2e_vm -- DIR
//! pid=12345
//! ```
//!
//! It writes `DIR/jit-PID.dump` and `/tmp/perf-PID.map`; `toyvm jitdump
//! DIR/jit-PID.dump` decodes the dump (the book's jitdump chapter shows
//! it). Under `perf record -k 1 --call-graph dwarf` and `perf inject
//! --jit` its stacks go through the function without a frame pointer.

#[path = "../tests/perf_e2e/child.rs"]
mod child;
#[path = "../tests/common/mod.rs"]
mod common;

use std::path::Path;
use std::process::ExitCode;

fn main() -> ExitCode {
    let dir = std::env::args_os().nth(1).unwrap_or_else(|| ".".into());
    match child::run_child(Path::new(&dir)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("e2e_vm: {err}");
            ExitCode::FAILURE
        }
    }
}
