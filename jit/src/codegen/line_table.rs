//! Truthful line tables: from Cranelift's source locations to one
//! attribution for every byte of machine code.
//!
//! The translator gives every IR instruction the [`SourceLoc`] of the
//! bytecode instruction it comes from ([`site`], [`inlined_site`]), or
//! [`function_line`] for the prologue it writes itself. Cranelift keeps
//! those locations through lowering, but not everywhere:
//!
//! * the e-graph optimizer builds new pure instructions for its rewrites
//!   (the multiply-and-shift that replaces `% 1000003`, a re-materialized
//!   constant, a hoisted `i + 1`) and gives them no location;
//! * lowering splits critical edges into blocks of its own (register moves
//!   and a `jmp`, such as a loop's back-edge), which belong to no IR
//!   instruction;
//! * its own prologue has no location.
//!
//! Those come out as ranges with the default location. Giving them the
//! function's line (the old fallback, [`OLD_FALLBACK_ENV`]) put most of a
//! hot loop on the `fn` line. [`attribute`] instead gives a range without a
//! location the attribution of the nearest preceding located range in the
//! same machine block; at the start of a block, that of the first located
//! range after it in the block (the instructions the optimizer placed there
//! feed it); in a block with no location at all (a split edge, a shared
//! error block), that of the end of its only predecessor. Only what is
//! left (shims, an error block shared by several sites) gets the
//! function's line, and so does Cranelift's prologue, up to the last of
//! its unwind steps ([`Compiled::prologue_end`]): it would otherwise
//! inherit the first statement's line, since nothing located precedes it
//! in its block (the frame itself is entered by the caller, see
//! `crate::abi::frames`). Blocks come from Cranelift's
//! `machine_code_cfg_info` (see `make_isa`).

use cranelift_codegen::ir::SourceLoc;
use vm::bytecode::Module;

/// Test-only: `TOYVM_JIT_OLD_LINE_FALLBACK=1` restores the old fallback
/// (every range without a location on the `fn` line): the negative control
/// of `tests/line_tables_perf.rs`.
pub const OLD_FALLBACK_ENV: &str = "TOYVM_JIT_OLD_LINE_FALLBACK";

/// The source location of code that belongs to the function as a whole
/// (prologue, OSR entry): attributed to the `fn` line.
pub fn function_line() -> SourceLoc {
    SourceLoc::new(FUNCTION_LINE_BITS)
}

/// The bits of [`function_line`].
const FUNCTION_LINE_BITS: u32 = u32::MAX - 1;

/// Set in a location of inlined code: the rest is `(callee, pc, call_pc)`.
const INLINED: u32 = 1 << 31;
/// Bits of the call's bytecode index in an inlined location (the low
/// bits).
const INLINED_CALL_PC_BITS: u32 = 15;
/// Bits of the callee's bytecode index (an inlinable leaf has at most 24
/// instructions), above the call's.
const INLINED_PC_BITS: u32 = 5;
/// Where the callee's index starts.
const INLINED_FUNC_SHIFT: u32 = INLINED_CALL_PC_BITS + INLINED_PC_BITS;
/// Largest callee index an inlined location can hold (the marker
/// [`function_line`] stays out of reach).
const INLINED_MAX_FUNC: u32 = (1 << (31 - INLINED_FUNC_SHIFT)) - 2;

/// The source location of bytecode instruction `pc` of the function being
/// compiled.
pub fn site(pc: usize) -> SourceLoc {
    debug_assert!(pc < INLINED as usize);
    SourceLoc::new(pc as u32)
}

/// The source location of instruction `pc` of `callee`, inlined at the
/// caller's instruction `call_pc` (kept for vmprof lines mode: the
/// caller's line while it runs inlined code). A callee or index too large
/// to encode (a caller of more than 32,767 instructions) falls back to the
/// call site: still a true line, just the caller's.
pub fn inlined_site(callee: u32, pc: usize, call_pc: usize) -> SourceLoc {
    if callee <= INLINED_MAX_FUNC
        && pc < (1 << INLINED_PC_BITS)
        && call_pc < (1 << INLINED_CALL_PC_BITS)
    {
        let pc = (pc as u32) << INLINED_CALL_PC_BITS;
        SourceLoc::new(INLINED | callee << INLINED_FUNC_SHIFT | pc | call_pc as u32)
    } else {
        site(call_pc)
    }
}

/// What a piece of machine code is attributed to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attribution {
    /// The function as a whole: its `fn` line.
    Function,
    /// Instruction `pc` of the compiled function itself.
    Site { pc: u32 },
    /// Instruction `pc` of function `func`, inlined at instruction
    /// `call_pc` of the compiled function.
    Inlined { func: u32, pc: u32, call_pc: u32 },
}

impl Attribution {
    /// Decodes a location the translator set; `None` for the default
    /// location (none).
    fn decode(loc: SourceLoc) -> Option<Attribution> {
        if loc.is_default() {
            return None;
        }
        let bits = loc.bits();
        Some(if bits == FUNCTION_LINE_BITS {
            Attribution::Function
        } else if bits & INLINED != 0 {
            Attribution::Inlined {
                func: (bits & !INLINED) >> INLINED_FUNC_SHIFT,
                pc: (bits >> INLINED_CALL_PC_BITS) & ((1 << INLINED_PC_BITS) - 1),
                call_pc: bits & ((1 << INLINED_CALL_PC_BITS) - 1),
            }
        } else {
            Attribution::Site { pc: bits }
        })
    }
}

/// Cranelift's view of one compiled body, as [`attribute`] reads it.
pub struct Compiled<'a> {
    /// `(start, end, location)` ranges, sorted by start, non-overlapping.
    pub ranges: &'a [(u32, u32, SourceLoc)],
    /// Start offset of every machine block, ascending.
    pub block_starts: &'a [u32],
    /// `(from, to)` block-start offsets of every control-flow edge.
    pub edges: &'a [(u32, u32)],
    /// Where Cranelift's prologue ends (the frame set up, callee-saved
    /// registers saved): the offset of its last unwind step, 0 if none.
    pub prologue_end: u32,
}

/// `(offset, attribution)` rows for `code`: each row holds from its offset
/// up to the next row's (the last up to the end of the code). Rows are
/// sorted, start at 0 and never repeat an attribution.
pub fn attribute(code: &Compiled<'_>) -> Vec<(u32, Attribution)> {
    let old_fallback = std::env::var_os(OLD_FALLBACK_ENV).is_some();
    // The prologue is the function's, whatever its block holds after it
    // (the first statement's code, where inheritance would put it).
    let mut decoded: Vec<(u32, Option<Attribution>)> = Vec::with_capacity(code.ranges.len() + 1);
    for &(start, end, loc) in code.ranges {
        let a = Attribution::decode(loc);
        if a.is_none() && start < code.prologue_end {
            decoded.push((start, Some(Attribution::Function)));
            if end > code.prologue_end {
                decoded.push((code.prologue_end, None));
            }
        } else {
            decoded.push((start, a));
        }
    }
    let resolved: Vec<Attribution> = if old_fallback {
        decoded
            .iter()
            .map(|&(_, a)| a.unwrap_or(Attribution::Function))
            .collect()
    } else {
        Inheritance::new(code, &decoded).resolve()
    };
    let mut rows: Vec<(u32, Attribution)> = Vec::with_capacity(resolved.len() + 1);
    if decoded.first().is_none_or(|&(start, _)| start != 0) {
        rows.push((0, Attribution::Function));
    }
    for (&(start, _), &a) in decoded.iter().zip(&resolved) {
        if rows.last().is_some_and(|&(_, last)| last == a) {
            continue;
        }
        rows.push((start, a));
    }
    rows
}

/// The source position `(line, column)` of `attribution` in function
/// `func` of `module`.
pub fn position(module: &Module, func: u32, attribution: Attribution) -> (u32, u32) {
    let f = &module.functions[func as usize];
    let span = match attribution {
        Attribution::Function => f.span,
        Attribution::Site { pc } => f.spans.get(pc as usize).copied().unwrap_or(f.span),
        Attribution::Inlined { func, pc, .. } => module
            .functions
            .get(func as usize)
            .and_then(|callee| callee.spans.get(pc as usize))
            .copied()
            .unwrap_or(f.span),
    };
    (span.line, span.col)
}

/// The fallback for ranges without a location (see the module docs).
struct Inheritance<'a> {
    code: &'a Compiled<'a>,
    decoded: &'a [(u32, Option<Attribution>)],
    /// Per block: its ranges, as `first..end` indices into `decoded`.
    block_ranges: Vec<std::ops::Range<usize>>,
    /// Per block: its predecessor block if it has exactly one.
    only_predecessor: Vec<Option<usize>>,
}

impl<'a> Inheritance<'a> {
    fn new(code: &'a Compiled<'a>, decoded: &'a [(u32, Option<Attribution>)]) -> Self {
        let mut block_ranges = Vec::with_capacity(code.block_starts.len());
        let mut at = 0;
        for (i, _) in code.block_starts.iter().enumerate() {
            let end_offset = code.block_starts.get(i + 1).copied().unwrap_or(u32::MAX);
            let first = at;
            while at < decoded.len() && decoded[at].0 < end_offset {
                at += 1;
            }
            block_ranges.push(first..at);
        }
        // Predecessors counted once, over all edges (not per block: a
        // function with thousands of blocks made that quadratic).
        let mut only_predecessor: Vec<Option<usize>> = vec![None; code.block_starts.len()];
        let mut count = vec![0u32; code.block_starts.len()];
        for &(from, to) in code.edges {
            let Ok(to) = code.block_starts.binary_search(&to) else {
                continue;
            };
            count[to] += 1;
            only_predecessor[to] = code.block_starts.binary_search(&from).ok();
        }
        for (pred, &n) in only_predecessor.iter_mut().zip(&count) {
            if n != 1 {
                *pred = None;
            }
        }
        Inheritance {
            code,
            decoded,
            block_ranges,
            only_predecessor,
        }
    }

    // ANCHOR: inherit
    fn resolve(&self) -> Vec<Attribution> {
        let mut out: Vec<Option<Attribution>> = self.decoded.iter().map(|&(_, a)| a).collect();
        let mut ends = vec![None; self.block_ranges.len()];
        // Ranges before the first block (none in practice) keep theirs.
        for (block, range) in self.block_ranges.iter().enumerate() {
            let located: Vec<(usize, Attribution)> = range
                .clone()
                .filter_map(|i| self.decoded[i].1.map(|a| (i, a)))
                .collect();
            // A range that starts in the block before and runs into this
            // one (the block boundary falls inside it: a fall-through edge
            // Cranelift records no edge for) is this block's first location.
            let block_start = self.code.block_starts[block];
            let covering = (range.start > 0
                && self
                    .decoded
                    .get(range.start)
                    .is_none_or(|&(start, _)| start > block_start))
            .then(|| self.decoded[range.start - 1].1)
            .flatten();
            let Some(first) = covering.or(located.first().map(|&(_, a)| a)) else {
                let inherited = self.end_of_only_predecessor(block, &mut ends);
                for slot in &mut out[range.clone()] {
                    *slot = Some(inherited);
                }
                continue;
            };
            let mut current = first;
            for i in range.clone() {
                match self.decoded[i].1 {
                    Some(a) => current = a,
                    None => out[i] = Some(current),
                }
            }
        }
        out.into_iter()
            .map(|a| a.unwrap_or(Attribution::Function))
            .collect()
    }
    // ANCHOR_END: inherit

    /// The attribution at the end of `block`'s only predecessor (walking
    /// back through predecessors without a location), or the function's
    /// line if it has none or several. `ends` remembers, per block without
    /// a location, what its end inherits, so that no chain is walked twice.
    fn end_of_only_predecessor(
        &self,
        block: usize,
        ends: &mut [Option<Attribution>],
    ) -> Attribution {
        let mut unlocated = Vec::new();
        let mut block = block;
        // At most one step per block: a cycle of blocks without locations
        // ends the walk.
        let mut found = Attribution::Function;
        for _ in 0..self.block_ranges.len() {
            let Some(pred) = self.only_predecessor[block] else {
                break;
            };
            if let Some(a) = ends[pred] {
                found = a;
                break;
            }
            let last = self.block_ranges[pred]
                .clone()
                .rev()
                .find_map(|i| self.decoded[i].1);
            if let Some(a) = last {
                found = a;
                break;
            }
            unlocated.push(pred);
            block = pred;
        }
        for b in unlocated {
            ends[b] = Some(found);
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(
        ranges: &[(u32, u32, SourceLoc)],
        starts: &[u32],
        edges: &[(u32, u32)],
    ) -> Vec<(u32, Attribution)> {
        attribute(&Compiled {
            ranges,
            block_starts: starts,
            edges,
            prologue_end: 0,
        })
    }

    fn at(pc: u32) -> Attribution {
        Attribution::Site { pc }
    }

    #[test]
    fn locations_round_trip() {
        assert_eq!(Attribution::decode(site(7)), Some(at(7)));
        assert_eq!(
            Attribution::decode(function_line()),
            Some(Attribution::Function)
        );
        assert_eq!(
            Attribution::decode(inlined_site(3, 5, 9)),
            Some(Attribution::Inlined {
                func: 3,
                pc: 5,
                call_pc: 9
            })
        );
        // Too large to encode: the call site.
        assert_eq!(
            Attribution::decode(inlined_site(1 << 20, 5, 9)),
            Some(at(9))
        );
        assert_eq!(Attribution::decode(SourceLoc::default()), None);
    }

    #[test]
    fn unlocated_code_inherits_within_its_block() {
        // Block 0: prologue (none) then the function line; block 20: none, pc 4,
        // none, pc 5; block 40: pc 7 and none.
        let ranges = [
            (0, 4, SourceLoc::default()),
            (4, 20, function_line()),
            (20, 24, SourceLoc::default()),
            (24, 28, site(4)),
            (28, 32, SourceLoc::default()),
            (32, 40, site(5)),
            (40, 44, site(7)),
            (44, 48, SourceLoc::default()),
        ];
        let got = rows(&ranges, &[0, 20, 40], &[(0, 20), (20, 20), (20, 40)]);
        assert_eq!(
            got,
            vec![
                (0, Attribution::Function),
                (20, at(4)),
                (32, at(5)),
                (40, at(7)),
            ]
        );
    }

    #[test]
    fn blocks_without_locations_inherit_from_their_only_predecessor() {
        // A split back-edge (block 30) takes the loop's branch (pc 7); a
        // shared error block (40) reached from two sites takes the fn line;
        // one reached from one site (50, via 45) takes that site's.
        let ranges = [
            (0, 10, function_line()),
            (10, 30, site(7)),
            (30, 34, SourceLoc::default()),
            (34, 40, site(8)),
            (40, 45, SourceLoc::default()),
            (45, 50, SourceLoc::default()),
            (50, 60, SourceLoc::default()),
        ];
        let edges = [
            (0, 10),
            (10, 30),
            (30, 10),
            (10, 34),
            (10, 40),
            (34, 40),
            (34, 45),
            (45, 50),
        ];
        let got = rows(&ranges, &[0, 10, 30, 34, 40, 45, 50], &edges);
        assert_eq!(
            got,
            vec![
                (0, Attribution::Function),
                (10, at(7)),
                (34, at(8)),
                (40, Attribution::Function),
                (45, at(8)),
            ]
        );
    }

    #[test]
    fn a_long_chain_of_unlocated_blocks_is_walked_once() {
        // Block 0 has a location; blocks 1..N have none, each the only
        // successor of the one before. Every block inherits pc 3. Walking
        // back from each block separately (and finding predecessors by
        // scanning every edge) took N^3 steps: this test would not end.
        const N: u32 = 50_000;
        let mut ranges = vec![(0, 4, site(3))];
        ranges.extend((1..N).map(|b| (b * 4, b * 4 + 4, SourceLoc::default())));
        let starts: Vec<u32> = (0..N).map(|b| b * 4).collect();
        let edges: Vec<(u32, u32)> = (1..N).map(|b| ((b - 1) * 4, b * 4)).collect();
        assert_eq!(rows(&ranges, &starts, &edges), vec![(0, at(3))]);
    }

    #[test]
    fn cycles_of_unlocated_blocks_end_on_the_function_line() {
        let ranges = [(0, 4, SourceLoc::default()), (4, 8, SourceLoc::default())];
        let got = rows(&ranges, &[0, 4], &[(0, 4), (4, 0)]);
        assert_eq!(got, vec![(0, Attribution::Function)]);
    }

    #[test]
    fn code_before_the_first_range_is_the_functions() {
        let got = rows(&[(4, 8, site(1))], &[0], &[]);
        assert_eq!(got, vec![(0, Attribution::Function), (4, at(1))]);
    }
}
