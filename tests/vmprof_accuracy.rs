//! Sample counts are proportional to CPU time: `tests/vmprof/accuracy.toy`
//! spends 70% of its time under `seventy` and 30% under `thirty`, and the
//! profile must say so within 2 points, in each tier.

mod common;

use std::path::PathBuf;

use common::toyvm;
use perfsupport::vmprof::read_profile;

/// Most points the measured share may be off.
const TOLERANCE: f64 = 2.0;

/// Rounds of accuracy.toy: about 6 s of CPU in either tier. Each thread's
/// own CPU clock signals it every millisecond (`perfsupport::vmprof::clock`),
/// so that is ~6,000 independent observations: a standard error of
/// sqrt(0.7 * 0.3 / 6000) = 0.59 points for a 70% share, which makes the
/// 2-point bound a 3.4-sigma one (a chance failure about once in 1,500
/// runs per tier). Under the process timer (its 250 Hz tick, each signal
/// weighted ~4 samples) the same run had ~1,500 observations, 1.2 points,
/// and needed a 5-point bound.
const ROUNDS: &str = "120";

/// Profiles accuracy.toy with `tier_flags` and returns the share of
/// samples under `seventy` among those under `seventy` or `thirty`.
fn seventy_share(name: &str, tier_flags: &[&str], rounds: &str) -> f64 {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("vmprof_accuracy");
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join(format!("{name}.prof"));
    let _ = std::fs::remove_file(&path);
    let mut argv = vec!["run", "--vmprof", path.to_str().expect("utf-8")];
    argv.extend_from_slice(tier_flags);
    argv.extend_from_slice(&["tests/vmprof/accuracy.toy", rounds]);
    let run = toyvm(&argv);
    assert_eq!(run.status, Some(0), "stderr: {}", run.stderr);
    let profile = read_profile(&path).expect("a readable profile");
    let id_of = |func: &str| {
        profile
            .names
            .iter()
            .find(|(_, name)| name.split(':').nth(1) == Some(func))
            .map(|(&id, _)| id)
            .unwrap_or_else(|| panic!("{func} is registered"))
    };
    let (seventy, thirty) = (id_of("seventy"), id_of("thirty"));
    let count = |id: u64| {
        profile
            .samples
            .iter()
            .filter(|s| s.stack.get(1) == Some(&id))
            .count()
    };
    let (a, b) = (count(seventy), count(thirty));
    assert!(a + b >= 200, "{name}: too few samples ({a} + {b}) to judge");
    let share = 100.0 * a as f64 / (a + b) as f64;
    eprintln!("{name}: seventy {a}, thirty {b}: {share:.1}%");
    share
}

#[test]
fn interpreter_tier_reports_seventy_thirty() {
    let share = seventy_share("interp", &["--no-jit"], ROUNDS);
    assert!(
        (share - 70.0).abs() <= TOLERANCE,
        "interpreter: {share:.1}% for 70%"
    );
}

#[test]
fn jit_tier_reports_seventy_thirty() {
    let share = seventy_share("jit", &["--jit-threshold", "0"], ROUNDS);
    assert!(
        (share - 70.0).abs() <= TOLERANCE,
        "JIT: {share:.1}% for 70%"
    );
}
