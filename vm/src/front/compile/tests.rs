//! Unit tests of the compiler: which instructions it picks.

use super::*;
use crate::bytecode::verify;
use crate::front::{check, parser};

fn compile_src(src: &str) -> Module {
    let mut program = parser::parse(src).expect("parses");
    check::check(&mut program).expect("checks");
    let module = compile(&program, "t.toy").expect("compiles");
    verify(&module).expect("verifies");
    module
}

fn main_code(src: &str) -> Vec<Op> {
    let m = compile_src(src);
    m.functions[m.main as usize].code.clone()
}

#[test]
fn int_constants_become_immediates() {
    let code = main_code("let x = 5; x = x * 3 + 1; x = x - 2; x = x / 4; x = x % 7;");
    assert!(
        code.contains(&Op::MulIImm {
            dst: 1,
            a: 0,
            imm: 3
        }),
        "{code:?}"
    );
    assert!(
        code.iter()
            .any(|op| matches!(op, Op::AddIImm { imm: 1, .. }))
    );
    assert!(
        code.iter()
            .any(|op| matches!(op, Op::AddIImm { imm: -2, .. }))
    );
    assert!(
        code.iter()
            .any(|op| matches!(op, Op::DivIImm { imm: 4, .. }))
    );
    assert!(
        code.iter()
            .any(|op| matches!(op, Op::RemIImm { imm: 7, .. }))
    );
    // Division by a literal zero must keep its run-time check.
    let code = main_code("let x = 5; print(x / 0);");
    assert!(code.iter().any(|op| matches!(op, Op::DivI { .. })));
}

#[test]
fn conditions_compile_to_fused_branches() {
    let code = main_code("let a = 1; let b = 2; if a < b { print(1); } if a >= 3 { print(2); }");
    assert!(
        code.contains(&Op::JmpIfNotLtI {
            a: 0,
            b: 1,
            target: 5
        }),
        "{code:?}"
    );
    assert!(
        code.iter()
            .any(|op| matches!(op, Op::JmpIfNotGeIImm { imm: 3, .. }))
    );
    assert!(
        !code
            .iter()
            .any(|op| matches!(op, Op::LtI { .. } | Op::JmpIfNot { .. }))
    );
}

#[test]
fn for_loops_use_forprep_and_forloop() {
    let code = main_code("let s = 0; for i in 0..10 { s += i; }");
    let prep = code
        .iter()
        .position(|op| matches!(op, Op::ForPrep { .. }))
        .unwrap();
    let back = code
        .iter()
        .position(|op| matches!(op, Op::ForLoop { .. }))
        .unwrap();
    assert!(prep < back);
    assert_eq!(
        code[back],
        Op::ForLoop {
            counter: 1,
            end: 2,
            target: prep as u32 + 1
        }
    );
}

#[test]
fn registers_keep_one_type_and_refs_are_listed() {
    let m = compile_src(
        "fn f(a: str, n: int, xs: [int]) -> int { let t = a + a; return n + len(xs) + len(t); }",
    );
    let f = &m.functions[0];
    assert_eq!(
        &f.reg_types[..3],
        &[Type::Str, Type::Int, Type::Array(Box::new(Type::Int))]
    );
    for &r in &f.ref_regs {
        assert!(f.reg_types[r as usize].is_ref());
    }
    let refs = f.reg_types.iter().filter(|t| t.is_ref()).count();
    assert_eq!(f.ref_regs.len(), refs);
}

#[test]
fn calls_use_the_call_area_after_the_typed_registers() {
    let m =
        compile_src("fn g(a: int, b: int) -> int { return a + b; }\nlet x = 1;\nprint(g(x, 2));");
    let main = &m.functions[m.main as usize];
    let base = main.num_typed() as u8;
    assert!(
        main.code.contains(&Op::Move { dst: base, src: 0 }),
        "{:?}",
        main.code
    );
    assert!(main.code.contains(&Op::LoadInt {
        dst: base + 1,
        imm: 2
    }));
    assert!(
        main.code
            .iter()
            .any(|op| matches!(op, Op::Call { func: 0, base: b, .. } if *b == base))
    );
    assert_eq!(main.frame_size as usize, main.num_typed() + 2);
}

#[test]
fn arguments_that_allocate_go_through_typed_registers() {
    let m = compile_src("fn g(a: str, b: str) {}\nlet s = \"x\";\ng(s, s + s);");
    let main = &m.functions[m.main as usize];
    let concat = main
        .code
        .iter()
        .position(|op| matches!(op, Op::Concat { .. }))
        .unwrap();
    let base = main.num_typed() as u8;
    // The first argument is moved into the call area only after the
    // concatenation (which may collect) has run.
    let first_arg = main
        .code
        .iter()
        .position(|op| matches!(op, Op::Move { dst, .. } if *dst == base))
        .unwrap();
    assert!(first_arg > concat, "{:?}", main.code);
}

#[test]
fn float_constants_in_loops_are_hoisted() {
    let m = compile_src("let x = 0.0; while x < 10.0 { x = x + 0.5; }");
    let main = &m.functions[m.main as usize];
    let loads = main
        .code
        .iter()
        .filter(|op| matches!(op, Op::LoadConst { .. }))
        .count();
    // 0.0 once (not in a loop); 10.0 and 0.5 once each at entry.
    assert_eq!(loads, 3, "{:?}", main.code);
    assert!(
        main.code[..2]
            .iter()
            .all(|op| matches!(op, Op::LoadConst { .. }))
    );
}

#[test]
fn every_function_ends_in_a_return_and_has_a_span_per_instruction() {
    let m = compile_src("fn f() { }\nfn g(x: int) -> int { return x; }\nf();\n");
    for f in &m.functions {
        assert_eq!(f.code.len(), f.spans.len());
        assert!(matches!(
            f.code.last(),
            Some(Op::Return { .. } | Op::ReturnVoid)
        ));
    }
}
