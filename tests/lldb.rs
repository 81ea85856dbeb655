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
    // Compiled spin: the whole function, or its OSR variant if the
    // compiler thread delivered that first (`toy:jit-osr:spin:...`).
    let compiled_spin = [
        format!("toy:jit:spin:{SCRIPT}:5"),
        format!("toy:jit-osr:spin:{SCRIPT}:5"),
    ];
    let in_compiled_spin = |frames: &[&str]| {
        frames
            .first()
            .is_some_and(|f| compiled_spin.iter().any(|s| f.contains(s.as_str())))
    };
    // The default tiering compiles spin on its own thread, so when the
    // second call of spin runs compiled code depends on how loaded the
    // machine is: up to ten tries, half a second apart.
    let mut output = String::new();
    for _ in 0..10 {
        output = lldb_backtrace(child.id());
        if in_compiled_spin(&frames(&output)) {
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let _ = child.kill();
    let _ = child.wait();
    let frames = frames(&output);
    assert!(!frames.is_empty(), "no backtrace:\n{output}");
    // A frame lldb can name reads `frame #N: ADDRESS module`symbol ...`.
    for frame in &frames {
        assert!(frame.contains('`'), "an unnamed frame `{frame}`:\n{output}");
    }
    assert!(
        in_compiled_spin(&frames) && frames[0].contains("hot.toy:"),
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

/// lldb's `bt` of the process `pid`, attached through the GDB JIT loader.
fn lldb_backtrace(pid: u32) -> String {
    let out = Command::new("lldb")
        .args([
            "--no-lldbinit",
            "--batch",
            "-o",
            "settings set plugin.jit-loader.gdb.enable on",
            "-o",
            &format!("process attach --pid {pid}"),
            "-o",
            "bt",
        ])
        .current_dir(common::repo_root())
        .stdin(Stdio::null())
        .output()
        .expect("run lldb");
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The `frame #N` lines of lldb's backtrace.
fn frames(output: &str) -> Vec<&str> {
    output
        .lines()
        .map(str::trim_start)
        .map(|l| l.trim_start_matches("* "))
        .filter(|l| l.starts_with("frame #"))
        .collect()
}
