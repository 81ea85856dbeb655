//! The JIT's lowering choices that other code depends on: which
//! instructions compile to a call of a runtime helper.
//!
//! That is the JIT's choice, not a fact of the bytecode (the interpreter
//! runs `LenS` inline, compiled code calls `toy_jit_str_len`), so it lives
//! here and not in the VM's instruction table. Two places read it: the
//! instruction lowering (`instruction.rs`), whose every helper call on an
//! instruction's own path must be one this table names (checked in debug
//! builds and by the test below), and vmprof lines mode (`lines.rs`),
//! which stores the instruction's location before such a call, so a
//! sample taken inside the helper finds the caller's line.

use vm::bytecode::Op;

/// True if compiled code carries out `op` by calling a runtime helper (on
/// its normal path; a failing instruction's error path calls one too, but
/// leaves the function, see `errors.rs`). A Toy call is not a helper call:
/// `calls.rs` stores its location itself.
pub(crate) fn calls_helper(op: &Op) -> bool {
    match op {
        // `fmod`, the string length and comparison helpers, and `Pop`,
        // which may shrink the array's buffer.
        Op::RemF { .. } | Op::LenS { .. } | Op::Pop { .. } => true,
        Op::EqS { .. } | Op::NeS { .. } | Op::LtS { .. } | Op::LeS { .. } => true,
        // Everything the interpreter runs out of line, through
        // `toy_jit_slow_op`.
        op => op.is_slow(),
    }
}

#[cfg(test)]
thread_local! {
    /// Test-only: (function, instruction) of every helper call the
    /// translator emitted on this thread.
    static HELPER_CALLS: std::cell::RefCell<Vec<(u32, usize)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// Test-only: notes that instruction `pc` of `func` called a helper.
#[cfg(test)]
pub(super) fn record_helper_call(func: u32, pc: usize) {
    HELPER_CALLS.with(|calls| calls.borrow_mut().push((func, pc)));
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    /// One of every instruction whose lowering calls a helper, and some
    /// that do not.
    const PROGRAM: &str = "\
fn work(s: str, x: float, n: int) -> int {
    let a = [1, 2, 3];
    push(a, n);
    let t = s + \"!\";
    let total = len(t) + len(a) + pop(a);
    if s == t { total = total + 1; }
    if s != t { total = total + 2; }
    if s < t { total = total + 3; }
    if s <= t { total = total + 4; }
    let r = x % 2.5;
    print(str(r));
    return total + parse_int(\"7\") + n * 2;
}
print(work(\"ab\", 7.5, 3));
";

    #[test]
    fn every_helper_call_is_one_the_table_names_and_stores_its_line() {
        let module = vm::driver::load("t.toy", PROGRAM.as_bytes()).expect("compiles");
        HELPER_CALLS.with(|calls| calls.borrow_mut().clear());
        let mut diagnostics = Vec::new();
        let listings = crate::disasm::listings(&module, &mut diagnostics, None).expect("JIT");
        assert!(!listings.is_empty());
        let called: BTreeSet<(u32, usize)> =
            HELPER_CALLS.with(|calls| calls.borrow().iter().copied().collect());
        let work = (module.functions.iter())
            .position(|f| f.name == "work")
            .expect("work") as u32;
        let named: BTreeSet<(u32, usize)> = (module.functions[work as usize].code.iter())
            .enumerate()
            .filter(|(_, op)| calls_helper(op))
            .map(|(pc, _)| (work, pc))
            .collect();
        let called_in_work: BTreeSet<_> = called.iter().filter(|c| c.0 == work).copied().collect();
        // Every helper-calling instruction of `work` is reachable, so the
        // two sets are equal: no helper call the table does not name (its
        // line would be missing in lines mode), no named instruction that
        // calls none (a needless store).
        assert_eq!(called_in_work, named);
        // The program covers every kind the table names.
        let kinds: BTreeSet<&str> = (named.iter())
            .map(|&(f, pc)| module.functions[f as usize].code[pc].name())
            .collect();
        for kind in [
            "RemF", "LenS", "Pop", "EqS", "NeS", "LtS", "LeS", "Concat", "Print",
        ] {
            assert!(kinds.contains(kind), "{kind} missing from {kinds:?}");
        }
    }
}
