//! A chaos test of the C API across `fork(2)` (`tests/c/fork_chaos.c`,
//! linked against the shared library): a parent whose two threads write
//! perf map lines, register vmprof code, push frames, enable and disable
//! profiling and fork at random moments; children (and now and then a
//! grandchild) that check the state they inherit, profile themselves and
//! write their own maps. Afterwards every perf map and every profile is well
//! formed and names only the code of its own process and of its ancestors
//! (the lines and code they wrote before the fork).
//!
//! The seed is random and printed; `FORK_CHAOS_SEED=<n>` replays a run (up to
//! thread scheduling).

mod support;

use std::collections::{HashMap, HashSet};
use std::fs::OpenOptions;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use support::{compile, pkg_config, repo_root, scratch};

/// The whole run is killed after this long (each child has `alarm(20)`).
const LIMIT: Duration = Duration::from_secs(120);

/// `PERFSUPPORT_ESTATE`: the child's map could not follow the fork.
const ESTATE: i32 = -5;

fn seed() -> u64 {
    match std::env::var("FORK_CHAOS_SEED") {
        Ok(text) => text.trim().parse().expect("FORK_CHAOS_SEED is a number"),
        Err(_) => {
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .expect("after 1970");
            (now.as_nanos() as u64 ^ u64::from(std::process::id())) % 1_000_000_007
        }
    }
}

/// Runs `program SEED` in `dir`, stdout and stderr into files (so that a
/// child that outlives the parent cannot hold a pipe open); kills the
/// whole process group after [`LIMIT`]. Its status, stdout and stderr.
fn run(program: &Path, dir: &Path, seed: u64, since: SystemTime) -> (ExitStatus, String, String) {
    let out_path = dir.join("stdout.txt");
    let err_path = dir.join("stderr.txt");
    let open = |path: &Path| {
        OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    };
    let mut child = support::program(program)
        .arg(seed.to_string())
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(open(&out_path))
        .stderr(open(&err_path))
        .process_group(0)
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e}", program.display()));
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if start.elapsed() > LIMIT {
            // The group's id is the parent's pid: this ends its children too.
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", child.id())])
                .status();
            let _ = child.wait();
            let stdout = std::fs::read_to_string(&out_path).unwrap_or_default();
            let stderr = std::fs::read_to_string(&err_path).unwrap_or_default();
            let _cleanup = MapCleanup::of(&stdout, since);
            panic!(
                "seed {seed}: no end after {LIMIT:?} (killed); stderr:\n{stderr}\nstdout:\n{stdout}"
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let read = |path: &Path| {
        String::from_utf8_lossy(&std::fs::read(path).unwrap_or_default()).into_owned()
    };
    (status, read(&out_path), read(&err_path))
}

/// The numbers after the words of `line` that follow `keys`, e.g.
/// `fields("proc 5 parent 4", &["proc", "parent"])` is `[5, 4]`.
fn fields(line: &str, keys: &[&str]) -> Option<Vec<i64>> {
    let words: Vec<&str> = line.split_whitespace().collect();
    let mut values = Vec::new();
    for key in keys {
        let at = words.iter().position(|w| w == key)?;
        values.push(words.get(at + 1)?.parse().ok()?);
    }
    Some(values)
}

/// The pid a name was written by: `p<pid>` or `c<pid>` up to `separator`.
fn owner(name: &str, separator: &str) -> Option<u32> {
    let (prefix, _) = name.split_once(separator)?;
    let digits = prefix
        .strip_prefix('p')
        .or_else(|| prefix.strip_prefix('c'))?;
    digits.parse().ok()
}

/// What a run printed: every process with its parent (0 for the root) and
/// the result of its `perf_map_after_fork_child`.
struct Processes {
    parent: HashMap<u32, u32>,
    map_result: HashMap<u32, i32>,
    root: u32,
    profiles: HashSet<String>,
}

impl Processes {
    /// `pid` and its ancestors, innermost first.
    fn lineage(&self, pid: u32) -> Vec<u32> {
        let mut chain = vec![pid];
        let mut at = pid;
        while let Some(&up) = self.parent.get(&at) {
            if up == 0 {
                break;
            }
            chain.push(up);
            at = up;
        }
        chain
    }
}

/// Checks the output lines: no failed check, every forked process ran,
/// passed and was waited for, the root finished.
fn parse(seed: u64, stdout: &str) -> Processes {
    let context = || format!("seed {seed}; stdout:\n{stdout}");
    assert!(!stdout.contains("FAIL"), "a check failed: {}", context());
    let mut processes = Processes {
        parent: HashMap::new(),
        map_result: HashMap::new(),
        root: 0,
        profiles: HashSet::new(),
    };
    let mut forked = HashMap::new();
    let mut exits = HashMap::new();
    let mut done = None;
    for line in stdout.lines() {
        let word = line.split_whitespace().next().unwrap_or("");
        match word {
            "seed" | "" => {}
            "root" => processes.root = fields(line, &["root"]).expect("root")[0] as u32,
            "proc" => {
                let v = fields(line, &["proc", "parent", "map", "samples"])
                    .unwrap_or_else(|| panic!("bad line `{line}`: {}", context()));
                let pid = v[0] as u32;
                assert!(
                    processes.parent.insert(pid, v[1] as u32).is_none(),
                    "pid {pid} twice: {}",
                    context()
                );
                processes.map_result.insert(pid, v[2] as i32);
            }
            "forked" => {
                let v = fields(line, &["forked", "by"]).expect("forked");
                forked.insert(v[0] as u32, v[1] as u32);
            }
            "exit" => {
                let v = fields(line, &["exit"]).expect("exit");
                let status: i64 = line.split_whitespace().nth(2).unwrap().parse().unwrap();
                exits.insert(v[0] as u32, status);
            }
            "profile" => {
                let name = line.split_whitespace().nth(1).expect("profile name");
                processes.profiles.insert(name.to_string());
            }
            "done" => done = Some(fields(line, &["done"]).expect("done")[0]),
            _ => panic!("unexpected line `{line}`: {}", context()),
        }
    }
    assert_eq!(done, Some(0), "the root did not finish: {}", context());
    assert_eq!(
        processes.parent.get(&processes.root),
        Some(&0),
        "{}",
        context()
    );
    assert!(
        forked.len() >= 20,
        "{} forks, 20 wanted: {}",
        forked.len(),
        context()
    );
    for (&pid, &by) in &forked {
        // A status of 1000 + n: killed by signal n (14: alarm, a deadlock).
        assert_eq!(
            exits.get(&pid),
            Some(&0),
            "process {pid} did not pass: {}",
            context()
        );
        assert_eq!(
            processes.parent.get(&pid),
            Some(&by),
            "process {pid} did not finish: {}",
            context()
        );
    }
    assert_eq!(processes.parent.len(), forked.len() + 1, "{}", context());
    processes
}

/// True if `path` exists and was written at or after `since`: a map of an
/// earlier process that had the same pid (pids wrap) is not ours.
fn written_since(path: &str, since: SystemTime) -> bool {
    std::fs::metadata(path)
        .and_then(|m| m.modified())
        .is_ok_and(|modified| modified >= since)
}

/// Checks every process's perf map (which it removes): well-formed lines
/// naming only the process and its ancestors, the ancestors' lines first
/// and exactly the start of the parent's map.
fn check_maps(seed: u64, processes: &Processes, since: SystemTime) {
    // Read them all, remove them, then judge.
    let mut maps: HashMap<u32, Vec<String>> = HashMap::new();
    for &pid in processes.parent.keys() {
        let path = format!("/tmp/perf-{pid}.map");
        if !written_since(&path, since) {
            continue;
        }
        if let Ok(bytes) = std::fs::read(&path) {
            let _ = std::fs::remove_file(&path);
            let text = String::from_utf8(bytes)
                .unwrap_or_else(|e| panic!("seed {seed}: {path} is not UTF-8: {e}"));
            assert!(
                text.is_empty() || text.ends_with('\n'),
                "seed {seed}: {path} ends inside a line"
            );
            maps.insert(pid, text.lines().map(str::to_owned).collect());
        }
    }
    assert!(
        maps.contains_key(&processes.root),
        "seed {seed}: the root wrote no map"
    );
    let mut estate = 0;
    for (&pid, &result) in &processes.map_result {
        match result {
            0 => assert!(
                maps.contains_key(&pid),
                "seed {seed}: process {pid} wrote no map"
            ),
            ESTATE => {
                estate += 1;
                assert!(
                    !maps.contains_key(&pid),
                    "seed {seed}: process {pid} could not follow the fork, yet has a map"
                );
            }
            other => panic!("seed {seed}: process {pid}: after_fork_child returned {other}"),
        }
    }
    let mut inherited_lines = 0;
    for (&pid, lines) in &maps {
        let lineage = processes.lineage(pid);
        let mut depth = lineage.len(); // the ancestors' lines come first
        let mut inherited = 0;
        for (n, line) in lines.iter().enumerate() {
            let at = || format!("seed {seed}: /tmp/perf-{pid}.map line {}: `{line}`", n + 1);
            let mut parts = line.splitn(3, ' ');
            let (start, size, name) = (parts.next(), parts.next(), parts.next());
            for hex in [start, size] {
                let hex = hex.unwrap_or("");
                assert!(
                    !hex.is_empty()
                        && hex.len() <= 16
                        && hex
                            .bytes()
                            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)),
                    "{}: not hex",
                    at()
                );
            }
            assert_eq!(size, Some("10"), "{}: the size", at());
            let name = name.unwrap_or("");
            let by = owner(name, "::").unwrap_or_else(|| panic!("{}: a foreign name", at()));
            let level = lineage.iter().position(|&p| p == by).unwrap_or_else(|| {
                panic!("{}: names process {by}, not {pid} or an ancestor", at())
            });
            assert!(
                level <= depth,
                "{}: an ancestor's line after a later one",
                at()
            );
            depth = level;
            if level > 0 {
                inherited += 1;
            }
        }
        if inherited > 0 {
            let parent = processes.parent[&pid];
            let theirs = maps.get(&parent).unwrap_or_else(|| {
                panic!("seed {seed}: {pid} copied lines from {parent}, which has no map")
            });
            assert!(
                theirs.starts_with(&lines[..inherited]),
                "seed {seed}: the first {inherited} lines of {pid}'s map are not the start of \
                 its parent {parent}'s"
            );
            inherited_lines += inherited;
        }
    }
    println!(
        "seed {seed}: {} maps, {estate} children that could not follow the map, \
         {inherited_lines} lines copied",
        maps.len()
    );
}

/// Checks every profile in `dir`: complete, named after a process of the
/// run, naming only that process's code and its ancestors'.
fn check_profiles(seed: u64, dir: &Path, processes: &Processes) {
    let mut files = HashSet::new();
    for entry in std::fs::read_dir(dir).expect("scratch dir") {
        let name = entry
            .expect("entry")
            .file_name()
            .to_string_lossy()
            .into_owned();
        if name.ends_with(".prof") {
            files.insert(name);
        }
    }
    assert_eq!(
        files, processes.profiles,
        "seed {seed}: the profiles in the directory are not those printed"
    );
    let mut samples = 0;
    for file in &files {
        let pid: u32 = file
            .strip_prefix("prof-")
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse().ok())
            .unwrap_or_else(|| panic!("seed {seed}: odd profile name {file}"));
        assert!(
            processes.parent.contains_key(&pid),
            "seed {seed}: {file} of an unknown process"
        );
        let lineage = processes.lineage(pid);
        let profile = ps::vmprof::read_profile(&dir.join(file))
            .unwrap_or_else(|e| panic!("seed {seed}: {file}: {e}"));
        assert!(profile.has_trailer, "seed {seed}: {file} has no trailer");
        let child = pid != processes.root;
        assert_eq!(
            profile.interp,
            if child { "chaos-child" } else { "chaos" },
            "seed {seed}: {file}"
        );
        for (id, name) in &profile.names {
            let by = owner(name, ":")
                .unwrap_or_else(|| panic!("seed {seed}: {file}: code {id} `{name}` is foreign"));
            assert!(
                lineage.contains(&by),
                "seed {seed}: {file}: code {id} `{name}` is not of {pid} or an ancestor"
            );
        }
        for sample in &profile.samples {
            assert!(!sample.stack.is_empty(), "seed {seed}: {file}: empty stack");
            for &id in &sample.stack {
                assert!(
                    profile.name(id).is_some(),
                    "seed {seed}: {file}: a sample names unknown code {id}"
                );
            }
        }
        let threads: HashSet<u64> = profile.samples.iter().map(|s| s.thread).collect();
        if child {
            // Only the forking thread exists and is attached in a child; its
            // thread id is the child's pid, not the parent's thread's.
            assert!(
                threads.iter().all(|&t| t == u64::from(pid)),
                "seed {seed}: {file}: samples of threads {threads:?}"
            );
        } else {
            assert!(
                threads.len() <= 2,
                "seed {seed}: {file}: samples of threads {threads:?}, 2 attached"
            );
        }
        if child {
            assert!(
                !profile.samples.is_empty(),
                "seed {seed}: {file} has no samples"
            );
            // The child burns its CPU in its own code (only the moments
            // around its pushes run under the frame its parent pushed).
            let own = |sample: &ps::vmprof::Sample| {
                let leaf = profile.name(*sample.stack.last().unwrap()).unwrap();
                owner(leaf, ":") == Some(pid)
            };
            assert!(
                profile.samples.iter().any(own),
                "seed {seed}: {file}: no sample in the child's own code"
            );
        }
        samples += profile.samples.len();
    }
    println!("seed {seed}: {} profiles, {samples} samples", files.len());
}

#[test]
fn parent_and_children_fork_register_and_profile_at_random() {
    let seed = seed();
    println!("seed {seed} (replay with FORK_CHAOS_SEED={seed})");
    let dir = scratch("fork-chaos");
    let source = repo_root().join("perfsupport-capi/tests/c/fork_chaos.c");
    let program = dir.path().join("fork_chaos");
    if compile(&[source], &program, &pkg_config(&["--libs"])).is_none() {
        return;
    }
    let start = Instant::now();
    // File times may lag the clock by a tick; a stale map is far older.
    let since = SystemTime::now() - Duration::from_secs(1);
    let (status, stdout, stderr) = run(&program, dir.path(), seed, since);
    println!("seed {seed}: ran in {:?}", start.elapsed());
    let _cleanup = MapCleanup::of(&stdout, since);
    // Nothing on stderr: a Rust panic message would be a bug.
    assert!(
        stderr.is_empty(),
        "seed {seed}: stderr:\n{stderr}\nstdout:\n{stdout}"
    );
    let processes = parse(seed, &stdout);
    check_maps(seed, &processes, since);
    assert!(status.success(), "seed {seed}: {status}; stdout:\n{stdout}");
    check_profiles(seed, dir.path(), &processes);
}

/// Removes the perf maps that the processes of the run wrote, whatever
/// the verdict (not the stale ones of earlier processes with their pids).
struct MapCleanup(Vec<String>, SystemTime);

impl MapCleanup {
    fn of(stdout: &str, since: SystemTime) -> MapCleanup {
        let pids: HashSet<u32> = stdout
            .lines()
            .filter_map(
                |line| match line.split_whitespace().collect::<Vec<_>>()[..] {
                    ["root" | "proc" | "forked", pid, ..] => pid.parse().ok(),
                    _ => None,
                },
            )
            .collect();
        MapCleanup(
            pids.into_iter()
                .map(|p| format!("/tmp/perf-{p}.map"))
                .collect(),
            since,
        )
    }
}

impl Drop for MapCleanup {
    fn drop(&mut self) {
        for path in &self.0 {
            if written_since(path, self.1) {
                let _ = std::fs::remove_file(path);
            }
        }
    }
}
