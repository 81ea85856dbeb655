//! Every gdb command the book shows works as typed: each `(gdb) ` line of a
//! console or shell block (run as one session, after the block's
//! `gdb --args ...` line) and each `break -function ...` the prose gives,
//! run with `gdb -batch -ex ...` against `tests/gdb/hot.toy`, where every
//! region name the book uses exists. A breakpoint must be hit, and its
//! name must be quoted: gdb reads the `-osr` of an unquoted
//! `toy:jit-osr:...` as an option ("invalid explicit location argument").
//!
//! Skipped loudly without gdb, except under `CI=true` (`.ci/run` installs it).

mod common;

use std::process::{Command, Stdio};

/// What every session runs when the book gives no program: the program of
/// the debuggers chapter.
const PROGRAM: [&str; 6] = [
    "run",
    "--gdb",
    "--jit-threshold",
    "1000",
    "tests/gdb/hot.toy",
    "100",
];

/// One session the book shows: its gdb commands and toyvm's arguments.
#[derive(Debug)]
struct Session {
    place: String,
    commands: Vec<String>,
    toyvm_args: Vec<String>,
}

/// The ARGS of a `gdb --args PATH/toyvm ARGS` line.
fn toyvm_args(line: &str) -> Option<Vec<String>> {
    let rest = line.trim().strip_prefix("gdb --args ")?;
    let mut words = rest.split_whitespace();
    let program = words.next()?;
    program
        .ends_with("toyvm")
        .then(|| words.map(str::to_string).collect())
}

/// Every inline code span of `text` that starts with `prefix`.
fn inline_spans<'a>(text: &'a str, prefix: &str) -> Vec<&'a str> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .filter(|span| span.starts_with(prefix))
        .collect()
}

/// The sessions of one chapter.
fn sessions(name: &str, text: &str) -> Vec<Session> {
    let mut found = Vec::new();
    let mut block: Option<Session> = None;
    for (number, line) in text.lines().enumerate() {
        let place = format!("book/src/{name}:{}", number + 1);
        if line.starts_with("```") {
            match block.take() {
                Some(session) if !session.commands.is_empty() => found.push(session),
                Some(_) => {}
                None => {
                    block = Some(Session {
                        place,
                        commands: Vec::new(),
                        toyvm_args: PROGRAM.map(String::from).to_vec(),
                    })
                }
            }
            continue;
        }
        if let Some(session) = block.as_mut() {
            if let Some(args) = toyvm_args(line) {
                session.toyvm_args = args;
            } else if let Some(command) = line.strip_prefix("(gdb) ") {
                session.commands.push(command.to_string());
            }
        } else {
            for span in inline_spans(line, "break -function ") {
                found.push(Session {
                    place: place.clone(),
                    commands: vec![
                        "set breakpoint pending on".into(),
                        span.to_string(),
                        "run".into(),
                    ],
                    toyvm_args: PROGRAM.map(String::from).to_vec(),
                });
            }
        }
    }
    found
}

#[test]
fn every_gdb_command_in_the_book_runs_as_typed() {
    if !common::tool_or_skip("book_gdb", "gdb", &["--version"]) {
        return;
    }
    let src = common::repo_root().join("book/src");
    let mut all = Vec::new();
    for entry in std::fs::read_dir(&src).expect("book/src") {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|e| e == "md") {
            let name = path.file_name().unwrap().to_string_lossy().to_string();
            all.extend(sessions(&name, &std::fs::read_to_string(&path).unwrap()));
        }
    }
    let breaks = (all.iter())
        .flat_map(|s| &s.commands)
        .filter(|c| c.starts_with("break"))
        .count();
    assert!(
        breaks >= 4,
        "the book's gdb commands were not found: {all:?}"
    );
    for session in &all {
        for command in session.commands.iter().filter(|c| c.starts_with("break ")) {
            let name = command.trim_start_matches("break -function ");
            assert!(
                name.starts_with('\'') && name.ends_with('\''),
                "{}: quote the region name: {command}",
                session.place
            );
        }
        let mut gdb = Command::new("gdb");
        gdb.args(["-nx", "-batch", "-ex", "set pagination off"]);
        for command in &session.commands {
            gdb.args(["-ex", command]);
        }
        gdb.args([
            "-ex",
            "bt 1",
            "-ex",
            "kill",
            "--args",
            env!("CARGO_BIN_EXE_toyvm"),
        ])
        .args(&session.toyvm_args)
        .current_dir(common::repo_root())
        .stdin(Stdio::null());
        let output = gdb.output().expect("run gdb");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(
            !text.contains("invalid explicit location") && !text.contains("No symbol table"),
            "{}: {:?} failed:\n{text}",
            session.place,
            session.commands
        );
        if session.commands.iter().any(|c| c.starts_with("break ")) {
            assert!(
                text.contains("Breakpoint 1, "),
                "{}: the breakpoint of {:?} was not hit:\n{text}",
                session.place,
                session.commands
            );
        }
    }
}
