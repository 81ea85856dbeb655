//! The compile budget: which functions are small enough to compile.
//!
//! Cranelift's optimiser (the egraph) and register allocator (regalloc2)
//! cost more than linear time and memory in the size of one function: a
//! 10,000-line straight-line `main` took 800 MB to compile, a 60,000-line
//! one was killed at 24 GB, while the interpreter ran it in 0.14 s. So the
//! JIT measures a function before compiling it, in bytecode instructions
//! *including the leaves it would inline* (what Cranelift actually sees),
//! each instruction that ends a block (a jump, a branch, a return) counting
//! [`BLOCK_END_WEIGHT`] more, and leaves a function over
//! [`MAX_COMPILED_OPS`] to the interpreter:
//! such a function is straight-line set-up code or generated code, run
//! few times per instruction, where the interpreter loses little.
//!
//! Inlining has its own budget per compiled function
//! ([`INLINE_BUDGET_OPS`], see [`InlineBudget`]): past it, calls of
//! inlinable leaves stay calls, so a function with thousands of calls of
//! small helpers does not multiply in size.
//!
//! The numbers come from `bench/compile_budget.sh`, which compiles
//! straight-line functions (one block) and branchy ones (a loop with an
//! if/else per line) of growing size at `--jit-threshold 0` and reports
//! compile time and peak memory (see `bench/RESULTS.md`). On a quiet
//! machine a straight-line instruction costs about 3.5 µs to compile and a
//! branchy line of 12 instructions and 4 block ends about 114 µs: about
//! 3.5 µs per instruction plus 14 µs per block end, so a block end weighs
//! as much as 4 more instructions.

use vm::bytecode::{Flags, Function, Module, Op};

// ANCHOR: budget
/// Largest size (own plus inlined instructions, block ends weighted by
/// [`BLOCK_END_WEIGHT`]) of a function that is compiled: chosen so that
/// compiling one costs at most about 20 ms and 10 MB (see the module docs).
pub const MAX_COMPILED_OPS: usize = 4000;

/// What an instruction that ends a block adds to a function's size, on top
/// of its own 1: the register allocator's and optimiser's work grows with
/// blocks, not only instructions (see the module docs).
pub const BLOCK_END_WEIGHT: usize = 4;

/// Most bytecode instructions of inlined leaves per compiled function.
pub const INLINE_BUDGET_OPS: usize = 1000;
// ANCHOR_END: budget

/// What is left of one compiled function's inlining budget. The translator
/// and [`compiled_ops`] both ask it, call by call in instruction order, so
/// they agree on which calls are inlined.
#[derive(Clone, Copy, Debug)]
pub struct InlineBudget {
    left: usize,
}

impl Default for InlineBudget {
    fn default() -> Self {
        InlineBudget {
            left: INLINE_BUDGET_OPS,
        }
    }
}

impl InlineBudget {
    /// True if a call of `callee` is inlined, taking its size from the
    /// budget; false if `callee` is no inlinable leaf or does not fit.
    pub fn take(&mut self, callee: &Function) -> bool {
        let size = callee.code.len();
        if !is_inlinable_leaf(callee) || size > self.left {
            return false;
        }
        self.left -= size;
        true
    }
}

/// The size of `func`'s own code: an instruction counts 1, one that ends a
/// block 1 + [`BLOCK_END_WEIGHT`].
pub fn own_ops(f: &Function) -> usize {
    let block_ends = f
        .code
        .iter()
        .filter(|op| op.flags().contains(Flags::ENDS_BLOCK))
        .count();
    f.code.len() + block_ends * BLOCK_END_WEIGHT
}

/// The size of `func` as compiled: [`own_ops`] plus the instructions of
/// the calls it inlines (straight-line leaves, one block each).
pub fn compiled_ops(module: &Module, func: u32) -> usize {
    let f = &module.functions[func as usize];
    let mut budget = InlineBudget::default();
    let mut ops = own_ops(f);
    for op in &f.code {
        if let Op::Call { func: callee, .. } = *op {
            let callee = &module.functions[callee as usize];
            if budget.take(callee) {
                ops += callee.code.len();
            }
        }
    }
    ops
}

/// Most instructions a callee may have to be inlined.
pub(crate) const INLINE_MAX_OPS: usize = 24;

/// A callee that the translator (`inline.rs`) can expand: short, straight-line
/// up to its first return, only scalar registers, and only instructions
/// that cannot fail, allocate, call or touch memory.
pub fn is_inlinable_leaf(f: &Function) -> bool {
    // Straight-line code: everything after the first return is unreachable
    // (the compiler may append a `ReturnVoid` there).
    let Some(ret) = f
        .code
        .iter()
        .position(|op| matches!(op, Op::Return { .. } | Op::ReturnVoid))
    else {
        return false;
    };
    let body = &f.code[..ret];
    ret < INLINE_MAX_OPS
        && f.reg_types.iter().all(|t| !t.is_ref())
        && f.frame_size as usize == f.num_typed()
        && body.iter().all(|op| op.flags().contains(Flags::INLINABLE))
}

/// A function over the compile budget: it stays interpreted for good.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OverBudget {
    /// Its size ([`compiled_ops`]).
    pub ops: usize,
    /// The budget in force ([`max_compiled_ops`]).
    pub budget: usize,
}

impl OverBudget {
    /// The `--jit-stats` line that says `name` is not compiled.
    pub fn stats_line(&self, name: &str) -> String {
        let OverBudget { ops, budget } = self;
        format!("jit-stats: {name}: not compiled: {ops} instructions, over the budget of {budget}")
    }
}

/// `Err` if `func` is over the budget in force ([`max_compiled_ops`]).
pub fn check_budget(module: &Module, func: u32) -> Result<(), OverBudget> {
    let ops = compiled_ops(module, func);
    let budget = max_compiled_ops();
    match ops <= budget {
        true => Ok(()),
        false => Err(OverBudget { ops, budget }),
    }
}

/// Bench-only: `TOYVM_JIT_MAX_OPS=N` replaces [`MAX_COMPILED_OPS`], so
/// `bench/compile_budget.sh` can measure functions over the budget.
pub const MAX_OPS_ENV: &str = "TOYVM_JIT_MAX_OPS";

/// The budget in force: [`MAX_COMPILED_OPS`] unless [`MAX_OPS_ENV`] says
/// otherwise.
pub fn max_compiled_ops() -> usize {
    std::env::var(MAX_OPS_ENV)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(MAX_COMPILED_OPS)
}

/// True if `func` is within [`MAX_COMPILED_OPS`].
#[cfg(test)]
fn within_budget(module: &Module, func: u32) -> bool {
    compiled_ops(module, func) <= MAX_COMPILED_OPS
}

#[cfg(test)]
mod tests {
    use super::*;

    fn module(source: &str) -> Module {
        vm::driver::load("t.toy", source.as_bytes()).expect("compiles")
    }

    fn func(m: &Module, name: &str) -> u32 {
        m.functions
            .iter()
            .position(|f| f.name == name)
            .expect("function exists") as u32
    }

    #[test]
    fn inlined_leaves_count_until_the_budget_runs_out() {
        let calls = INLINE_BUDGET_OPS + 10;
        let mut src =
            String::from("fn inc(x: int) -> int { return x + 1; }\nfn f(x: int) -> int {\n");
        for _ in 0..calls {
            src.push_str("    x = inc(x);\n");
        }
        src.push_str("    return x;\n}\nprint(f(0));\n");
        let m = module(&src);
        let (f, inc) = (func(&m, "f"), func(&m, "inc"));
        let leaf = m.functions[inc as usize].code.len();
        assert!(is_inlinable_leaf(&m.functions[inc as usize]));
        let own = own_ops(&m.functions[f as usize]);
        let inlined = INLINE_BUDGET_OPS / leaf;
        assert!(inlined < calls);
        assert_eq!(compiled_ops(&m, f), own + inlined * leaf);
    }

    #[test]
    fn block_ends_weigh_more_than_straight_line_instructions() {
        let ends = |f: &Function| {
            f.code
                .iter()
                .filter(|op| op.flags().contains(Flags::ENDS_BLOCK))
                .count()
        };
        let straight =
            module("fn f(x: int) -> int { let y = x * 3; y = y + 1; return y; }\nprint(f(1));\n");
        let branchy = module(
            "fn f(x: int) -> int { for i in 0..x { if i > 2 { x = x + 1; } } return x; }\nprint(f(1));\n",
        );
        let f = &straight.functions[func(&straight, "f") as usize];
        let g = &branchy.functions[func(&branchy, "f") as usize];
        // The return (and the compiler's unreachable `ReturnVoid` after it).
        assert!(ends(f) <= 2);
        // The loop's test and back-edge, the if, the returns.
        assert!(ends(g) >= 4, "{}", ends(g));
        for h in [f, g] {
            assert_eq!(own_ops(h), h.code.len() + ends(h) * BLOCK_END_WEIGHT);
        }
    }

    #[test]
    fn a_huge_function_is_over_budget_and_a_small_one_is_not() {
        let mut src = String::from("let x = 1;\n");
        for k in 0..MAX_COMPILED_OPS {
            src.push_str(&format!("x = (x * 3 + {k}) & 65535;\n"));
        }
        src.push_str("fn small(x: int) -> int { return x * 2; }\nprint(small(x));\n");
        let m = module(&src);
        assert!(!within_budget(&m, m.main));
        assert!(within_budget(&m, func(&m, "small")));
    }
}
