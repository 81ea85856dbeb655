//! The control-flow graph of a bytecode function: block leaders and the
//! number of edges into each (so blocks can be sealed as early as possible).

use std::collections::HashMap;

use vm::bytecode::{Flags, Op};

/// Per leader instruction, the number of control-flow edges into its block
/// that translating `code` can emit: one per jump naming it, one for falling
/// through from the instruction before it (which also ends a block when it
/// is a conditional jump), and one from the entry for each of `starts`.
/// Edges from unreachable instructions are counted too, so counts never
/// fall short.
pub fn incoming_edges(code: &[Op], starts: &[usize]) -> HashMap<usize, u32> {
    let leaders = leaders(code);
    let mut incoming: HashMap<usize, u32> = leaders.iter().map(|&pc| (pc, 0)).collect();
    for &start in starts {
        *incoming.entry(start).or_default() += 1;
    }
    for (pc, op) in code.iter().enumerate() {
        for t in op.targets() {
            *incoming.entry(t as usize).or_default() += 1;
        }
        if op.falls_through()
            && let Some(n) = incoming.get_mut(&(pc + 1))
        {
            *n += 1;
        }
    }
    incoming
}

/// The loop headers of `code`: the targets of its back-edges (jumps to an
/// instruction at or before their own), where the interpreter asks about
/// OSR; sorted, each once.
pub fn loop_headers(code: &[Op]) -> Vec<usize> {
    let mut headers: Vec<usize> = vm::bytecode::back_edges(code)
        .map(|(_, target)| target)
        .collect();
    headers.sort_unstable();
    headers.dedup();
    headers
}

/// The instructions that start a basic block: the first, every jump target,
/// and every instruction after a jump or return.
pub fn leaders(code: &[Op]) -> Vec<usize> {
    let mut leader = vec![false; code.len()];
    if let Some(first) = leader.first_mut() {
        *first = true;
    }
    for (pc, op) in code.iter().enumerate() {
        for t in op.targets() {
            leader[t as usize] = true;
        }
        if op.flags().contains(Flags::ENDS_BLOCK) && pc + 1 < code.len() {
            leader[pc + 1] = true;
        }
    }
    (0..code.len()).filter(|&pc| leader[pc]).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `r0 = 0; loop: r0 += 1 (for r0 < r1); if !r2 goto end; r0 = 5; end: return`
    fn code() -> Vec<Op> {
        vec![
            Op::LoadInt { dst: 0, imm: 0 },
            Op::ForLoop {
                counter: 0,
                end: 1,
                target: 1,
            },
            Op::JmpIfNot { a: 2, target: 5 },
            Op::LoadInt { dst: 0, imm: 5 },
            Op::Jmp { target: 5 },
            Op::ReturnVoid,
            Op::ReturnVoid,
        ]
    }

    #[test]
    fn leaders_are_the_entry_jump_targets_and_what_follows_a_block_end() {
        // 1: target and after nothing (ForLoop's own target); 2: after the
        // ForLoop; 3: after JmpIfNot; 5: target, after Jmp; 6: after return.
        assert_eq!(leaders(&code()), [0, 1, 2, 3, 5, 6]);
    }

    #[test]
    fn edges_count_jumps_fall_throughs_and_the_entry() {
        let edges = incoming_edges(&code(), &[0]);
        let count = |pc: usize| edges.get(&pc).copied();
        assert_eq!(count(0), Some(1), "the entry");
        assert_eq!(count(1), Some(2), "fall-through from 0 and the back-edge");
        assert_eq!(count(2), Some(1), "the loop's exit");
        assert_eq!(count(3), Some(1), "JmpIfNot falls through");
        assert_eq!(
            count(5),
            Some(2),
            "JmpIfNot and Jmp; Jmp does not fall through"
        );
        assert_eq!(count(6), Some(0), "nothing reaches the trailing return");
        // An OSR entry at the loop header adds one edge there.
        assert_eq!(incoming_edges(&code(), &[1]).get(&1).copied(), Some(3));
    }

    #[test]
    fn loop_headers_are_back_edge_targets() {
        // `ForLoop` at 1 jumps back to itself; the jumps to 5 go forward.
        assert_eq!(loop_headers(&code()), [1]);
        let two_loops = vec![
            Op::Jmp { target: 0 },
            Op::JmpIf { a: 0, target: 1 },
            Op::JmpIf { a: 0, target: 0 },
            Op::ReturnVoid,
        ];
        assert_eq!(loop_headers(&two_loops), [0, 1]);
    }
}
