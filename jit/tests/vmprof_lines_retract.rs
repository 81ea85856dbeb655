//! With `--vmprof-lines` the JIT publishes a line table for each compiled
//! body, which the sampler's signal handler searches by program counter.
//! A dropped JIT frees its code memory, so it must retract those tables
//! first: otherwise the next code mapped at those addresses (another JIT's,
//! in a process that runs many VMs in turn) would be given the old lines.
//! Retracted tables are freed, so the tables held come back to where they
//! were after every run.
//!
//! Its own test binary: the counts are process-wide, and no other test may
//! publish tables meanwhile.

use std::sync::Arc;

use perfsupport::vmprof::code_lines::table_counts;
use vm::driver::{Options, TierUpFactory, load, run_with};
use vm::vmprof::VmprofOptions;

/// A native function (called), an OSR variant (a hot loop in `<main>`)
/// and an inlined leaf.
const PROGRAM: &str = "fn sq(x: int) -> int { return x * x; }\n\
    fn sum(n: int) -> int { let s = 0; for i in 0..n { s = s + sq(i) % 7; } return s; }\n\
    let t = 0;\nfor i in 0..3000 { t = t + sum(50); }\nprint(t);\n";

#[test]
fn a_dropped_jit_retracts_every_line_table_it_published() {
    let module = load("lines.toy", PROGRAM.as_bytes()).expect("compiles");
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("vmprof_lines_retract");
    std::fs::create_dir_all(&dir).expect("temp dir");
    let (published_before, live_before) = table_counts();
    for round in 0..3 {
        let make = || {
            jit::tier_up(jit::JitOptions {
                threshold: Some(5),
                ..jit::JitOptions::default()
            })
        };
        let mut vmprof = VmprofOptions::new(dir.join(format!("run{round}.prof")));
        vmprof.lines = true;
        let options = Options {
            tier_up: Some(Arc::new(make) as TierUpFactory),
            vmprof: Some(vmprof),
            ..Options::default()
        };
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let status = run_with(&module, Vec::new(), &options, &mut out, &mut err);
        assert_eq!(status, 0, "{}", String::from_utf8_lossy(&err));
        assert_eq!(String::from_utf8_lossy(&out), "294000\n");
        let (published, live) = table_counts();
        assert!(
            published >= published_before + 2 * (round + 1),
            "round {round}: the JIT published {} tables in all",
            published - published_before
        );
        assert_eq!(
            live, live_before,
            "round {round}: tables still in use after the JIT was dropped"
        );
    }
}
