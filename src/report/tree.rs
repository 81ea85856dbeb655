//! The call tree and the flat profile, computed from the distinct stacks
//! and their sample counts.
//!
//! Both take time linear in the number of frames in all samples: the tree
//! finds a node's child for a frame in a hash map keyed by (parent, frame),
//! so a node with a hundred thousand children (as many distinct leaves
//! under `<main>`) costs no more per sample than one with two.

use std::collections::HashMap;

use super::load::VmProfile;

/// One node of the call tree: a frame reached by one call path.
#[derive(Debug)]
pub struct Node {
    /// Index into [`VmProfile::frames`].
    pub frame: usize,
    /// Samples in this function or anything it called on this path.
    pub total: u64,
    /// Samples in this function's own code on this path.
    pub self_samples: u64,
    /// Child nodes, sorted by `total`, largest first (after [`CallTree::build`]).
    pub children: Vec<usize>,
}

/// All call paths of a profile, merged. Direct recursion (`f` calling `f`)
/// is folded into one node, as vmprof's own tree does, so a deep recursion
/// stays one line.
#[derive(Debug)]
pub struct CallTree {
    /// `nodes[0]` is a virtual root above the outermost frames.
    pub nodes: Vec<Node>,
}

impl CallTree {
    /// Builds the tree of `profile`'s samples.
    pub fn build(profile: &VmProfile) -> CallTree {
        let mut tree = CallTree {
            nodes: vec![Node {
                frame: usize::MAX,
                total: 0,
                self_samples: 0,
                children: Vec::new(),
            }],
        };
        let mut child_of: HashMap<(usize, usize), usize> = HashMap::new();
        for stack in &profile.stacks {
            let mut at = 0;
            tree.nodes[0].total += stack.count;
            let mut previous = None;
            for &frame in &stack.frames {
                if previous == Some(frame) {
                    continue;
                }
                previous = Some(frame);
                at = *child_of
                    .entry((at, frame))
                    .or_insert_with(|| tree.add_child(at, frame));
                tree.nodes[at].total += stack.count;
            }
            tree.nodes[at].self_samples += stack.count;
        }
        let totals: Vec<u64> = tree.nodes.iter().map(|n| n.total).collect();
        for node in &mut tree.nodes {
            node.children
                .sort_by_key(|&c| (std::cmp::Reverse(totals[c]), c));
        }
        tree
    }

    /// Creates a child of `parent` for `frame`; returns its index.
    fn add_child(&mut self, parent: usize, frame: usize) -> usize {
        self.nodes.push(Node {
            frame,
            total: 0,
            self_samples: 0,
            children: Vec::new(),
        });
        let index = self.nodes.len() - 1;
        self.nodes[parent].children.push(index);
        index
    }
}

/// One line of the flat profile.
#[derive(Debug, PartialEq, Eq)]
pub struct FlatEntry {
    /// Index into [`VmProfile::frames`].
    pub frame: usize,
    /// Samples with this function anywhere on the stack (counted once per
    /// sample, however deep the recursion).
    pub total: u64,
    /// Samples with this function innermost.
    pub self_samples: u64,
}

/// Every frame's total and self samples, sorted by total, largest first;
/// among equal totals callers (frames seen nearer the root) come first.
pub fn flat_profile(profile: &VmProfile) -> Vec<FlatEntry> {
    let mut entries: Vec<FlatEntry> = (0..profile.frames.len())
        .map(|frame| FlatEntry {
            frame,
            total: 0,
            self_samples: 0,
        })
        .collect();
    let mut last_seen = vec![usize::MAX; profile.frames.len()];
    let mut min_depth = vec![usize::MAX; profile.frames.len()];
    for (index, stack) in profile.stacks.iter().enumerate() {
        for (depth, &frame) in stack.frames.iter().enumerate() {
            min_depth[frame] = min_depth[frame].min(depth);
            if last_seen[frame] != index {
                last_seen[frame] = index;
                entries[frame].total += stack.count;
            }
        }
        if let Some(&leaf) = stack.frames.last() {
            entries[leaf].self_samples += stack.count;
        }
    }
    entries.sort_by_key(|e| {
        (
            std::cmp::Reverse(e.total),
            min_depth[e.frame],
            std::cmp::Reverse(e.self_samples),
            e.frame,
        )
    });
    entries
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::load::Frame;

    fn profile(stacks: Vec<Vec<usize>>) -> VmProfile {
        let frame = |name: &str| Frame {
            name: name.into(),
            file: "a.toy".into(),
            line: 1,
            file_cut: false,
        };
        VmProfile::of_samples(
            vec![frame("<main>"), frame("f"), frame("g")],
            stacks,
            Vec::new(),
        )
    }

    #[test]
    fn tree_counts_total_and_self_and_folds_direct_recursion() {
        let p = profile(vec![
            vec![0, 1, 1, 1],
            vec![0, 1, 2],
            vec![0, 1, 2],
            vec![0],
        ]);
        let tree = CallTree::build(&p);
        let main = tree.nodes[0].children[0];
        assert_eq!(
            (tree.nodes[main].total, tree.nodes[main].self_samples),
            (4, 1)
        );
        let f = tree.nodes[main].children[0];
        assert_eq!((tree.nodes[f].total, tree.nodes[f].self_samples), (3, 1));
        let g = tree.nodes[f].children[0];
        assert_eq!((tree.nodes[g].total, tree.nodes[g].self_samples), (2, 2));
        assert!(tree.nodes[g].children.is_empty());
    }

    #[test]
    fn a_node_with_many_children_finds_each_child_again() {
        // 3 frames: <main> with children f and g, alternating, many times.
        let stacks = (0..1000).map(|i| vec![0, 1 + i % 2]).collect();
        let tree = CallTree::build(&profile(stacks));
        assert_eq!(tree.nodes.len(), 4, "root, <main>, f, g: no duplicates");
        let main = tree.nodes[0].children[0];
        let totals: Vec<u64> = tree.nodes[main]
            .children
            .iter()
            .map(|&c| tree.nodes[c].total)
            .collect();
        assert_eq!(totals, vec![500, 500]);
    }

    #[test]
    fn flat_profile_counts_recursion_once_and_sorts_by_total() {
        let p = profile(vec![vec![0, 2, 1, 1], vec![0, 1], vec![0, 2]]);
        let flat = flat_profile(&p);
        let rows: Vec<(usize, u64, u64)> = flat
            .iter()
            .map(|e| (e.frame, e.total, e.self_samples))
            .collect();
        assert_eq!(rows, vec![(0, 3, 0), (1, 2, 2), (2, 2, 1)]);
        // Equal totals: the caller first, even with less self time.
        let p = profile(vec![vec![0, 1, 2], vec![0, 1, 2], vec![0, 1]]);
        let rows: Vec<usize> = flat_profile(&p).iter().map(|e| e.frame).collect();
        assert_eq!(rows, vec![0, 1, 2]);
    }
}
