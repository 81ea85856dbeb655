//! Deep stacks are profiled right (issue 11, item 7): a sample holds at
//! most 1,024 frames, and a deeper stack keeps its innermost ones, where
//! the time goes, under one `[outer frames cut]` frame, in every tier, as
//! the file reader and `toyvm report` show; the file says how many frames
//! were cut (META `cut_samples` and `cut_frames_max`), and so does the
//! report.

mod common;

use std::path::PathBuf;

use perfsupport::vmprof::{
    CUT_FRAMES_NAME, META_CUT_FRAMES_MAX, META_CUT_SAMPLES, SHADOW_STACK_CAPACITY, read_profile,
};

const TIERS: [&[&str]; 3] = [
    &["--no-jit"],
    &["--jit-threshold", "50"],
    &["--jit-threshold", "0"],
];

fn temp_path(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("deep_stack_profile");
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join(name);
    let _ = std::fs::remove_file(&path);
    path
}

#[test]
fn a_1030_deep_recursion_shows_its_leaf_under_a_cut_marker() {
    for tier in TIERS {
        let path = temp_path("deep.prof");
        let profile_arg = path.to_str().expect("utf-8 path");
        let mut args = vec!["run", "--vmprof", profile_arg];
        args.extend_from_slice(tier);
        // ~0.3-0.4 s in the leaf (measured on a quiet machine), 1,030
        // calls of `down` deep (1,033 frames): a few hundred samples.
        let n = if tier == ["--no-jit"] {
            "60000000"
        } else {
            "100000000"
        };
        args.extend_from_slice(&["tests/vmprof/deep.toy", "1030", n]);
        let run = common::toyvm(&args);
        assert_eq!(run.status, Some(0), "{tier:?}: {}", run.stderr);

        let profile = read_profile(&path).expect("a readable profile");
        let names = |stack: &[u64]| -> Vec<String> {
            stack
                .iter()
                .map(|&id| {
                    let name = profile.name(id).expect("every id is named");
                    name.split(':')
                        .nth(1)
                        .expect("class:fn:line:file")
                        .to_string()
                })
                .collect()
        };
        let samples = &profile.samples;
        assert!(samples.len() >= 20, "{tier:?}: {} samples", samples.len());
        let in_leaf = samples
            .iter()
            .filter(|s| names(&s.stack).last().map(String::as_str) == Some("leaf"))
            .count();
        assert!(
            in_leaf * 10 >= samples.len() * 8,
            "{tier:?}: only {in_leaf} of {} samples end in the leaf",
            samples.len()
        );
        for sample in samples {
            let stack = names(&sample.stack);
            assert!(stack.len() <= SHADOW_STACK_CAPACITY, "{tier:?}");
            if stack.last().map(String::as_str) == Some("leaf") {
                // 1,033 frames (<main>, `down` for d = 1030 ..= 0, the
                // leaf): the 10 outermost (<main> and 9 `down`) are one
                // marker frame, then 1,022 `down` and the leaf.
                assert_eq!(stack.len(), SHADOW_STACK_CAPACITY, "{tier:?}");
                assert_eq!(stack[0], CUT_FRAMES_NAME, "{tier:?}");
                assert!(stack[1..stack.len() - 1].iter().all(|n| n == "down"));
            }
        }

        // How many were cut: every sample at the leaf lost 10 frames; a
        // sample on the way down or up may have lost fewer.
        let cut = (samples.iter())
            .filter(|s| names(&s.stack).first().map(String::as_str) == Some(CUT_FRAMES_NAME))
            .count();
        assert!(cut > 0, "{tier:?}");
        assert_eq!(
            profile.meta_value(META_CUT_SAMPLES),
            Some(cut.to_string().as_str()),
            "{tier:?}"
        );
        assert_eq!(
            profile.meta_value(META_CUT_FRAMES_MAX),
            Some("10"),
            "{tier:?}"
        );

        // `toyvm report` names the marker and the leaf's self time, and
        // says how many frames were cut.
        let report = common::toyvm(&["report", profile_arg]);
        assert_eq!(report.status, Some(0), "{}", report.stderr);
        assert!(report.stdout.contains(CUT_FRAMES_NAME), "{}", report.stdout);
        let said = format!("{cut} samples had their outermost frames cut (at most 10 frames each)");
        assert!(report.stdout.contains(&said), "{}", report.stdout);
        let folded = common::toyvm(&["report", "--folded", profile_arg]);
        assert_eq!(folded.status, Some(0), "{}", folded.stderr);
        let leaf_samples: u64 = folded
            .stdout
            .lines()
            .filter(|l| {
                l.starts_with("[outer_frames_cut];") // `_`: folded form
                    && l.rsplit_once(' ').is_some_and(|(s, _)| s.ends_with(";leaf"))
            })
            .filter_map(|l| l.rsplit_once(' ')?.1.parse::<u64>().ok())
            .sum();
        assert!(
            leaf_samples > 0,
            "{tier:?}: no cut stack ends in leaf:\n{}",
            folded.stdout
        );
    }
}
