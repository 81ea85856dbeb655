//! examples/c-minijit/elfjit.c, a C JIT whose code runs from files of the
//! C API's code memory and makes no profiler-specific call, under tools
//! that know nothing of it: `perf record` with DWARF unwinding and with
//! frame pointers (no perf map, no jitdump, no `perf inject`), and
//! eu-stack on the running process. Its code dies and is compiled again
//! (`--generations`): each generation runs from its own file.
//!
//! perf and eu-stack cannot look into emulated code: their tests run on
//! x86-64 only. The files themselves are checked everywhere (also on
//! aarch64 under qemu).

mod support;

use std::path::Path;
use support::{elfjit, program, run_ok, scratch};
#[cfg(target_arch = "x86_64")]
use {
    std::io::{BufRead, BufReader},
    std::path::PathBuf,
    std::process::{Command, Stdio},
    support::{missing, perf},
};

/// The example, or `None` when perf is missing off CI.
#[cfg(target_arch = "x86_64")]
fn setup(tag: &str) -> Option<(support::Scratch, PathBuf)> {
    if missing("perf", &["--version"]) {
        return None;
    }
    let dir = scratch(tag);
    let jit = elfjit(dir.path())?;
    Some((dir, jit))
}

/// `perf record` of elfjit with `call_graph`; the samples' frames
/// (symbol names, leaf first) and the program's pid.
#[cfg(target_arch = "x86_64")]
fn record(dir: &Path, jit: &Path, call_graph: &[&str]) -> (Vec<Vec<String>>, String) {
    run_ok(
        perf(dir)
            .args(["record", "-q", "-e", "cpu-clock", "-F", "999"])
            .args(call_graph)
            .args(["-o", "perf.data"])
            .arg(jit)
            .args(["--rounds", "3000", "--generations", "4", "--dir", "."]),
    );
    let out = run_ok(perf(dir).args(["script", "-F", "pid,ip,sym", "-i", "perf.data"]));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let pid = text.split_whitespace().next().unwrap_or("").to_owned();
    let samples = (text.split("\n\n"))
        .map(|sample| {
            (sample.lines().skip(1))
                .filter_map(|l| l.trim().split_once(' ').map(|(_, sym)| sym.to_owned()))
                .collect::<Vec<_>>()
        })
        .filter(|s| !s.is_empty())
        .collect();
    (samples, pid)
}

/// The files of elfjit's run `pid`, checked: as many as generations, and
/// no perf map or jitdump beside them.
fn check_files(dir: &Path, pid: &str) {
    let files = dir.join(format!("elfjit-{pid}"));
    let mut names: Vec<String> = std::fs::read_dir(&files)
        .unwrap_or_else(|e| panic!("{}: {e}", files.display()))
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["code-1.so", "code-2.so", "code-3.so", "code-4.so"]);
    // A perf map of an earlier process with the same pid may be there (perf
    // maps are never deleted): only one written since the run began counts.
    let began = std::fs::metadata(&files)
        .and_then(|m| m.modified())
        .expect("the run's directory");
    let map = Path::new(&format!("/tmp/perf-{pid}.map")).to_owned();
    if let Ok(written) = std::fs::metadata(&map).and_then(|m| m.modified()) {
        assert!(written < began, "{} written by the run", map.display());
    }
    assert!(!dir.join(format!("jit-{pid}.dump")).exists());
}

/// The share of `samples` with `leaf` as their leaf that have `below`
/// under it, in order; and how many have that leaf.
#[cfg(target_arch = "x86_64")]
fn chained(samples: &[Vec<String>], leaf: &str, below: &[&str]) -> (usize, usize) {
    let at_leaf: Vec<_> = samples.iter().filter(|s| s[0] == leaf).collect();
    let whole = (at_leaf.iter())
        .filter(|s| {
            let mut rest = s.iter().skip(1);
            below.iter().all(|b| rest.any(|f| f == b))
        })
        .count();
    (whole, at_leaf.len())
}

/// Without any tool: each generation's code runs from a file of its own,
/// named by its functions, and nothing else is written.
#[test]
fn each_generation_runs_from_its_own_file() {
    let dir = scratch("elfjit-files");
    let Some(jit) = elfjit(dir.path()) else {
        return;
    };
    let output = run_ok(program(&jit).current_dir(dir.path()).args([
        "--rounds",
        "200",
        "--generations",
        "4",
        "--dir",
        ".",
    ]));
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(text.contains("ran outer(200) in 4 generations"), "{text}");
    let pid = (text.split_whitespace())
        .find_map(|w| w.strip_prefix("./elfjit-"))
        .unwrap_or_else(|| panic!("no files directory in: {text}"))
        .to_owned();
    check_files(dir.path(), &pid);
    let code = std::fs::read(dir.path().join(format!("elfjit-{pid}/code-4.so"))).expect("code");
    for name in ["elfjit::leaf", "elfjit::middle", "elfjit::outer"] {
        assert!(
            code.windows(name.len()).any(|w| w == name.as_bytes()),
            "{name} is not in code-4.so"
        );
    }
}

#[test]
#[cfg(target_arch = "x86_64")]
fn perf_unwinds_and_names_the_code_from_its_files() {
    let Some((dir, jit)) = setup("elfjit-dwarf") else {
        return;
    };
    let (samples, pid) = record(dir.path(), &jit, &["--call-graph", "dwarf"]);
    check_files(dir.path(), &pid);
    // leaf has no frame pointer: only its .eh_frame rows reach middle.
    let (whole, leaf) = chained(
        &samples,
        "elfjit::leaf",
        &["elfjit::middle", "elfjit::outer", "run_jit", "main"],
    );
    eprintln!("elfjit dwarf: {whole} of {leaf} leaf samples reach main through middle");
    assert!(
        leaf * 4 > samples.len(),
        "{leaf} of {} in leaf",
        samples.len()
    );
    assert!(
        whole * 10 >= leaf * 9,
        "{whole} of {leaf}: {:#?}",
        &samples[..5]
    );
}

#[test]
#[cfg(target_arch = "x86_64")]
fn frame_pointer_stacks_name_the_code_from_its_files() {
    let Some((dir, jit)) = setup("elfjit-fp") else {
        return;
    };
    let (samples, pid) = record(dir.path(), &jit, &["-g"]);
    check_files(dir.path(), &pid);
    // middle keeps a frame: its samples reach main by frame pointers.
    let (whole, middle) = chained(
        &samples,
        "elfjit::middle",
        &["elfjit::outer", "run_jit", "main"],
    );
    eprintln!("elfjit -g: {whole} of {middle} middle samples reach main");
    assert!(middle > 10, "{middle} samples in middle");
    assert!(whole * 10 >= middle * 9, "{whole} of {middle}");
}

#[test]
#[cfg(target_arch = "x86_64")]
fn eu_stack_names_the_running_code_down_to_main() {
    if missing("eu-stack", &["--version"]) {
        return;
    }
    let dir = scratch("elfjit-eu-stack");
    let Some(jit) = elfjit(dir.path()) else {
        return;
    };
    // Long enough to be caught running; killed once seen.
    let mut child = Command::new(&jit)
        .args(["--rounds", "100000000", "--dir"])
        .arg(dir.path())
        .stdout(Stdio::piped())
        .spawn()
        .expect("elfjit");
    // It says nothing until it ends: ask until its code runs (a loaded
    // machine may take a while to get there).
    let mut seen = String::new();
    let mut whole = false;
    for _ in 0..25 {
        std::thread::sleep(std::time::Duration::from_millis(200));
        let out = Command::new("eu-stack")
            .args(["-p", &child.id().to_string()])
            .output()
            .expect("eu-stack");
        seen = String::from_utf8_lossy(&out.stdout).into_owned();
        let frames: Vec<&str> = (seen.lines())
            .filter_map(|l| l.split_whitespace().nth(2))
            .collect();
        let position = |name: &str| frames.iter().position(|f| *f == name);
        let order = ["elfjit::outer", "run_jit", "main"].map(position);
        whole = order.iter().all(Option::is_some) && order.is_sorted();
        if whole {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    let _ = BufReader::new(child.stdout.take().expect("stdout"))
        .lines()
        .count();
    assert!(
        whole,
        "eu-stack shows outer, run_jit, main in order:\n{seen}"
    );
}
