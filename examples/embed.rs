//! A host that embeds toyvm: runs N VMs in one process, taking the scripts
//! in turn (round robin), each a fresh VM and JIT, on T threads at once,
//! and prints what each script prints (see `toyvm::embed`).
//!
//! ```text
//! cargo run --release --example embed -- [--jit-threshold N] [--jit-code-limit SIZE]
//!     [--perf] [--perf-jitdump] [--perf-dir DIR] [--gdb] [--vmprof FILE]
//!     [--vmprof-each DIR] [--threads T] N SCRIPT...
//! ```
//!
//! `--vmprof FILE` profiles the whole process (every VM) into one file;
//! `--vmprof-each DIR` profiles each VM on its own, into `DIR/vm-I.prof`
//! (the host enables and disables vmprof around each VM: each file names
//! only the code of the VMs that ran while it was on).
//!
//! Every VM's code is named in the process's one perf map and one jitdump;
//! dropping a VM gives back its code memory, mappings, unwind and GDB
//! registrations and its compiler thread, so RSS and the mapping count stay
//! flat however many VMs run in turn.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};

use clap::Parser;
use toyvm::embed::{self, Engine, Script};

/// Runs N VMs in one process.
#[derive(Parser)]
struct Args {
    /// Compile a function once its calls plus loop back-edges reach N (0:
    /// everything before it runs) [default: the cost-scaled tiering].
    #[arg(long, value_name = "N")]
    jit_threshold: Option<u32>,
    /// Most bytes of executable memory each VM's JIT may hold (K, M, G).
    #[arg(long, value_name = "SIZE", value_parser = jit::parse_size)]
    jit_code_limit: Option<usize>,
    /// Interpret only.
    #[arg(long)]
    no_jit: bool,
    /// Write /tmp/perf-PID.map (one for the process).
    #[arg(long)]
    perf: bool,
    /// Write jit-PID.dump (one for the process).
    #[arg(long)]
    perf_jitdump: bool,
    /// Directory of the jitdump [default: /tmp].
    #[arg(long, value_name = "DIR")]
    perf_dir: Option<PathBuf>,
    /// Publish compiled code through the GDB JIT interface.
    #[arg(long)]
    gdb: bool,
    /// Profile the whole process (every VM) into FILE.
    #[arg(long, value_name = "FILE", conflicts_with = "vmprof_each")]
    vmprof: Option<PathBuf>,
    /// Profile each VM into DIR/vm-I.prof (VM I's own profile).
    #[arg(long, value_name = "DIR")]
    vmprof_each: Option<PathBuf>,
    /// At the end, print the process's peak RSS and mapping count to stderr
    /// (`embed: peak RSS N KB, M mappings`).
    #[arg(long)]
    stats: bool,
    /// VMs running at once.
    #[arg(long, value_name = "T", default_value_t = 1)]
    threads: usize,
    /// How many VMs to run in all.
    n: usize,
    /// The scripts, taken in turn.
    #[arg(required = true)]
    scripts: Vec<PathBuf>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    // As `toyvm run` does: cranelift-jit must not write a perf map of its own.
    // SAFETY: no other thread runs yet.
    unsafe { jit::forget_perf_buildid_dir() };
    let mut scripts: Vec<Script> = Vec::new();
    for path in &args.scripts {
        let shown = path.to_string_lossy();
        let loaded = std::fs::read(path)
            .map_err(|e| format!("error: cannot read '{shown}': {e}"))
            .and_then(|bytes| embed::load(&shown, &bytes));
        match loaded {
            Ok(script) => scripts.push(script),
            Err(e) => {
                eprintln!("{}", e.trim_end());
                return ExitCode::from(1);
            }
        }
    }
    let jit = (!args.no_jit).then(|| jit::JitOptions {
        threshold: Some(args.jit_threshold.unwrap_or(jit::DEFAULT_THRESHOLD)),
        cost_model: args.jit_threshold.is_none(),
        background: args.jit_threshold.is_none(),
        perf_map: args.perf,
        jitdump_dir: (args.perf_jitdump).then(|| {
            args.perf_dir
                .clone()
                .unwrap_or_else(perfsupport::JitDump::default_dir)
        }),
        gdb: args.gdb,
        elf_dir: None,
        stats: false,
        code_limit: args.jit_code_limit,
    });
    let mut engine = Engine::new(jit);
    if let Some(path) = &args.vmprof {
        // One profile for the process: enabled before the first VM, joined
        // by each, disabled after the last.
        let each = vm::vmprof::VmprofOptions {
            join: true,
            ..vm::vmprof::VmprofOptions::new(path)
        };
        let enable = vm::vmprof::enable_options(&each, "embed");
        if let Err(e) = perfsupport::vmprof::enable_path(path, &enable) {
            eprintln!("error: cannot profile into '{}': {e}", path.display());
            return ExitCode::from(1);
        }
        engine.vm_options().vmprof = Some(each);
    }
    let next = AtomicUsize::new(0);
    let failed = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..args.threads.max(1) {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= args.n {
                        break;
                    }
                    let (mut out, mut err) = (Vec::new(), Vec::new());
                    let script = &scripts[i % scripts.len()];
                    let status = match &args.vmprof_each {
                        Some(dir) => {
                            let mut own = engine.clone();
                            let path = dir.join(format!("vm-{i}.prof"));
                            own.vm_options().vmprof = Some(vm::vmprof::VmprofOptions::new(path));
                            own.run(script, vec![], &mut out, &mut err)
                        }
                        None => engine.run(script, vec![], &mut out, &mut err),
                    };
                    if status != 0 {
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                    // One VM's output in one piece.
                    let _ = std::io::stdout().lock().write_all(&out);
                    let _ = std::io::stderr().lock().write_all(&err);
                }
            });
        }
    });
    if args.vmprof.is_some()
        && let Err(e) = perfsupport::vmprof::disable()
    {
        eprintln!("error: the profile is incomplete: {e}");
        return ExitCode::from(1);
    }
    if args.stats {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let rss = (status.lines())
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .map_or("?", |v| v.trim().trim_end_matches(" kB"));
        let maps = std::fs::read_to_string("/proc/self/maps").map_or(0, |m| m.lines().count());
        eprintln!("embed: peak RSS {rss} KB, {maps} mappings");
    }
    match failed.load(Ordering::Relaxed) {
        0 => ExitCode::SUCCESS,
        _ => ExitCode::from(1),
    }
}
