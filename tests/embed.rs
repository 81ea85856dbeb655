//! Many VMs in one process (`examples/embed.rs`, `toyvm::embed`): every VM
//! is named in the process's one perf map and one jitdump, each VM's own
//! vmprof profile names only its code, dropping VMs keeps the mapping
//! count flat, and under `perf record` every sample of two scripts run
//! alternately in fresh VMs is named for the script that was running.

mod common;

use std::path::PathBuf;
use std::process::{Command, Output};

const ALPHA: &str = "tests/embed/alpha.toy";
const BETA: &str = "tests/embed/beta.toy";

/// The example binary, built by `cargo test` with the tests.
fn embed_bin() -> PathBuf {
    common::release_dir().join("examples/embed")
}

fn embed(args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(embed_bin())
        .current_dir(common::repo_root())
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("run examples/embed")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn every_vm_prints_and_is_named_in_the_one_perf_map_and_jitdump() {
    let dir = std::env::temp_dir().join(format!("toyvm-embed-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let d = dir.to_string_lossy().into_owned();
    let child = Command::new(embed_bin())
        .current_dir(common::repo_root())
        .args([
            "--jit-threshold",
            "0",
            "--perf",
            "--perf-jitdump",
            "--perf-dir",
            &d,
        ])
        .args(["--gdb", "--threads", "2", "40", ALPHA, BETA])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert_eq!(
        stdout.lines().filter(|l| l.starts_with("alpha ")).count(),
        20
    );
    assert_eq!(
        stdout.lines().filter(|l| l.starts_with("beta ")).count(),
        20
    );
    assert!(out.stderr.is_empty(), "{}", text(&out.stderr));
    let map_path = format!("/tmp/perf-{pid}.map");
    let map = std::fs::read_to_string(&map_path).expect("the perf map");
    let _ = std::fs::remove_file(&map_path);
    let dump = std::fs::read(dir.join(format!("jit-{pid}.dump"))).expect("the jitdump");
    let _ = std::fs::remove_dir_all(&dir);
    // Each VM compiled its functions: 20 of each script's, in both files.
    for name in [
        "toy:jit:alpha:tests/embed/alpha.toy",
        "toy:jit:beta:tests/embed/beta.toy",
    ] {
        let in_map = map
            .lines()
            .filter(|l| l.contains(&format!(" {name}:")))
            .count();
        assert_eq!(in_map, 20, "{name} in the perf map:\n{map}");
        let in_dump = dump
            .windows(name.len())
            .filter(|w| *w == name.as_bytes())
            .count();
        assert!(in_dump >= 20, "{name}: {in_dump} times in the jitdump");
    }
}

#[test]
fn each_vms_own_profile_names_only_its_code() {
    let dir = std::env::temp_dir().join(format!("toyvm-embed-vmprof-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let d = dir.to_string_lossy().into_owned();
    let out = embed(&["--vmprof-each", &d, "60", ALPHA, BETA], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let first = std::fs::read(dir.join("vm-0.prof")).unwrap();
    let last = std::fs::read(dir.join("vm-58.prof")).unwrap();
    let other = std::fs::read(dir.join("vm-59.prof")).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let has = |file: &[u8], s: &str| file.windows(s.len()).any(|w| w == s.as_bytes());
    // VM 58 ran alpha.toy, after 58 VMs: it names alpha, never beta.
    assert!(has(&last, "alpha:2:tests/embed/alpha.toy"));
    assert!(!has(&last, "beta.toy"), "VM 58's profile names beta");
    assert!(!has(&other, "alpha.toy"), "VM 59's profile names alpha");
    // And it is no larger than the first VM's for the names it carries.
    let names = |file: &[u8]| file.windows(4).filter(|w| *w == b"toy:").count();
    assert_eq!(names(&first), names(&last));
}

/// `embed: peak RSS N KB, M mappings` -> (N, M).
fn resources(stderr: &str) -> (u64, u64) {
    let line = (stderr.lines())
        .find_map(|l| l.strip_prefix("embed: peak RSS "))
        .unwrap_or_else(|| panic!("no stats in {stderr}"));
    let mut words = line.split_whitespace();
    let rss = words.next().unwrap().parse().unwrap();
    let maps = words.nth(1).unwrap().parse().unwrap();
    (rss, maps)
}

#[test]
fn dropping_vms_gives_back_what_they_took() {
    let flags = ["--jit-threshold", "0", "--perf-jitdump", "--gdb", "--stats"];
    let dir = std::env::temp_dir().join(format!("toyvm-embed-res-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let d = dir.to_string_lossy().into_owned();
    let run = |n: &str| {
        let mut args = flags.to_vec();
        args.extend(["--perf-dir", &d, n, ALPHA, BETA]);
        let out = embed(&args, &[]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        resources(&text(&out.stderr))
    };
    let (rss_few, maps_few) = run("20");
    let (rss_many, maps_many) = run("400");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        maps_many <= maps_few + 2,
        "mappings grow with VMs: {maps_few} after 20, {maps_many} after 400"
    );
    assert!(
        rss_many * 4 <= rss_few * 5,
        "peak RSS grows with VMs: {rss_few} KB after 20, {rss_many} KB after 400"
    );
}

/// The script file each toy frame of a `perf script` stack names, leaf
/// first.
fn stack_files(stack: &str) -> Vec<String> {
    (stack.lines())
        .filter_map(|l| l.split_whitespace().nth(1))
        .filter(|sym| sym.starts_with("toy:"))
        .map(|sym| {
            let file = sym.rsplit_once(':').map_or(sym, |(rest, _)| rest);
            file.rsplit(':').next().unwrap_or(file).to_string()
        })
        .collect()
}

/// Records two scripts run alternately in fresh VMs on `threads` threads
/// under a perf map; the samples whose toy frames name more than one
/// script (a stale name) and the number of samples with toy frames.
fn mixed_stacks(threads: &str, env: &[(&str, &str)]) -> Option<(usize, usize)> {
    if !common::tool_or_skip("embed_perf", "perf", common::PERF_RECORD_PROBE) {
        return None;
    }
    let work = common::PerfWork::new("embed-perf");
    let bin = embed_bin();
    let root = common::repo_root();
    let (alpha, beta) = (root.join(ALPHA), root.join(BETA));
    let data = work.path("perf.data");
    let record = work
        .command("perf")
        .args(["record", "-e", "cpu-clock", "-F", "4000", "-g", "-o"])
        .arg(&data)
        .arg("--")
        .arg(&bin)
        .args([
            "--jit-threshold",
            "1",
            "--jit-code-limit",
            &common::pages(4),
            "--perf",
            "--threads",
            threads,
        ])
        .args(["24"])
        .arg(&alpha)
        .arg(&beta)
        .envs(env.iter().copied())
        .output()
        .expect("perf record");
    assert!(record.status.success(), "{}", text(&record.stderr));
    let script = work.perf(
        &["script", "-i", data.to_str().unwrap(), "-F", "pid,ip,sym"],
        &[],
    );
    assert!(script.status.success(), "{}", text(&script.stderr));
    let out = text(&script.stdout);
    // The recorded process's perf map (perf has read it).
    if let Some(pid) = out.split_whitespace().next() {
        let _ = std::fs::remove_file(format!("/tmp/perf-{pid}.map"));
    }
    let (mut mixed, mut named) = (0, 0);
    for stack in out.split("\n\n") {
        let files = stack_files(stack);
        if files.is_empty() {
            continue;
        }
        named += 1;
        if files.iter().any(|f| f != &files[0]) {
            mixed += 1;
        }
    }
    Some((mixed, named))
}

#[test]
fn under_perf_every_sample_names_the_script_that_ran() {
    for threads in ["1", "2"] {
        let Some((mixed, named)) = mixed_stacks(threads, &[]) else {
            return;
        };
        assert!(
            named > 200,
            "{threads} threads: {named} samples in toy code"
        );
        assert_eq!(
            mixed, 0,
            "{threads} threads: {mixed} of {named} samples mix two scripts"
        );
    }
    // Negative control: without the quarantine a freed range goes to the
    // other script's code, and perf names it after the first.
    let Some((mixed, named)) = mixed_stacks("1", &[("TOYVM_NO_QUARANTINE", "1")]) else {
        return;
    };
    assert!(
        mixed > 0,
        "the control shows no stale name in {named} samples"
    );
}

#[test]
fn one_vmprof_profile_for_the_whole_process_names_every_vms_code() {
    let dir = std::env::temp_dir().join(format!("toyvm-embed-whole-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("all.prof");
    let p = path.to_string_lossy().into_owned();
    let out = embed(&["--vmprof", &p, "--threads", "2", "40", ALPHA, BETA], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let profile = perfsupport::vmprof::read_profile(&path).expect("the profile");
    let _ = std::fs::remove_dir_all(&dir);
    let leaf_named = |what: &str| {
        (profile.samples.iter())
            .filter_map(|s| s.stack.last())
            .filter_map(|&id| profile.name(id))
            .filter(|name| name.starts_with(&format!("toy:{what}:")))
            .count()
    };
    // Both scripts ran on both threads, all into one file.
    assert!(
        leaf_named("alpha") > 0 && leaf_named("beta") > 0,
        "{} samples",
        profile.samples.len()
    );
    let threads: std::collections::HashSet<u64> =
        profile.samples.iter().map(|s| s.thread).collect();
    assert!(threads.len() >= 2, "samples from {} threads", threads.len());
}
