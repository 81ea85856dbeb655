//! The peer programs in `bench/peers/` compute what the Toy benchmarks in
//! `examples/scripts/bench/` compute: each peer, run at a small size given
//! on its command line, prints what `toyvm run` prints for the Toy program
//! at that size (by the rules of `bench/compare.py`, which `bench/run.sh`
//! applies at the real sizes).
//!
//! Every peer runs: C compiled with `cc -O2`, Lua with `lua5.4` and
//! `luajit`, JavaScript with `node`, Python with `python3`. A missing
//! compiler or interpreter is skipped loudly on a developer machine, and is
//! a failure under `CI=true` (`.ci/run` installs them all).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{parallel_map, repo_root, toyvm};

/// Every benchmark with a small size that runs in milliseconds everywhere,
/// even in CPython.
const BENCHES: [(&str, &str); 6] = [
    ("fib", "15"),
    ("loop", "1000"),
    ("calls", "1000"),
    ("mandelbrot", "20"),
    ("spectral", "10"),
    ("nbody", "100"),
];

/// One way of running the peers: a name, the directory under
/// `bench/peers/`, the file extension, and the interpreter (`None`: C,
/// compiled first).
struct Engine {
    name: &'static str,
    dir: &'static str,
    ext: &'static str,
    interpreter: Option<&'static str>,
}

const ENGINES: [Engine; 5] = [
    Engine {
        name: "C",
        dir: "c",
        ext: "c",
        interpreter: None,
    },
    Engine {
        name: "Lua 5.4",
        dir: "lua",
        ext: "lua",
        interpreter: Some("lua5.4"),
    },
    Engine {
        name: "LuaJIT",
        dir: "lua",
        ext: "lua",
        interpreter: Some("luajit"),
    },
    Engine {
        name: "node",
        dir: "js",
        ext: "js",
        interpreter: Some("node"),
    },
    Engine {
        name: "CPython",
        dir: "py",
        ext: "py",
        interpreter: Some("python3"),
    },
];

/// Skips one engine with a loud message, or fails under `CI=true`.
fn missing_tool(why: &str) {
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "CI=true, so this is a failure: {why}"
    );
    eprintln!("SKIPPED (not a pass): {why}");
}

/// Whether `tool --version` (or `-v`) runs.
fn available(tool: &str) -> bool {
    ["--version", "-v"].iter().any(|flag| {
        Command::new(tool)
            .arg(flag)
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

/// Runs a command and returns its stdout; panics with stderr on failure.
fn stdout_of(command: &mut Command) -> String {
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("cannot run {command:?}: {e}"));
    assert!(
        output.status.success(),
        "{command:?} failed ({}):\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("UTF-8 output")
}

/// Whether a Toy output line matches a peer's line: equal, or, where the
/// peer printed a float with "%.9f", the Toy line is `int(x * 1e9)`
/// (truncated) within 1 of the peer's digits read as an integer (rounded).
/// This is `bench/compare.py`'s `toy` rule.
fn toy_line_matches(peer: &str, toy: &str) -> bool {
    if !peer.contains('.') {
        return peer == toy;
    }
    match (peer.replace('.', "").parse::<i64>(), toy.parse::<i64>()) {
        (Ok(p), Ok(t)) => p.abs_diff(t) <= 1,
        _ => false,
    }
}

fn outputs_match(peer: &str, toy: &str) -> bool {
    let (peer, toy): (Vec<&str>, Vec<&str>) = (peer.lines().collect(), toy.lines().collect());
    peer.len() == toy.len() && peer.iter().zip(&toy).all(|(p, t)| toy_line_matches(p, t))
}

/// A fresh directory for the compiled C peers.
fn build_dir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("bench_peers");
    std::fs::create_dir_all(&dir).expect("create the build directory");
    dir
}

/// Compiles `bench/peers/c/NAME.c` into `dir` with `cc -O2`.
fn compile_c(name: &str, dir: &Path) -> PathBuf {
    let source = repo_root().join("bench/peers/c").join(format!("{name}.c"));
    let binary = dir.join(name);
    stdout_of(
        Command::new("cc")
            .args(["-O2", "-o"])
            .arg(&binary)
            .arg(&source)
            .arg("-lm"),
    );
    binary
}

/// What `toyvm run examples/scripts/bench/NAME.toy SIZE` prints.
fn toy_output(name: &str, size: &str) -> String {
    let script = format!("examples/scripts/bench/{name}.toy");
    let run = toyvm(&["run", &script, size]);
    assert_eq!(
        run.status,
        Some(0),
        "toyvm run {script} {size}: {}",
        run.stderr
    );
    run.stdout
}

#[test]
fn the_tool_free_comparison_follows_compare_py() {
    assert!(toy_line_matches("2178309", "2178309"));
    assert!(!toy_line_matches("2178309", "2178308"));
    assert!(toy_line_matches("1.274223867", "1274223867"));
    assert!(toy_line_matches("1.274223867", "1274223866"));
    assert!(!toy_line_matches("1.274223867", "1274223865"));
    assert!(toy_line_matches("-0.169075164", "-169075164"));
    assert!(!outputs_match("1\n2\n", "1\n"));
}

#[test]
fn every_peer_prints_what_the_toy_program_prints() {
    let toy: Vec<String> = parallel_map(&BENCHES, |(name, size)| toy_output(name, size));
    let dir = build_dir();
    let mut mismatches = Vec::new();
    let mut checked = 0;
    for engine in &ENGINES {
        let tool = engine.interpreter.unwrap_or("cc");
        if !available(tool) {
            missing_tool(&format!(
                "bench_peers: {tool} not found, {} peers not checked",
                engine.name
            ));
            continue;
        }
        let outputs = parallel_map(&BENCHES, |(name, size)| {
            let program = repo_root()
                .join("bench/peers")
                .join(engine.dir)
                .join(format!("{name}.{}", engine.ext));
            let mut command = match engine.interpreter {
                Some(interpreter) => {
                    let mut command = Command::new(interpreter);
                    command.arg(&program);
                    command
                }
                None => Command::new(compile_c(name, &dir)),
            };
            stdout_of(command.arg(size).current_dir(repo_root()))
        });
        for (((name, size), peer), toy) in BENCHES.iter().zip(&outputs).zip(&toy) {
            checked += 1;
            if !outputs_match(peer, toy) {
                mismatches.push(format!(
                    "{} {name} {size}: peer printed {peer:?}, toyvm printed {toy:?}",
                    engine.name
                ));
            }
        }
        // The empty program, which bench/run.sh times as startup, runs and prints nothing.
        let empty = repo_root()
            .join("bench/peers")
            .join(engine.dir)
            .join(format!("empty.{}", engine.ext));
        let printed = match engine.interpreter {
            Some(interpreter) => stdout_of(Command::new(interpreter).arg(&empty)),
            None => stdout_of(&mut Command::new(compile_c("empty", &dir))),
        };
        assert_eq!(
            printed, "",
            "{} empty program printed something",
            engine.name
        );
    }
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
    eprintln!("bench_peers: {checked} peer outputs agree with toyvm");
}
