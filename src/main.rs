//! The `toyvm` command line: `run`, `check`, `disasm`, `report` and `profile`.
//!
//! This file only parses arguments and reads the script; every stage of the
//! work lives in the `vm` crate (see `vm::driver`).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

mod profile;
mod report;

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
        /// The script (`*.toy`).
        script: PathBuf,
    },
    /// Show a profile written by `run --vmprof`: call tree and flat
    /// profile, collapsed stacks, or a flame graph.
    Report(report::ReportArgs),
    /// Profile a script with Linux perf (native and Toy frames together):
    /// writes a text report and a flame graph.
    Profile(profile::ProfileArgs),
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

    /// Write /tmp/perf-PID.map for `perf report`, and run interpreted
    /// functions through per-function trampolines so perf names them.
    #[arg(long)]
    perf: bool,

    /// Write jit-PID.dump (with unwind and line info) for
    /// `perf record -k 1` + `perf inject --jit`; trampolines as for --perf.
    #[arg(long)]
    perf_jitdump: bool,

    /// Directory of the jitdump [default: $JITDUMPDIR, else /tmp]. It must
    /// not start with /tmp/perf- (perf would misread the files there).
    #[arg(long, value_name = "DIR")]
    perf_dir: Option<PathBuf>,

    /// Tell gdb and lldb about compiled code (GDB JIT interface): names,
    /// source lines and unwind info; trampolines as for --perf.
    #[arg(long)]
    gdb: bool,

    /// Print each JIT compilation's time to stderr.
    #[arg(long)]
    jit_stats: bool,

    /// Record a VMProf-style profile of the Toy call stack into FILE
    /// (read it with `toyvm report FILE` or the PyPI `vmprof` tools).
    #[arg(long, value_name = "FILE")]
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

    /// The call-depth limit: deeper calls stop the script with an error.
    #[arg(long, value_name = "N", default_value_t = vm::driver::DEFAULT_MAX_DEPTH,
          value_parser = clap::value_parser!(usize))]
    max_depth: usize,

    /// Collect garbage at every allocation and poison freed objects, so a
    /// missing GC root shows up as wrong output (for testing the VM).
    #[arg(long, hide = true)]
    gc_stress: bool,

    /// The script (`*.toy`).
    script: PathBuf,

    /// Arguments for the script, returned by `args()`.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    args: Vec<String>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let status = match cli.command {
        Command::Run(run) => run_script(run),
        Command::Check { script } => load(&script).map(|_| 0),
        Command::Disasm { jit: false, script } => load(&script).map(|module| {
            print!("{}", vm::disasm::disassemble(&module));
            0
        }),
        Command::Disasm { jit: true, script } => {
            load(&script).and_then(|module| match jit::disasm::disassemble(&module) {
                Ok(text) => {
                    print!("{text}");
                    Ok(0)
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    Err(())
                }
            })
        }
        Command::Report(args) => report::run(args),
        Command::Profile(args) => profile::run(args),
    };
    ExitCode::from(status.unwrap_or(1))
}

fn run_script(run: RunArgs) -> Result<u8, ()> {
    let module = load(&run.script)?;
    let jit_options = jit::JitOptions {
        threshold: (!run.no_jit).then(|| run.jit_threshold.unwrap_or(jit::DEFAULT_THRESHOLD)),
        perf_map: run.perf,
        jitdump_dir: run.perf_jitdump.then(|| {
            run.perf_dir
                .or_else(|| std::env::var_os("JITDUMPDIR").map(PathBuf::from))
                .unwrap_or_else(|| PathBuf::from("/tmp"))
        }),
        gdb: run.gdb,
        stats: run.jit_stats,
    };
    // Pure interpretation needs no hook at all: calls take the fastest path.
    let wanted = jit_options.threshold.is_some() || run.perf || run.perf_jitdump || run.gdb;
    let tier_up: Option<vm::driver::TierUpFactory> = wanted.then(|| {
        let make = move || jit::tier_up(jit_options.clone());
        std::sync::Arc::new(make) as vm::driver::TierUpFactory
    });
    let options = vm::driver::Options {
        max_depth: run.max_depth,
        gc_stress: run.gc_stress,
        tier_up,
        vmprof: run.vmprof.map(|path| vm::vmprof::VmprofOptions {
            path,
            interval: std::time::Duration::from_micros(run.vmprof_interval_us),
            inlined_frames: run.vmprof_inlined,
        }),
        ..vm::driver::Options::default()
    };
    Ok(vm::driver::run(&module, run.args, &options) as u8)
}

/// Reads and compiles a script, printing the diagnostic on failure.
fn load(script: &std::path::Path) -> Result<vm::bytecode::Module, ()> {
    let path = script.to_string_lossy();
    let bytes = std::fs::read(script).map_err(|err| {
        eprintln!("error: cannot read '{path}': {err}");
    })?;
    vm::driver::load(&path, &bytes).map_err(|rendered| {
        eprint!("{rendered}");
    })
}
