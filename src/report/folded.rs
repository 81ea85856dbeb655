//! Collapsed stacks (`<main>;outer;inner 123`), the input format of every
//! flame-graph tool, and SVG flame graphs drawn from them with `inferno`.

use std::collections::BTreeMap;
use std::io::Write;

use super::load::VmProfile;

/// One line per distinct stack, root first, frames joined by `;`, then a
/// space and the number of samples; sorted by stack.
pub fn folded_lines(profile: &VmProfile) -> Vec<String> {
    folded_stacks(profile, false)
}

/// [`folded_lines`], and `with_lines` names each frame `name:LINE`, the
/// line it was executing (`name:?` where unknown): `report --folded
/// --lines`, the input of a line-level flame graph, for a profile recorded
/// in lines mode.
pub fn folded_stacks(profile: &VmProfile, with_lines: bool) -> Vec<String> {
    let names: Vec<String> = profile
        .frames
        .iter()
        .map(|f| folded_name(&f.name))
        .collect();
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    for stack in profile.stacks.iter().filter(|s| !s.frames.is_empty()) {
        let frame = |(depth, &f): (usize, &usize)| match stack.lines.get(depth) {
            Some(&line) if with_lines && line > 0 => format!("{}:{line}", names[f]),
            _ if with_lines => format!("{}:?", names[f]),
            _ => names[f].clone(),
        };
        let key = (stack.frames.iter().enumerate())
            .map(frame)
            .collect::<Vec<_>>()
            .join(";");
        *counts.entry(key).or_default() += stack.count;
    }
    counts
        .into_iter()
        .map(|(stack, n)| format!("{stack} {n}"))
        .collect()
}

/// Writes [`folded_stacks`] to `out`, one per line.
pub fn write_folded(profile: &VmProfile, lines: bool, out: &mut dyn Write) -> std::io::Result<()> {
    for line in folded_stacks(profile, lines) {
        out.write_all(line.as_bytes())?;
        out.write_all(b"\n")?;
    }
    Ok(())
}

/// A frame name that cannot break the format (`;` separates frames, the
/// last space separates the count).
fn folded_name(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c == ';' || c.is_whitespace() {
                '_'
            } else {
                c
            }
        })
        .collect()
}

/// Draws the flame graph of `lines` (collapsed stacks) as SVG into `out`.
pub fn write_flamegraph(lines: &[String], title: &str, out: impl Write) -> Result<(), String> {
    if lines.is_empty() {
        return Err("the profile has no samples: there is nothing to draw".into());
    }
    let mut options = inferno::flamegraph::Options::default();
    options.title = title.to_owned();
    options.count_name = "samples".to_owned();
    inferno::flamegraph::from_lines(&mut options, lines.iter().map(String::as_str), out)
        .map_err(|e| format!("cannot draw the flame graph: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::load::Frame;

    #[test]
    fn stacks_are_counted_joined_and_sorted() {
        let frame = |name: &str| Frame {
            name: name.into(),
            file: "a.toy".into(),
            line: 1,
            file_cut: false,
        };
        let profile = VmProfile::of_samples(
            vec![frame("<main>"), frame("f"), frame("odd name;x")],
            vec![vec![0, 1], vec![0, 2], vec![0, 1], vec![0]],
            Vec::new(),
        );
        assert_eq!(
            folded_lines(&profile),
            vec!["<main> 1", "<main>;f 2", "<main>;odd_name_x 1"]
        );
    }

    #[test]
    fn an_empty_profile_draws_nothing() {
        assert!(write_flamegraph(&[], "t", Vec::new()).is_err());
    }
}
