//! The `toyvm` command line: `run`, `check`, `disasm`, `report` and `profile`.
//!
//! This file only parses arguments and reads the script; every stage of the
//! work lives in the `vm` crate (see `vm::driver`).
//!
//! No path panics on an I/O error: messages go through [`stderr`] (a full
//! or closed stderr is ignored), and stdout is written with errors handled
//! (a closed pipe ends the output quietly, a full disk is an error).

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

#[macro_use]
mod stderr;
mod files;
mod jitdump;
mod profile;
mod report;
mod signals;

/// toyvm: a small typed language with a bytecode interpreter, built to teach
/// JIT profiling.
#[derive(Parser)]
#[command(name = "toyvm", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Compile and run a script.
    Run(RunArgs),
    /// Compile a script without running it; report the first compile error.
    Check {
        /// The script (`*.toy`).
        script: PathBuf,
    },
    /// Print the bytecode of every function, with source lines.
    Disasm {
        /// Show each function's Cranelift IR and machine code instead.
        #[arg(long)]
        jit: bool,
        /// Show the code as `run --slow-line LINE:NANOS` runs it (its
        /// `Spin` instructions, and their loops in machine code).
        #[arg(long, value_name = "LINE:NANOS")]
        slow_line: Vec<vm::driver::SlowLine>,
        /// The script (`*.toy`).
        script: PathBuf,
    },
    /// Show a profile written by `run --vmprof`: call tree and flat
    /// profile, collapsed stacks, or a flame graph.
    Report(report::ReportArgs),
    /// Profile a script with Linux perf (native and Toy frames together):
    /// writes a text report and a flame graph.
    Profile(profile::ProfileArgs),
    /// Decode a jitdump (`jit-PID.dump` of `run --perf-jitdump`) record by
    /// record, as the jitdump chapter of the book lays the bytes out.
    Jitdump(jitdump::JitdumpArgs),
}

#[derive(Args)]
struct RunArgs {
    /// Never compile to machine code: interpret every function.
    #[arg(long)]
    no_jit: bool,

    /// Compile a function once its calls plus loop back-edges reach N;
    /// 0 compiles every function before it first runs.
    #[arg(long, value_name = "N", conflicts_with = "no_jit")]
    jit_threshold: Option<u32>,

    /// Compile on a background thread (`toyvm-jit`) while the interpreter
    /// keeps running, as the default tiering does, also with an explicit
    /// --jit-threshold N (N > 0).
    #[arg(long, conflicts_with = "no_jit")]
    jit_background: bool,

    /// Write /tmp/perf-PID.map for `perf report`, and run interpreted
    /// functions through per-function trampolines so perf names them.
    #[arg(long)]
    perf: bool,

    /// Write jit-PID.dump (with unwind and line info) for
    /// `perf record -k 1` + `perf inject --jit`; trampolines as for --perf.
    #[arg(long)]
    perf_jitdump: bool,

    /// Directory of the jitdump and of --jit-elf's files [default:
    /// $JITDUMPDIR, else /tmp; an empty JITDUMPDIR counts as unset]. It must not start with /tmp/perf- (perf
    /// would misread the files there).
    #[arg(long, value_name = "DIR", value_parser = non_empty_path)]
    perf_dir: Option<PathBuf>,

    /// Tell gdb and lldb about compiled code (GDB JIT interface): names,
    /// source lines and unwind info; trampolines as for --perf.
    #[arg(long)]
    gdb: bool,

    /// Run compiled code from ELF files toyvm writes (one per batch, with
    /// symbols, .eh_frame and a build-id) into DIR/toyvm-PID/ (DIR as for
    /// --perf-dir), so perf without inject, eu-stack, bpftrace, samply and
    /// fleet profilers see it as native code; trampolines as for --perf.
    /// The files stay after the run.
    #[arg(long)]
    jit_elf: bool,

    /// Most bytes of executable memory the JIT may hold at once (K, M or
    /// G suffixes; default 256M, whole pages): when new code would not fit,
    /// the coldest compiled functions that are not running are evicted (they
    /// run interpreted and may be compiled again). The trampolines of
    /// --perf, --perf-jitdump, --gdb and --jit-elf are never evicted and count against
    /// it (about 300 bytes a function); a limit they fill compiles nothing,
    /// with one warning. Code memory is given out in whole pages, each
    /// batch of code taking at least one (two with --jit-elf): 4 KiB on
    /// x86-64 and most arm64 kernels, but 16 KiB or 64 KiB on some arm64
    /// kernels, where a limit of a few pages holds fewer batches and one
    /// under a page compiles nothing (say 12K on a 4K kernel, 48K on 16K).
    #[arg(long, value_name = "SIZE", value_parser = jit::parse_size, conflicts_with = "no_jit")]
    jit_code_limit: Option<usize>,

    /// Print each JIT compilation's time, and the code cache's evictions and
    /// recompiles, to stderr.
    #[arg(long)]
    jit_stats: bool,

    /// Record a VMProf-style profile of the Toy call stack into FILE
    /// (read it with `toyvm report FILE` or the PyPI `vmprof` tools).
    #[arg(long, value_name = "FILE", value_parser = non_empty_path)]
    vmprof: Option<PathBuf>,

    /// CPU time between two --vmprof samples, in microseconds.
    #[arg(long, value_name = "N", requires = "vmprof", default_value_t = 1000,
          value_parser = clap::value_parser!(u64).range(10..=1_000_000))]
    vmprof_interval_us: u64,

    /// Also give --vmprof a frame for each call the JIT inlined (a few
    /// stores per inlined call); without it their time counts as the
    /// caller's, as in perf.
    #[arg(long, requires = "vmprof")]
    vmprof_inlined: bool,

    /// Also record, for every frame of every --vmprof sample, the source
    /// line it was executing (vmprof lines mode; `toyvm report --lines`
    /// shows the hottest lines). Costs the interpreter a store per
    /// instruction and compiled code a store per call.
    #[arg(long, requires = "vmprof")]
    vmprof_lines: bool,

    /// Slow line LINE of the script down by about NANOS nanoseconds of busy
    /// CPU time each time control enters it (from another line, or by a
    /// loop's back-edge), in every tier, as the line's own code: the
    /// slowdown experiment that checks a profile (book: "Is the profile
    /// right?"). May be given several times; NANOS from 1 to 1000000000.
    #[arg(long, value_name = "LINE:NANOS")]
    slow_line: Vec<vm::driver::SlowLine>,

    /// After the run, print on stderr how many times control entered each
    /// --slow-line line (`slow-line: line 10 (work): 60000 entries`), the
    /// ground truth a profile's shares are predicted from. Counted by the
    /// interpreter, so it needs --no-jit (the count is the program's, the
    /// same in every tier).
    #[arg(long, requires = "slow_line", requires = "no_jit")]
    slow_line_counts: bool,

    /// The call-depth limit (at least 1): deeper calls stop the script
    /// with an error.
    #[arg(long, value_name = "N", default_value_t = vm::driver::DEFAULT_MAX_DEPTH as u64,
          value_parser = clap::value_parser!(u64).range(1..))]
    max_depth: u64,

    /// Most memory the heap may hold (e.g. 512M, 4G); beyond it the script
    /// stops with `out of memory` [default: half of the machine's memory].
    #[arg(long, value_name = "SIZE", value_parser = vm::runtime::heap_limit::parse_size)]
    max_heap: Option<usize>,

    /// Collect garbage at every allocation and poison freed objects, so a
    /// missing GC root shows up as wrong output (for testing the VM).
    #[arg(long, hide = true)]
    gc_stress: bool,

    /// The script (`*.toy`).
    script: PathBuf,

    /// Arguments for the script, returned by `args()`. toyvm's own options
    /// go before SCRIPT; one of them among the script's arguments is
    /// refused, unless `--` follows SCRIPT (`toyvm run s.toy -- x --no-jit`
    /// passes `x` and `--no-jit` to the script).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    args: Vec<String>,
}

/// Rejects an empty path, which would silently mean the current directory.
pub(crate) fn non_empty_path(value: &str) -> Result<PathBuf, String> {
    if value.is_empty() {
        Err("the path is empty".into())
    } else {
        Ok(PathBuf::from(value))
    }
}

fn main() -> ExitCode {
    // SAFETY: first thing in `main`: no other thread exists yet.
    unsafe { jit::forget_perf_buildid_dir() };
    let cli = Cli::parse();
    if let Err(why) = files::refuse_overwriting_inputs(&cli.command.files()) {
        say!("error: {why}");
        return ExitCode::from(1);
    }
    let status = match cli.command {
        Command::Run(run) => run_script(run),
        Command::Check { script } => load(&script).map(|_| 0),
        Command::Disasm {
            jit: false,
            script,
            slow_line,
        } => load_slowed(&script, &slow_line)
            .and_then(|module| print_stdout(&vm::bytecode::disasm::disassemble(&module))),
        Command::Disasm {
            jit: true,
            script,
            slow_line,
        } => load_slowed(&script, &slow_line).and_then(|module| {
            match jit::disasm::disassemble(&module, &mut std::io::stderr()) {
                Ok(text) => print_stdout(&text),
                Err(e) => {
                    say!("error: {e}");
                    Err(())
                }
            }
        }),
        Command::Report(args) => report::run(args),
        Command::Profile(args) => profile::run(args),
        Command::Jitdump(args) => jitdump::run(args),
    };
    ExitCode::from(status.unwrap_or(1))
}

impl Command {
    /// What the command reads and writes (see [`files`]): every option that
    /// names a file to write is listed here.
    fn files(&self) -> files::Files {
        match self {
            Command::Run(run) => files::Files {
                inputs: vec![run.script.clone()],
                outputs: (run.vmprof.iter())
                    .map(|path| files::Output {
                        option: "--vmprof",
                        path: path.clone(),
                    })
                    .collect(),
            },
            Command::Check { script } | Command::Disasm { script, .. } => files::Files {
                inputs: vec![script.clone()],
                outputs: Vec::new(),
            },
            Command::Report(args) => args.files(),
            Command::Profile(args) => args.files(),
            Command::Jitdump(args) => args.files(),
        }
    }
}

/// Writes `text` to stdout: a closed pipe (`| head -1`) ends the output
/// quietly, any other failure (a full disk) is an error.
fn print_stdout(text: &str) -> Result<u8, ()> {
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Ok(()) => Ok(0),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(0),
        Err(e) => {
            say!("error: cannot write to stdout: {e}");
            Err(())
        }
    }
}

/// The script's arguments. clap gives toyvm the options between SCRIPT and
/// the first script argument, and the script everything from there on, so
/// `toyvm run s.toy x --no-jit` would silently pass `--no-jit` to the
/// script. Such an argument, spelled like one of `run`'s own options, is
/// refused with a hint, unless the command line has a `--` (then the user
/// said where toyvm's options end).
fn script_args(args: Vec<String>) -> Result<Vec<String>, String> {
    if std::env::args_os().any(|arg| arg == "--") {
        return Ok(args);
    }
    let run = RunArgs::augment_args(clap::Command::new("run"));
    let ours = |arg: &str| {
        let name = arg.split('=').next().unwrap_or(arg);
        run.get_arguments().any(|a| {
            a.get_long().is_some_and(|long| name == format!("--{long}"))
                || a.get_short()
                    .is_some_and(|short| name == format!("-{short}"))
        }) || name == "--help"
            || name == "-h"
    };
    match args.iter().find(|a| ours(a)) {
        Some(flag) => Err(format!(
            "'{flag}' comes after the script's arguments, so it would go to the script, not to toyvm; \
             put toyvm's options before SCRIPT, or write `--` after SCRIPT to pass it to the script"
        )),
        None => Ok(args),
    }
}

fn run_script(run: RunArgs) -> Result<u8, ()> {
    let args = script_args(run.args).map_err(|why| say!("error: {why}"))?;
    // Before any thread exists, so every thread inherits the blocked mask.
    let on_output = match signals::stop_cleanly_on_signals() {
        Ok(hook) => Some(hook),
        Err(e) => {
            warn!("cannot handle SIGINT/SIGTERM/SIGHUP: {e}; Ctrl-C may lose output");
            None
        }
    };
    let module = load_slowed(&run.script, &run.slow_line)?;
    let jit_options = jit::JitOptions {
        threshold: (!run.no_jit).then(|| run.jit_threshold.unwrap_or(jit::DEFAULT_THRESHOLD)),
        cost_model: run.jit_threshold.is_none(),
        background: run.jit_threshold.is_none() || run.jit_background,
        perf_map: run.perf,
        jitdump_dir: (run.perf_jitdump).then(|| {
            run.perf_dir
                .clone()
                .unwrap_or_else(perfsupport::JitDump::default_dir)
        }),
        gdb: run.gdb,
        elf_dir: (run.jit_elf).then(|| {
            run.perf_dir
                .clone()
                .unwrap_or_else(perfsupport::JitDump::default_dir)
        }),
        stats: run.jit_stats,
        code_limit: run.jit_code_limit,
    };
    // Pure interpretation needs no hook at all: calls take the fastest path.
    let wanted =
        jit_options.threshold.is_some() || run.perf || run.perf_jitdump || run.gdb || run.jit_elf;
    let tier_up: Option<vm::driver::TierUpFactory> = wanted.then(|| {
        let make = move || jit::tier_up(jit_options.clone());
        std::sync::Arc::new(make) as vm::driver::TierUpFactory
    });
    let options = vm::driver::Options {
        max_depth: usize::try_from(run.max_depth).unwrap_or(usize::MAX),
        max_heap: run
            .max_heap
            .unwrap_or_else(vm::runtime::heap_limit::default_max_heap),
        gc_stress: run.gc_stress,
        tier_up,
        vmprof: run.vmprof.map(|path| vm::vmprof::VmprofOptions {
            path,
            interval: std::time::Duration::from_micros(run.vmprof_interval_us),
            inlined_frames: run.vmprof_inlined,
            lines: run.vmprof_lines,
            join: false,
        }),
        on_output,
        ..vm::driver::Options::default()
    };
    let status = vm::driver::run(&module, args, &options) as u8;
    if run.slow_line_counts {
        for (line, functions, entries) in vm::driver::slow_line_entries(&module) {
            eprintln!(
                "slow-line: line {line} ({}): {entries} entries",
                functions.join(", ")
            );
        }
    }
    Ok(status)
}

/// [`load`], then `--slow-line`'s spins placed (none for no requests).
fn load_slowed(
    script: &std::path::Path,
    slow_lines: &[vm::driver::SlowLine],
) -> Result<vm::bytecode::Module, ()> {
    let mut module = load(script)?;
    vm::driver::slow_lines(&mut module, slow_lines).map_err(|why| say!("error: {why}"))?;
    Ok(module)
}

/// Reads and compiles a script, printing the diagnostic on failure.
fn load(script: &std::path::Path) -> Result<vm::bytecode::Module, ()> {
    let path = script.to_string_lossy();
    let bytes = std::fs::read(script).map_err(|err| {
        say!("error: cannot read '{path}': {err}");
    })?;
    vm::driver::load(&path, &bytes).map_err(|rendered| {
        say!("{}", rendered.trim_end());
    })
}
