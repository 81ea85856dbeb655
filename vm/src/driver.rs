//! The API the `toyvm` command line uses: load a script, run it.
//!
//! [`load`] turns source bytes into a verified [`Module`] (or the rendered
//! compile error); [`run`] executes `<main>` and returns the exit status.
//!
//! Native stack: the interpreter recurses natively once per Toy call, so
//! running `--max-depth N` frames needs about `N * NATIVE_BYTES_PER_CALL`
//! bytes of native stack (`N * COMPILED_BYTES_PER_CALL` with a JIT, whose
//! compiled prologues also check the stack pointer against
//! [`Vm::stack_limit`], see [`runtime::native_stack`]). [`run`] uses the
//! main thread (so perf's frame-pointer stacks reach `main`) when its stack limit allows, raising
//! the soft `RLIMIT_STACK` if that is enough, and otherwise runs the script
//! on a spawned thread with a stack large enough.

use std::io::Write;

use crate::bytecode::{self, Module};
use crate::front::ast::Span;
use crate::front::diag::{self, Diagnostic};
use crate::front::{check, compile, parser};
use crate::interp::{self, STATUS_OK, Vm, tier};
use crate::runtime;
use crate::vmprof::{Session, VmprofOptions};

/// Default `--max-depth`: frames that may be active at once.
pub const DEFAULT_MAX_DEPTH: usize = 10_000;

/// Native stack bytes one interpreted Toy call may use, with headroom.
/// Measured with gdb (`$rsp` at successive `interp_entry`s): 144 bytes in
/// release builds, 6544 in unoptimised debug builds.
pub const NATIVE_BYTES_PER_CALL: usize = if cfg!(debug_assertions) { 8192 } else { 512 };

/// Native stack bytes one Toy call may use when a JIT runs: a compiled
/// frame is larger than an interpreted one (its registers' spill slots:
/// registers are numbered by a byte, and 240 locals all live across a
/// recursive call measured `sub rsp,7A0h`, 1,968 bytes with the saved
/// `rbp` and return address; 6 KB leaves room for inlined leaves'
/// temporaries), and its prologue checks the stack
/// (`runtime::native_stack`), so this only has to make every program that
/// fits in the interpreter fit compiled too. The stack is reserved, not
/// committed: pages are touched only as deep as the recursion goes.
pub const COMPILED_BYTES_PER_CALL: usize = if cfg!(debug_assertions) { 16384 } else { 6144 };

/// Native stack kept free for everything else (builtins, printing, the
/// collector, the Rust runtime).
const NATIVE_RESERVE: usize = 4 << 20;

/// Largest main-thread stack we raise the soft limit to. Beyond this the
/// stack could run into memory mapped below it, so a thread is used.
const MAX_MAIN_STACK: usize = 64 << 20;

/// Stack of the thread that parses and checks (deep trees recurse).
const FRONT_END_STACK: usize = 512 << 20;

/// Makes the JIT for one run (called on the thread that runs the script,
/// after the VM exists; see [`tier`]).
pub type TierUpFactory = std::sync::Arc<dyn Fn() -> Box<dyn tier::TierUp> + Send + Sync>;

/// Called once with the run's [`runtime::PendingOutput`] when the VM
/// exists and its `--vmprof` profile (if any) has started, so a signal
/// thread can write out what the script printed, and complete the profile,
/// before the process stops (see [`runtime::output`]).
pub type OutputHook = std::sync::Arc<dyn Fn(runtime::PendingOutput) + Send + Sync>;

/// How to run a script.
#[derive(Clone)]
pub struct Options {
    /// Most Toy frames active at once (`<main>` counts as one).
    pub max_depth: usize,
    /// Most bytes the heap may hold; more is the runtime error `out of
    /// memory` (see [`crate::runtime::heap_limit`] for the default).
    pub max_heap: usize,
    /// Collect garbage at every allocation: slow, but any object the root
    /// maps forget is freed at once (for testing the VM).
    pub gc_stress: bool,
    /// Record a VMProf-style profile of the Toy call stack (see
    /// [`crate::vmprof`]).
    pub vmprof: Option<VmprofOptions>,
    /// Write stdout out after every `print` instead of in 64 KiB chunks.
    /// [`run`] turns it on when stdout is a terminal.
    pub line_buffered: bool,
    /// The JIT to run with; `None` interprets everything.
    pub tier_up: Option<TierUpFactory>,
    /// See [`OutputHook`].
    pub on_output: Option<OutputHook>,
}

impl std::fmt::Debug for Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Options")
            .field("max_depth", &self.max_depth)
            .field("max_heap", &self.max_heap)
            .field("gc_stress", &self.gc_stress)
            .field("line_buffered", &self.line_buffered)
            .field("tier_up", &self.tier_up.is_some())
            .field("vmprof", &self.vmprof)
            .field("on_output", &self.on_output.is_some())
            .finish()
    }
}

impl Default for Options {
    fn default() -> Self {
        Options {
            max_depth: DEFAULT_MAX_DEPTH,
            max_heap: runtime::heap_limit::default_max_heap(),
            gc_stress: false,
            vmprof: None,
            line_buffered: false,
            tier_up: None,
            on_output: None,
        }
    }
}

/// Parses, checks and compiles a script. `path` is used in messages and
/// tracebacks exactly as given. The error is the rendered diagnostic.
pub fn load(path: &str, bytes: &[u8]) -> Result<Module, String> {
    let source = match std::str::from_utf8(bytes) {
        Ok(s) => s,
        Err(e) => {
            // Show the valid prefix: the caret lands on the bad byte.
            let prefix = String::from_utf8_lossy(&bytes[..e.valid_up_to()]);
            return Err(diag::render(path, &prefix, &diag::utf8_error(bytes, e)));
        }
    };
    let front_end = || -> Result<Module, Diagnostic> {
        let mut program = parser::parse(source)?;
        check::check(&mut program)?;
        let mut module = compile::compile(&program, path)?;
        module.source = source.to_string();
        bytecode::verify(&module)
            .map_err(|e| Diagnostic::new(Span::new(1, 1), format!("internal error: {e}")))?;
        Ok(module)
    };
    let result = std::thread::scope(|s| {
        std::thread::Builder::new()
            .name("toyvm-front-end".into())
            .stack_size(FRONT_END_STACK)
            .spawn_scoped(s, front_end)
            .map(|handle| handle.join())
    });
    match result {
        Ok(Ok(Ok(module))) => Ok(module),
        Ok(Ok(Err(d))) => Err(diag::render(path, source, &d)),
        Ok(Err(_)) => Err(format!("{path}: error: internal error in the compiler\n")),
        Err(e) => Err(format!(
            "{path}: error: cannot start the compiler thread: {e}\n"
        )),
    }
}

pub use crate::front::slow_line::SlowLine;

/// Applies `toyvm run --slow-line` to a loaded module: measures this
/// machine's spin loop ([`runtime::spin`]), then places a spin wherever
/// control enters each line ([`crate::front::slow_line`]). Nothing for no
/// requests. The error names the request that cannot hold.
pub fn slow_lines(module: &mut Module, requests: &[SlowLine]) -> Result<(), String> {
    if requests.is_empty() {
        return Ok(());
    }
    let rate = runtime::spin::iterations_per_ns();
    crate::front::slow_line::apply(module, requests, rate)?;
    bytecode::verify(module).map_err(|e| format!("internal error after --slow-line: {e}"))
}

/// `--slow-line-counts`: each slowed line, the functions it is in and how
/// often the interpreter entered it.
pub use crate::front::slow_line::entries as slow_line_entries;

/// Runs `<main>` with the process's stdout and stderr; returns the exit
/// status (0, or 1 after a runtime error).
pub fn run(module: &Module, args: Vec<String>, options: &Options) -> i32 {
    // SAFETY: isatty only inspects the descriptor.
    let terminal = unsafe { libc::isatty(libc::STDOUT_FILENO) } == 1;
    let options = Options {
        line_buffered: options.line_buffered || terminal,
        ..options.clone()
    };
    run_with(
        module,
        args,
        &options,
        &mut std::io::stdout(),
        &mut std::io::stderr(),
    )
}

/// [`run`] with explicit output streams (tests capture them).
pub fn run_with(
    module: &Module,
    args: Vec<String>,
    options: &Options,
    stdout: &mut (dyn Write + Send),
    stderr: &mut (dyn Write + Send),
) -> i32 {
    let per_call = if options.tier_up.is_some() {
        COMPILED_BYTES_PER_CALL
    } else {
        NATIVE_BYTES_PER_CALL
    };
    let needed = options
        .max_depth
        .saturating_mul(per_call)
        .saturating_add(NATIVE_RESERVE);
    if main_thread_can_hold(needed) {
        return execute(module, args, options, stdout, stderr);
    }
    let spawned = std::thread::scope(|s| {
        std::thread::Builder::new()
            .name("toyvm".into())
            .stack_size(needed)
            .spawn_scoped(s, || execute(module, args, options, stdout, stderr))
            .map(|handle| handle.join().unwrap_or(1))
    });
    spawned.unwrap_or_else(|e| {
        let _ = writeln!(
            stderr,
            "error: --max-depth {} needs too much native stack: {e}",
            options.max_depth
        );
        1
    })
}

/// True if this is the main thread and its stack may grow to `needed`
/// bytes (raising the soft limit if necessary and allowed).
fn main_thread_can_hold(needed: usize) -> bool {
    if std::thread::current().name() != Some("main") {
        return false;
    }
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we pass and nothing else.
    if unsafe { libc::getrlimit(libc::RLIMIT_STACK, &mut limit) } != 0 {
        return false;
    }
    if limit.rlim_cur == libc::RLIM_INFINITY || limit.rlim_cur as usize >= needed {
        return true;
    }
    if needed > MAX_MAIN_STACK
        || (limit.rlim_max != libc::RLIM_INFINITY && (limit.rlim_max as usize) < needed)
    {
        return false;
    }
    let raised = libc::rlimit {
        rlim_cur: needed as libc::rlim_t,
        rlim_max: limit.rlim_max,
    };
    // SAFETY: setrlimit only reads the struct; the main thread's stack
    // may then grow up to the new soft limit.
    unsafe { libc::setrlimit(libc::RLIMIT_STACK, &raised) == 0 }
}

/// Creates the VM, runs `<main>`, flushes stdout, reports any error.
fn execute<'m>(
    module: &'m Module,
    args: Vec<String>,
    options: &Options,
    stdout: &'m mut (dyn Write + Send),
    stderr: &'m mut (dyn Write + Send),
) -> i32 {
    let mut vm = match Vm::new(module, args, options.max_depth, stdout) {
        Ok(vm) => vm,
        Err(msg) => {
            let _ = writeln!(stderr, "error: {msg}");
            return 1;
        }
    };
    // From here on, everything for stderr goes through the VM, the JIT's
    // diagnostics included.
    vm.set_diagnostics(stderr);
    vm.heap.set_limit(options.max_heap);
    if options.gc_stress {
        vm.heap.set_stress();
    }
    vm.stack_limit = runtime::native_stack::limit_for_current_thread();
    vm.out.line_buffered = options.line_buffered;
    // Profiling starts before the JIT does, so compiled code knows whether
    // to write frame records for the calls it inlines (`--vmprof-inlined`,
    // see `crate::vmprof`).
    let profile = options.vmprof.as_ref().and_then(|vmprof| {
        // SAFETY: the VM is boxed (it never moves), runs on this thread
        // and lives until the end of this function, after the session:
        // finished below, or dropped first on a panic (declared later).
        unsafe { start_profile(&mut vm, vmprof) }.map(|session| (session, vmprof))
    });
    // Only now, with the profile started, may the hook let a stop signal
    // in (`toyvm run` unblocks SIGINT/SIGTERM/SIGHUP here): a signal taken
    // while the profile was being opened would find no session to complete,
    // and the profile would be left without its trailer. One sent earlier
    // stays pending until this call.
    if let Some(hook) = &options.on_output {
        hook(vm.out.pending());
    }
    // The JIT (its code memory) must stay alive while the VM runs code;
    // it lives until the end of this function.
    let mut jit = options.tier_up.as_ref().map(|make| make());
    let status = interp::run_main(&mut vm, jit.as_deref_mut());
    // Completes the profile before anything else is reported, also after a
    // runtime error (and, through `Session`'s drop, on a panic).
    if let Some((session, vmprof)) = profile {
        finish_profile(session, vmprof, vm.diagnostics());
    }
    let flushed = vm.out.flush();
    let (error, trace) = match (status, flushed) {
        (STATUS_OK, Ok(())) => (None, Vec::new()),
        (STATUS_OK, Err(e)) => (Some(e), Vec::new()),
        (_, _) => {
            let error = vm
                .error
                .take()
                .unwrap_or(runtime::RuntimeError::OutOfMemory);
            (Some(error), std::mem::take(&mut vm.trace))
        }
    };
    if let Some(error) = &error {
        let text = runtime::error::render(module, error, &trace);
        let diagnostics = vm.diagnostics();
        let _ = diagnostics.write_all(text.as_bytes());
        let _ = diagnostics.flush();
    }
    if let Some(jit) = jit.as_mut() {
        jit.finish(&mut vm);
    }
    i32::from(error.is_some())
}

/// Starts profiling `vm`; if that fails, says why in one line and lets the
/// script run unprofiled.
///
/// # Safety
/// As for [`Session::start`].
unsafe fn start_profile(vm: &mut Vm<'_>, options: &VmprofOptions) -> Option<Session> {
    // SAFETY: the caller's contract.
    match unsafe { Session::start(vm, options) } {
        Ok(session) => Some(session),
        Err(error) => {
            let why = match &error {
                perfsupport::vmprof::VmprofError::Io { source, .. } => source.to_string(),
                other => other.to_string(),
            };
            let _ = writeln!(
                vm.diagnostics(),
                "toyvm: warning: cannot write the profile '{}': {why}; running without --vmprof",
                options.path.display()
            );
            None
        }
    }
}

/// Stops the profiler; reports a profile that could not be completed.
fn finish_profile(session: Session, options: &VmprofOptions, stderr: &mut (dyn Write + Send)) {
    if let Err(error) = session.finish() {
        let _ = writeln!(
            stderr,
            "toyvm: warning: the profile '{}' is incomplete: {error}",
            options.path.display()
        );
    }
}
