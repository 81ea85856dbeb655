//! The instructions that allocate, print, parse or read the clock (the
//! table's `slow` section), run out of line: by the interpreter's handlers
//! and, through [`run_slow_op`], by compiled code, so both tiers share one
//! implementation and fail with identical errors.

use super::regs::Regs;
use super::{STATUS_OK, Vm};
use crate::bytecode::Op;
use crate::runtime::heap::{self, arr_mut, str_ref};
use crate::runtime::print::{write_scalar, write_value};
use crate::runtime::{RuntimeError, builtins};

/// Records `err`, raised at instruction `pc` of `func`.
#[cold]
#[inline(never)]
unsafe fn fail(vm: *mut Vm<'_>, err: RuntimeError, func: u32, pc: usize) -> u32 {
    // SAFETY: `vm` is valid (caller's contract) and not borrowed elsewhere.
    unsafe { (*vm).fail(err, func, pc) }
}

/// Executes instruction `pc` of function `func` in the frame at `regs`,
/// out of line, if it is one of the allocating, printing or parsing
/// instructions (`Concat`, `NewArray`, `RepeatArray`, `Push`, `Print`,
/// `ToStr`, `Clock`, `Args`, `ParseInt`, `ParseFloat`; any other
/// instruction is ignored). Compiled code calls this for the instructions
/// it does not implement inline. It may collect garbage afterwards, so
/// every live reference must be in the frame's ref registers, as the GC
/// invariant requires anyway. Returns [`STATUS_OK`] or [`STATUS_ERROR`](super::STATUS_ERROR)
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
        let op = funcs
            .get_unchecked(func as usize)
            .slots
            .get_unchecked(pc as usize)
            .op();
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
/// As for [`slow_op`].
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

/// Runs `op`, one of the table's `slow` instructions (`pc` is the index of
/// the *next* instruction), in the frame at `regs`; any other instruction
/// is ignored. Kept out of the handlers so that theirs stay small.
///
/// # Safety
/// As for [`super::interp_entry`], at an instruction boundary of the
/// active frame of `func`: `op` comes from its verified code.
#[inline(never)]
pub(super) unsafe fn slow_op(vm: *mut Vm<'_>, func: u32, regs: *mut u64, op: Op, pc: usize) -> u32 {
    // SAFETY: the caller's contract (verified code, the active frame).
    unsafe {
        let r = Regs::new(regs);
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
                let len = str_ref(r.get(a))
                    .len()
                    .saturating_add(str_ref(r.get(b)).len());
                if let Err(e) = make_room(vm, len) {
                    raise!(pc, e);
                }
                let (x, y) = (str_ref(r.get(a)), str_ref(r.get(b)));
                let mut s = match (*vm).heap.new_string(len) {
                    Ok(s) => s,
                    Err(e) => raise!(pc, e),
                };
                s.push_str(x);
                s.push_str(y);
                r.set(dst, (*vm).heap.alloc_str(s));
                gc_point!();
            }
            Op::NewArray { dst, refs, cap } => {
                let elems = match (*vm).heap.new_slots(cap as usize) {
                    Ok(v) => v,
                    Err(e) => raise!(pc, e),
                };
                r.set(dst, (*vm).heap.alloc_array(refs, elems));
                gc_point!();
            }
            Op::RepeatArray {
                dst,
                val,
                count,
                depth,
                refs,
            } => {
                let n = match builtins::repeat_count(r.int(count)) {
                    Ok(n) => n,
                    Err(e) => raise!(pc, e),
                };
                let size = builtins::repeat_size(r.get(val), depth as u32, n);
                if let Err(e) = make_room(vm, size) {
                    raise!(pc, e);
                }
                let mut elems = match (*vm).heap.new_slots(n) {
                    Ok(v) => v,
                    Err(e) => raise!(pc, e),
                };
                let v = r.get(val);
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
                r.set(dst, (*vm).heap.alloc_array(refs, elems));
                gc_point!();
            }
            Op::Push { arr, val } => {
                let growth = heap::push_growth_bytes(&arr_mut(r.get(arr)).elems);
                if growth != 0
                    && let Err(e) = make_room(vm, growth)
                {
                    raise!(pc, e);
                }
                // Borrowed after `make_room`'s collection: the array is
                // rooted (its register), so it survived, unmoved.
                let a = arr_mut(r.get(arr));
                let grew = match (*vm).heap.reserve_push(&mut a.elems) {
                    Ok(grew) => grew,
                    Err(e) => raise!(pc, e),
                };
                a.elems.push(r.get(val));
                if grew {
                    gc_point!();
                }
            }
            Op::Print { src, ty } => {
                let vmr = &mut *vm;
                let ty = vmr.module.types.get_unchecked(ty as usize);
                vmr.scratch.clear();
                write_value(&mut vmr.scratch, r.get(src), ty);
                vmr.scratch.push('\n');
                if let Err(e) = vmr.out.write(vmr.scratch.as_bytes()) {
                    raise!(pc, e);
                }
            }
            Op::ToStr { dst, src, ty } => {
                let vmr = &mut *vm;
                let ty = vmr.module.types.get_unchecked(ty as usize);
                let mut s = String::new();
                write_scalar(&mut s, r.get(src), ty);
                r.set(dst, vmr.heap.alloc_str(s));
                gc_point!();
            }
            Op::Clock { dst } => r.set_flt(dst, (*vm).start.elapsed().as_secs_f64()),
            Op::Args { dst } => {
                let vmr = &mut *vm;
                let elems = vmr.args.clone();
                r.set(dst, vmr.heap.alloc_array(true, elems));
                gc_point!();
            }
            Op::ParseInt { dst, src } => match builtins::parse_int(str_ref(r.get(src))) {
                Ok(v) => r.set_int(dst, v),
                Err(e) => raise!(pc, e),
            },
            Op::ParseFloat { dst, src } => match builtins::parse_float(str_ref(r.get(src))) {
                Ok(v) => r.set_flt(dst, v),
                Err(e) => raise!(pc, e),
            },
            _ => {}
        }
        STATUS_OK
    }
}
