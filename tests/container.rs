//! Profiling toyvm inside a pid namespace, as in a container, with `perf`
//! running in the same namespace (`unshare --pid --fork --mount-proc`):
//!
//! * `--perf`: perf report names compiled Toy code from
//!   `/tmp/perf-<namespace pid>.map`, in the namespace's own `/tmp`;
//! * `--perf-jitdump`: `perf inject --jit` matches `jit-<namespace pid>.dump`
//!   and its objects name the same code;
//! * `toyvm profile` works there (it runs perf itself).
//!
//! perf outside the namespace cannot match those files to the host pid
//! (perf 6.1; see the troubleshooting chapter), so that case is not tested.
//! Skipped loudly without `unshare` rights or `perf`, except under
//! `CI=true`.

mod common;

const SCRIPT: &str = "tests/perf/nested.toy";

use common::PerfWork as Work;

fn tools_present(test: &str) -> bool {
    common::tool_or_skip(test, "perf", &["--version"])
        && common::tool_or_skip(
            test,
            "unshare",
            &["--pid", "--fork", "--mount-proc", "true"],
        )
}

/// Runs `script` with `sh -c` in a new pid namespace (own /proc), in the
/// work directory, with toyvm as `$TOYVM`; returns (stdout, stderr).
fn in_namespace(work: &Work, script: &str) -> (String, String) {
    let out = work
        .command("unshare")
        .args(["--pid", "--fork", "--mount-proc", "sh", "-euc", script])
        .env("TOYVM", env!("CARGO_BIN_EXE_toyvm"))
        .env("SCRIPT", common::repo_root().join(SCRIPT))
        .output()
        .expect("run unshare");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{script}\n{stdout}\n{stderr}");
    (stdout, stderr)
}

#[test]
fn perf_in_the_namespace_reads_the_perf_map() {
    if !tools_present("container") {
        return;
    }
    let work = Work::new("container-map");
    let (report, stderr) = in_namespace(
        &work,
        r#"# A container's own /tmp, as most have: the map of this namespace's
           # small pid neither lands in the host's /tmp nor meets another's.
           # The work directory (under the host's /tmp, still the current
           # directory) is bound back at its path: PERF_CONFIG names it.
           work=$PWD
           mount -t tmpfs -o mode=1777 toyvm-container-tmp /tmp
           mkdir -p "$work" && mount --bind . "$work"
           perf record -q -e cpu-clock -o perf.data -- "$TOYVM" run --jit-threshold 0 --perf "$SCRIPT" 20 4000000 > /dev/null
           # The pids perf saw are the namespace's: the map is perf-<small pid>.map.
           ls /tmp/perf-*.map > /dev/null
           perf report -i perf.data --stdio --sort sym 2>/dev/null"#,
    );
    assert!(
        report.contains("toy:jit:inner_hot:"),
        "no Toy symbol from the perf map:\n{report}\n{stderr}"
    );
}

#[test]
fn perf_in_the_namespace_injects_the_jitdump() {
    if !tools_present("container") {
        return;
    }
    let work = Work::new("container-jitdump");
    let (report, stderr) = in_namespace(
        &work,
        r#"perf record -q -k 1 -e cpu-clock -o perf.data -- "$TOYVM" run --jit-threshold 0 --perf-jitdump --perf-dir "$PWD" "$SCRIPT" 20 4000000 > /dev/null
           ls jit-*.dump > /dev/null
           perf inject --jit -i perf.data -o perf.jit.data
           perf report -i perf.jit.data --stdio --sort dso,sym 2>/dev/null"#,
    );
    assert!(
        report
            .lines()
            .any(|l| l.contains("jitted-") && l.contains("toy:jit:inner_hot:")),
        "no Toy symbol from the injected jitdump:\n{report}\n{stderr}"
    );
}

#[test]
fn toyvm_profile_works_in_the_namespace() {
    if !tools_present("container") {
        return;
    }
    let work = Work::new("container-profile");
    let (_, stderr) = in_namespace(
        &work,
        r#""$TOYVM" profile --out prof "$SCRIPT" 20 4000000 > /dev/null"#,
    );
    let report = std::fs::read_to_string(work.dir.join("prof/report.txt")).expect("report.txt");
    // Default tiering: `inner_hot`'s 20 calls each run a long loop, so it
    // runs its OSR variant and is not compiled whole too (the cost model).
    let compiled =
        |text: &str| text.contains("toy:jit:inner_hot:") || text.contains("toy:jit-osr:inner_hot:");
    assert!(
        compiled(&report),
        "toyvm profile in a namespace:\n{report}\n{stderr}"
    );
    // The file it writes for the Firefox Profiler names the same code.
    let script =
        std::fs::read_to_string(work.dir.join("prof/perf-script.txt")).expect("perf-script.txt");
    assert!(compiled(&script), "{stderr}");
}
