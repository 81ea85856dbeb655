//! Proof on a program that evicts (`examples/scripts/phases.toy`: eight
//! functions hot one after another, in rounds, under a code limit that
//! holds a few of them): every profiler attributes each sample to the
//! function that was running when it was taken. The check is on the order
//! of the named samples in time, not only on totals: phase `k` runs after
//! phase `k - 1` and before phase `k + 1`, so walking the samples in time
//! order, a sample named for an earlier phase than the last one seen
//! starts a new round. A stale name (code of phase 3 named phase 1 because
//! it reuses phase 1's addresses) starts a round too many.

mod common;

use std::path::Path;

const PHASES: &str = "examples/scripts/phases.toy";
const ROUNDS: usize = 3;
const SIZE: &str = "20000";

/// The phase (0-7) a symbol or code name belongs to.
fn phase_of(name: &str) -> Option<usize> {
    let at = name.find("phase")?;
    name[at + 5..]
        .chars()
        .next()?
        .to_digit(10)
        .map(|d| d as usize)
}

/// Rounds the sequence of phases implies, and the distinct phases seen.
fn rounds(phases: impl IntoIterator<Item = usize>) -> (usize, usize) {
    let (mut rounds, mut last, mut seen) = (0, None, [false; 8]);
    for p in phases {
        seen[p] = true;
        if last.is_none_or(|l| p < l) {
            rounds += 1;
        }
        last = Some(p);
    }
    (rounds, seen.iter().filter(|&&s| s).count())
}

fn the_run(flags: &[&str]) -> Vec<String> {
    the_run_within(&common::pages(4), flags)
}

/// [`the_run`] under the code limit `limit`.
fn the_run_within(limit: &str, flags: &[&str]) -> Vec<String> {
    let mut args = vec!["run", "--jit-threshold", "10", "--jit-code-limit", limit];
    args.extend(flags);
    args.extend([PHASES, "3", SIZE]);
    args.iter().map(|s| s.to_string()).collect()
}

fn check(what: &str, phases: Vec<usize>) {
    let (found, distinct) = rounds(phases.iter().copied());
    assert!(phases.len() > 50, "{what}: {} named samples", phases.len());
    assert!(distinct >= 6, "{what}: only {distinct} phases sampled");
    assert!(
        found <= ROUNDS,
        "{what}: the samples in time order imply {found} rounds, the program ran {ROUNDS}: {phases:?}"
    );
}

#[test]
fn the_rounds_detector_sees_a_stale_name() {
    assert_eq!(rounds([0, 0, 1, 2, 3, 5, 7, 0, 1, 4, 6, 0, 2]), (3, 8));
    // Phase 1's name on phase 3's code: a round too many.
    assert_eq!(rounds([0, 1, 2, 3, 1, 3, 4, 5, 6, 7]).0, 2);
}

/// `perf record` (with `-k 1` for jitdump) of `toyvm` with `flags`; the
/// leaf symbols of the samples in time order (after `perf inject --jit`
/// when `inject`).
fn perf_leaves(
    tag: &str,
    limit: &str,
    flags: &[&str],
    inject: bool,
    env: &[(&str, &str)],
) -> Option<Vec<String>> {
    if !common::tool_or_skip(tag, "perf", common::PERF_RECORD_PROBE) {
        return None;
    }
    let work = common::PerfWork::new(tag);
    let data = work.path("perf.data");
    let dir = work.dir.to_string_lossy().into_owned();
    let mut flags = flags.to_vec();
    flags.extend(["--perf-dir", &dir]);
    let record = work
        .command("perf")
        .args(["record", "-k", "1", "-e", "cpu-clock", "-F", "2000", "-o"])
        .arg(&data)
        .arg("--")
        .arg(env!("CARGO_BIN_EXE_toyvm"))
        .args(the_run_within(limit, &flags))
        .envs(env.iter().copied())
        .current_dir(common::repo_root())
        .output()
        .expect("perf record");
    assert!(
        record.status.success(),
        "{}",
        String::from_utf8_lossy(&record.stderr)
    );
    let mut input = data.clone();
    if inject {
        let injected = work.path("perf.jit.data");
        let out = work.perf(
            &[
                "inject",
                "--jit",
                "-i",
                data.to_str().unwrap(),
                "-o",
                injected.to_str().unwrap(),
            ],
            &[],
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        input = injected;
    }
    let out = work.perf(
        &[
            "script",
            "-i",
            input.to_str().unwrap(),
            "-F",
            "pid,time,ip,sym",
        ],
        &[],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<String> = (String::from_utf8_lossy(&out.stdout).lines())
        .map(str::to_string)
        .collect();
    // The recorded toyvm's perf map (perf has read it).
    if let Some(pid) = lines.first().and_then(|l| l.split_whitespace().next()) {
        let _ = std::fs::remove_file(format!("/tmp/perf-{pid}.map"));
    }
    Some(lines)
}

fn phases_in(lines: &[String]) -> Vec<usize> {
    (lines.iter())
        .filter(|l| l.contains("toy:"))
        .filter_map(|l| phase_of(l))
        .collect()
}

#[test]
fn jitdump_and_perf_inject_name_each_sample_by_time() {
    let Some(lines) = perf_leaves(
        "cache-jitdump",
        &common::pages(4),
        &["--perf-jitdump"],
        true,
        &[],
    ) else {
        return;
    };
    check("jitdump + perf inject", phases_in(&lines));
}

#[test]
fn the_perf_map_names_each_sample_by_time() {
    let Some(lines) = perf_leaves("cache-perfmap", &common::pages(4), &["--perf"], false, &[])
    else {
        return;
    };
    check("perf map", phases_in(&lines));
    // Negative control: with the test-only switch that turns the
    // quarantine off, freed ranges go to other phases' code and the map's
    // first name for them wins: samples jump back to old phases.
    let control = [("TOYVM_NO_QUARANTINE", "1")];
    let Some(lines) = perf_leaves(
        "cache-perfmap-control",
        &common::pages(4),
        &["--perf"],
        false,
        &control,
    ) else {
        return;
    };
    let (found, _) = rounds(phases_in(&lines));
    assert!(
        found > ROUNDS,
        "the control shows no stale name ({found} rounds)"
    );
}

/// `--jit-elf`: each batch's code runs from a new file, dead code is
/// unmapped, and perf names samples from the files it saw mapped: by time,
/// with no perf map, no jitdump and no `perf inject`. The run must reuse
/// addresses for other phases' code (or the check proves nothing).
#[test]
fn code_files_name_each_sample_by_time() {
    // Eight pages: each batch's file takes a page of headers, so four
    // (half of it pinned trampolines) hold one phase at a time and most
    // compiles find no room; eight evict and reuse addresses all the time.
    let Some(lines) = perf_leaves(
        "cache-jit-elf",
        &common::pages(8),
        &["--jit-elf"],
        false,
        &[],
    ) else {
        return;
    };
    check("--jit-elf", phases_in(&lines));
    // `PID TIME: IP SYMBOL+OFFSET`: the phases each code page was named for.
    let mut pages: std::collections::HashMap<u64, std::collections::BTreeSet<usize>> =
        std::collections::HashMap::new();
    for line in lines.iter().filter(|l| l.contains("toy:")) {
        let mut fields = line.split_whitespace().skip(2);
        let (Some(ip), Some(sym)) = (fields.next(), fields.next()) else {
            continue;
        };
        if let (Ok(ip), Some(phase)) = (u64::from_str_radix(ip, 16), phase_of(sym)) {
            pages.entry(ip / 4096).or_default().insert(phase);
        }
    }
    let reused = pages.values().filter(|p| p.len() > 1).count();
    assert!(
        reused > 0,
        "no code page ran two phases' code: the run reused no address"
    );
}

#[test]
fn vmprof_names_each_sample_by_time() {
    let dir = std::env::temp_dir().join(format!("toyvm-cache-vmprof-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let prof = dir.join("phases.prof");
    let mut args = the_run(&[
        "--vmprof",
        prof.to_str().unwrap(),
        "--vmprof-interval-us",
        "200",
    ]);
    args.insert(0, String::new());
    let args: Vec<&str> = args[1..].iter().map(String::as_str).collect();
    let run = common::toyvm(&args);
    assert_eq!(run.status, Some(0), "{}", run.stderr);
    let profile = perfsupport::vmprof::read_profile(Path::new(&prof)).expect("the profile");
    let _ = std::fs::remove_dir_all(&dir);
    let phases = (profile.samples.iter())
        .filter_map(|s| s.stack.last())
        .filter_map(|&id| profile.name(id))
        .filter_map(phase_of)
        .collect();
    check("vmprof", phases);
}
