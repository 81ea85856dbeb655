//! toyvm's code under the real gdb, through the GDB JIT interface
//! (`toyvm run --gdb`, `perfsupport::gdb_jit`).
//!
//! * a pending breakpoint on a compiled Toy function, by its documented
//!   name (`jit/src/codegen/names.rs`), resolves when the code is registered and
//!   stops there; `info line`, `list`, `up`/`down` and `finish` work at that
//!   JIT frame;
//! * gdb attached to a compiled hot loop prints a backtrace that names every
//!   Toy function with `file:line`, through interpreted frames and
//!   trampolines, down to `main`, with no `??` frame;
//! * without `--gdb` the same backtrace has `??` frames (the control).
//!
//! Skipped loudly without gdb, except under `CI=true` (`.ci/run` installs it).

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const SCRIPT: &str = "tests/gdb/hot.toy";

fn gdb_present() -> bool {
    common::tool_or_skip("gdb", "gdb", &["--version"])
}

/// gdb in batch mode, no init files, no paging, no line wrapping: what
/// every test here starts from.
fn batch_gdb() -> Command {
    let mut cmd = Command::new("gdb");
    cmd.args(common::GDB_BATCH);
    cmd
}

/// Runs gdb in batch mode with `commands` and returns everything it printed.
fn gdb_batch(commands: &[&str], tail: &[&str]) -> String {
    let mut cmd = batch_gdb();
    for c in commands {
        cmd.args(["-ex", c]);
    }
    cmd.args(tail)
        .current_dir(common::repo_root())
        .stdin(Stdio::null());
    let out = cmd.output().expect("run gdb");
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A toyvm running `hot.toy` with a loop that never ends in practice, once
/// it printed `ready` (its hot loop is compiled by then or soon after).
struct Spinning(Child);

impl Spinning {
    fn start(flags: &[&str]) -> Spinning {
        let mut child = Command::new(env!("CARGO_BIN_EXE_toyvm"))
            .arg("run")
            .args(flags)
            .args([SCRIPT, "1000000000000"])
            .current_dir(common::repo_root())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn toyvm");
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let first = lines.next().expect("a line").expect("read stdout");
        assert!(first.starts_with("ready"), "{first}");
        Spinning(child)
    }

    fn pid(&self) -> String {
        self.0.id().to_string()
    }
}

impl Drop for Spinning {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The `#N ...` frame lines of a backtrace.
fn frames(output: &str) -> Vec<&str> {
    output.lines().filter(|l| l.starts_with('#')).collect()
}

/// `bt` of a spinning toyvm, once `settled` accepts it (or the last of ten
/// tries, half a second apart): the default tiering compiles spin on its
/// own thread, so when the second call of spin runs compiled code depends
/// on how loaded the machine is.
fn attached_backtrace(flags: &[&str], settled: impl Fn(&[&str]) -> bool) -> String {
    let spinning = Spinning::start(flags);
    let mut output = String::new();
    for _ in 0..10 {
        output = gdb_batch(&["bt"], &["-p", &spinning.pid()]);
        if settled(&frames(&output)) {
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    output
}

/// Frame #0 is compiled spin (the whole function or its OSR variant).
fn in_compiled_spin(frames: &[&str]) -> bool {
    frames
        .first()
        .is_some_and(|f| f.contains("toy:jit") && f.contains(":spin:"))
}

#[test]
fn a_compiled_hot_loop_has_a_named_backtrace_down_to_main() {
    if !gdb_present() {
        return;
    }
    let started = Instant::now();
    let output = attached_backtrace(&["--gdb"], in_compiled_spin);
    let frames = frames(&output);
    assert!(!frames.is_empty(), "no backtrace:\n{output}");
    let text = frames.join("\n");
    assert!(!text.contains("?? ("), "a frame gdb cannot name:\n{output}");
    assert!(
        frames.last().is_some_and(|f| f.contains(" main ")),
        "the backtrace does not reach main:\n{output}"
    );
    // The innermost frame is compiled spin, at a line of its loop.
    let spin_lines = ["hot.toy:6", "hot.toy:7", "hot.toy:8", "hot.toy:5"];
    assert!(
        in_compiled_spin(&frames),
        "frame #0 is not compiled spin:\n{output}"
    );
    assert!(
        spin_lines.iter().any(|l| frames[0].contains(l)),
        "frame #0 has no line of spin:\n{output}"
    );
    // Every Toy function, with file:line: the interpreted ones through
    // their trampolines.
    for (function, line) in [("middle", 13), ("outer", 17), ("<main>", 1)] {
        let name = format!("toy:interp:{function}:{SCRIPT}:");
        let at = format!("at {SCRIPT}:{line}");
        assert!(
            frames.iter().any(|f| f.contains(&name) && f.contains(&at)),
            "no frame `{name}` {at}:\n{output}"
        );
    }
    eprintln!("gdb backtrace ({:?}):\n{text}", started.elapsed());
}

#[test]
fn without_the_interface_gdb_cannot_name_jit_frames() {
    if !gdb_present() {
        return;
    }
    let output = attached_backtrace(&[], |frames| frames.iter().any(|f| f.contains("?? (")));
    assert!(
        frames(&output).iter().any(|f| f.contains("?? (")),
        "expected unnamed JIT frames without --gdb:\n{output}"
    );
}

/// Splits gdb output at `echo ==NAME==` markers: (NAME, what followed).
fn sections(output: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = vec![(String::new(), String::new())];
    for line in output.lines() {
        if let Some(name) = line.strip_prefix("==").and_then(|l| l.strip_suffix("==")) {
            out.push((name.to_string(), String::new()));
        } else if let Some(last) = out.last_mut() {
            last.1.push_str(line);
            last.1.push('\n');
        }
    }
    out
}

#[test]
fn a_pending_breakpoint_on_a_toy_function_stops_there() {
    if !gdb_present() {
        return;
    }
    // The documented name of compiled spin (jit/src/codegen/names.rs).
    let spin = format!("toy:jit:spin:{SCRIPT}:5");
    let steps = [
        ("break", "break -function ".to_string() + &spin),
        ("run", "run".into()),
        ("info line", "info line".into()),
        ("list", "list".into()),
        ("up", "up".into()),
        ("down", "down".into()),
        ("finish", "finish".into()),
        ("after finish", "bt 1".into()),
    ];
    let mut commands = vec!["set breakpoint pending on".to_string()];
    for (name, command) in &steps {
        commands.push(format!("echo =={name}==\\n"));
        commands.push(command.clone());
    }
    commands.push("kill".into());
    let commands: Vec<&str> = commands.iter().map(String::as_str).collect();
    let output = gdb_batch(
        &commands,
        &[
            "--args",
            env!("CARGO_BIN_EXE_toyvm"),
            "run",
            "--gdb",
            // An explicit threshold compiles on the interpreter's thread,
            // at spin's 1000th call (from warm_up): the breakpoint is hit
            // there, under spin's entry shim.
            "--jit-threshold",
            "1000",
            SCRIPT,
            "100",
        ],
    );
    let sections = sections(&output);
    let section = |name: &str| -> &str {
        sections
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, text)| text.as_str())
            .unwrap_or_else(|| panic!("no `{name}` step in:\n{output}"))
    };
    // The code did not exist yet: the breakpoint was pending, then hit.
    assert!(
        section("break").contains(&format!("Breakpoint 1 (-function {spin}) pending.")),
        "{output}"
    );
    assert!(
        section("run").contains(&format!("Breakpoint 1, {spin} () at {SCRIPT}:")),
        "did not stop in {spin}:\n{output}"
    );
    // `info line` and `list` show the Toy source of the JIT frame.
    assert!(
        section("info line").contains(&format!(" of \"{SCRIPT}\" starts at address")),
        "info line:\n{output}"
    );
    assert!(
        section("list").contains("for i in 0..n {"),
        "list:\n{output}"
    );
    // `up` reaches the compiled caller (spin's entry shim, or warm_up's
    // OSR code, which calls spin directly when the two were compiled in
    // one batch), `down` comes back.
    let callers = [
        format!("toy:jit-entry:spin:{SCRIPT}:5"),
        format!("toy:jit-osr:warm_up:{SCRIPT}:"),
    ];
    let is_caller = |text: &str| callers.iter().any(|c| text.contains(c.as_str()));
    assert!(
        section("up").starts_with("#1  0x") && is_caller(section("up")),
        "up:\n{output}"
    );
    assert!(
        section("down").starts_with(&format!("#0  {spin} () at {SCRIPT}:")),
        "down:\n{output}"
    );
    // `finish` runs spin to its return: the caller is now the innermost frame.
    assert!(
        section("after finish").starts_with("#0  0x") && is_caller(section("after finish")),
        "finish:\n{output}"
    );
}

/// Where gdb stops in `toy_jit_str_len` during `tests/gdb/evict.toy` under
/// a code limit of four pages (eight functions evicted and compiled again, round
/// after round, at reused addresses): the name of the compiled caller at
/// each stop, in order, and the bytes of JIT objects gdb holds at the last
/// stop (`maint info jit`).
fn callers_under_eviction(env: &[(&str, &str)]) -> (Vec<String>, u64) {
    let dir = std::env::temp_dir().join(format!("toyvm-gdb-evict-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let script = dir.join("evict.gdb");
    std::fs::write(
        &script,
        "set breakpoint pending on\nbreak toy_jit_str_len\ncommands 1\nsilent\nmaint info jit\nbt 2\ncontinue\nend\nrun\n",
    )
    .unwrap();
    let mut cmd = batch_gdb();
    cmd.arg("-x")
        .arg(&script)
        .args([
            "--args",
            env!("CARGO_BIN_EXE_toyvm"),
            "run",
            "--jit-threshold",
            "10",
        ])
        .args([
            "--jit-code-limit",
            &common::pages(4),
            "--gdb",
            "tests/gdb/evict.toy",
        ])
        .envs(env.iter().copied())
        .current_dir(common::repo_root())
        .stdin(Stdio::null());
    let out = cmd.output().expect("run gdb");
    let _ = std::fs::remove_dir_all(&dir);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        text.contains("round 2: 493453380"),
        "the run did not finish:\n{text}"
    );
    let callers = (text.lines())
        .filter(|l| l.starts_with("#1 "))
        .filter_map(|l| l.split(" in ").nth(1))
        .map(|l| l.split(' ').next().unwrap_or("").to_string())
        .collect();
    // The last `maint info jit` table: one row per object, its size last.
    let last = text.rsplit("jit_code_entry address").next().unwrap_or("");
    let bytes = (last.lines().skip(1))
        .take_while(|l| l.starts_with("0x"))
        .filter_map(|l| l.split_whitespace().nth(2)?.parse::<u64>().ok())
        .sum();
    (callers, bytes)
}

/// Rounds the phases named in order imply (a phase earlier than the last
/// one starts a round).
fn rounds_named(callers: &[String]) -> usize {
    let (mut rounds, mut last) = (0, None);
    for name in callers {
        let phase = name.split(':').nth(2).unwrap_or("").to_string();
        if last.as_ref().is_none_or(|l: &String| phase < *l) {
            rounds += 1;
        }
        last = Some(phase);
    }
    rounds
}

#[test]
fn after_evictions_gdb_names_the_code_that_is_there_now() {
    if !gdb_present() {
        return;
    }
    let (callers, bytes) = callers_under_eviction(&[]);
    // 3 rounds x 8 phases x 40 calls, the first calls interpreted.
    assert!(callers.len() > 600, "{} stops", callers.len());
    for name in &callers {
        assert!(
            name.starts_with("toy:jit"),
            "an unnamed or foreign caller: {name}"
        );
    }
    // Each stop names the phase running then, though all eight phases
    // were compiled at the same address in turn.
    assert_eq!(rounds_named(&callers), 3, "{callers:?}");
    // Dead code left the debugger: gdb holds only the objects of live
    // code. Negative control: left registered, dead code piles up (gdb
    // names the newest object at an address, so the names stay right, but
    // every freed range stays described).
    let (_, kept) = callers_under_eviction(&[("TOYVM_GDB_KEEP_DEAD", "1")]);
    assert!(
        bytes > 0 && bytes * 3 < kept,
        "{bytes} bytes of live objects, {kept} with dead code kept"
    );
}

/// What gdb says, at every stop in `toy_jit_str_len` during
/// `tests/gdb/evict.toy` under a code limit of four pages and a perf map (whose
/// quarantine keeps freed addresses unused), of the address of the first
/// compiled caller it stopped in (`phase0`'s code in round 0): the lines of
/// `info symbol` at each stop.
fn first_address_over_time(env: &[(&str, &str)]) -> Vec<String> {
    let dir = std::env::temp_dir().join(format!("toyvm-gdb-freed-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let script = dir.join("freed.gdb");
    std::fs::write(
        &script,
        "set $first = 0\nset breakpoint pending on\nbreak toy_jit_str_len\ncommands 1\nsilent\nup\n\
         if $first == 0\nset $first = $pc\nend\ninfo symbol $first\ncontinue\nend\nrun\n",
    )
    .unwrap();
    let out = batch_gdb()
        .arg("-x")
        .arg(&script)
        .args([
            "--args",
            env!("CARGO_BIN_EXE_toyvm"),
            "run",
            "--perf",
            "--jit-threshold",
        ])
        .args([
            "10",
            "--jit-code-limit",
            &common::pages(4),
            "--gdb",
            "tests/gdb/evict.toy",
        ])
        .envs(env.iter().copied())
        .current_dir(common::repo_root())
        .stdin(Stdio::null())
        .output()
        .expect("run gdb");
    let _ = std::fs::remove_dir_all(&dir);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        text.contains("round 2: 493453380"),
        "the run did not finish:\n{text}"
    );
    // `[Inferior 1 (process N) exited normally]`: remove its perf map.
    if let Some(pid) = (text.split("(process ").nth(1)).and_then(|t| t.split(')').next()) {
        let _ = std::fs::remove_file(format!("/tmp/perf-{pid}.map"));
    }
    (text.lines())
        .filter(|l| l.starts_with("toy:") || l.starts_with("No symbol matches"))
        .map(str::to_string)
        .collect()
}

#[test]
fn a_freed_address_resolves_to_nothing_in_gdb() {
    if !gdb_present() {
        return;
    }
    let answers = first_address_over_time(&[]);
    assert!(answers.len() > 600, "{} stops", answers.len());
    assert!(answers[0].starts_with("toy:jit:phase0:"), "{}", answers[0]);
    // Once phase0's first code is evicted, its address names nothing.
    let gone = answers
        .iter()
        .position(|a| a.starts_with("No symbol"))
        .expect("never freed");
    assert!(
        answers[gone..].iter().all(|a| a.starts_with("No symbol")),
        "a freed address got a name back: {:?}",
        &answers[gone..]
    );
    // Negative control: left registered, dead code keeps its name.
    let stale = first_address_over_time(&[("TOYVM_GDB_KEEP_DEAD", "1")]);
    assert!(
        stale.iter().all(|a| a.starts_with("toy:jit:phase0:")),
        "the control lost the name"
    );
}

/// The direct children of process `parent` (from `/proc/*/stat`).
fn children_of(parent: u32) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // pid (comm) state ppid ...: comm may hold blanks, so split after ')'.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(parent) {
            found.push(pid);
        }
    }
    found
}

/// Ctrl-C under gdb: a real SIGINT sent to the program (not a breakpoint)
/// stops it in gdb, with the VM's thread current, and `bt` names the Toy
/// frames. toyvm once took the signal with sigwait(2), undelivered: gdb
/// never saw it and the program exited with 130 (`No stack.`).
#[test]
fn ctrl_c_under_gdb_stops_the_program_in_the_vms_thread() {
    if !gdb_present() {
        return;
    }
    let mut gdb = batch_gdb()
        .args(["-ex", "set startup-with-shell off", "-ex", "run"])
        .args(["-ex", "info threads", "-ex", "bt", "--args"])
        .arg(env!("CARGO_BIN_EXE_toyvm"))
        .args([
            "run",
            "--jit-threshold",
            "0",
            "--gdb",
            SCRIPT,
            "1000000000000",
        ])
        .current_dir(common::repo_root())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn gdb");
    let mut lines = BufReader::new(gdb.stdout.take().expect("stdout")).lines();
    let mut output = String::new();
    for line in lines.by_ref() {
        let line = line.expect("read gdb's stdout");
        let ready = line.starts_with("ready");
        output.push_str(&line[..line.len().min(200)]);
        output.push('\n');
        if ready {
            break;
        }
    }
    assert!(
        output.contains("ready"),
        "the program did not start:\n{output}"
    );
    std::thread::sleep(Duration::from_millis(300));
    let program = children_of(gdb.id());
    assert_eq!(program.len(), 1, "gdb's children: {program:?}\n{output}");
    // SAFETY: kill only sends a signal to the process found above.
    assert_eq!(unsafe { libc::kill(program[0] as i32, libc::SIGINT) }, 0);
    for line in lines {
        output.push_str(&line.expect("read gdb's stdout"));
        output.push('\n');
    }
    let status = gdb.wait().expect("wait for gdb");
    let mut errors = String::new();
    std::io::Read::read_to_string(&mut gdb.stderr.take().expect("stderr"), &mut errors)
        .expect("read gdb's stderr");
    let all = format!("{output}{errors}");
    assert!(status.success(), "gdb failed:\n{all}");
    assert!(
        all.contains("received signal SIGINT"),
        "gdb did not see the SIGINT:\n{all}"
    );
    assert!(
        !all.contains("exited with code"),
        "the program ended:\n{all}"
    );
    // The current thread (`*` in `info threads`) is the VM's: toyvm's main
    // thread, named after the program, not toyvm-signals or toyvm-jit.
    let current = all
        .lines()
        .find(|l| l.starts_with('*'))
        .unwrap_or_else(|| panic!("no current thread:\n{all}"));
    assert!(
        current.contains("\"toyvm\"") && !current.contains("toyvm-"),
        "the current thread is not the VM's: {current}\n{all}"
    );
    let frames = frames(&all);
    for function in [":spin:", ":middle:", ":outer:", ":<main>:"] {
        assert!(
            frames
                .iter()
                .any(|f| f.contains("toy:jit") && f.contains(function)),
            "no compiled {function} frame:\n{all}"
        );
    }
}
