//! The tiering policy: [`Jit`], the interpreter's [`TierUp`] hook. It keeps
//! one state per function ([`FnPolicy`]), decides what to compile when a
//! countdown runs out, and answers with a decision (see `vm::abi::TierUp`).
//! It only decides: the compile work, Cranelift and the profiler outputs
//! are the [`Compiler`]'s, which runs on this thread or on the compiler
//! thread (`crate::compiler::background`).
//!
//! * **Thresholds.** By default each function's threshold follows from its
//!   estimated compile cost ([`crate::policy::cost`]); an explicit
//!   `--jit-threshold N` is taken literally.
//! * **At a call** the function is compiled with the warm callees it
//!   reaches that are still interpreted, callees first ([`callgraph`]), in
//!   one batch; its entry shim is installed and the call enters it.
//! * **Lazy entry shims.** The other functions of a batch get only their
//!   native function (most are only ever called from compiled code,
//!   directly, and a shim costs about a third of a small function's
//!   compile); their countdown is set to ask at their next call through
//!   the entry table, which builds the shim.
//! * **At a back-edge** one compile: the function's OSR variant, which
//!   enters at any of its loop headers (with the warm callees as native
//!   functions). The function is compiled whole only if it keeps being
//!   called afterwards, long enough that the interpreted start of each call
//!   costs more than the compile ([`Jit::whole_after`]).
//! * **Threshold 0** compiles every function at start, callees first.
//! * **Trampolines**: with a profiler sink, every function gets its
//!   interpreter-entry trampoline at start, before anything is compiled;
//!   they are pinned (see `Compiler::trampolines`).
//! * **Background** (the default tiering): requests go to the compiler
//!   thread and the interpreter keeps interpreting; the function is asked
//!   about again every [`POLL`] events, and every ask first installs
//!   whatever the thread finished (entries into the entry table, OSR
//!   variants into the cache). Compiled code thus starts at the next call
//!   through the entry table or at the next ask at a back-edge.
//! * **The code limit** (`--jit-code-limit`): a batch that does not fit
//!   comes back as [`Action::NoRoom`]; the policy takes the functions with
//!   an activation from the VM, has the compiler evict the coldest code
//!   outside them (`compiler::cache`; on the compiler thread it waits for
//!   the answer, so nothing runs in between), puts the evicted functions'
//!   entries back to the interpreter, and asks for the batch again.
//!   An evicted function is interpreted and tiers up again when hot, after
//!   a wait that doubles with each of its evictions.
//! * **No compile storm** ([`Jit::make_room`]): a compile that found no
//!   room is wasted work, so each function and kind of compile (whole, OSR
//!   variant, entry shims) gets at most [`MAX_NO_ROOM_TRIES`] of them
//!   between two evictions that free bytes; after that it is not compiled
//!   until code was freed. Once code is being evicted, compiles may take
//!   at most a third of the run's time from then on (plus 200 ms): code
//!   evicted again and again never pays for its compiles, so no limit
//!   makes a run much slower than interpreting it. A batch larger than
//!   the limit less the pinned
//!   trampolines can never fit: its function is compiled alone from then
//!   on, and a function that alone cannot fit is never compiled again
//!   (`--jit-stats` says so). A limit that leaves no room at all after the
//!   trampolines is one warning at start, and the run is interpreted.
//! * **Obsolete OSR variants**: once a function with an OSR variant is
//!   compiled whole, the variant is freed at the first ask at which no
//!   activation of the function runs (none can enter it after that).

pub(crate) mod callgraph;
pub mod cost;

use std::time::Duration;

use vm::abi::{CallDecision, Countdown, EntryFn, LoopDecision, OsrFn, TierUp, Vm};

use crate::compiler::background::Background;
use crate::compiler::{Action, Compiler, FnState, Program, Request};
use crate::options::JitOptions;
use crate::translate::limits;

/// A callee joins its caller's batch once it ran this fraction (1/N) of
/// its own threshold (see [`Jit::hot_batch`]).
const CALLEE_WARM_SHARE: u32 = 8;

/// Events after which a function with an OSR variant but no native
/// function is asked about again: soon, so that a later activation enters
/// the variant early in its loop.
const OSR_REASK: u32 = 50;

/// Asks after which a function with an OSR variant is compiled whole with
/// an explicit `--jit-threshold` (the cost model decides otherwise, see
/// [`Jit::whole_after`]): it is being called again and again, not running
/// one long loop ([`Jit::osr_reask`]).
const WHOLE_AFTER_ASKS: u32 = 16;

/// Events after which a function whose code is being compiled in the
/// background is asked about again (each ask installs what is ready).
pub const POLL: u32 = 256;

/// Evictions in a row, each followed by a batch that still found no room,
/// after which the policy stops evicting for that batch (its functions
/// stay interpreted until they ask again): a batch larger than what can
/// be freed must not evict everything over and over.
const MAX_EVICTIONS_IN_A_ROW: u32 = 4;

/// Compiles of one function and [`Ask`] that may find no room between two
/// evictions that free bytes (see [`Jit::make_room`]).
pub const MAX_NO_ROOM_TRIES: u32 = 3;

/// The longest back-off: a wait is the function's threshold doubled at
/// most this many times.
const MAX_DOUBLINGS: u32 = 12;

/// Once code is being evicted, compiles (and evictions) may take at most
/// 1/`BUDGET_SHARE` of the run's time from then on, plus
/// [`BUDGET_ALLOWANCE`]; past it, nothing is compiled until the run has
/// caught up. Code that is evicted again and again never pays for its
/// compiles; this keeps any limit from making a run much slower than
/// interpreting it: with compiles on the interpreter's thread, `spent <=
/// (interpreting + spent) / 3 + A` gives at most half the interpreting time
/// plus 1.5 A (the reliability round's bound: 1.5x plus 0.5 s). Compiles
/// are measured in CPU time of the compiling thread: the profiler sinks'
/// work counts, a debugger stopping the process to read a registration
/// does not.
const BUDGET_SHARE: u32 = 3;

/// The compile time always allowed under eviction (see [`BUDGET_SHARE`]):
/// large enough that a program that only cycles a few functions through a
/// small cache (the eviction demo) never meets the budget, so its compiles
/// do not depend on timing.
const BUDGET_ALLOWANCE: Duration = Duration::from_millis(200);

/// What a compile request is, for the bookkeeping of compiles that found
/// no room: one count per function and kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ask {
    /// Native functions (with the asker's entry shim): a whole compile.
    Whole,
    /// An OSR variant.
    Osr,
    /// Entry shims alone, for functions compiled earlier.
    Shims,
}

impl Ask {
    /// The kind of a compile request; `None` for evictions and frees.
    fn of(request: &Request) -> Option<Ask> {
        match request {
            Request::Compile { funcs, .. } if funcs.is_empty() => Some(Ask::Shims),
            Request::Compile { .. } => Some(Ask::Whole),
            Request::Osr { .. } => Some(Ask::Osr),
            Request::Evict { .. } | Request::FreeOsr { .. } => None,
        }
    }

    fn index(self) -> usize {
        self as usize
    }

    fn describe(self) -> &'static str {
        match self {
            Ask::Whole => "compiled whole",
            Ask::Osr => "its OSR variant",
            Ask::Shims => "its entry shim",
        }
    }
}

/// The function a compile request is made for: the one whose countdown
/// ran out (the others are its callees).
fn asker(request: &Request) -> Option<u32> {
    match request {
        Request::Compile { funcs, entered } => entered.first().or(funcs.last()).copied(),
        Request::Osr { func, .. } => Some(*func),
        Request::Evict { .. } | Request::FreeOsr { .. } => None,
    }
}

/// Compiles of one function and [`Ask`] that found no room.
#[derive(Clone, Copy, Debug, Default)]
struct NoRoomTries {
    /// The room epoch ([`Jit::room_epoch`]) `tries` counts in.
    epoch: u64,
    /// Compiles that found no room in that epoch.
    tries: u32,
    /// Its code alone needs more than the limit leaves after the pinned
    /// trampolines: never compiled again.
    never_fits: bool,
}

impl FnState {
    /// When the interpreter asks about a function in this state next
    /// (`initial`: the function's own threshold).
    fn countdown(self, initial: Countdown) -> Countdown {
        match self {
            FnState::Interpreted => initial,
            FnState::Native(_) => Countdown::Next,
            FnState::Entered(_) | FnState::Refused => Countdown::Never,
        }
    }
}

/// Where compiles run.
enum Mode {
    /// On the interpreter's thread, when asked (`Option`: taken while the
    /// compiler thread starts).
    Inline(Option<Box<Compiler>>),
    /// On the compiler thread.
    Background(Background),
    /// The compiler thread stopped ([`TierUp::finish`]).
    Stopped,
}

/// Everything the policy knows about one function.
#[derive(Clone, Copy, Debug)]
struct FnPolicy {
    /// Its compiled state, as far as this thread has applied it.
    state: FnState,
    /// Calls plus back-edges before it is compiled (see [`cost`]), set at
    /// start.
    threshold: u32,
    /// Its OSR variant (one enters at every loop header), once one was
    /// asked for: `Some(None)` if it cannot be compiled.
    osr: Option<Option<OsrFn>>,
    /// Times the interpreter asked about it while it had an OSR variant but
    /// no native function (see [`Jit::osr_reask`]).
    osr_asks: u32,
    /// Background: a request that names it is on its way.
    pending: bool,
    /// Background: its OSR variant is on its way.
    pending_osr: bool,
    /// It was compiled whole once (and evicted since, perhaps): compiled
    /// whole again at its first ask after an OSR variant, without the
    /// wait [`Jit::whole_after`] gives a function not known to be called
    /// again and again.
    was_entered: bool,
    /// Batches naming it that found no room, in a row: each one more
    /// doubles the wait before it is asked about again (see
    /// [`Jit::make_room`]).
    no_room_streak: u32,
    /// Compiles that found no room, per [`Ask`].
    no_room: [NoRoomTries; 3],
    /// A batch with its callees never fits: it is compiled alone (its
    /// callees are called through the entry table).
    alone: bool,
    /// Times its body was evicted: each doubles the wait before it is
    /// compiled again, so a working set larger than the limit cannot make
    /// the JIT recompile without end.
    evictions: u32,
    /// The countdown this ask answers with when it compiled nothing: set
    /// by a back-off during the ask (see [`Jit::make_room`]).
    wait: Option<u32>,
}

impl FnPolicy {
    /// A function not compiled yet, with `threshold`.
    fn new(threshold: u32) -> FnPolicy {
        FnPolicy {
            state: FnState::Interpreted,
            threshold,
            osr: None,
            osr_asks: 0,
            pending: false,
            pending_osr: false,
            was_entered: false,
            no_room_streak: 0,
            no_room: [NoRoomTries::default(); 3],
            alone: false,
            evictions: 0,
            wait: None,
        }
    }

    /// True if it has an OSR variant that compiled (counted as its first
    /// ask when it arrived).
    fn has_osr(&self) -> bool {
        self.osr_asks > 0
    }

    /// True if a compile of it is on its way to or from the compiler thread.
    fn waiting(&self) -> bool {
        self.pending || self.pending_osr
    }
}

/// The Cranelift tier (see the module docs).
pub struct Jit {
    options: JitOptions,
    mode: Mode,
    /// One state per function of the VM's module, set at start.
    functions: Vec<FnPolicy>,
    /// Problems met in [`Jit::new`], reported by [`TierUp::start`].
    startup_warnings: Vec<String>,
    /// [`TierUp::finish`] ran.
    finished: bool,
    /// The compiler moves to its thread at the next request.
    go_background: bool,
    /// A batch that found no room, waiting for an eviction.
    no_room: Option<(Request, usize)>,
    /// Evictions since a batch last found room.
    evictions_in_a_row: u32,
    /// Functions compiled whole whose OSR variant is still held.
    obsolete_osr: Vec<u32>,
    /// Counts the evictions (and frees) that gave bytes back: compiles
    /// that found no room are counted per epoch ([`NoRoomTries`]).
    room_epoch: u64,
    /// The code limit leaves no room for compiled code: nothing is
    /// compiled (the trampolines, if any, are built).
    compiles_off: bool,
    /// The process's CPU time when code was first evicted: the compile
    /// budget runs from then on ([`BUDGET_SHARE`]), in CPU time, so that
    /// a loaded machine (a long wall clock) does not buy more compiles.
    evicting_since: Option<Duration>,
    /// Time the compiler spent on requests since then.
    spent_since_evicting: Duration,
}

impl Jit {
    /// Creates the JIT: its compiler, which opens the profiler outputs
    /// (see [`Compiler::new`]); problems with those are reported when the
    /// run starts.
    ///
    /// # Errors
    /// The compiler's, if Cranelift cannot start.
    pub fn new(options: JitOptions) -> Result<Jit, String> {
        let (compiler, startup_warnings) = Compiler::new(&options)?;
        Ok(Jit {
            mode: Mode::Inline(Some(Box::new(compiler))),
            functions: Vec::new(),
            startup_warnings,
            finished: false,
            go_background: false,
            no_room: None,
            evictions_in_a_row: 0,
            obsolete_osr: Vec::new(),
            room_epoch: 0,
            compiles_off: false,
            evicting_since: None,
            spent_since_evicting: Duration::ZERO,
            options,
        })
    }

    /// The compiler, when it runs on this thread.
    fn inline_compiler(&mut self) -> Option<&mut Compiler> {
        match &mut self.mode {
            Mode::Inline(Some(compiler)) => Some(compiler),
            _ => None,
        }
    }

    /// The compiled functions without an entry shim that a function
    /// without native code calls.
    fn called_from_interpreted(&self, vm: &Vm<'_>) -> Vec<u32> {
        let functions = &vm.module().functions;
        let mut wanted = vec![false; functions.len()];
        for (caller, f) in functions.iter().enumerate() {
            if self.state(caller as u32).native().is_some() {
                continue;
            }
            for op in &f.code {
                if let vm::bytecode::Op::Call { func, .. } = *op {
                    wanted[func as usize] |= matches!(self.state(func as u32), FnState::Native(_));
                }
            }
        }
        (0..wanted.len() as u32)
            .filter(|&f| wanted[f as usize])
            .collect()
    }

    fn state(&self, func: u32) -> FnState {
        self.functions[func as usize].state
    }

    fn function(&mut self, func: u32) -> &mut FnPolicy {
        &mut self.functions[func as usize]
    }

    /// True if requests go (or will go) to the compiler thread.
    fn background(&self) -> bool {
        self.go_background || matches!(self.mode, Mode::Background(_))
    }

    /// Runs `request`: now, on this thread (and applies what came of it),
    /// or queued for the compiler thread (the functions it names are then
    /// pending until their states come back).
    fn run(&mut self, vm: &mut Vm<'_>, request: Request) {
        if !self.room_allows(vm, &request) {
            return;
        }
        if std::mem::take(&mut self.go_background)
            && let Mode::Inline(compiler) = &mut self.mode
            && let Some(compiler) = compiler.take()
        {
            self.mode = match Background::start(*compiler, Program::of(vm)) {
                Ok(background) => Mode::Background(background),
                Err(e) => {
                    warn(vm, format_args!("toyvm: warning: JIT: {e}"));
                    Mode::Stopped
                }
            };
        }
        match &mut self.mode {
            Mode::Inline(Some(compiler)) => {
                let mut out = Vec::new();
                compiler.run(&*vm, &request, &mut out);
                self.apply(vm, out);
                self.make_room(vm);
            }
            Mode::Background(background) => {
                let named = request.functions();
                let osr = match &request {
                    Request::Osr { func, .. } => Some(*func),
                    _ => None,
                };
                if let Some(func) = osr {
                    self.functions[func as usize].pending_osr = true;
                }
                if background.send(request) {
                    for f in named {
                        self.functions[f as usize].pending = true;
                    }
                }
            }
            Mode::Inline(None) | Mode::Stopped => {}
        }
    }

    /// Applies what the compiler did: states and countdowns, entries, OSR
    /// variants, diagnostics.
    fn apply(&mut self, vm: &mut Vm<'_>, actions: Vec<Action>) {
        for action in actions {
            match action {
                Action::State(f, state) => {
                    let function = self.function(f);
                    function.state = state;
                    function.pending = false;
                    let entered = matches!(state, FnState::Entered(_));
                    function.was_entered |= entered;
                    if entered && matches!(function.osr, Some(Some(_))) {
                        self.obsolete_osr.push(f);
                    }
                    vm.set_countdown(f, state.countdown(self.initial(f)));
                }
                Action::Entry(f, entry) => {
                    self.evictions_in_a_row = 0;
                    self.function(f).no_room_streak = 0;
                    // SAFETY: the compiler built `entry` for `f` with the
                    // entry ABI (an entry shim or trampoline,
                    // `pipeline::install`), finalized it and reported it to
                    // the profilers before handing it over; it stays until
                    // the compiler is dropped (after the run, see `Action`)
                    // or the function is evicted, which resets the entry
                    // first (`Action::Evicted`).
                    unsafe { vm.set_entry(f, entry) };
                }
                Action::Osr(f, osr) => {
                    if osr.is_some() {
                        self.evictions_in_a_row = 0;
                    }
                    let function = self.function(f);
                    function.pending_osr = false;
                    function.osr = Some(osr);
                    if osr.is_some() {
                        function.no_room_streak = 0;
                        function.osr_asks = function.osr_asks.max(1);
                    }
                }
                Action::Warn(line) => warn(vm, format_args!("{line}")),
                Action::NoRoom {
                    request,
                    needed,
                    room,
                } => {
                    if let Request::Osr { func, .. } = request {
                        self.function(func).pending_osr = false;
                    }
                    let (epoch, ask) = (self.room_epoch, Ask::of(&request));
                    for f in request.functions() {
                        let function = self.function(f);
                        function.no_room_streak += 1;
                        if let Some(ask) = ask {
                            let tries = &mut function.no_room[ask.index()];
                            if tries.epoch != epoch {
                                *tries = NoRoomTries {
                                    epoch,
                                    ..NoRoomTries::default()
                                };
                            }
                            tries.tries += 1;
                        }
                    }
                    if needed > room {
                        self.never_fits(vm, &request, needed, room);
                    } else {
                        self.no_room = Some((request, needed));
                    }
                }
                Action::Freed(bytes) => {
                    if bytes > 0 {
                        self.room_epoch += 1;
                    }
                }
                Action::Spent(took) => {
                    if self.evicting_since.is_some() {
                        self.spent_since_evicting += took;
                    }
                }
                Action::Evicted { func, entry } => {
                    self.evicting_since
                        .get_or_insert_with(crate::compiler::process_cpu_time);
                    let function = self.function(func);
                    function.state = FnState::Interpreted;
                    function.osr = None;
                    function.osr_asks = 0;
                    function.evictions += 1;
                    let doublings = function.evictions;
                    let entry: EntryFn = entry.unwrap_or(vm::abi::interp_entry);
                    // SAFETY: `entry` is the function's trampoline (built by
                    // the compiler for it, never freed while the compiler
                    // lives) or the interpreter's own entry.
                    unsafe { vm.set_entry(func, entry) };
                    let wait = self.doubled_wait(func, doublings);
                    vm.set_countdown(func, wait);
                }
                Action::OsrFreed(func) => {
                    let function = self.function(func);
                    function.osr = None;
                    if function.state == FnState::Interpreted {
                        function.osr_asks = 0;
                    }
                }
            }
        }
    }

    // ANCHOR: make_room
    /// After a batch found no room: has the compiler evict code that no
    /// activation runs in, applies that before anything runs again, and
    /// asks for the batch again (see the module docs).
    ///
    /// A batch that cannot get room now is not asked for again at once:
    /// its functions wait twice as long after each such batch (their
    /// threshold, doubled per batch in a row that found no room, up to
    /// 2^12 times), so a cache full of running code costs no compile per
    /// ask. And however the asks come (calls, back-edges, the compiler
    /// thread's answers), a function and kind of compile gets at most
    /// [`MAX_NO_ROOM_TRIES`] compiles that find no room until an eviction
    /// frees bytes ([`Jit::room_allows`]).
    fn make_room(&mut self, vm: &mut Vm<'_>) {
        let Some((request, needed)) = self.no_room.take() else {
            return;
        };
        if self.evictions_in_a_row >= MAX_EVICTIONS_IN_A_ROW {
            self.back_off(vm, &request);
            return;
        }
        self.evictions_in_a_row += 1;
        let evict = Request::Evict {
            needed,
            active: vm.active_functions(),
        };
        let actions = match &mut self.mode {
            Mode::Inline(Some(compiler)) => {
                let mut out = Vec::new();
                compiler.run(&*vm, &evict, &mut out);
                out
            }
            Mode::Background(background) => background.call(evict),
            Mode::Inline(None) | Mode::Stopped => return,
        };
        let freed = (actions.iter()).any(|a| matches!(a, Action::Freed(n) if *n > 0));
        self.apply(vm, actions);
        if freed {
            self.run(vm, request);
        } else {
            self.back_off(vm, &request);
        }
    }

    /// Sets the wait of the functions of a batch that found no room (see
    /// [`Jit::make_room`]): their countdowns, and the answer of the ask
    /// under way ([`FnPolicy::wait`]), which would otherwise set the
    /// countdown back.
    fn back_off(&mut self, vm: &mut Vm<'_>, request: &Request) {
        for f in request.functions() {
            self.back_off_function(vm, f);
        }
    }

    /// Sets the wait of one function (see [`Jit::back_off`]).
    fn back_off_function(&mut self, vm: &mut Vm<'_>, func: u32) {
        let function = self.function(func);
        if function.state.native().is_some() {
            return;
        }
        let doubled =
            (function.threshold.max(POLL) as u64) << function.no_room_streak.min(MAX_DOUBLINGS);
        let wait = doubled.min(u32::MAX as u64 / 2) as u32;
        function.wait = Some(wait);
        vm.set_countdown(func, Countdown::After(wait));
    }

    /// True if `request` may be compiled now: the code limit leaves room
    /// for compiled code at all, its function has not used up its
    /// compiles that found no room ([`MAX_NO_ROOM_TRIES`] in this room
    /// epoch) nor been found too large for the limit, and, once code is
    /// being evicted, compiles are within their share of the run
    /// ([`BUDGET_SHARE`]). A refused request backs its function off.
    /// Callees of a batch that are refused themselves are left out of it
    /// by [`Jit::hot_batch`].
    fn room_allows(&mut self, vm: &mut Vm<'_>, request: &Request) -> bool {
        let (Some(ask), Some(func)) = (Ask::of(request), asker(request)) else {
            return true;
        };
        if self.compiles_off {
            return false;
        }
        if self.may_compile(func, ask) && self.within_budget() {
            return true;
        }
        let function = self.function(func);
        function.no_room_streak += 1;
        if function.no_room[ask.index()].never_fits {
            function.wait = Some(u32::MAX / 2);
            return false;
        }
        self.back_off_function(vm, func);
        false
    }

    /// True unless code is being evicted and compiles took more than their
    /// share of the run since ([`BUDGET_SHARE`]).
    fn within_budget(&self) -> bool {
        self.evicting_since.is_none_or(|since| {
            let run = crate::compiler::process_cpu_time().saturating_sub(since);
            self.spent_since_evicting <= run / BUDGET_SHARE + BUDGET_ALLOWANCE
        })
    }

    /// True if `func` may be compiled as `ask` (see [`Jit::room_allows`]).
    fn may_compile(&self, func: u32, ask: Ask) -> bool {
        let tries = self.functions[func as usize].no_room[ask.index()];
        !tries.never_fits && (tries.epoch != self.room_epoch || tries.tries < MAX_NO_ROOM_TRIES)
    }

    /// `request` needs `needed` bytes and no eviction can ever give it more
    /// than `room`: a batch with callees is made for its function alone
    /// from now on; a function that alone does not fit is never compiled
    /// that way again (`--jit-stats` says so). Nothing is evicted for it.
    fn never_fits(&mut self, vm: &mut Vm<'_>, request: &Request, needed: usize, room: usize) {
        let (Some(ask), Some(func)) = (Ask::of(request), asker(request)) else {
            return;
        };
        let others = request.functions().into_iter().any(|f| f != func);
        if others && !self.functions[func as usize].alone {
            self.function(func).alone = true;
        } else {
            self.function(func).no_room[ask.index()].never_fits = true;
            if self.options.stats {
                let name = &vm.module().functions[func as usize].name;
                warn(
                    vm,
                    format_args!(
                        "jit-stats: {name}: never {} again: it needs {needed} bytes of code, the code limit leaves {room} for compiled code",
                        ask.describe()
                    ),
                );
            }
        }
        self.back_off(vm, request);
    }

    /// `func`'s threshold doubled `doublings` times (at most
    /// [`MAX_DOUBLINGS`]): the countdown of a function evicted that often.
    fn doubled_wait(&self, func: u32, doublings: u32) -> Countdown {
        match self.initial(func) {
            Countdown::After(n) => {
                let wait = (n.max(1) as u64) << doublings.min(MAX_DOUBLINGS);
                Countdown::After(wait.min(u32::MAX as u64 / 2) as u32)
            }
            other => other,
        }
    }

    /// The countdown of an ask about `func` that compiled nothing: the wait
    /// a back-off set during the ask, else `otherwise`.
    fn unless_backed_off(&mut self, func: u32, otherwise: Countdown) -> Countdown {
        self.function(func)
            .wait
            .take()
            .map_or(otherwise, Countdown::After)
    }
    // ANCHOR_END: make_room

    /// Frees the OSR variants made obsolete by a whole-function compile
    /// whose function has no activation now.
    fn free_obsolete_osr(&mut self, vm: &mut Vm<'_>) {
        if self.obsolete_osr.is_empty() {
            return;
        }
        let active = vm.active_functions();
        let (free, keep): (Vec<u32>, Vec<u32>) = (std::mem::take(&mut self.obsolete_osr)
            .into_iter())
        .partition(|&f| !active[f as usize] && matches!(self.state(f), FnState::Entered(_)));
        self.obsolete_osr = keep;
        self.obsolete_osr
            .retain(|&f| matches!(self.functions[f as usize].osr, Some(Some(_))));
        if free.is_empty() {
            return;
        }
        for &f in &free {
            self.function(f).osr = None;
        }
        self.run(vm, Request::FreeOsr { funcs: free });
    }

    /// Installs what the compiler thread finished since the last ask, and
    /// frees what is obsolete.
    fn drain(&mut self, vm: &mut Vm<'_>) {
        if let Mode::Background(background) = &self.mode {
            let actions = background.drain();
            self.apply(vm, actions);
            self.make_room(vm);
        }
        self.free_obsolete_osr(vm);
    }

    /// The batch for a hot `func`: it and the callees it reaches that are
    /// still interpreted and warm (ran at least [`CALLEE_WARM_SHARE`] of
    /// their own threshold), callees first. A callee that ran a handful of
    /// times stays out: compiled code calls it through the entry table,
    /// and it tiers up by itself if it gets hot (a `<main>` calling 5,000
    /// functions once each compiles none of them).
    fn hot_batch(&self, vm: &Vm<'_>, func: u32) -> Vec<u32> {
        if self.functions[func as usize].alone {
            return vec![func];
        }
        callgraph::with_callees(vm.module(), func, |c| {
            let callee = &self.functions[c as usize];
            let warm = (callee.threshold / CALLEE_WARM_SHARE).max(1);
            callee.state == FnState::Interpreted
                && !callee.pending
                && (c == func || self.may_compile(c, Ask::Whole))
                && vm.runs_since(c, self.initial(c)) >= warm
        })
    }

    /// Says once, at start, if the code limit leaves no room for compiled
    /// code (less than one page after the pinned trampolines): the run is
    /// then interpreted, with its trampolines.
    fn check_room(&mut self, vm: &mut Vm<'_>) {
        let Some(compiler) = self.inline_compiler() else {
            return;
        };
        let (room, pinned) = (compiler.room(), compiler.pinned());
        let page = crate::codegen::arena::page_size();
        if self.options.threshold.is_none() || room >= page {
            return;
        }
        let limit = self.options.code_limit();
        let why = match pinned {
            0 => format!("is less than one page ({page} bytes), the smallest piece of code memory"),
            _ => format!(
                "leaves {room} bytes after the {pinned} bytes of interpreter-entry trampolines, which are never evicted"
            ),
        };
        warn(
            vm,
            format_args!(
                "toyvm: warning: JIT: the code limit of {limit} bytes {why}: nothing is compiled (a limit of at least {} bytes compiles)",
                pinned + page
            ),
        );
        self.compiles_off = true;
        for f in 0..self.functions.len() as u32 {
            vm.set_countdown(f, Countdown::Never);
        }
    }

    /// The countdown `func` starts with: its threshold.
    fn initial(&self, func: u32) -> Countdown {
        match self.options.threshold {
            None => Countdown::Never,
            Some(_) => Countdown::After(self.functions[func as usize].threshold),
        }
    }

    /// Per-function state and thresholds for `vm`'s module, and every
    /// function's countdown set to its threshold.
    fn set_up(&mut self, vm: &mut Vm<'_>) {
        let module = vm.module();
        let n = module.functions.len();
        if let Some(compiler) = self.inline_compiler() {
            compiler.reset(n);
        }
        let base = self.options.threshold.unwrap_or(0);
        let cost_model = self.options.cost_model;
        self.functions = (0..n as u32)
            .map(|f| match cost_model {
                true => FnPolicy::new(cost::threshold(module, f, base)),
                false => FnPolicy::new(base),
            })
            .collect();
        for f in 0..n as u32 {
            vm.set_countdown(f, self.initial(f));
        }
    }

    /// The interpreter asked again about `func`, which has an OSR variant
    /// but no native function. A function whose loop got hot in one long
    /// activation is done with OSR; one called again and again reaches
    /// here at each call: after [`Jit::whole_after`] asks it is compiled
    /// whole (with its warm callees, as at a call, and its shim if
    /// `entered`). True if the compile was asked for.
    fn osr_reask(&mut self, vm: &mut Vm<'_>, func: u32, entered: bool) -> bool {
        let function = self.function(func);
        function.osr_asks += 1;
        let (asks, pending) = (function.osr_asks, function.pending);
        let wait = match function.was_entered {
            true => 1,
            false => self.whole_after(vm, func),
        };
        if asks < wait || pending {
            return false;
        }
        let funcs = self.hot_batch(vm, func);
        let entered = if entered { vec![func] } else { Vec::new() };
        self.run(vm, Request::Compile { funcs, entered });
        true
    }

    /// Asks after which `func`, which has an OSR variant, is compiled
    /// whole: each ask is an activation that started interpreted and ran
    /// about [`OSR_REASK`] events before it entered the variant, so the
    /// whole compile pays after [`cost::whole_after_asks`] of them (with the
    /// cost model), or after [`WHOLE_AFTER_ASKS`] (an explicit threshold).
    fn whole_after(&self, vm: &Vm<'_>, func: u32) -> u32 {
        match self.options.cost_model {
            true => cost::whole_after_asks(vm.module(), func, OSR_REASK),
            false => WHOLE_AFTER_ASKS,
        }
    }

    /// True if `func` is too large to compile (see [`crate::translate::limits`]): it
    /// is then refused, never asked about again; `--jit-stats` says so.
    /// Decided here, on the interpreter's thread, before any request, so
    /// the answer and the message do not depend on the compiler thread's
    /// timing (the compiler checks the callees of a batch itself).
    fn over_budget(&mut self, vm: &mut Vm<'_>, func: u32) -> bool {
        if self.state(func) == FnState::Refused {
            return true;
        }
        let Err(over) = limits::check_budget(vm.module(), func) else {
            return false;
        };
        self.apply(vm, vec![Action::State(func, FnState::Refused)]);
        if let Some(compiler) = self.inline_compiler() {
            compiler.refuse(func);
        }
        if self.options.stats {
            let line = over.stats_line(&vm.module().functions[func as usize].name);
            warn(vm, format_args!("{line}"));
        }
        true
    }

    /// The countdown of a function that waits for the compiler thread, or
    /// `None` when compiles run on this thread.
    fn poll(&self) -> Option<Countdown> {
        self.background().then_some(Countdown::After(POLL))
    }
}

/// Writes one diagnostic line to the VM's diagnostics (the driver's stderr).
fn warn(vm: &mut Vm<'_>, line: std::fmt::Arguments<'_>) {
    let _ = writeln!(vm.diagnostics(), "{line}");
}

// SAFETY: every OSR entry `hot_loop` returns was built by `translate` for
// that function and loop header (`Role::Osr`), with the `OsrFn` signature
// (`pipeline::CodeGen::install`), and finalized before it was handed over.
unsafe impl TierUp for Jit {
    fn initial_countdown(&self) -> Countdown {
        self.options
            .threshold
            .map_or(Countdown::Never, Countdown::After)
    }

    fn start(&mut self, vm: &mut Vm<'_>) {
        for warning in std::mem::take(&mut self.startup_warnings) {
            warn(vm, format_args!("{warning}"));
        }
        self.set_up(vm);
        // Trampolines first: they are pinned, and what they leave of the
        // code limit is the room for compiled code.
        if let Mode::Inline(Some(compiler)) = &mut self.mode
            && !compiler.no_profilers()
        {
            let mut out = Vec::new();
            compiler.trampolines(&*vm, &mut out);
            self.apply(vm, out);
        }
        self.check_room(vm);
        if self.options.threshold == Some(0) && !self.compiles_off {
            let order = callgraph::callee_first_order(vm.module());
            // `<main>` is always entered through the entry table.
            self.run(
                vm,
                Request::Compile {
                    funcs: order,
                    entered: vec![vm.module().main],
                },
            );
            // Functions left to the interpreter (over the budget) call
            // through the entry table: their callees get their shims now,
            // in one batch, not in one batch per callee at its first call
            // (5,000 batches for a big interpreted `<main>`: 5,000 objects
            // for gdb, a page of code memory each).
            let entered = self.called_from_interpreted(vm);
            self.run(
                vm,
                Request::Compile {
                    funcs: Vec::new(),
                    entered,
                },
            );
        }
        // The compiler moves to its thread at the first request (a run
        // that compiles nothing pays for no thread and no program copy).
        self.go_background =
            self.options.background && self.options.threshold.is_some_and(|t| t > 0);
    }

    fn hot_call(&mut self, vm: &mut Vm<'_>, func: u32) -> CallDecision {
        if self.options.threshold.is_none() {
            return CallDecision::Interpret(Countdown::Never);
        }
        self.function(func).wait = None;
        self.drain(vm);
        if self.functions[func as usize].pending {
            return CallDecision::Interpret(Countdown::After(POLL));
        }
        if self.over_budget(vm, func) {
            return CallDecision::Interpret(Countdown::Never);
        }
        match self.state(func) {
            FnState::Refused => return CallDecision::Interpret(Countdown::Never),
            // Compiled earlier in a batch of callees: only the shim is new.
            FnState::Native(_) => self.run(
                vm,
                Request::Compile {
                    funcs: Vec::new(),
                    entered: vec![func],
                },
            ),
            // Its loop tiered up through OSR: this call's loop will enter
            // the variant; compiled whole only if it keeps being called.
            FnState::Interpreted if self.functions[func as usize].has_osr() => {
                if !self.osr_reask(vm, func, true) {
                    return CallDecision::Interpret(Countdown::After(OSR_REASK));
                }
            }
            FnState::Interpreted => {
                let funcs = self.hot_batch(vm, func);
                self.run(
                    vm,
                    Request::Compile {
                        funcs,
                        entered: vec![func],
                    },
                );
            }
            FnState::Entered(_) => {}
        }
        match (self.state(func), self.poll()) {
            (FnState::Entered(_), _) => CallDecision::Enter,
            (FnState::Refused, _) => CallDecision::Interpret(Countdown::Never),
            (_, Some(poll)) if self.functions[func as usize].pending => {
                CallDecision::Interpret(poll)
            }
            _ => CallDecision::Interpret(self.unless_backed_off(func, Countdown::Never)),
        }
    }

    // ANCHOR: hot_loop
    fn hot_loop(&mut self, vm: &mut Vm<'_>, func: u32, _header: u32) -> LoopDecision {
        if self.options.threshold.is_none() {
            return LoopDecision::Interpret(Countdown::Never);
        }
        self.function(func).wait = None;
        self.drain(vm);
        if self.functions[func as usize].waiting() {
            return LoopDecision::Interpret(Countdown::After(POLL));
        }
        // One compile: the OSR variant (with the warm callees it calls, as
        // native functions). The function is compiled whole only if it
        // keeps being called (`osr_reask`), not on the chance that it will.
        if self.over_budget(vm, func) {
            return LoopDecision::Interpret(Countdown::Never);
        }
        let cached = self.functions[func as usize].osr.is_some();
        match self.state(func) {
            FnState::Interpreted if cached => {
                if self.functions[func as usize].has_osr() {
                    self.osr_reask(vm, func, false);
                }
            }
            FnState::Refused => {}
            _ if cached => {}
            // Not compiled yet, or compiled but this interpreted activation
            // started before: its variant.
            state => {
                let mut callees = Vec::new();
                if state == FnState::Interpreted {
                    callees = self.hot_batch(vm, func);
                    callees.retain(|&f| f != func);
                }
                self.run(vm, Request::Osr { callees, func });
            }
        }
        if let Some(poll) = self.poll()
            && self.functions[func as usize].waiting()
        {
            return LoopDecision::Interpret(poll);
        }
        let osr = self.functions[func as usize].osr.flatten();
        match (osr, self.state(func)) {
            // Later activations start interpreted and enter the variant
            // at this back-edge, soon.
            (Some(osr), FnState::Interpreted) => {
                LoopDecision::Enter(osr, Countdown::After(OSR_REASK))
            }
            // This activation leaves the interpreter: the shim can wait for
            // the first entry-table call; another interpreted activation's
            // back-edge lands here and gets the OSR variant.
            (Some(osr), FnState::Native(_)) => LoopDecision::Enter(osr, Countdown::Next),
            (Some(osr), _) => LoopDecision::Enter(osr, Countdown::Never),
            // Keep interpreting this activation, but never ask again.
            (None, FnState::Native(_)) => {
                self.run(
                    vm,
                    Request::Compile {
                        funcs: Vec::new(),
                        entered: vec![func],
                    },
                );
                match self.poll() {
                    Some(poll) => LoopDecision::Interpret(poll),
                    None => LoopDecision::Interpret(self.unless_backed_off(func, Countdown::Never)),
                }
            }
            // No variant (over the budget, it failed, or no room): a call
            // may still compile the function whole, after the wait a
            // back-off set.
            (None, FnState::Interpreted) => {
                let initial = self.initial(func);
                LoopDecision::Interpret(self.unless_backed_off(func, initial))
            }
            (None, _) => LoopDecision::Interpret(self.unless_backed_off(func, Countdown::Never)),
        }
    }
    // ANCHOR_END: hot_loop

    fn finish(&mut self, vm: &mut Vm<'_>) {
        self.finished = true;
        let compiler = match std::mem::replace(&mut self.mode, Mode::Stopped) {
            Mode::Inline(compiler) => compiler.map(|c| *c),
            Mode::Background(mut background) => background.stop().map(|(compiler, actions)| {
                // Only the diagnostics: the run is over.
                for action in actions {
                    if let Action::Warn(line) = action {
                        warn(vm, format_args!("{line}"));
                    }
                }
                compiler
            }),
            Mode::Stopped => None,
        };
        if let Some(mut compiler) = compiler {
            // With an explicit limit, or once something was evicted.
            if self.options.stats && (self.options.code_limit.is_some() || compiler.evicted()) {
                let line = compiler.cache_stats();
                warn(vm, format_args!("{line}"));
            }
            for failure in compiler.finish_profilers() {
                warn(vm, format_args!("toyvm: warning: {failure}"));
            }
        }
    }
}

impl Drop for Jit {
    /// Completes the profiler outputs if [`TierUp::finish`] never ran (no
    /// VM to report failures on then); the fields then drop in order, the
    /// code memory last (see [`crate::codegen::pipeline`]).
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        match std::mem::replace(&mut self.mode, Mode::Stopped) {
            Mode::Inline(Some(mut compiler)) => {
                let _ = compiler.finish_profilers();
            }
            Mode::Background(mut background) => {
                if let Some((mut compiler, _)) = background.stop() {
                    let _ = compiler.finish_profilers();
                }
            }
            Mode::Inline(None) | Mode::Stopped => {}
        }
    }
}

/// A [`TierUp`] that never compiles: used when the JIT cannot start, and
/// says why when the run starts.
pub struct Disabled {
    /// Why the JIT could not start.
    pub why: String,
}

// SAFETY: returns no OSR entry.
unsafe impl TierUp for Disabled {
    fn initial_countdown(&self) -> Countdown {
        Countdown::Never
    }
    fn start(&mut self, vm: &mut Vm<'_>) {
        warn(
            vm,
            format_args!("toyvm: warning: JIT disabled: {}", self.why),
        );
    }
    fn hot_call(&mut self, _vm: &mut Vm<'_>, _func: u32) -> CallDecision {
        CallDecision::Interpret(Countdown::Never)
    }
    fn hot_loop(&mut self, _vm: &mut Vm<'_>, _func: u32, _pc: u32) -> LoopDecision {
        LoopDecision::Interpret(Countdown::Never)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cranelift_module::FuncId;

    #[test]
    fn states_decide_the_countdown() {
        let initial = Countdown::After(7);
        let id = FuncId::from_u32(0);
        assert_eq!(FnState::Interpreted.countdown(initial), initial);
        assert_eq!(FnState::Native(id).countdown(initial), Countdown::Next);
        assert_eq!(FnState::Entered(id).countdown(initial), Countdown::Never);
        assert_eq!(FnState::Refused.countdown(initial), Countdown::Never);
    }
}
