//! The bytecode verifier: what makes running a [`Module`] from safe code
//! sound. The interpreter and the JIT trust every operand (no bounds or
//! type checks at run time), so [`verify`] proves, before a VM accepts a
//! module, that
//!
//! * every index (register, constant, function, type, jump target) is in
//!   range, call windows start in the call area and fit the frame, and
//!   execution cannot run off the end of the code;
//! * every register operand has the type its instruction's table row asks
//!   for ([`RegClass`]), and the instructions whose operands are related
//!   (`Move`, `Call`, element access, `Print`, ...) agree with each other;
//! * the GC root map is exactly the typed reference registers;
//! * a typed reference register that is not a parameter is written before
//!   it is read, on every path (the interpreter zeroes it on entry, for the
//!   collector: reading it earlier would dereference null).
//!
//! Typed registers have one type for the whole function. The call area is
//! untyped: a forward data-flow pass tracks what each of its slots holds
//! (unknown after a merge of different types, and after anything that may
//! collect garbage, since the collector does not scan the call area). A
//! slot read as a reference must be known to hold one of the right type;
//! a slot read as a scalar may hold anything (any bits are a valid int,
//! float or bool: wrong, but not undefined behaviour).

use super::{Const, Function, Module, Op, Operand, Reg, RegClass, RegOperand};
use crate::types::Type;

/// Checks the invariants above; the error names the function and the
/// instruction.
pub fn verify(module: &Module) -> Result<(), String> {
    if module.main as usize >= module.functions.len() {
        return Err("no <main> function".into());
    }
    // `<main>` is called with no arguments: a parameter would read null.
    if !module.functions[module.main as usize].params.is_empty() {
        return Err("<main> has parameters".into());
    }
    if module.functions.len() > u16::MAX as usize + 1 {
        return Err("too many functions".into());
    }
    for f in &module.functions {
        let checker = Checker { module, f };
        checker
            .layout()
            .and_then(|()| checker.ranges())
            .and_then(|()| checker.types())
            .map_err(|(pc, what)| format!("{}: instruction {pc}: {what}", f.name))?;
    }
    Ok(())
}

/// An error: the instruction index and what is wrong.
type Failure = (usize, String);

/// What each call-area slot is known to hold (`None`: unknown).
type CallArea = Vec<Option<Type>>;

/// Per typed register: written on every path so far (a reference register
/// that is not a parameter holds null until then).
type Assigned = Vec<bool>;

struct Checker<'m> {
    module: &'m Module,
    f: &'m Function,
}

/// Whether a value of type `t` may be an operand of class `class`.
fn fits(t: &Type, class: RegClass) -> bool {
    match class {
        // Scalars share one representation (64 bits, any pattern valid),
        // and the compiler reuses scalar temporaries across scalar types:
        // only references must match exactly to keep runs sound.
        RegClass::Int | RegClass::Float | RegClass::Bool | RegClass::IntOrBool => is_scalar(t),
        RegClass::Str => *t == Type::Str,
        RegClass::Array => matches!(t, Type::Array(_)),
        RegClass::Any => *t != Type::Void,
    }
}

/// An `int`, `float` or `bool`.
fn is_scalar(t: &Type) -> bool {
    !t.is_ref() && *t != Type::Void
}

/// How many arrays deep `t` is (`[[int]]`: 2).
fn array_depth(t: &Type) -> usize {
    match t {
        Type::Array(e) => 1 + array_depth(e),
        _ => 0,
    }
}

impl Checker<'_> {
    /// Frame layout, parameter types and the GC root map.
    fn layout(&self) -> Result<(), Failure> {
        let f = self.f;
        let frame = f.frame_size as usize;
        let bad = |what: &str| Err((0, what.to_string()));
        if frame > super::MAX_REGS || f.num_typed() > frame || f.params.len() > f.num_typed() {
            return bad("bad frame layout");
        }
        if f.spans.len() != f.code.len() {
            return bad("bad register map or span table");
        }
        let params_match = f.params.iter().zip(&f.reg_types).all(|((_, p), r)| p == r);
        let roots: Vec<Reg> = (0..f.num_typed())
            .filter(|&r| f.reg_types[r].is_ref())
            .map(|r| r as Reg)
            .collect();
        let mut ref_regs = f.ref_regs.clone();
        ref_regs.sort_unstable();
        if !params_match || ref_regs != roots || f.reg_types.contains(&Type::Void) {
            return bad("bad register map or span table");
        }
        if f.code.last().is_none_or(Op::falls_through) {
            return Err((f.code.len(), "code can run off the end".into()));
        }
        Ok(())
    }

    /// Every index operand in range.
    fn ranges(&self) -> Result<(), Failure> {
        let (f, module) = (self.f, self.module);
        for (pc, op) in f.code.iter().enumerate() {
            for operand in op.operands() {
                let ok = match operand {
                    Operand::Reg(r) => (r.reg as usize) < f.frame_size as usize,
                    Operand::Const(k) => (k as usize) < f.consts.len(),
                    Operand::Target(t) => (t as usize) < f.code.len(),
                    Operand::Func(i) => (i as usize) < module.functions.len(),
                    Operand::Type(t) => (t as usize) < module.types.len(),
                    Operand::Imm(_) | Operand::Flag(..) | Operand::Num(..) => true,
                };
                if !ok {
                    return Err((pc, format!("operand {operand:?} out of range")));
                }
            }
            if let Op::Call { base, func, .. } = *op {
                if (base as usize) < f.num_typed() {
                    return Err((pc, "call window overlaps typed registers".into()));
                }
                let args = module.functions[func as usize].params.len();
                if base as usize + args > f.frame_size as usize {
                    return Err((pc, "call arguments outside the frame".into()));
                }
            }
            // The interpreter's `wrapping_div` by an immediate 0 panics
            // (the compiler keeps `/ 0` as `DivI`, which fails cleanly).
            if let Op::DivIImm { imm: 0, .. } | Op::RemIImm { imm: 0, .. } = op {
                return Err((pc, "division by an immediate 0".into()));
            }
            if let Op::Spin { k } = *op
                && !matches!(f.consts[k as usize], Const::Int(1..=super::MAX_SPIN))
            {
                return Err((pc, "spin count not an int in 1..=MAX_SPIN".into()));
            }
            if let Op::Return { .. } = op
                && f.ret.is_none()
            {
                return Err((pc, "value returned from a function without a result".into()));
            }
        }
        Ok(())
    }

    /// Operand types, with the call area tracked by a forward data-flow
    /// pass to a fixed point.
    fn types(&self) -> Result<(), Failure> {
        let code = &self.f.code;
        let area_len = self.f.frame_size as usize - self.f.num_typed();
        // Typed registers that hold a value: every scalar (zero is a valid
        // int, float and bool) and the parameters from the start.
        let assigned: Assigned = (0..self.f.num_typed())
            .map(|r| r < self.f.params.len() || !self.f.reg_types[r].is_ref())
            .collect();
        let mut state: Vec<Option<(CallArea, Assigned)>> = vec![None; code.len()];
        state[0] = Some((vec![None; area_len], assigned));
        let mut work = vec![0usize];
        while let Some(pc) = work.pop() {
            let (mut area, mut assigned) = state[pc].clone().expect("queued with a state");
            self.assignment(&code[pc], &mut assigned)
                .map_err(|what| (pc, what))?;
            self.instruction(&code[pc], &mut area)
                .map_err(|what| (pc, what))?;
            let next = code[pc].falls_through().then_some(pc + 1);
            for succ in code[pc].targets().map(|t| t as usize).chain(next) {
                let merged = match &state[succ] {
                    None => (area.clone(), assigned.clone()),
                    Some((old, old_assigned)) => (
                        old.iter()
                            .zip(&area)
                            .map(|(a, b)| if a == b { a.clone() } else { None })
                            .collect(),
                        old_assigned
                            .iter()
                            .zip(&assigned)
                            .map(|(a, b)| *a && *b)
                            .collect(),
                    ),
                };
                if state[succ].as_ref() != Some(&merged) {
                    state[succ] = Some(merged);
                    work.push(succ);
                }
            }
        }
        Ok(())
    }

    /// Requires every typed register `op` reads to be assigned (see
    /// [`Assigned`]), then marks the ones it writes.
    fn assignment(&self, op: &Op, assigned: &mut Assigned) -> Result<(), String> {
        for r in op.regs() {
            if r.access.reads() && assigned.get(r.reg as usize) == Some(&false) {
                return Err(format!("r{} may be read before it is assigned", r.reg));
            }
        }
        for r in op.regs().filter(|r| r.access.writes()) {
            if let Some(a) = assigned.get_mut(r.reg as usize) {
                *a = true;
            }
        }
        Ok(())
    }

    /// What register `r` holds: its type if typed, else what is known.
    fn get(&self, area: &CallArea, r: Reg) -> Option<Type> {
        let r = r as usize;
        match self.f.reg_types.get(r) {
            Some(t) => Some(t.clone()),
            None => area[r - self.f.num_typed()].clone(),
        }
    }

    /// Requires `r` to hold a `t` (anything, if `t` is a scalar and `r` an
    /// unknown call-area slot).
    fn expect(&self, area: &CallArea, r: Reg, t: &Type) -> Result<(), String> {
        match self.get(area, r) {
            Some(have) if have == *t || (is_scalar(&have) && is_scalar(t)) => Ok(()),
            None if !t.is_ref() => Ok(()),
            have => Err(mismatch(r, t, have)),
        }
    }

    /// Records that `r` now holds a `t` (`None`: unknown).
    fn def(&self, area: &mut CallArea, r: Reg, t: Option<Type>) -> Result<(), String> {
        let r = r as usize;
        match self.f.reg_types.get(r) {
            Some(have) => match t {
                Some(t) if t == *have || (is_scalar(&t) && is_scalar(have)) => Ok(()),
                None if !have.is_ref() => Ok(()),
                t => Err(format!(
                    "r{r} is {have} but receives {}",
                    t.map_or("an unknown value".into(), |t| t.to_string())
                )),
            },
            None => {
                area[r - self.f.num_typed()] = t;
                Ok(())
            }
        }
    }

    /// Checks one instruction and applies its effect on the call area.
    fn instruction(&self, op: &Op, area: &mut CallArea) -> Result<(), String> {
        for RegOperand {
            reg, access, class, ..
        } in op.regs()
        {
            if access.reads() && class != RegClass::Any {
                match self.get(area, reg) {
                    Some(t) if !fits(&t, class) => {
                        return Err(format!("r{reg} is {t}, expected {class:?}"));
                    }
                    None if matches!(class, RegClass::Str | RegClass::Array) => {
                        return Err(format!("r{reg} is not known to hold a {class:?}"));
                    }
                    _ => {}
                }
            }
            if access.writes()
                && let Some(t) = self.f.reg_types.get(reg as usize)
                && !fits(t, class)
            {
                return Err(format!("r{reg} is {t}, cannot receive a {class:?}"));
            }
        }
        self.related(op, area)?;
        // The collector may run inside a call or a slow instruction (after
        // it wrote its result) and does not scan the call area.
        if op.is_slow() || matches!(op, Op::Call { .. }) {
            for slot in area
                .iter_mut()
                .filter(|s| s.as_ref().is_some_and(Type::is_ref))
            {
                *slot = None;
            }
        }
        Ok(())
    }

    /// The element type of array register `arr` (its class is checked).
    fn elem(&self, area: &CallArea, arr: Reg) -> Result<Type, String> {
        match self.get(area, arr) {
            Some(Type::Array(e)) => Ok(*e),
            _ => Err(format!("r{arr} is not known to hold an array")),
        }
    }

    /// The checks that relate operands, and every write's effect.
    fn related(&self, op: &Op, area: &mut CallArea) -> Result<(), String> {
        let (f, module) = (self.f, self.module);
        match *op {
            Op::Move { dst, src } => self.def(area, dst, self.get(area, src)),
            Op::LoadInt { dst, .. } => {
                let t = f.reg_types.get(dst as usize).cloned().unwrap_or(Type::Int);
                self.def(area, dst, Some(t))
            }
            Op::LoadConst { dst, k } => {
                let t = match f.consts[k as usize] {
                    Const::Int(_) => Type::Int,
                    Const::Float(_) => Type::Float,
                    Const::Str(s) if (s as usize) < module.strings.len() => Type::Str,
                    Const::Str(_) => return Err("string constant out of range".into()),
                };
                self.def(area, dst, Some(t))
            }
            Op::Call { dst, func, base } => {
                let callee = &module.functions[func as usize];
                for (i, (_, t)) in callee.params.iter().enumerate() {
                    self.expect(area, base + i as Reg, t)?;
                }
                // The callee's frame overlays the window and beyond.
                let from = base as usize - f.num_typed();
                area[from..].iter_mut().for_each(|s| *s = None);
                match &callee.ret {
                    Some(t) => self.def(area, dst, Some(t.clone())),
                    None if dst == base => Ok(()),
                    None => Err("void call copies its result".into()),
                }
            }
            Op::Return { src } => match &f.ret {
                Some(t) => self.expect(area, src, t),
                None => Err("value returned from a function without a result".into()),
            },
            Op::GetElem { dst, arr, .. } | Op::Pop { dst, arr } => {
                let e = self.elem(area, arr)?;
                self.def(area, dst, Some(e))
            }
            Op::SetElem { arr, val, .. } | Op::Push { arr, val } => {
                let e = self.elem(area, arr)?;
                self.expect(area, val, &e)
            }
            Op::NewArray { dst, refs, .. } => match f.reg_types.get(dst as usize) {
                Some(Type::Array(e)) if e.is_ref() == refs => Ok(()),
                Some(_) => Err("array element kind does not match `refs`".into()),
                None => self.def(area, dst, None),
            },
            Op::RepeatArray {
                dst,
                val,
                depth,
                refs,
                ..
            } => {
                let e = match (f.reg_types.get(dst as usize), self.get(area, val)) {
                    (Some(Type::Array(e)), _) => (**e).clone(),
                    (None, Some(v)) => v,
                    _ => return Err(format!("r{val} is not known to hold a value")),
                };
                self.expect(area, val, &e)?;
                if e.is_ref() != refs || array_depth(&e) != depth as usize {
                    return Err("`depth` or `refs` does not match the element type".into());
                }
                self.def(area, dst, Some(Type::Array(Box::new(e))))
            }
            Op::Print { src, ty } => self.expect(area, src, &module.types[ty as usize]),
            Op::ToStr { dst, src, ty } => {
                self.expect(area, src, &module.types[ty as usize])?;
                self.def(area, dst, Some(Type::Str))
            }
            Op::Args { dst } => self.def(area, dst, Some(Type::Array(Box::new(Type::Str)))),
            _ => {
                for r in op.regs().filter(|r| r.access.writes()) {
                    let t = match r.class {
                        RegClass::Int => Type::Int,
                        RegClass::Float => Type::Float,
                        RegClass::Bool => Type::Bool,
                        RegClass::Str => Type::Str,
                        class => return Err(format!("{class:?} write not checked: {op:?}")),
                    };
                    self.def(area, r.reg, Some(t))?;
                }
                Ok(())
            }
        }
    }
}

fn mismatch(r: Reg, want: &Type, have: Option<Type>) -> String {
    match have {
        Some(have) => format!("r{r} is {have}, expected {want}"),
        None => format!("r{r} is not known to hold a {want}"),
    }
}
