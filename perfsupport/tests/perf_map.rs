//! Perf map files: line format, concurrency, stale files, fork.

mod common;

use common::scratch_dir;
use perfsupport::{CodeRegion, JitDump, PerfMap, ProfilerSink, Profilers};
use std::collections::HashMap;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

const FORK_HELPER_ENV: &str = "PERFSUPPORT_FORK_HELPER_DIR";

fn map_file(dir: &Path, pid: u32) -> std::path::PathBuf {
    dir.join(format!("perf-{pid}.map"))
}

/// Parses `"<hex> <hex> <name>"` lines; panics on anything else.
fn parse_lines(contents: &str) -> Vec<(u64, u64, String)> {
    assert!(
        contents.is_empty() || contents.ends_with('\n'),
        "last line ends in \\n"
    );
    contents
        .lines()
        .map(|line| {
            let mut parts = line.splitn(3, ' ');
            let start = parts.next().unwrap();
            let size = parts.next().expect("size");
            let name = parts.next().expect("name");
            for hex in [start, size] {
                assert!(
                    !hex.is_empty()
                        && hex
                            .bytes()
                            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)),
                    "lowercase hex without 0x: {line:?}"
                );
            }
            (
                u64::from_str_radix(start, 16).unwrap(),
                u64::from_str_radix(size, 16).unwrap(),
                name.to_string(),
            )
        })
        .collect()
}

#[test]
fn writes_one_line_per_region_lazily_with_mode_0644() {
    let dir = scratch_dir("map-format");
    let map = PerfMap::in_dir(dir.path());
    let path = map_file(dir.path(), std::process::id());
    assert_eq!(map.path(), Some(path.clone()));
    assert!(!path.exists(), "nothing is created before first use");

    let code = vec![0x90u8; 300];
    let regions = [
        CodeRegion::new(&code[..11], "toy::fib"),
        CodeRegion::new(&code[16..43], "toy-tramp::main with spaces"),
        CodeRegion::new(&code[64..], "toy::stub"),
    ];
    // A name that would split the line is rejected, and nothing is written.
    let evil = CodeRegion::new(&code[64..], "evil\nname");
    let err = map.register(&[regions[0], evil]).unwrap_err();
    assert!(
        err.to_string()
            .contains("\"evil\\nname\": name contains a newline"),
        "{err}"
    );
    assert!(!path.exists(), "a rejected batch creates nothing");
    map.register(&regions).expect("register");
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o644);
    let lines = parse_lines(&std::fs::read_to_string(&path).unwrap());
    let expected: Vec<(u64, u64, String)> = vec![
        (regions[0].start(), 11, "toy::fib".into()),
        (regions[1].start(), 27, "toy-tramp::main with spaces".into()),
        (regions[2].start(), 236, "toy::stub".into()),
    ];
    assert_eq!(lines, expected);
    // Exact text, as perf and CPython's test expect it.
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.starts_with(&format!("{:x} b toy::fib\n", regions[0].start())));

    map.finish().expect("finish");
    assert!(
        map.register(&regions).is_err(),
        "registering after finish fails"
    );
    assert!(path.exists(), "the map stays for perf report");
}

#[test]
fn eight_threads_ten_thousand_entries_each_no_torn_or_lost_line() {
    const THREADS: usize = 8;
    const ENTRIES: usize = 10_000;
    let dir = scratch_dir("map-threads");
    let map = PerfMap::in_dir(dir.path());
    let code = vec![0xc3u8; 4096];
    std::thread::scope(|scope| {
        for thread in 0..THREADS {
            let (map, code) = (&map, &code);
            scope.spawn(move || {
                for i in 0..ENTRIES {
                    let offset = (thread * 512 + i % 256) % 4000;
                    let name = format!("toy::t{thread}_e{i}");
                    let region = CodeRegion::new(&code[offset..offset + 1 + i % 64], &name);
                    map.register(&[region]).expect("register");
                }
            });
        }
    });
    map.finish().unwrap();
    let contents = std::fs::read_to_string(map_file(dir.path(), std::process::id())).unwrap();
    let lines = parse_lines(&contents);
    assert_eq!(lines.len(), THREADS * ENTRIES);
    let mut seen = HashMap::new();
    let base = code.as_ptr() as u64;
    for (start, size, name) in lines {
        let rest = name.strip_prefix("toy::t").expect("name intact");
        let (thread, i) = rest.split_once("_e").expect("name intact");
        let (thread, i): (usize, usize) = (thread.parse().unwrap(), i.parse().unwrap());
        let offset = (thread * 512 + i % 256) % 4000;
        assert_eq!(
            (start, size),
            (base + offset as u64, 1 + (i % 64) as u64),
            "{name}"
        );
        assert!(seen.insert(name, ()).is_none(), "no duplicates");
    }
    assert_eq!(seen.len(), THREADS * ENTRIES);
}

#[test]
fn stale_map_of_a_dead_process_is_replaced() {
    let dir = scratch_dir("map-stale");
    let path = map_file(dir.path(), std::process::id());
    std::fs::write(&path, "dead00 10 old::name\n").unwrap();
    let map = PerfMap::in_dir(dir.path());
    let code = [0xc3u8; 8];
    map.register(&[CodeRegion::new(&code, "toy::new")]).unwrap();
    let lines = parse_lines(&std::fs::read_to_string(&path).unwrap());
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0].2, "toy::new");
}

#[test]
fn appends_alongside_another_writer() {
    // cranelift-jit appends its own lines to the same file under perf.
    let dir = scratch_dir("map-append");
    let map = PerfMap::in_dir(dir.path());
    map.open().unwrap();
    let path = map.path().unwrap();
    let mut other = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    let code = [0xc3u8; 8];
    for i in 0..100 {
        map.register(&[CodeRegion::new(&code, &format!("toy::ours{i}"))])
            .unwrap();
        writeln!(other, "1000 10 cranelift{i}").unwrap();
    }
    let lines = parse_lines(&std::fs::read_to_string(&path).unwrap());
    assert_eq!(lines.len(), 200);
    assert_eq!(
        lines
            .iter()
            .filter(|l| l.2.starts_with("toy::ours"))
            .count(),
        100
    );
}

#[test]
fn a_second_map_for_the_same_path_is_refused() {
    let dir = scratch_dir("map-twice");
    let first = PerfMap::in_dir(dir.path());
    first.open().unwrap();
    let second = PerfMap::in_dir(dir.path());
    let err = second.open().unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::ResourceBusy);
    // The first map's file survives.
    let code = [0xc3u8; 8];
    first
        .register(&[CodeRegion::new(&code, "toy::kept")])
        .unwrap();
    assert!(
        std::fs::read_to_string(first.path().unwrap())
            .unwrap()
            .contains("toy::kept")
    );
    // Even after the first map finished, its file is never replaced.
    first.finish().unwrap();
    assert_eq!(
        PerfMap::in_dir(dir.path()).open().unwrap_err().kind(),
        std::io::ErrorKind::ResourceBusy
    );
}

/// Runs in a separate process (this test binary re-run with
/// `PERFSUPPORT_FORK_HELPER_DIR`), so `fork` happens in a process with no
/// other test threads. Uses the `Profilers` fan-out with a perf map and a
/// jitdump, as a VM would.
fn fork_helper(dir: &Path) {
    let code = [0xc3u8; 16];
    let region = |range: std::ops::Range<usize>, name| CodeRegion::new(&code[range], name);
    let mut profilers = Profilers::new();
    profilers.add(Box::new(PerfMap::in_dir(dir)));
    profilers.add(Box::new(JitDump::create_in(dir).unwrap()));
    assert!(
        profilers
            .register(&[region(0..4, "toy::before_fork")])
            .is_empty()
    );
    // SAFETY: this process runs only this test (`--test-threads=1`), so no
    // other thread holds a lock; the child leaves with `_exit`.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let followed = profilers.after_fork_child().is_empty();
        let failures = profilers.register(&[region(4..8, "toy::child_after_fork")]);
        // The perf map continues in the child; the parent's jitdump simply
        // stops (it once refused the first registration with an error).
        let jitdump_stopped = failures.is_empty();
        let finished = profilers.finish().is_empty();
        let ok = followed && jitdump_stopped && finished;
        // SAFETY: leaving the forked child without running the parent's
        // destructors or test harness.
        unsafe { libc::_exit(if ok { 0 } else { 1 }) };
    }
    let mut status = 0;
    // SAFETY: waiting for our own child with a valid status pointer.
    let waited = unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(waited, pid);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "child failed: {status}"
    );
    assert!(
        profilers
            .register(&[region(8..12, "toy::parent_after_fork")])
            .is_empty()
    );
    assert!(profilers.finish().is_empty());
    std::fs::write(dir.join("child.pid"), pid.to_string()).unwrap();
}

/// Names in the CODE_LOAD records of a jitdump, in order.
fn jitdump_names(path: &Path) -> Vec<String> {
    use linux_perf_data::jitdump::{JitDumpReader, JitDumpRecord};
    let mut reader = JitDumpReader::new(std::fs::File::open(path).unwrap()).unwrap();
    let mut names = Vec::new();
    while let Some(raw) = reader.next_record().unwrap() {
        if let JitDumpRecord::CodeLoad(load) = raw.parse().unwrap() {
            names.push(String::from_utf8(load.function_name.as_slice().to_vec()).unwrap());
        }
    }
    names
}

#[test]
fn after_fork_child_starts_its_own_map_with_the_parent_entries() {
    if let Some(dir) = std::env::var_os(FORK_HELPER_ENV) {
        fork_helper(Path::new(&dir));
        return;
    }
    let dir = scratch_dir("map-fork");
    let helper = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "after_fork_child_starts_its_own_map_with_the_parent_entries",
            "--test-threads=1",
        ])
        .env(FORK_HELPER_ENV, dir.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let helper_pid = helper.id();
    let output = helper.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "helper failed: {}",
        String::from_utf8_lossy(&output.stdout)
    );
    let child_pid: u32 = std::fs::read_to_string(dir.path().join("child.pid"))
        .unwrap()
        .parse()
        .unwrap();
    let names = |pid: u32| -> Vec<String> {
        let text = std::fs::read_to_string(map_file(dir.path(), pid)).unwrap();
        parse_lines(&text).into_iter().map(|l| l.2).collect()
    };
    assert_eq!(
        names(helper_pid),
        ["toy::before_fork", "toy::parent_after_fork"]
    );
    assert_eq!(
        names(child_pid),
        ["toy::before_fork", "toy::child_after_fork"]
    );
    // The child wrote nothing into the parent's dump, and made none of its own.
    let dump = dir.path().join(format!("jit-{helper_pid}.dump"));
    assert_eq!(
        jitdump_names(&dump),
        ["toy::before_fork", "toy::parent_after_fork"]
    );
    assert!(!dir.path().join(format!("jit-{child_pid}.dump")).exists());
    let mode = std::fs::metadata(map_file(dir.path(), child_pid))
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o644);
}

#[test]
fn after_fork_child_without_an_open_map_does_nothing() {
    let dir = scratch_dir("map-fork-unopened");
    let map = PerfMap::in_dir(dir.path());
    map.after_fork_child().expect("nothing to do");
    assert!(std::fs::read_dir(dir.path()).unwrap().next().is_none());
    let from_file = PerfMap::from_file(tempfile::tempfile().unwrap());
    let err = from_file.after_fork_child().unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::Unsupported);
}
