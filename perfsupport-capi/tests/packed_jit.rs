//! examples/c-minijit/packed.c: four functions placed back to back, as
//! most JITs place them, registered one per call (callee first, or caller
//! first with `--down`) or in one batch, all with frame-pointer unwind
//! info. Under real `perf record --call-graph dwarf` + `perf inject --jit`
//! every sample has its whole stack, named: perfsupport writes the regions
//! without room header-only and perf unwinds them by frame pointers. With
//! perfsupport 0.1 the `--down` order gave no full stack at all (each
//! region's injected mapping covered its neighbours: `[unknown]` frames).
//! Under gdb, with `PERFSUPPORT_OUTPUT_GDB`, the backtrace names every
//! packed function, and a retired one is gone from the debugger.
//!
//! packed.c emits x86-64 code only, and perf and gdb cannot look into
//! emulated code: elsewhere (aarch64 under qemu) the example must say so
//! and exit 2.

mod support;

use support::{packed, scratch};
#[cfg(target_arch = "x86_64")]
use {
    std::collections::BTreeMap,
    std::path::Path,
    std::process::Command,
    support::{missing, perf, record_dwarf_and_inject, run_ok},
};

/// The call chain each packed function must have, innermost first.
#[cfg(target_arch = "x86_64")]
const CHAINS: [&[&str]; 4] = [
    &[
        "packed::leaf",
        "packed::inner",
        "packed::middle",
        "packed::outer",
        "run_jit",
    ],
    &[
        "packed::inner",
        "packed::middle",
        "packed::outer",
        "run_jit",
    ],
    &["packed::middle", "packed::outer", "run_jit"],
    &["packed::outer", "run_jit"],
];

/// The JIT samples of `perf script` (stacks through `run_jit`), each as
/// its frames from the innermost down to `run_jit`.
#[cfg(target_arch = "x86_64")]
fn jit_stacks(dir: &Path, data: &str) -> Vec<Vec<String>> {
    let output = run_ok(perf(dir).args(["script", "-F", "ip,sym", "-i", data]));
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    text.split("\n\n")
        .filter_map(|sample| {
            let frames: Vec<String> = (sample.lines())
                .filter_map(|line| line.trim().split_once(' ').map(|(_, sym)| sym.to_string()))
                .collect();
            let jit = frames
                .iter()
                .position(|f| f.starts_with("packed::") || f == "[unknown]")?;
            // perf may add " (inlined)" to the host function's name.
            let host = frames.iter().position(|f| f.starts_with("run_jit"))?;
            if host < jit {
                return None;
            }
            let mut stack = frames[jit..=host].to_vec();
            stack[host - jit] = "run_jit".to_string();
            Some(stack)
        })
        .collect()
}

#[test]
#[cfg(target_arch = "x86_64")]
fn packed_functions_get_full_named_stacks_under_dwarf_unwinding() {
    if missing("perf", &["--version"]) {
        return;
    }
    let dir = scratch("packed-perf");
    let Some(jit) = packed(dir.path()) else {
        return;
    };
    let modes: [(&str, &[&str], &str); 3] = [
        ("callee first", &[], "header_only=0 rewritten=1"),
        ("caller first", &["--down"], "header_only=1 rewritten=0"),
        ("one batch", &["--batch"], "header_only=3 rewritten=0"),
    ];
    for (mode, flags, fallbacks) in modes {
        let d = dir.path().join(mode.replace(' ', "-"));
        std::fs::create_dir_all(&d).unwrap();
        let mut args = vec!["--jitdump-dir", ".", "--rounds", "3000"];
        args.extend(flags);
        let record = record_dwarf_and_inject(&d, &jit, &args);
        let stdout = String::from_utf8_lossy(&record.stdout);
        assert!(
            stdout.contains(fallbacks),
            "{mode}: no '{fallbacks}' in:\n{stdout}"
        );
        let stacks = jit_stacks(&d, "perf.jit.data");
        let mut exact: BTreeMap<&str, usize> = BTreeMap::new();
        let mut wrong = Vec::new();
        for stack in &stacks {
            match CHAINS.iter().find(|chain| chain.iter().eq(stack.iter())) {
                Some(chain) => *exact.entry(chain[0]).or_default() += 1,
                None => wrong.push(stack.join(" <- ")),
            }
        }
        let summary = format!(
            "{mode}: {exact:?}, {} other stacks:\n{}",
            wrong.len(),
            wrong.join("\n")
        );
        assert!(stacks.len() >= 50, "{mode}: too few JIT samples: {summary}");
        assert_eq!(
            exact.len(),
            4,
            "{mode}: a function has no full stack: {summary}"
        );
        // A sample on a prologue's first instruction, before rbp is set,
        // skips one caller under the frame-pointer fallback.
        assert!(
            wrong.len() * 20 <= stacks.len(),
            "{mode}: over 5% wrong stacks: {summary}"
        );
        assert!(
            !wrong.iter().any(|w| w.contains("[unknown]")),
            "{mode}: {summary}"
        );
    }
}

/// gdb's answers for a run of `packed` stopped at `host_probe` twice: in
/// the packed leaf, then in its replacement after the leaf was retired.
#[cfg(target_arch = "x86_64")]
fn under_gdb(jit: &Path, dir: &Path, flags: &[&str]) -> String {
    let run = format!(
        "run --rounds 1 --replace --jitdump-dir . {}",
        flags.join(" ")
    );
    let output = run_ok(
        Command::new("gdb")
            .current_dir(dir)
            .args(["-nx", "-q", "-batch"])
            .args([
                "-ex",
                "set debuginfod enabled off",
                "-ex",
                "break host_probe",
            ])
            .args([
                "-ex",
                &run,
                "-ex",
                "bt",
                "-ex",
                "frame 1",
                "-ex",
                "set $old = $pc",
            ])
            .args(["-ex", "info symbol $old", "-ex", "continue", "-ex", "bt"])
            .args(["-ex", "info symbol $old"])
            .arg(jit),
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
#[cfg(target_arch = "x86_64")]
fn gdb_names_packed_functions_and_forgets_retired_ones() {
    if missing("gdb", &["--version"]) {
        return;
    }
    let dir = scratch("packed-gdb");
    let Some(jit) = packed(dir.path()) else {
        return;
    };
    let seen = under_gdb(&jit, dir.path(), &["--gdb"]);
    // The first stop: every packed frame named, with its line.
    let frames: Vec<&str> = (seen.lines())
        .filter(|l| l.starts_with('#'))
        .filter_map(|l| l.split(" in ").nth(1))
        .filter_map(|l| l.split(' ').next())
        .collect();
    let first = [
        "packed::leaf",
        "packed::inner",
        "packed::middle",
        "packed::outer",
        "run_jit",
    ];
    assert!(
        frames.windows(5).any(|w| w == first),
        "no named packed stack in:\n{seen}"
    );
    assert!(seen.contains("packed::leaf () at packed.mj:3"), "{seen}");
    assert!(seen.contains("packed::leaf + 13 in section"), "{seen}");
    // After the leaf was retired: its address names nothing, the new leaf
    // is in the backtrace.
    assert!(
        seen.contains("No symbol matches $old."),
        "retired leaf still known:\n{seen}"
    );
    assert!(
        frames.windows(2).any(|w| w == ["packed::leaf2", "run_jit"]),
        "no packed::leaf2 frame in:\n{seen}"
    );
    // Without the GDB output gdb has no name for them.
    let blind = under_gdb(&jit, dir.path(), &[]);
    assert!(blind.contains("host_probe"), "{blind}");
    assert!(
        !blind.contains("packed::"),
        "named without the GDB JIT interface:\n{blind}"
    );
}

/// Off x86-64 the example builds, and says why it does not run.
#[test]
#[cfg(not(target_arch = "x86_64"))]
fn packed_says_it_emits_x86_64_only() {
    let dir = scratch("packed-elsewhere");
    let Some(jit) = packed(dir.path()) else {
        return;
    };
    let output = support::program(&jit)
        .current_dir(dir.path())
        .output()
        .expect("run packed");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.starts_with("packed: this example emits x86-64 code only ("),
        "{stderr}"
    );
    assert!(output.stdout.is_empty());
}
