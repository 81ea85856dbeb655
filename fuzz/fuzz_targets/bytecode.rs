//! Arbitrary bytecode: a module built from the input (functions with
//! register types, parameters, constants and instructions chosen by the
//! bytes, the instructions by `arbitrary::Arbitrary` on `vm::bytecode::Op`)
//! goes to the verifier (`vm::bytecode::verify`) and, if it is accepted,
//! to the interpreter through the driver. The interpreter trusts every
//! operand of a verified module, so an accepted module that crashes the
//! process is a hole in the verifier (or a bug in the interpreter).
//!
//! Arbitrary code loops and recurses: the run has a small depth and heap
//! limit, and a tier-up hook that never compiles but counts calls and
//! back-edges ([`Fuel`]) stops it with an error once it has run long
//! enough.
#![no_main]

use std::sync::Arc;

use arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use vm::abi::Vm;
use vm::front::ast::{Span, Type};
use vm::bytecode::{Const, Function, Module, Op};
use vm::abi::{CallDecision, Countdown, LoopDecision, TierUp};

/// Most instructions per function.
const MAX_CODE: usize = 64;

/// The types a register, parameter, result or `Print` may have.
fn a_type(u: &mut Unstructured<'_>) -> Result<Type> {
    Ok(match u.int_in_range(0..=7)? {
        0 => Type::Int,
        1 => Type::Float,
        2 => Type::Bool,
        3 => Type::Str,
        4 => Type::Array(Box::new(Type::Int)),
        5 => Type::Array(Box::new(Type::Str)),
        6 => Type::Array(Box::new(Type::Array(Box::new(Type::Float)))),
        _ => Type::Array(Box::new(Type::Bool)),
    })
}

/// One function. Its typed registers repeat a short cycle of types, so
/// that an arbitrary register index often has the class an instruction
/// asks for; the call area is a few slots after them.
fn function(u: &mut Unstructured<'_>, name: String, strings: u32) -> Result<Function> {
    let cycle: Vec<Type> = (0..u.int_in_range(1..=6)?)
        .map(|_| a_type(u))
        .collect::<Result<_>>()?;
    let num_typed = u.int_in_range(1..=240usize)?;
    let reg_types: Vec<Type> = (0..num_typed).map(|r| cycle[r % cycle.len()].clone()).collect();
    let frame_size = (num_typed + u.int_in_range(0..=16usize)?) as u32;
    let params = (0..u.int_in_range(0..=3usize)?.min(num_typed))
        .map(|i| (format!("p{i}"), reg_types[i].clone()))
        .collect();
    let ret = if u.arbitrary()? { Some(a_type(u)?) } else { None };
    let mut consts: Vec<Const> = (0..u.int_in_range(0..=4)?)
        .map(|_| {
            Ok(match u.int_in_range(0..=2)? {
                0 => Const::Int(u.arbitrary()?),
                1 => Const::Float(u.arbitrary()?),
                _ => Const::Str(u.int_in_range(0..=strings)?),
            })
        })
        .collect::<Result<_>>()?;
    let mut code: Vec<Op> = Vec::new();
    while code.len() < MAX_CODE && !u.is_empty() && u.arbitrary()? {
        code.push(u.arbitrary()?);
    }
    code.push(Op::ReturnVoid);
    // A spin (`--slow-line`'s busy work) runs its constant's count of
    // rounds in one step the fuel does not see: keep those counts small.
    for op in &code {
        if let Op::Spin { k } = *op
            && let Some(Const::Int(rounds)) = consts.get(k as usize)
        {
            consts[k as usize] = Const::Int(rounds.rem_euclid(1024));
        }
    }
    let ref_regs = (0..num_typed)
        .filter(|&r| reg_types[r].is_ref())
        .map(|r| r as u8)
        .collect();
    Ok(Function {
        name,
        params,
        ret,
        span: Span::new(1, 1),
        reg_names: vec![None; num_typed],
        reg_types,
        ref_regs,
        frame_size,
        consts,
        spans: vec![Span::new(1, 1); code.len()],
        code,
    })
}

fn module(u: &mut Unstructured<'_>) -> Result<Module> {
    let strings = vec!["".to_string(), "ab".to_string(), "12".to_string()];
    let types = (0..u.int_in_range(1..=4)?)
        .map(|_| a_type(u))
        .collect::<Result<_>>()?;
    let n = u.int_in_range(1..=3)?;
    let functions: Vec<Function> = (0..n)
        .map(|i| {
            let name = if i + 1 == n { "<main>".into() } else { format!("f{i}") };
            function(u, name, strings.len() as u32 - 1)
        })
        .collect::<Result<_>>()?;
    Ok(Module {
        path: "b.toy".into(),
        main: n - 1,
        functions,
        strings,
        types,
        source: "x\n".into(),
        ..Module::default()
    })
}

/// A tier-up hook that compiles nothing: it counts calls and back-edges in
/// steps of [`Fuel::STEP`] and, once [`Fuel::BUDGET`] is spent, ends the run
/// with the depth error (from an entry or OSR entry that fails at once).
struct Fuel {
    left: u32,
}

impl Fuel {
    const STEP: u32 = 16;
    const BUDGET: u32 = 20_000;

    /// False once the budget is spent.
    fn spend(&mut self) -> bool {
        self.left = self.left.saturating_sub(Fuel::STEP);
        self.left > 0
    }
}

/// Fails without running: the depth error, with no trace entry of its own
/// (what an entry does when its frame cannot become active).
unsafe extern "C" fn out_of_fuel(vm: *mut Vm<'_>, _func: u32, _base: *mut u64) -> u32 {
    // SAFETY: the interpreter passes its live VM, borrowed by no one.
    unsafe { (*vm).fail_depth_exceeded() }
}

/// As [`out_of_fuel`], in place of an OSR entry.
unsafe extern "C" fn out_of_fuel_osr(vm: *mut Vm<'_>, _base: *mut u64, _pc: u32) -> u32 {
    // SAFETY: as in `out_of_fuel`.
    unsafe { (*vm).fail_depth_exceeded() }
}

// SAFETY: the only OSR entry returned fails at once, touching nothing but
// the VM's error (the interpreter undoes the frame, as after any error).
unsafe impl TierUp for Fuel {
    fn initial_countdown(&self) -> Countdown {
        Countdown::After(Fuel::STEP)
    }

    fn start(&mut self, _vm: &mut Vm<'_>) {}

    fn hot_call(&mut self, vm: &mut Vm<'_>, func: u32) -> CallDecision {
        if self.spend() {
            return CallDecision::Interpret(Countdown::After(Fuel::STEP));
        }
        // SAFETY: `out_of_fuel` fails the call before its frame becomes
        // active, as an entry at the depth limit does; `tier::run_main`
        // restores the table when the run ends.
        unsafe { vm.set_entry(func, out_of_fuel) };
        CallDecision::Enter
    }

    fn hot_loop(&mut self, _vm: &mut Vm<'_>, _func: u32, _pc: u32) -> LoopDecision {
        if self.spend() {
            return LoopDecision::Interpret(Countdown::After(Fuel::STEP));
        }
        LoopDecision::Enter(out_of_fuel_osr, Countdown::Never)
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(module) = module(&mut Unstructured::new(data)) else {
        return;
    };
    if vm::bytecode::verify(&module).is_err() {
        return;
    }
    // Reproducing a crash: `BYTECODE_DUMP=1 cargo fuzz run ... bytecode FILE`.
    if std::env::var_os("BYTECODE_DUMP").is_some() {
        eprintln!("{}", vm::bytecode::disasm::disassemble(&module));
        eprintln!("{module:#?}");
    }
    let _ = vm::bytecode::disasm::disassemble(&module);
    let make = || {
        Box::new(Fuel {
            left: Fuel::BUDGET,
        }) as Box<dyn TierUp>
    };
    let options = vm::driver::Options {
        max_depth: 16,
        max_heap: 1 << 20,
        tier_up: Some(Arc::new(make)),
        ..vm::driver::Options::default()
    };
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let status = vm::driver::run_with(&module, Vec::new(), &options, &mut out, &mut err);
    assert!(status == 0 || status == 1, "status {status}");
});
