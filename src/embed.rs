//! Embedding toyvm: many VMs, one after another or at once, in one host
//! process, the way a scripting VM is embedded (`examples/embed.rs` runs
//! it from the command line).
//!
//! ```no_run
//! use toyvm::embed::{self, Engine};
//!
//! let script = embed::load("fib.toy", b"fn f() -> int { return 1; }\nprint(f());\n").unwrap();
//! let engine = Engine::new(Some(jit::JitOptions {
//!     threshold: Some(jit::DEFAULT_THRESHOLD),
//!     cost_model: true,
//!     background: true,
//!     perf_map: true,
//!     ..jit::JitOptions::default()
//! }));
//! let mut out = Vec::new();
//! let mut err = Vec::new();
//! let status = engine.run(&script, vec![], &mut out, &mut err);
//! assert_eq!((status, out), (0, b"1\n".to_vec()));
//! ```
//!
//! Each [`Engine::run`] makes a fresh VM and, with JIT options, a fresh JIT
//! (its compiler thread included), runs `<main>` and drops both: the VM's
//! heap and stack, the JIT's code memory, its unwind registrations with the
//! system unwinder, its GDB JIT objects and its vmprof line tables all go
//! back, and the compiler thread ends. What a run keeps is what the
//! process's profilers need: its lines in the one perf map and the one
//! jitdump of the process (every JIT of the process writes to the same two
//! files, so every VM is named), and, while a perf map is written, the
//! addresses of its freed code (kept in quarantine, never committed
//! memory; see the book's "When code dies").
//!
//! Runs on different threads are independent: each has its own VM and JIT;
//! the profiler files and the code arena are shared and locked.

use std::io::Write;
use std::sync::Arc;

use jit::JitOptions;
pub use vm::bytecode::Module as Script;
use vm::driver::{self, Options, TierUpFactory};

/// Parses, checks and compiles a script to bytecode (see
/// [`vm::driver::load`]); `path` names it in messages and tracebacks. One
/// script may be run by many VMs, also at once.
///
/// # Errors
/// The rendered compile error (file, line, column).
pub fn load(path: &str, source: &[u8]) -> Result<Script, String> {
    driver::load(path, source)
}

/// How to run scripts: the options of `toyvm run`, for any number of VMs.
#[derive(Clone, Debug, Default)]
pub struct Engine {
    options: Options,
}

impl Engine {
    /// Runs with a JIT made from `jit` for each VM, or interpreted only
    /// (`None`, as `toyvm run --no-jit`).
    pub fn new(jit: Option<JitOptions>) -> Engine {
        let tier_up = jit.map(|options| {
            let make = move || jit::tier_up(options.clone());
            Arc::new(make) as TierUpFactory
        });
        Engine {
            options: Options {
                tier_up,
                ..Options::default()
            },
        }
    }

    /// The VM options (depth and heap limits, vmprof) to change.
    pub fn vm_options(&mut self) -> &mut Options {
        &mut self.options
    }

    /// Runs `script` in a fresh VM (and JIT) with `args`, writing what it
    /// prints to `stdout` and errors and diagnostics to `stderr`, then drops
    /// them; the exit status (0, or 1 after a runtime error).
    pub fn run(
        &self,
        script: &Script,
        args: Vec<String>,
        stdout: &mut (dyn Write + Send),
        stderr: &mut (dyn Write + Send),
    ) -> i32 {
        driver::run_with(script, args, &self.options, stdout, stderr)
    }
}
