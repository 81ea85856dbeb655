//! The unwind information is right at every instruction a debugger can
//! stop at, checked with a real debugger: gdb steps (`stepi`) through toy
//! code from pending breakpoints and, at each program counter, checks that
//! the backtrace it builds from the code's unwind info (the GDB JIT
//! interface's images, `--gdb`) is the right chain down to `main`
//! (`tests/gdb/stepi.py` says the rule). Stepped: compiled functions with
//! calls and their epilogues, loops entered through OSR, an entry shim and
//! an interpreter-entry trampoline (`tests/gdb/stepi.toy`).
//!
//! Natively on x86_64 (`gdb`), and in `tools/aarch64-tests` on aarch64:
//! toyvm runs under `qemu-aarch64-static -g PORT` and `gdb-multiarch`
//! attaches to qemu's gdb stub.
//!
//! A run steps the path the program takes; an instruction on a path not
//! taken (a branch never followed) is never stepped here. Every
//! instruction of every region, taken or not, is checked statically by
//! `tests/unwind_every_instruction.rs` (the CFA the unwind info gives
//! against the stack-pointer changes simulated over the disassembly).

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};

const SCRIPT: &str = "tests/gdb/stepi.toy";

/// The symbol of a toy region of [`SCRIPT`]: `KIND:NAME` at `LINE`.
fn symbol(kind: &str, line: u32) -> String {
    let name = match line {
        7 => "leaf",
        11 => "middle",
        19 => "outer",
        27 => "looping",
        35 => "cold",
        _ => panic!("no function at line {line} of {SCRIPT}"),
    };
    format!("toy:{kind}:{name}:{SCRIPT}:{line}")
}

/// What `tests/gdb/stepi.py` found in one run.
struct Stepped {
    /// Program counters checked.
    checked: u64,
    /// Problems, each with the instruction and the backtraces.
    errors: Vec<String>,
    /// Per region stepped: distinct instructions stepped, instructions in it.
    regions: BTreeMap<String, (usize, usize)>,
}

/// How gdb reaches the program: directly, or through qemu's gdb stub when
/// the tests run under a runner ([`common::RUNNER_ENV`]).
enum Debugger {
    Native,
    Emulated { runner: Vec<String> },
}

impl Debugger {
    fn here() -> Option<Debugger> {
        let runner = common::runner();
        let (gdb, debugger) = match runner.is_empty() {
            true => ("gdb", Debugger::Native),
            false => ("gdb-multiarch", Debugger::Emulated { runner }),
        };
        common::tool_or_skip("unwind_stepi", gdb, &["--version"]).then_some(debugger)
    }

    /// Runs `toyvm run --gdb FLAGS SCRIPT` under gdb with the stepping
    /// script, stopping at `breaks`.
    fn step(&self, flags: &[&str], breaks: &[String], out: &Path) -> Stepped {
        let toyvm = common::release_dir().join("toyvm");
        let settings = format!(
            "python BREAKS={breaks:?}; STEP_LIMIT=20000; OUT={:?}; START={:?}",
            out.display().to_string(),
            match self {
                Debugger::Native => "run",
                Debugger::Emulated { .. } => "continue",
            }
        );
        let mut gdb = Command::new(match self {
            Debugger::Native => "gdb",
            Debugger::Emulated { .. } => "gdb-multiarch",
        });
        gdb.args(common::GDB_BATCH);
        let mut stub = None;
        match self {
            Debugger::Native => {
                gdb.args(["-ex", &settings, "-x", "tests/gdb/stepi.py", "--args"])
                    .arg(&toyvm)
                    .args(["run", "--gdb"])
                    .args(flags)
                    .arg(SCRIPT);
            }
            Debugger::Emulated { runner } => {
                // qemu-aarch64-static -L SYSROOT -g PORT toyvm ...: the
                // program waits for gdb at its first instruction.
                let port = free_port();
                let child = Command::new(&runner[0])
                    .args(&runner[1..])
                    .args(["-g", &port.to_string()])
                    .arg(&toyvm)
                    .args(["run", "--gdb"])
                    .args(flags)
                    .arg(SCRIPT)
                    .current_dir(common::repo_root())
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .spawn()
                    .expect("start toyvm under qemu's gdb stub");
                stub = Some(child);
                let sysroot = runner.iter().skip_while(|w| *w != "-L").nth(1);
                if let Some(sysroot) = sysroot {
                    gdb.args(["-ex", &format!("set sysroot {sysroot}")]);
                }
                gdb.args(["-ex", &format!("file {}", toyvm.display())])
                    .args(["-ex", &format!("target remote :{port}")])
                    .args(["-ex", &settings, "-x", "tests/gdb/stepi.py"]);
            }
        }
        let _ = std::fs::remove_file(out);
        let output = gdb
            .current_dir(common::repo_root())
            .stdin(Stdio::null())
            .output()
            .expect("run gdb");
        if let Some(mut stub) = stub {
            let _ = stub.kill();
            let _ = stub.wait();
        }
        let text = std::fs::read_to_string(out).unwrap_or_else(|_| {
            panic!(
                "gdb wrote no result:\n{}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            )
        });
        parse(&text)
    }
}

/// A TCP port nobody listens on now (for qemu's gdb stub).
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a port");
    listener.local_addr().expect("its address").port()
}

/// Reads the stepping script's JSON result.
fn parse(text: &str) -> Stepped {
    let json: serde_json::Value = serde_json::from_str(text).expect("JSON from stepi.py");
    let pcs = json["pcs"].as_object().expect("pcs");
    let regions = pcs
        .iter()
        .map(|(name, pcs)| {
            let stepped = pcs.as_array().map_or(0, Vec::len);
            let size = json["sizes"][name].as_u64().unwrap_or(0) as usize;
            (name.clone(), (stepped, size))
        })
        .collect();
    Stepped {
        checked: json["checked"].as_u64().unwrap_or(0),
        errors: (json["errors"].as_array().expect("errors").iter())
            .map(|e| e.as_str().unwrap_or_default().to_string())
            .collect(),
        regions,
    }
}

#[test]
fn every_instruction_stepped_has_the_right_backtrace() {
    let Some(debugger) = Debugger::here() else {
        return;
    };
    let dir = tempfile::Builder::new()
        .prefix("toyvm-stepi-")
        .tempdir()
        .expect("temp dir");
    // Everything compiled before it runs: outer -> middle (-> leaf,
    // inlined) from compiled <main>, every epilogue on the way out. Not
    // under emulation, where each step costs a round trip to qemu's gdb
    // stub (the run below steps every kind of region too, compiled leaf
    // whole among them).
    let eager = match debugger {
        Debugger::Native => Some(debugger.step(
            &["--jit-threshold", "0"],
            &[symbol("jit", 19)],
            &dir.path().join("eager.json"),
        )),
        Debugger::Emulated { .. } => None,
    };
    // A threshold of 5: loops entered through OSR, interpreted middle
    // calling compiled leaf through its entry shim, cold behind its
    // trampoline.
    let tiered = debugger.step(
        &["--jit-threshold", "5"],
        &[
            symbol("jit-osr", 19),
            symbol("jit-entry", 7),
            symbol("jit-osr", 27),
            symbol("interp", 35),
            symbol("jit-osr", 11),
        ],
        &dir.path().join("tiered.json"),
    );
    let mut problems = Vec::new();
    let mut regions = BTreeMap::new();
    let mut checked = 0;
    let runs = [
        ("--jit-threshold 0", eager.as_ref()),
        ("--jit-threshold 5", Some(&tiered)),
    ];
    for (run, stepped) in runs.into_iter().filter_map(|(r, s)| Some((r, s?))) {
        checked += stepped.checked;
        for error in &stepped.errors {
            problems.push(format!("[{run}] {error}"));
        }
        for (name, (pcs, size)) in &stepped.regions {
            let entry = regions.entry(name.clone()).or_insert((0, *size));
            entry.0 = entry.0.max(*pcs);
        }
    }
    let (pcs, instructions) = regions
        .values()
        .fold((0, 0), |(p, i), (rp, ri)| (p + rp, i + ri));
    eprintln!(
        "unwind_stepi ({}): {checked} program counters checked; {pcs} of the {instructions} \
         instructions of the {} regions stepped (the rest, on paths not taken, are checked \
         statically by tests/unwind_every_instruction.rs)",
        std::env::consts::ARCH,
        regions.len()
    );
    for (name, (pcs, size)) in &regions {
        eprintln!("  {pcs:>4} of {size:>4}  {name}");
    }
    assert!(
        problems.is_empty(),
        "{} problems:\n{}",
        problems.len(),
        problems.join("\n")
    );
    assert!(checked > 0, "nothing was stepped");
    for kind in ["toy:jit:", "toy:jit-osr:", "toy:jit-entry:", "toy:interp:"] {
        assert!(
            regions.keys().any(|name| name.starts_with(kind)),
            "no {kind} region was stepped: {regions:?}"
        );
    }
    for (name, (pcs, size)) in &regions {
        assert!(
            pcs <= size && *size > 0,
            "{name}: {pcs} instructions stepped of {size}"
        );
    }
}
