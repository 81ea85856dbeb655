//! The bounded code cache (`--jit-code-limit`): code is evicted and
//! compiled again with the program's output unchanged, and the profiler
//! files stay exact through the deaths: the jitdump reuses freed addresses
//! with new `JIT_CODE_LOAD`s, the perf map never gives an address to code
//! with another name.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

const PHASES: &str = "examples/scripts/phases.toy";

/// The numbers of `--jit-stats`' code cache line: (evictions, recompiles).
fn cache_counts(stderr: &str) -> (u64, u64) {
    let line = (stderr.lines())
        .find_map(|l| l.strip_prefix("jit-stats (code cache): "))
        .unwrap_or_else(|| panic!("no code cache line in:\n{stderr}"));
    let number_before = |what: &str| -> u64 {
        let at = line
            .find(what)
            .unwrap_or_else(|| panic!("{what} in {line}"));
        let digits: String = line[..at]
            .trim_end()
            .rsplit(' ')
            .next()
            .unwrap()
            .to_string();
        digits
            .parse()
            .unwrap_or_else(|_| panic!("{what} in {line}"))
    };
    (number_before(" evictions"), number_before(" recompiles"))
}

#[test]
fn evicted_code_is_compiled_again_and_the_output_is_the_interpreters() {
    // The compiler thread's tiers (`--jit-background`, and the default
    // tiering, which compiles in the background too) get phases ten times
    // longer: their code arrives whenever the thread is scheduled, and with the default
    // phases a loaded machine (CI, two cores, four test processes) let
    // every phase end before its code came back, so nothing was compiled
    // again. At this length it still recompiles with 100 ms per request
    // (`TOYVM_JIT_DELAY_US=100000`).
    let long = ["3", "20000"];
    for (tier, program_args) in [
        (&["--jit-threshold", "10"][..], &[][..]),
        (&["--jit-threshold", "10", "--jit-background"], &long[..]),
        (&[], &long[..]),
    ] {
        let mut interpreted = vec!["run", "--no-jit", PHASES];
        interpreted.extend(program_args);
        let expected = common::toyvm(&interpreted);
        assert_eq!(expected.status, Some(0), "{}", expected.stderr);
        let four_pages = common::pages(4);
        let mut args = vec!["run", "--jit-code-limit", &four_pages, "--jit-stats"];
        args.extend(tier);
        args.push(PHASES);
        args.extend(program_args);
        let run = common::toyvm(&args);
        assert_eq!(run.status, Some(0), "{tier:?}: {}", run.stderr);
        assert_eq!(run.stdout, expected.stdout, "{tier:?}");
        let (evictions, recompiles) = cache_counts(&run.stderr);
        assert!(evictions > 0, "{tier:?}: nothing evicted:\n{}", run.stderr);
        if !tier.is_empty() {
            assert!(
                recompiles > 0,
                "{tier:?}: nothing recompiled:\n{}",
                run.stderr
            );
        }
    }
    // Above the working set: nothing is evicted.
    let reference = common::toyvm(&["run", "--no-jit", PHASES]);
    let run = common::toyvm(&[
        "run",
        "--jit-threshold",
        "10",
        "--jit-code-limit",
        "256M",
        "--jit-stats",
        PHASES,
    ]);
    assert_eq!(run.stdout, reference.stdout);
    assert_eq!(cache_counts(&run.stderr), (0, 0), "{}", run.stderr);
}

#[test]
fn sizes_take_suffixes_and_nonsense_is_refused() {
    let run = common::toyvm(&["run", "--jit-code-limit", "12x", PHASES]);
    assert_eq!(run.status, Some(2), "{}", run.stderr);
    assert!(run.stderr.contains("'12x' is not a size"), "{}", run.stderr);
    let run = common::toyvm(&[
        "run",
        "--jit-code-limit",
        "1G",
        "examples/scripts/hello.toy",
    ]);
    assert_eq!(run.status, Some(0), "{}", run.stderr);
}

/// One `JIT_CODE_LOAD` record: (timestamp, address, size, code index, name).
type Load = (u64, u64, u64, u64, String);

fn jitdump_loads(bytes: &[u8]) -> Vec<Load> {
    let u32_at = |o: usize| u32::from_le_bytes(bytes[o..o + 4].try_into().unwrap());
    let u64_at = |o: usize| u64::from_le_bytes(bytes[o..o + 8].try_into().unwrap());
    let mut at = u32_at(8) as usize; // the header's total_size
    let mut loads = Vec::new();
    while at + 16 <= bytes.len() {
        let (id, size, timestamp) = (u32_at(at), u32_at(at + 4) as usize, u64_at(at + 8));
        if size < 16 || at + size > bytes.len() {
            break;
        }
        if id == 0 {
            let body = at + 16;
            let name_at = body + 40;
            let name_end = name_at + bytes[name_at..].iter().position(|&b| b == 0).unwrap();
            let name = String::from_utf8_lossy(&bytes[name_at..name_end]).into_owned();
            loads.push((
                timestamp,
                u64_at(body + 16),
                u64_at(body + 24),
                u64_at(body + 32),
                name,
            ));
        }
        at += size;
    }
    loads
}

/// Runs `phases.toy` under a small limit with `flags` and `env`, in `dir`;
/// the pid.
fn run_phases_profiled(dir: &Path, flags: &[&str], env: &[(&str, &str)]) -> u32 {
    let root = common::repo_root();
    let child = Command::new(env!("CARGO_BIN_EXE_toyvm"))
        .current_dir(&root)
        .envs(env.iter().copied())
        .args([
            "run",
            "--jit-threshold",
            "10",
            "--jit-code-limit",
            &common::pages(4),
            "--jit-stats",
        ])
        .args(flags)
        .arg("--perf-dir")
        .arg(dir)
        .arg(PHASES)
        .output_with_pid();
    let (pid, output) = child;
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let (evictions, _) = cache_counts(&String::from_utf8_lossy(&output.stderr));
    assert!(evictions > 0, "nothing evicted");
    pid
}

trait OutputWithPid {
    fn output_with_pid(&mut self) -> (u32, std::process::Output);
}

impl OutputWithPid for Command {
    fn output_with_pid(&mut self) -> (u32, std::process::Output) {
        let child = (self.stdout(std::process::Stdio::piped()))
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn toyvm");
        let pid = child.id();
        (pid, child.wait_with_output().expect("wait"))
    }
}

#[test]
fn the_jitdump_reuses_freed_addresses_with_new_loads() {
    let dir = std::env::temp_dir().join(format!("toyvm-code-cache-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pid = run_phases_profiled(&dir, &["--perf-jitdump"], &[]);
    let dump = dir.join(format!("jit-{pid}.dump"));
    let bytes = std::fs::read(&dump).expect("the jitdump");
    let _ = std::fs::remove_dir_all(&dir);
    let loads = jitdump_loads(&bytes);
    assert!(loads.len() > 10, "{} loads", loads.len());
    // Code indexes are never reused, and grow with time.
    for pair in loads.windows(2) {
        assert!(pair[1].3 > pair[0].3, "code index reused: {pair:?}");
        assert!(pair[1].0 >= pair[0].0, "time went back: {pair:?}");
    }
    // Freed memory is reused: some address holds code of two names, each
    // a LOAD of its own.
    let mut by_address: BTreeMap<u64, Vec<&str>> = BTreeMap::new();
    for (_, address, _, _, name) in &loads {
        by_address.entry(*address).or_default().push(name);
    }
    let reused = (by_address.values()).filter(|names| names.windows(2).any(|w| w[0] != w[1]));
    assert!(reused.count() > 0, "no address was given to other code");
}

/// The perf map's ranges, sorted, and the pairs of overlapping ranges
/// with different names.
fn stale_names(pid: u32) -> (usize, Vec<String>) {
    let path = format!("/tmp/perf-{pid}.map");
    let text = std::fs::read_to_string(&path).expect("the perf map");
    let _ = std::fs::remove_file(&path);
    let mut ranges: Vec<(u64, u64, String)> = (text.lines())
        .map(|l| {
            let mut f = l.splitn(3, ' ');
            let start = u64::from_str_radix(f.next().unwrap(), 16).unwrap();
            let size = u64::from_str_radix(f.next().unwrap(), 16).unwrap();
            (start, start + size, f.next().unwrap().to_string())
        })
        .collect();
    ranges.sort();
    let mut stale = Vec::new();
    for (i, (_, end, a)) in ranges.iter().enumerate() {
        for (start, _, b) in &ranges[i + 1..] {
            if start >= end {
                break;
            }
            if a != b {
                stale.push(format!("{a} / {b}"));
            }
        }
    }
    (ranges.len(), stale)
}

#[test]
fn the_perf_map_never_gives_an_address_to_another_name() {
    let dir = std::env::temp_dir().join(format!("toyvm-code-cache-map-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pid = run_phases_profiled(&dir, &["--perf"], &[]);
    let (lines, stale) = stale_names(pid);
    assert!(lines > 10, "{lines} lines");
    assert!(stale.is_empty(), "two names for one address: {stale:?}");
    // Negative control: without the quarantine, freed ranges go to other
    // code, and the map names them twice.
    let pid = run_phases_profiled(&dir, &["--perf"], &[("TOYVM_NO_QUARANTINE", "1")]);
    let (_, stale) = stale_names(pid);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(!stale.is_empty(), "the control shows no stale name");
}
