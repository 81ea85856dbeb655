//! The bytecode interpreter: one `match` loop per Toy call.
//!
//! [`interp_entry`] is the default [`EntryFn`] of every function. A Toy
//! call is one native call: the `Call` instruction calls the callee's entry
//! through [`Vm::entry_table`], and when that entry is `interp_entry` the
//! interpreter recurses natively (so native stack use grows with Toy call
//! depth: see `driver` for how the stack is sized).
//!
//! The loop trusts the bytecode: register operands are below the frame
//! size, jump targets inside the code, constant, type and function
//! indexes in range, and every function ends in a return. The compiler
//! guarantees this and [`crate::bytecode::verify`] checks it before a
//! module is run, which is what makes the unchecked accesses below sound.

use std::sync::atomic::{Ordering, compiler_fence};

use crate::bytecode::Op;
use crate::runtime::heap::{self, arr_mut, str_ref};
use crate::runtime::print::{write_scalar, write_value};
use crate::runtime::{
    EntryFn, FrameRecord, RuntimeError, STATUS_ERROR, STATUS_OK, TraceEntry, Vm, builtins, tier,
};

// ANCHOR: interp_entry
/// The interpreter's entry point for function `func` (see the entry ABI in
/// [`crate::runtime`]).
///
/// # Safety
/// `vm` must be a valid VM whose module passed [`crate::bytecode::verify`],
/// `func` a function index of it, and `base` the start of a window of at
/// least that function's `frame_size` slots inside the VM's value stack,
/// with the arguments in place.
pub unsafe extern "C" fn interp_entry(vm: *mut Vm<'_>, func: u32, base: *mut u64) -> u32 {
    // SAFETY: the caller's contract; `depth + 1 <= max_depth` keeps the
    // frame record inside its region.
    unsafe {
        let rt = (*vm).funcs.as_mut_ptr().add(func as usize);
        (*rt).hotness -= 1;
        if (*rt).hotness < 0
            && let Some(entry) = tier::hot_call(vm, func)
        {
            return entry(vm, func, base);
        }
        let depth = (*vm).depth + 1;
        if depth > (*vm).max_depth {
            (*vm).error = Some(RuntimeError::DepthExceeded((*vm).max_depth));
            return STATUS_ERROR;
        }
        // The record before the depth that covers it: the vmprof sampler
        // reads these records from a signal handler (see `crate::vmprof`).
        *(*vm).frames.add(depth) = FrameRecord { base, func, pc: 0 };
        compiler_fence(Ordering::Release);
        (*vm).depth = depth;
        // vmprof lines mode gets its own copy of the loop (see `run`).
        let status = if (*vm).vmprof_lines {
            run::<true>(vm, func, base)
        } else {
            run::<false>(vm, func, base)
        };
        (*vm).depth = depth - 1;
        status
    }
}

// ANCHOR_END: interp_entry

/// Runs `<main>` of the VM's module through its entry; returns the status
/// ([`STATUS_OK`], or `STATUS_ERROR` with the error in `vm.error` and the
/// traceback in `vm.trace`).
pub fn run_main(vm: &mut Vm<'_>) -> u32 {
    let main = vm.module.main;
    let vm: *mut Vm<'_> = vm;
    // SAFETY: `Vm::new` verified the module; every entry follows the ABI
    // (`set_entry` is unsafe for that reason); `stack_base` is register 0
    // of a value stack sized for max_depth frames; `<main>` takes no
    // arguments.
    unsafe {
        let entry = *(*vm).entry_table.add(main as usize);
        entry(vm, main, (*vm).stack_base)
    }
}

/// Checks that `interp_entry` has the ABI type (compile-time only).
const _: EntryFn = interp_entry;

/// Raises `err` at instruction `pc`.
#[cold]
#[inline(never)]
unsafe fn fail(vm: *mut Vm<'_>, err: RuntimeError, func: u32, pc: usize) -> u32 {
    // SAFETY: `vm` is valid (caller's contract) and not borrowed elsewhere.
    unsafe { (*vm).fail(err, func, pc) }
}

/// Runs the body of `func` in the frame at `regs`, the innermost frame.
///
/// `LINES` (a vmprof session recording lines, `Vm::vmprof_lines`): before
/// each instruction, store its index in the frame's record
/// ([`FrameRecord::pc`]), where the sampler's signal handler reads the
/// line each frame is executing. That is the only difference between the
/// two copies: without lines the loop is exactly what it was.
///
/// # Safety
/// As for [`interp_entry`].
// `!(a < b)` is deliberate: NaN operands must take the jump.
#[allow(clippy::neg_cmp_op_on_partial_ord)]
#[inline(always)]
unsafe fn run<const LINES: bool>(vm: *mut Vm<'_>, func: u32, regs: *mut u64) -> u32 {
    // SAFETY (whole body): register operands are < frame_size and the
    // frame lies in the value stack; constant/type/function indexes and
    // jump targets are in range (verified bytecode, see the module docs).
    // `vm` is only accessed through the raw pointer, one field at a time,
    // so the callee's accesses during a nested call alias nothing we hold.
    // Heap references read from typed ref registers are live objects of
    // the register's static type (GC root invariant), and no collection
    // runs while a borrow of an object obtained here is alive.
    unsafe {
        // Copy out raw pointers; no borrow of the VM outlives this block.
        let (code, consts, hotness) = {
            let funcs: &mut [_] = &mut (*vm).funcs;
            let rt = funcs.get_unchecked_mut(func as usize);
            for &r in rt.zero_regs.iter() {
                *regs.add(r as usize) = 0;
            }
            (rt.code, rt.consts.as_ptr(), &raw mut rt.hotness)
        };

        macro_rules! reg {
            ($r:expr) => {
                *regs.add($r as usize)
            };
        }
        macro_rules! int {
            ($r:expr) => {
                (*regs.add($r as usize) as i64)
            };
        }
        macro_rules! flt {
            ($r:expr) => {
                f64::from_bits(*regs.add($r as usize))
            };
        }
        macro_rules! set_int {
            ($r:expr, $v:expr) => {
                *regs.add($r as usize) = ($v) as u64
            };
        }
        macro_rules! set_flt {
            ($r:expr, $v:expr) => {
                *regs.add($r as usize) = f64::to_bits($v)
            };
        }
        macro_rules! set_bool {
            ($r:expr, $v:expr) => {
                *regs.add($r as usize) = ($v) as u64
            };
        }
        macro_rules! raise {
            ($pc:expr, $err:expr) => {
                return fail(vm, $err, func, $pc.offset_from(code) as usize - 1)
            };
        }

        let mut ip: *const Op = code;
        // ANCHOR: back_edge
        // Every jump goes through here: a backward one is a loop back-edge,
        // counted for tier-up; when the count runs out the JIT may hand
        // back an OSR entry that finishes this activation in compiled code.
        macro_rules! jump {
            ($target:expr) => {{
                let to = code.add($target as usize);
                if to < ip {
                    *hotness -= 1;
                    if *hotness < 0
                        && let Some(osr) = tier::hot_loop(vm, func, $target)
                    {
                        return osr(vm, regs);
                    }
                }
                ip = to;
            }};
        }
        // ANCHOR_END: back_edge

        // ANCHOR: lines_store
        // This frame's record: `interp_entry` made it the innermost one.
        let record_pc: *mut u32 = if LINES {
            &raw mut (*(*vm).frames.add((*vm).depth)).pc
        } else {
            std::ptr::null_mut()
        };
        loop {
            if LINES {
                // Volatile: nothing here reads it, the signal handler does.
                record_pc.write_volatile(ip.offset_from(code) as u32);
            }
            // ANCHOR_END: lines_store
            let op = *ip;
            ip = ip.add(1);
            match op {
                Op::Move { dst, src } => reg!(dst) = reg!(src),
                Op::LoadInt { dst, imm } => set_int!(dst, imm as i64),
                Op::LoadConst { dst, k } => reg!(dst) = *consts.add(k as usize),

                Op::AddI { dst, a, b } => set_int!(dst, int!(a).wrapping_add(int!(b))),
                Op::SubI { dst, a, b } => set_int!(dst, int!(a).wrapping_sub(int!(b))),
                Op::MulI { dst, a, b } => set_int!(dst, int!(a).wrapping_mul(int!(b))),
                Op::DivI { dst, a, b } => {
                    let d = int!(b);
                    if d == 0 {
                        raise!(ip, RuntimeError::DivisionByZero);
                    }
                    set_int!(dst, int!(a).wrapping_div(d));
                }
                Op::RemI { dst, a, b } => {
                    let d = int!(b);
                    if d == 0 {
                        raise!(ip, RuntimeError::ModuloByZero);
                    }
                    set_int!(dst, int!(a).wrapping_rem(d));
                }
                Op::AndI { dst, a, b } => set_int!(dst, int!(a) & int!(b)),
                Op::OrI { dst, a, b } => set_int!(dst, int!(a) | int!(b)),
                Op::XorI { dst, a, b } => set_int!(dst, int!(a) ^ int!(b)),
                Op::ShlI { dst, a, b } => set_int!(dst, int!(a).wrapping_shl(int!(b) as u32)),
                Op::ShrI { dst, a, b } => set_int!(dst, int!(a).wrapping_shr(int!(b) as u32)),
                Op::NegI { dst, src } => set_int!(dst, int!(src).wrapping_neg()),
                Op::AddIImm { dst, a, imm } => set_int!(dst, int!(a).wrapping_add(imm as i64)),
                Op::MulIImm { dst, a, imm } => set_int!(dst, int!(a).wrapping_mul(imm as i64)),
                Op::DivIImm { dst, a, imm } => set_int!(dst, int!(a).wrapping_div(imm as i64)),
                Op::RemIImm { dst, a, imm } => set_int!(dst, int!(a).wrapping_rem(imm as i64)),

                Op::AddF { dst, a, b } => set_flt!(dst, flt!(a) + flt!(b)),
                Op::SubF { dst, a, b } => set_flt!(dst, flt!(a) - flt!(b)),
                Op::MulF { dst, a, b } => set_flt!(dst, flt!(a) * flt!(b)),
                Op::DivF { dst, a, b } => set_flt!(dst, flt!(a) / flt!(b)),
                Op::RemF { dst, a, b } => set_flt!(dst, flt!(a) % flt!(b)),
                Op::NegF { dst, src } => set_flt!(dst, -flt!(src)),

                Op::EqI { dst, a, b } => set_bool!(dst, reg!(a) == reg!(b)),
                Op::NeI { dst, a, b } => set_bool!(dst, reg!(a) != reg!(b)),
                Op::LtI { dst, a, b } => set_bool!(dst, int!(a) < int!(b)),
                Op::LeI { dst, a, b } => set_bool!(dst, int!(a) <= int!(b)),
                Op::EqF { dst, a, b } => set_bool!(dst, flt!(a) == flt!(b)),
                Op::NeF { dst, a, b } => set_bool!(dst, flt!(a) != flt!(b)),
                Op::LtF { dst, a, b } => set_bool!(dst, flt!(a) < flt!(b)),
                Op::LeF { dst, a, b } => set_bool!(dst, flt!(a) <= flt!(b)),
                Op::EqS { dst, a, b } => set_bool!(dst, str_ref(reg!(a)) == str_ref(reg!(b))),
                Op::NeS { dst, a, b } => set_bool!(dst, str_ref(reg!(a)) != str_ref(reg!(b))),
                Op::LtS { dst, a, b } => set_bool!(dst, str_ref(reg!(a)) < str_ref(reg!(b))),
                Op::LeS { dst, a, b } => set_bool!(dst, str_ref(reg!(a)) <= str_ref(reg!(b))),
                Op::Not { dst, src } => reg!(dst) = reg!(src) ^ 1,

                Op::Jmp { target } => jump!(target),
                Op::JmpIf { a, target } => {
                    if reg!(a) != 0 {
                        jump!(target);
                    }
                }
                Op::JmpIfNot { a, target } => {
                    if reg!(a) == 0 {
                        jump!(target);
                    }
                }
                Op::JmpIfNotLtI { a, b, target } => {
                    if int!(a) >= int!(b) {
                        jump!(target);
                    }
                }
                Op::JmpIfNotLeI { a, b, target } => {
                    if int!(a) > int!(b) {
                        jump!(target);
                    }
                }
                Op::JmpIfNotEqI { a, b, target } => {
                    if reg!(a) != reg!(b) {
                        jump!(target);
                    }
                }
                Op::JmpIfNotNeI { a, b, target } => {
                    if reg!(a) == reg!(b) {
                        jump!(target);
                    }
                }
                Op::JmpIfNotLtIImm { a, imm, target } => {
                    if int!(a) >= imm as i64 {
                        jump!(target);
                    }
                }
                Op::JmpIfNotLeIImm { a, imm, target } => {
                    if int!(a) > imm as i64 {
                        jump!(target);
                    }
                }
                Op::JmpIfNotGtIImm { a, imm, target } => {
                    if int!(a) <= imm as i64 {
                        jump!(target);
                    }
                }
                Op::JmpIfNotGeIImm { a, imm, target } => {
                    if int!(a) < imm as i64 {
                        jump!(target);
                    }
                }
                Op::JmpIfNotEqIImm { a, imm, target } => {
                    if int!(a) != imm as i64 {
                        jump!(target);
                    }
                }
                Op::JmpIfNotNeIImm { a, imm, target } => {
                    if int!(a) == imm as i64 {
                        jump!(target);
                    }
                }
                Op::JmpIfNotLtF { a, b, target } => {
                    if !(flt!(a) < flt!(b)) {
                        jump!(target);
                    }
                }
                Op::JmpIfNotLeF { a, b, target } => {
                    if !(flt!(a) <= flt!(b)) {
                        jump!(target);
                    }
                }
                Op::JmpIfLtF { a, b, target } => {
                    if flt!(a) < flt!(b) {
                        jump!(target);
                    }
                }
                Op::JmpIfLeF { a, b, target } => {
                    if flt!(a) <= flt!(b) {
                        jump!(target);
                    }
                }
                Op::ForPrep {
                    counter,
                    end,
                    target,
                } => {
                    if int!(counter) >= int!(end) {
                        jump!(target);
                    }
                }
                Op::ForLoop {
                    counter,
                    end,
                    target,
                } => {
                    let next = int!(counter) + 1;
                    set_int!(counter, next);
                    if next < int!(end) {
                        jump!(target);
                    }
                }

                // ANCHOR: call_op
                Op::Call {
                    func: callee,
                    base,
                    dst,
                } => {
                    let entry = *(*vm).entry_table.add(callee as usize);
                    if entry(vm, callee as u32, regs.add(base as usize)) != STATUS_OK {
                        (*vm).trace.push(TraceEntry {
                            func,
                            pc: (ip.offset_from(code) - 1) as u32,
                        });
                        return STATUS_ERROR;
                    }
                    reg!(dst) = reg!(base);
                }
                // ANCHOR_END: call_op
                Op::Return { src } => {
                    reg!(0) = reg!(src);
                    return STATUS_OK;
                }
                Op::ReturnVoid => return STATUS_OK,

                Op::LenS { dst, src } => set_int!(dst, str_ref(reg!(src)).len()),

                Op::GetElem { dst, arr, idx } => {
                    let a = arr_mut(reg!(arr));
                    let i = int!(idx);
                    match a.elems.get(i as usize) {
                        Some(&v) if i >= 0 => reg!(dst) = v,
                        _ => raise!(
                            ip,
                            RuntimeError::IndexOutOfRange {
                                index: i,
                                len: a.elems.len()
                            }
                        ),
                    }
                }
                Op::SetElem { arr, idx, val } => {
                    let a = arr_mut(reg!(arr));
                    let i = int!(idx);
                    let len = a.elems.len();
                    match a.elems.get_mut(i as usize) {
                        Some(slot) if i >= 0 => *slot = reg!(val),
                        _ => raise!(ip, RuntimeError::IndexOutOfRange { index: i, len }),
                    }
                }
                Op::LenA { dst, src } => set_int!(dst, arr_mut(reg!(src)).elems.len()),
                Op::Pop { dst, arr } => match arr_mut(reg!(arr)).elems.pop() {
                    Some(v) => reg!(dst) = v,
                    None => raise!(ip, RuntimeError::PopEmpty),
                },

                Op::IntToFloat { dst, src } => set_flt!(dst, int!(src) as f64),
                Op::FloatToInt { dst, src } => set_int!(dst, flt!(src) as i64),
                Op::Sqrt { dst, src } => set_flt!(dst, flt!(src).sqrt()),
                slow_ops!() => {
                    if slow_op(vm, func, regs, op, ip.offset_from(code) as usize) != STATUS_OK {
                        return STATUS_ERROR;
                    }
                }
            }
        }
    }
}

/// Executes instruction `pc` of function `func` in the frame at `regs`,
/// out of line, if it is one of the allocating, printing or parsing
/// instructions (`Concat`, `NewArray`, `RepeatArray`, `Push`, `Print`,
/// `ToStr`, `Clock`, `Args`, `ParseInt`, `ParseFloat`; any other
/// instruction is ignored). Compiled code calls this for the instructions
/// it does not implement inline. It may collect garbage afterwards, so
/// every live reference must be in the frame's ref registers, as the GC
/// invariant requires anyway. Returns [`STATUS_OK`] or [`STATUS_ERROR`]
/// (error and trace entry recorded, as for any entry).
///
/// # Safety
/// `vm` valid with a verified module; `func`/`pc` an instruction of it;
/// `regs` the active frame of `func` (its record pushed, as the entry ABI
/// requires).
pub unsafe extern "C" fn run_slow_op(vm: *mut Vm<'_>, func: u32, regs: *mut u64, pc: u32) -> u32 {
    // SAFETY: caller's contract; `pc` indexes verified code.
    unsafe {
        let funcs: &[_] = &(*vm).funcs;
        let op = *funcs.get_unchecked(func as usize).code.add(pc as usize);
        slow_op(vm, func, regs, op, pc as usize + 1)
    }
}

// ANCHOR: make_room
/// Makes sure `bytes` more fit under the heap limit, collecting first if
/// they do not and garbage may be what is in the way. Runs at the start of
/// an allocating instruction, where every live reference is in a ref
/// register (the instruction's result is not written yet).
///
/// # Safety
/// As for [`run`], at an instruction boundary of the active frame.
unsafe fn make_room(vm: *mut Vm<'_>, bytes: usize) -> Result<(), RuntimeError> {
    // SAFETY: the caller's contract: the GC root invariant holds here.
    unsafe {
        let heap = &(*vm).heap;
        if !heap.has_room(bytes) && heap.may_have_garbage() {
            (*vm).collect();
        }
        if (*vm).heap.has_room(bytes) {
            Ok(())
        } else {
            Err(RuntimeError::OutOfMemory)
        }
    }
}
// ANCHOR_END: make_room

/// The instructions that allocate, print or parse, kept out of the main
/// loop so that its hot state stays in machine registers. Runs `op` (the
/// instruction before `pc`: `pc` is the index of the next instruction) in
/// the frame at `regs`.
///
/// # Safety
/// As for [`run`]: `op` comes from verified code of `func`.
#[inline(never)]
unsafe fn slow_op(vm: *mut Vm<'_>, func: u32, regs: *mut u64, op: Op, pc: usize) -> u32 {
    // SAFETY: as in `run` (same invariants, same frame).
    unsafe {
        macro_rules! reg {
            ($r:expr) => {
                *regs.add($r as usize)
            };
        }
        macro_rules! int {
            ($r:expr) => {
                (*regs.add($r as usize) as i64)
            };
        }
        macro_rules! set_int {
            ($r:expr, $v:expr) => {
                *regs.add($r as usize) = ($v) as u64
            };
        }
        macro_rules! set_flt {
            ($r:expr, $v:expr) => {
                *regs.add($r as usize) = f64::to_bits($v)
            };
        }
        macro_rules! raise {
            ($pc:expr, $err:expr) => {
                return fail(vm, $err, func, $pc - 1)
            };
        }
        macro_rules! gc_point {
            () => {
                if (*vm).heap.should_collect() {
                    (*vm).collect();
                }
            };
        }
        match op {
            Op::Concat { dst, a, b } => {
                let len = str_ref(reg!(a))
                    .len()
                    .saturating_add(str_ref(reg!(b)).len());
                if let Err(e) = make_room(vm, len) {
                    raise!(pc, e);
                }
                let (x, y) = (str_ref(reg!(a)), str_ref(reg!(b)));
                let mut s = match (*vm).heap.new_string(len) {
                    Ok(s) => s,
                    Err(e) => raise!(pc, e),
                };
                s.push_str(x);
                s.push_str(y);
                reg!(dst) = (*vm).heap.alloc_str(s);
                gc_point!();
            }
            Op::NewArray { dst, refs, cap } => {
                let elems = match (*vm).heap.new_slots(cap as usize) {
                    Ok(v) => v,
                    Err(e) => raise!(pc, e),
                };
                reg!(dst) = (*vm).heap.alloc_array(refs, elems);
                gc_point!();
            }
            Op::RepeatArray {
                dst,
                val,
                count,
                depth,
                refs,
            } => {
                let n = match builtins::repeat_count(int!(count)) {
                    Ok(n) => n,
                    Err(e) => raise!(pc, e),
                };
                let size = builtins::repeat_size(reg!(val), depth as u32, n);
                if let Err(e) = make_room(vm, size) {
                    raise!(pc, e);
                }
                let mut elems = match (*vm).heap.new_slots(n) {
                    Ok(v) => v,
                    Err(e) => raise!(pc, e),
                };
                let v = reg!(val);
                if depth == 0 {
                    elems.resize(n, v);
                } else {
                    for _ in 0..n {
                        match builtins::deep_copy(&mut (*vm).heap, v, depth as u32) {
                            Ok(copy) => elems.push(copy),
                            Err(e) => raise!(pc, e),
                        }
                    }
                }
                reg!(dst) = (*vm).heap.alloc_array(refs, elems);
                gc_point!();
            }
            Op::Push { arr, val } => {
                let growth = heap::push_growth_bytes(&arr_mut(reg!(arr)).elems);
                if growth != 0
                    && let Err(e) = make_room(vm, growth)
                {
                    raise!(pc, e);
                }
                // Borrowed after `make_room`'s collection: the array is
                // rooted (its register), so it survived, unmoved.
                let a = arr_mut(reg!(arr));
                let grew = match (*vm).heap.reserve_push(&mut a.elems) {
                    Ok(grew) => grew,
                    Err(e) => raise!(pc, e),
                };
                a.elems.push(reg!(val));
                if grew {
                    gc_point!();
                }
            }
            Op::Print { src, ty } => {
                let vmr = &mut *vm;
                let ty = vmr.module.types.get_unchecked(ty as usize);
                vmr.scratch.clear();
                write_value(&mut vmr.scratch, reg!(src), ty);
                vmr.scratch.push('\n');
                if let Err(e) = vmr.out.write(vmr.scratch.as_bytes()) {
                    raise!(pc, e);
                }
            }
            Op::ToStr { dst, src, ty } => {
                let vmr = &mut *vm;
                let ty = vmr.module.types.get_unchecked(ty as usize);
                let mut s = String::new();
                write_scalar(&mut s, reg!(src), ty);
                reg!(dst) = vmr.heap.alloc_str(s);
                gc_point!();
            }
            Op::Clock { dst } => set_flt!(dst, (*vm).start.elapsed().as_secs_f64()),
            Op::Args { dst } => {
                let vmr = &mut *vm;
                let elems = vmr.args.clone();
                reg!(dst) = vmr.heap.alloc_array(true, elems);
                gc_point!();
            }
            Op::ParseInt { dst, src } => match builtins::parse_int(str_ref(reg!(src))) {
                Ok(v) => set_int!(dst, v),
                Err(e) => raise!(pc, e),
            },
            Op::ParseFloat { dst, src } => match builtins::parse_float(str_ref(reg!(src))) {
                Ok(v) => set_flt!(dst, v),
                Err(e) => raise!(pc, e),
            },
            _ => {}
        }
        STATUS_OK
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bytecode::Module;
    use crate::driver;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn module(src: &str) -> Module {
        driver::load("t.toy", src.as_bytes()).expect("compiles")
    }

    const SRC: &str = "fn answer(x: int) -> int { return x + 1; }\nprint(answer(1) + answer(2));\n";

    #[test]
    fn the_interpreter_runs_main_through_the_entry_table() {
        let m = module(SRC);
        let mut out = Vec::new();
        let mut vm = Vm::new(&m, vec![], 100, &mut out).unwrap();
        assert_eq!(run_main(&mut vm), STATUS_OK);
        assert_eq!(vm.depth, 0);
        vm.out.flush().unwrap();
        drop(vm);
        assert_eq!(out, b"5\n");
    }

    /// Stands in for compiled code: returns 40 + its argument.
    unsafe extern "C" fn native_answer(vm: *mut Vm<'_>, _func: u32, base: *mut u64) -> u32 {
        // SAFETY: the ABI: `base[0]` holds the argument and takes the result.
        unsafe {
            if (*vm).depth >= (*vm).max_depth {
                (*vm).error = Some(RuntimeError::DepthExceeded((*vm).max_depth));
                return STATUS_ERROR;
            }
            *base = (*base as i64 + 40) as u64;
        }
        STATUS_OK
    }

    #[test]
    fn a_replaced_entry_is_called_with_arguments_in_place() {
        let m = module(SRC);
        let mut out = Vec::new();
        let mut vm = Vm::new(&m, vec![], 100, &mut out).unwrap();
        // SAFETY: `native_answer` follows the ABI for `answer(int) -> int`.
        assert!(unsafe { vm.set_entry(0, native_answer) });
        assert_eq!(run_main(&mut vm), STATUS_OK);
        vm.out.flush().unwrap();
        drop(vm);
        assert_eq!(out, b"83\n");
    }

    static TRAMPOLINE_CALLS: AtomicUsize = AtomicUsize::new(0);

    /// A perf-style trampoline: counts, then runs the function in the
    /// interpreter.
    unsafe extern "C" fn counting_trampoline(vm: *mut Vm<'_>, func: u32, base: *mut u64) -> u32 {
        TRAMPOLINE_CALLS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded unchanged from our caller, which obeyed the ABI.
        unsafe { interp_entry(vm, func, base) }
    }

    #[test]
    fn trampolines_can_wrap_the_interpreter() {
        let m = module(SRC);
        let mut out = Vec::new();
        let mut vm = Vm::new(&m, vec![], 100, &mut out).unwrap();
        // SAFETY: the trampoline forwards to `interp_entry`.
        unsafe { vm.set_entry(0, counting_trampoline) };
        assert_eq!(run_main(&mut vm), STATUS_OK);
        assert_eq!(TRAMPOLINE_CALLS.load(Ordering::Relaxed), 2);
    }

    /// Fails like a runtime error raised in compiled code.
    unsafe extern "C" fn failing(vm: *mut Vm<'_>, func: u32, _base: *mut u64) -> u32 {
        // SAFETY: `vm` is valid per the ABI.
        unsafe { (*vm).fail(RuntimeError::PopEmpty, func, 0) }
    }

    #[test]
    fn errors_from_an_entry_unwind_with_a_traceback() {
        let m = module(SRC);
        let mut out = Vec::new();
        let mut vm = Vm::new(&m, vec![], 100, &mut out).unwrap();
        // SAFETY: `failing` reports an error the ABI way.
        unsafe { vm.set_entry(0, failing) };
        assert_eq!(run_main(&mut vm), STATUS_ERROR);
        assert_eq!(vm.error, Some(RuntimeError::PopEmpty));
        assert_eq!(
            vm.trace,
            vec![TraceEntry { func: 0, pc: 0 }, TraceEntry { func: 1, pc: 1 }]
        );
        assert_eq!(vm.depth, 0);
    }

    /// A hand-written "compiled" `twice(s: str) -> str { return s + s; }`:
    /// follows the entry protocol and runs the concatenation out of line.
    unsafe extern "C" fn compiled_twice(vm: *mut Vm<'_>, func: u32, base: *mut u64) -> u32 {
        // SAFETY: the entry ABI; instruction 0 of `twice` is its Concat
        // into register 1, checked by the test below.
        unsafe {
            let depth = (*vm).depth + 1;
            if depth > (*vm).max_depth {
                (*vm).error = Some(RuntimeError::DepthExceeded((*vm).max_depth));
                return STATUS_ERROR;
            }
            *(*vm).frames.add(depth) = FrameRecord { base, func, pc: 0 };
            (*vm).depth = depth;
            *base.add(1) = 0; // a non-parameter ref register
            let status = run_slow_op(vm, func, base, 0);
            if status == STATUS_OK {
                *base = *base.add(1);
            }
            (*vm).depth = depth - 1;
            status
        }
    }

    #[test]
    fn compiled_code_can_run_slow_instructions_out_of_line() {
        let m = module("fn twice(s: str) -> str { return s + s; }\nprint(twice(\"ab\"));\n");
        assert!(matches!(
            m.functions[0].code[0],
            Op::Concat { dst: 1, a: 0, b: 0 }
        ));
        let mut out = Vec::new();
        let mut vm = Vm::new(&m, vec![], 100, &mut out).unwrap();
        vm.heap.set_stress();
        // SAFETY: `compiled_twice` implements `twice` with the entry ABI.
        unsafe { vm.set_entry(0, compiled_twice) };
        assert_eq!(run_main(&mut vm), STATUS_OK);
        vm.out.flush().unwrap();
        drop(vm);
        assert_eq!(out, b"abab\n");
    }

    #[test]
    fn set_entry_rejects_unknown_functions() {
        let m = module(SRC);
        let mut out = Vec::new();
        let mut vm = Vm::new(&m, vec![], 100, &mut out).unwrap();
        // SAFETY: nothing is installed.
        assert!(!unsafe { vm.set_entry(7, failing) });
        assert!(vm.entry(7).is_none());
    }
}
