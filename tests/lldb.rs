//! The backtrace test of `tests/gdb.rs` under lldb, which reads the same
//! GDB JIT interface (`plugin.jit-loader.gdb`): attached to a compiled hot
//! loop of `toyvm run --gdb`, `bt` names every Toy function with
//! `file:line`, through interpreted frames and trampolines, down to `main`,
//! and has no unnamed frame.
//!
//! Skipped loudly without lldb, except under `CI=true` (`.ci/run` installs
//! Debian's lldb).

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

const SCRIPT: &str = "tests/gdb/hot.toy";

#[test]
fn lldb_names_every_frame_of_a_compiled_hot_loop() {
    if !common::tool_or_skip("lldb", "lldb", &["--version"]) {
        return;
    }
    let mut child = Command::new(env!("CARGO_BIN_EXE_toyvm"))
        .args(["run", "--gdb", SCRIPT, "1000000000000"])
        .current_dir(common::repo_root())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn toyvm");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let first = lines.next().expect("a line").expect("stdout");
    assert!(first.starts_with("ready"), "{first}");
    std::thread::sleep(Duration::from_millis(300));
    let out = Command::new("lldb")
        .args([
            "--no-lldbinit",
            "--batch",
            "-o",
            "settings set plugin.jit-loader.gdb.enable on",
            "-o",
            &format!("process attach --pid {}", child.id()),
            "-o",
            "bt",
        ])
        .current_dir(common::repo_root())
        .stdin(Stdio::null())
        .output()
        .expect("run lldb");
    let _ = child.kill();
    let _ = child.wait();
    let output = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let frames: Vec<&str> = output
        .lines()
        .map(str::trim_start)
        .map(|l| l.trim_start_matches("* "))
        .filter(|l| l.starts_with("frame #"))
        .collect();
    assert!(!frames.is_empty(), "no backtrace:\n{output}");
    // A frame lldb can name reads `frame #N: ADDRESS module`symbol ...`.
    for frame in &frames {
        assert!(frame.contains('`'), "an unnamed frame `{frame}`:\n{output}");
    }
    // Compiled spin: the whole function, or its OSR variant if the
    // compiler thread delivered that first (`toy:jit-osr:spin:...`).
    let compiled_spin = [
        format!("toy:jit:spin:{SCRIPT}:5"),
        format!("toy:jit-osr:spin:{SCRIPT}:5"),
    ];
    assert!(
        compiled_spin.iter().any(|s| frames[0].contains(s.as_str()))
            && frames[0].contains("hot.toy:"),
        "frame #0 is not compiled spin with a line:\n{output}"
    );
    for (function, line) in [("middle", 13), ("outer", 17), ("<main>", 1)] {
        let name = format!("`toy:interp:{function}:{SCRIPT}:{line} at hot.toy:{line}");
        assert!(
            frames.iter().any(|f| f.contains(&name)),
            "no frame `{name}`:\n{output}"
        );
    }
    assert!(
        frames.iter().any(|f| f.contains("toyvm`main")),
        "the backtrace does not reach main:\n{output}"
    );
}
