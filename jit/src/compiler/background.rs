//! The compiler thread: `toyvm-jit` runs the [`Compiler`] while the
//! interpreter keeps running.
//!
//! ```text
//!  interpreter thread                         toyvm-jit
//!  ──────────────────                         ─────────
//!  countdown runs out ── Request ──────────▶  translate, Cranelift,
//!  keep interpreting,                         finalize (code executable),
//!  ask again every POLL events                register unwind info, report
//!  │                                          to perf map / jitdump / GDB
//!  ask: drain ◀──────────────── Vec<Action> ──┘
//!  set_entry / cache OSR variant
//!  next call or back-edge runs compiled code
//! ```
//!
//! The interpreter only ever installs code the compiler thread already
//! finished and reported to the profilers: a region is in the perf map
//! and the jitdump before its entry is in the entry table. The entry
//! table, the countdowns and the diagnostics writer are touched only on
//! the interpreter's thread, at its tier-up hooks (the safe points).
//!
//! `--vmprof`: this thread joins the sampler's threads
//! (`perfsupport::vmprof::join_current_thread`: its own CPU clock, or the
//! process-wide timer's share), so its samples land here in proportion to
//! the CPU time it burns. While it compiles,
//! the thread's shadow stack holds `<main>` and [`COMPILER_FRAME`] (class
//! `jit`), so those samples show compile time as what it is, never inside
//! a Toy function; `vm::vmprof` names the frame in the file's metadata.
//! `<main>` is there because vmprof's reader hangs every sample under the
//! first sample's root: a profile must have one root.
//!
//! Test-only: [`DELAY_ENV`] makes the thread sleep before each request, so
//! tests see the interpreter run on while code is on its way.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::thread::JoinHandle;
use std::time::Duration;

use perfsupport::vmprof::{self, CodeId, CodeIdCell};
pub use vm::abi::COMPILER_FRAME;

use crate::compiler::{Action, Compiler, Program, Request};

/// The vmprof code id of [`COMPILER_FRAME`], registered once per process.
fn compiler_frame() -> Option<CodeId> {
    static CELL: CodeIdCell = CodeIdCell::new();
    let class = vmprof::register_code_object_class("jit").ok()?;
    Some(vmprof::register_code(&CELL, &class, COMPILER_FRAME, 0, "-"))
}

/// The compiler thread's name (perf, gdb and `/proc` show it).
pub const THREAD_NAME: &str = "toyvm-jit";

/// Test-only: `TOYVM_JIT_DELAY_US=N` makes the compiler thread sleep N
/// microseconds before each request (the stress tier of the conformance
/// and differential tests).
pub const DELAY_ENV: &str = "TOYVM_JIT_DELAY_US";

/// The most compile requests one batch takes ([`gather`]).
const MAX_GROUP: usize = 256;

/// `first` and the compile requests queued behind it, up to
/// [`MAX_GROUP`]: one batch for the compiler (`Compiler::run_group`).
/// Nothing waits for more: the group is what queued while the last batch
/// was compiled. A request that cannot join (an eviction, freeing OSR
/// variants) ends the group and goes to `next`, to run after it.
fn gather(first: Request, inbox: &Receiver<Request>, next: &mut Option<Request>) -> Vec<Request> {
    let joins = |r: &Request| matches!(r, Request::Compile { .. } | Request::Osr { .. });
    let mut group = vec![first];
    while joins(&group[0]) && group.len() < MAX_GROUP {
        match inbox.try_recv() {
            Ok(request) if joins(&request) => group.push(request),
            Ok(request) => {
                *next = Some(request);
                break;
            }
            Err(_) => break,
        }
    }
    group
}

/// The interpreter's side of the compiler thread.
pub struct Background {
    requests: Option<Sender<Request>>,
    /// What came of each request, and whether it was an eviction (which
    /// [`Background::call`] waits for).
    results: Receiver<(bool, Vec<Action>)>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Compiler>>,
}

impl Background {
    /// Starts the compiler thread with `compiler` and a copy of the
    /// program.
    ///
    /// # Errors
    /// The compiler back if the thread cannot be started.
    pub fn start(compiler: Compiler, program: Program) -> Result<Background, String> {
        let (requests, inbox) = mpsc::channel::<Request>();
        let (outbox, results) = mpsc::channel::<(bool, Vec<Action>)>();
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let delay = std::env::var(DELAY_ENV)
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .map(Duration::from_micros);
        // A helper thread: Ctrl-C and friends go to the interpreter's thread.
        let thread = perfsupport::threads::spawn_helper(THREAD_NAME, move || {
            let main = program.vmprof_main();
            let frame = compiler_frame();
            vmprof::join_current_thread();
            let mut compiler = compiler;
            let mut next = None;
            while let Some(request) = next.take().or_else(|| inbox.recv().ok()) {
                if stopped.load(Ordering::Acquire) {
                    break;
                }
                if let Some(delay) = delay {
                    std::thread::sleep(delay);
                }
                let group = if compiler.groups_batches() {
                    gather(request, &inbox, &mut next)
                } else {
                    vec![request]
                };
                let mut out = Vec::new();
                {
                    let _root = main.map(vmprof::vmprof_execute_code);
                    let _frame = frame.map(vmprof::vmprof_execute_code);
                    compiler.run_group(&program, &group, &mut out);
                }
                let evicted = matches!(group[..], [Request::Evict { .. }]);
                if outbox.send((evicted, out)).is_err() {
                    break;
                }
            }
            vmprof::leave_current_thread();
            compiler
        })
        .map_err(|e| format!("cannot start the compiler thread: {e}"))?;
        Ok(Background {
            requests: Some(requests),
            results,
            stop,
            thread: Some(thread),
        })
    }

    /// Queues `request`; false if the thread is gone.
    pub fn send(&self, request: Request) -> bool {
        self.requests
            .as_ref()
            .is_some_and(|r| r.send(request).is_ok())
    }

    /// What the thread finished since the last call, without waiting.
    pub fn drain(&self) -> Vec<Action> {
        let mut all = Vec::new();
        while let Ok((_, actions)) = self.results.try_recv() {
            all.extend(actions);
        }
        all
    }

    /// Sends an eviction request and waits until it is done: everything
    /// the thread finished before it, then its answer, in order (the
    /// caller applies them all before it runs code again). Empty if the
    /// thread is gone.
    pub fn call(&self, request: Request) -> Vec<Action> {
        debug_assert!(matches!(request, Request::Evict { .. }));
        let mut all = Vec::new();
        if !self.send(request) {
            return all;
        }
        while let Ok((evicted, actions)) = self.results.recv() {
            all.extend(actions);
            if evicted {
                break;
            }
        }
        all
    }

    /// Stops the thread (requests still queued are dropped, the one being
    /// compiled is finished) and returns its compiler and the actions it
    /// sent that were not drained; `None` if it panicked.
    pub fn stop(&mut self) -> Option<(Compiler, Vec<Action>)> {
        self.stop.store(true, Ordering::Release);
        self.requests = None;
        let compiler = self.thread.take()?.join().ok()?;
        Some((compiler, self.drain()))
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        if self.thread.is_some() {
            let _ = self.stop();
        }
    }
}
