//! The compile budget: which functions are small enough to compile.
//!
//! Cranelift's optimiser (the egraph) and register allocator (regalloc2)
//! cost more than linear time and memory in the size of one function: a
//! 10,000-line straight-line `main` took 800 MB to compile, a 60,000-line
//! one was killed at 24 GB, while the interpreter ran it in 0.14 s. So the
//! JIT measures a function before compiling it, in bytecode instructions
//! *including the leaves it would inline* (what Cranelift actually sees),
//! and leaves a function over [`MAX_COMPILED_OPS`] to the interpreter:
//! such a function is straight-line set-up code or generated code, run
//! few times per instruction, where the interpreter loses little.
//!
//! Inlining has its own budget per compiled function
//! ([`INLINE_BUDGET_OPS`], see [`InlineBudget`]): past it, calls of
//! inlinable leaves stay calls, so a function with thousands of calls of
//! small helpers does not multiply in size.
//!
//! The numbers come from `bench/compile_budget.sh`, which compiles
//! straight-line functions of growing size at `--jit-threshold 0` and
//! reports compile time and peak memory (see `bench/RESULTS.md`).

use vm::bytecode::{Function, Module, Op};

use crate::translate::is_inlinable_leaf;

// ANCHOR: budget
/// Most bytecode instructions (own plus inlined) a function may have to be
/// compiled: chosen so that compiling one costs at most about 20 ms and
/// 10 MB (see the module docs).
pub const MAX_COMPILED_OPS: usize = 4000;

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

/// The size of `func` as compiled: its instructions plus those of the
/// calls it inlines.
pub fn compiled_ops(module: &Module, func: u32) -> usize {
    let f = &module.functions[func as usize];
    let mut budget = InlineBudget::default();
    let mut ops = f.code.len();
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
        let own = m.functions[f as usize].code.len();
        let inlined = INLINE_BUDGET_OPS / leaf;
        assert!(inlined < calls);
        assert_eq!(compiled_ops(&m, f), own + inlined * leaf);
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
