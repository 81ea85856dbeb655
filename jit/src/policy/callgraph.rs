//! The two walks of the call graph that decide which functions compile
//! together: callees first, so compiled code calls compiled callees
//! directly instead of through the entry table.

use vm::bytecode::{Module, Op};

/// The function a `Call` instruction calls.
fn callee(op: &Op) -> Option<u32> {
    match *op {
        Op::Call { func, .. } => Some(func as u32),
        _ => None,
    }
}

/// Every function in callee-first order (post-order of the call graph from
/// `<main>`, then any unreachable ones), so compiling them in this order
/// lets each call a compiled callee directly (except around cycles).
pub fn callee_first_order(module: &Module) -> Vec<u32> {
    let n = module.functions.len();
    let mut seen = vec![false; n];
    let mut order = Vec::with_capacity(n);
    let roots = std::iter::once(module.main).chain(0..n as u32);
    for root in roots {
        if seen[root as usize] {
            continue;
        }
        // Iterative DFS: (function, next instruction to scan).
        let mut stack = vec![(root, 0usize)];
        seen[root as usize] = true;
        while let Some((f, at)) = stack.pop() {
            let code = &module.functions[f as usize].code;
            let next_call = code[at..].iter().position(|op| callee(op).is_some());
            match next_call {
                Some(i) => {
                    stack.push((f, at + i + 1));
                    if let Some(c) = callee(&code[at + i])
                        && !seen[c as usize]
                    {
                        seen[c as usize] = true;
                        stack.push((c, 0));
                    }
                }
                None => order.push(f),
            }
        }
    }
    order
}

/// `func` preceded by the callees it reaches through functions that
/// `include` accepts (`func` itself is always in), callees first.
pub fn with_callees(module: &Module, func: u32, include: impl Fn(u32) -> bool) -> Vec<u32> {
    let mut order = Vec::new();
    let mut seen = vec![false; module.functions.len()];
    let mut stack = vec![(func, false)];
    while let Some((f, expanded)) = stack.pop() {
        if expanded {
            order.push(f);
            continue;
        }
        if std::mem::replace(&mut seen[f as usize], true) {
            continue;
        }
        stack.push((f, true));
        for c in module.functions[f as usize].code.iter().filter_map(callee) {
            if !seen[c as usize] && include(c) {
                stack.push((c, false));
            }
        }
    }
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROGRAM: &str = "fn leaf(x: int) -> int { return x + 1; }\n\
        fn mid(x: int) -> int { return leaf(x) * 2; }\n\
        fn top(x: int) -> int { return mid(x) + leaf(x); }\n\
        fn unused() { print(1); }\n\
        print(top(3));\n";

    fn names(module: &Module, order: &[u32]) -> Vec<String> {
        (order.iter())
            .map(|&f| module.functions[f as usize].name.clone())
            .collect()
    }

    fn func(module: &Module, name: &str) -> u32 {
        (module.functions.iter())
            .position(|f| f.name == name)
            .expect("function exists") as u32
    }

    #[test]
    fn callees_come_before_their_callers_and_unreachable_ones_last() {
        let m = vm::driver::load("t.toy", PROGRAM.as_bytes()).expect("compiles");
        let order = names(&m, &callee_first_order(&m));
        assert_eq!(order, ["leaf", "mid", "top", "<main>", "unused"]);
    }

    #[test]
    fn only_included_callees_join_the_batch() {
        let m = vm::driver::load("t.toy", PROGRAM.as_bytes()).expect("compiles");
        let (top, mid) = (func(&m, "top"), func(&m, "mid"));
        let all = names(&m, &with_callees(&m, top, |_| true));
        assert_eq!(all, ["leaf", "mid", "top"]);
        // `mid` excluded: `leaf` is still reached directly from `top`.
        let without_mid = names(&m, &with_callees(&m, top, |f| f != mid));
        assert_eq!(without_mid, ["leaf", "top"]);
        assert_eq!(names(&m, &with_callees(&m, top, |_| false)), ["top"]);
    }
}
