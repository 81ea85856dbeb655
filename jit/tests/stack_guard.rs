//! The native stack check in compiled prologues (`jit::stack_guard`): with
//! `Vm::stack_limit` set, compiled recursion that reaches the limit fails
//! with the depth error, however far the depth limit is, instead of
//! running off the end of the thread's stack.

use vm::abi::{RuntimeError, STATUS_OK, Vm};

const RECURSE: &str = "fn f(n: int) -> int {\n    if n == 0 { return 1; }\n    return f(n - 1) + 1;\n}\nprint(7);\nprint(f(N));\n";

/// Runs `RECURSE` with `N = depth` compiled at threshold 0, with the stack
/// limit `limit(sp)` where `sp` is an address in this frame. Returns the
/// status, the error, the output and the depth afterwards.
fn run(depth: usize, limit: impl Fn(usize) -> usize) -> (u32, Option<RuntimeError>, String, usize) {
    let source = RECURSE.replace('N', &depth.to_string());
    let module = vm::driver::load("r.toy", source.as_bytes()).expect("compiles");
    let mut out = Vec::new();
    let mut diagnostics = Vec::new();
    let mut jit = jit::tier_up(jit::JitOptions {
        threshold: Some(0),
        ..jit::JitOptions::default()
    });
    let (status, error, depth_after) = {
        let mut vm: Box<Vm<'_>> = Vm::new(&module, Vec::new(), 10_000_000, &mut out).expect("vm");
        vm.set_diagnostics(&mut diagnostics);
        let here = 0u8;
        vm.set_stack_limit(limit(&here as *const u8 as usize));
        let status = vm::interp::run_main(&mut vm, Some(&mut *jit));
        vm.flush_output().expect("flush");
        (status, vm.take_error(), vm.depth())
    };
    let diagnostics = String::from_utf8_lossy(&diagnostics);
    assert!(
        diagnostics.is_empty(),
        "the JIT started and compiled: {diagnostics}"
    );
    (
        status,
        error,
        String::from_utf8(out).expect("utf-8"),
        depth_after,
    )
}

#[test]
fn no_limit_runs_the_recursion() {
    let (status, error, out, depth) = run(1000, |_| 0);
    assert_eq!(status, STATUS_OK, "{error:?}");
    assert_eq!(out, "7\n1001\n");
    assert_eq!(depth, 0);
}

#[test]
fn recursion_reaching_the_limit_fails_with_the_depth_error() {
    // 10 million frames would need far more than this test thread's stack
    // (2 MiB by default): without the check this is SIGSEGV.
    let (status, error, out, depth) = run(10_000_000, |sp| sp - (256 << 10));
    assert_ne!(status, STATUS_OK);
    assert!(
        matches!(error, Some(RuntimeError::DepthExceeded(10_000_000))),
        "{error:?}"
    );
    assert_eq!(out, "7\n", "output before the error is kept");
    assert_eq!(depth, 0, "every frame restored the depth");
}

#[test]
fn a_limit_above_the_stack_pointer_stops_the_first_compiled_call() {
    let (status, error, out, _) = run(3, |_| usize::MAX);
    assert_ne!(status, STATUS_OK);
    assert!(
        matches!(error, Some(RuntimeError::DepthExceeded(_))),
        "{error:?}"
    );
    assert_eq!(out, "");
}
