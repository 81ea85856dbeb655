//! Expressions, operators, calls and builtins.

use super::*;

/// Integer value of a literal (also `-literal`), for immediate operands.
pub(super) fn int_literal(e: &Expr) -> Option<i64> {
    match &e.kind {
        ExprKind::Int(v) => Some(*v),
        ExprKind::Unary {
            op: UnOp::Neg,
            operand,
        } => match operand.kind {
            ExprKind::Int(v) => Some(v.wrapping_neg()),
            _ => None,
        },
        _ => None,
    }
}

/// True if evaluating `e` can neither call a function nor allocate, so it
/// may be computed straight into the call area.
pub(super) fn is_simple(e: &Expr) -> bool {
    match &e.kind {
        ExprKind::Int(_) | ExprKind::Float(_) | ExprKind::Bool(_) | ExprKind::Str(_) => true,
        ExprKind::Local { .. } => true,
        ExprKind::Unary { operand, .. } => is_simple(operand),
        ExprKind::Binary { op, lhs, rhs } => {
            !(*op == BinOp::Add && lhs.ty == Type::Str) && is_simple(lhs) && is_simple(rhs)
        }
        ExprKind::Logic { lhs, rhs, .. } => is_simple(lhs) && is_simple(rhs),
        ExprKind::Index { array, index } => is_simple(array) && is_simple(index),
        ExprKind::Call { .. } | ExprKind::ArrayLit(_) | ExprKind::ArrayRepeat { .. } => false,
    }
}

/// Array nesting depth of a type (`[int]` 1, `[[int]]` 2, scalars 0).
pub(super) fn array_depth(ty: &Type) -> usize {
    match ty {
        Type::Array(inner) => 1 + array_depth(inner),
        _ => 0,
    }
}

pub(super) fn elem_type(ty: &Type) -> Type {
    match ty {
        Type::Array(inner) => (**inner).clone(),
        _ => Type::Void,
    }
}

impl FnCompiler<'_> {
    /// `dst` if given, else a new temporary of type `ty`.
    pub(super) fn target(&mut self, dst: Option<Reg>, ty: &Type, span: Span) -> Result<Reg> {
        match dst {
            Some(d) => Ok(d),
            None => self.temp(ty, span),
        }
    }

    /// Compiles `e`. The value ends up in `dst` if given; otherwise in the
    /// returned register (a local's own register, or a temporary the caller
    /// must [`release`](Self::release)).
    pub(super) fn expr(&mut self, e: &Expr, dst: Option<Reg>) -> Result<Reg> {
        let span = e.span;
        match &e.kind {
            ExprKind::Int(v) => {
                let r = self.target(dst, &Type::Int, span)?;
                self.load_int(r, *v, span)?;
                Ok(r)
            }
            ExprKind::Bool(b) => {
                let r = self.target(dst, &Type::Bool, span)?;
                self.emit(
                    Op::LoadInt {
                        dst: r,
                        imm: *b as i32,
                    },
                    span,
                );
                Ok(r)
            }
            ExprKind::Float(x) => {
                if let Some(&r) = self.hoisted_regs.get(&x.to_bits()) {
                    return match dst {
                        Some(d) => {
                            self.emit(Op::Move { dst: d, src: r }, span);
                            Ok(d)
                        }
                        None => Ok(r),
                    };
                }
                if self.loop_depth > 0
                    && !self.loop_floats.iter().any(|y| y.to_bits() == x.to_bits())
                {
                    self.loop_floats.push(*x);
                }
                let r = self.target(dst, &Type::Float, span)?;
                let k = self.constant(ConstKey::Float(x.to_bits()), Const::Float(*x), span)?;
                self.emit(Op::LoadConst { dst: r, k }, span);
                Ok(r)
            }
            ExprKind::Str(s) => {
                let r = self.target(dst, &Type::Str, span)?;
                let id = self.string(s);
                let k = self.constant(ConstKey::Str(id), Const::Str(id), span)?;
                self.emit(Op::LoadConst { dst: r, k }, span);
                Ok(r)
            }
            ExprKind::Local { local, .. } => {
                let r = self.local_reg(*local, span)?;
                match dst {
                    Some(d) if d != r => {
                        self.emit(Op::Move { dst: d, src: r }, span);
                        Ok(d)
                    }
                    _ => Ok(r),
                }
            }
            ExprKind::Unary { op, operand } => {
                if let (UnOp::Neg, Some(v)) = (op, int_literal(e)) {
                    let r = self.target(dst, &Type::Int, span)?;
                    self.load_int(r, v, span)?;
                    return Ok(r);
                }
                let src = self.expr(operand, None)?;
                self.release(src);
                let r = self.target(dst, &e.ty, span)?;
                let op = match (op, &e.ty) {
                    (UnOp::Not, _) => Op::Not { dst: r, src },
                    (UnOp::Neg, Type::Float) => Op::NegF { dst: r, src },
                    (UnOp::Neg, _) => Op::NegI { dst: r, src },
                };
                self.emit(op, span);
                Ok(r)
            }
            ExprKind::Binary { op, lhs, rhs } => self.binary(*op, lhs, rhs, &e.ty, dst, span),
            ExprKind::Logic { .. } => {
                // Computed in a fresh temporary: `dst` may be read by the
                // right operand.
                let t = self.temp(&Type::Bool, span)?;
                let mut when_false = Vec::new();
                self.jump_if_false(e, &mut when_false)?;
                self.emit(Op::LoadInt { dst: t, imm: 1 }, span);
                let to_end = self.emit(Op::Jmp { target: UNPATCHED }, span);
                self.patch_here(&when_false);
                self.emit(Op::LoadInt { dst: t, imm: 0 }, span);
                self.patch_here(&[to_end]);
                self.move_to_dst(t, dst, span)
            }
            ExprKind::Call { args, callee, .. } => self.call(*callee, args, &e.ty, dst, span),
            ExprKind::Index { array, index } => {
                let arr = self.expr(array, None)?;
                let idx = self.expr(index, None)?;
                self.release(arr);
                self.release(idx);
                let r = self.target(dst, &e.ty, span)?;
                self.emit(Op::GetElem { dst: r, arr, idx }, span);
                Ok(r)
            }
            ExprKind::ArrayLit(elems) => {
                let t = self.temp(&e.ty, span)?;
                let refs = elem_type(&e.ty).is_ref();
                let cap = elems.len().min(u16::MAX as usize) as u16;
                self.emit(Op::NewArray { dst: t, refs, cap }, span);
                for el in elems {
                    let v = self.expr(el, None)?;
                    self.emit(Op::Push { arr: t, val: v }, el.span);
                    self.release(v);
                }
                self.move_to_dst(t, dst, span)
            }
            ExprKind::ArrayRepeat { value, count } => {
                let val = self.expr(value, None)?;
                let cnt = self.expr(count, None)?;
                self.release(val);
                self.release(cnt);
                let depth = array_depth(&value.ty);
                let depth = u8::try_from(depth)
                    .map_err(|_| Diagnostic::new(span, "array type nested too deeply"))?;
                let r = self.target(dst, &e.ty, span)?;
                let op = Op::RepeatArray {
                    dst: r,
                    val,
                    count: cnt,
                    depth,
                    refs: value.ty.is_ref(),
                };
                self.emit(op, span);
                Ok(r)
            }
        }
    }

    /// Moves temporary `t` into `dst` (if given) and frees it.
    pub(super) fn move_to_dst(&mut self, t: Reg, dst: Option<Reg>, span: Span) -> Result<Reg> {
        match dst {
            Some(d) => {
                self.emit(Op::Move { dst: d, src: t }, span);
                self.release(t);
                Ok(d)
            }
            None => Ok(t),
        }
    }

    pub(super) fn load_int(&mut self, r: Reg, v: i64, span: Span) -> Result<()> {
        match i32::try_from(v) {
            Ok(imm) => self.emit(Op::LoadInt { dst: r, imm }, span),
            Err(_) => {
                let k = self.constant(ConstKey::Int(v), Const::Int(v), span)?;
                self.emit(Op::LoadConst { dst: r, k }, span)
            }
        };
        Ok(())
    }

    pub(super) fn binary(
        &mut self,
        op: BinOp,
        lhs: &Expr,
        rhs: &Expr,
        ty: &Type,
        dst: Option<Reg>,
        span: Span,
    ) -> Result<Reg> {
        // `3 * x`: a literal has no effects, so the operands may swap to
        // use the immediate form.
        let small = |e: &Expr| int_literal(e).is_some_and(|v| i32::try_from(v).is_ok());
        if lhs.ty == Type::Int && matches!(op, BinOp::Add | BinOp::Mul) && small(lhs) && !small(rhs)
        {
            return self.binary(op, rhs, lhs, ty, dst, span);
        }
        let a = self.expr(lhs, None)?;
        self.binary_rhs(op, &lhs.ty, a, rhs, ty, dst, span)
    }

    /// Emits `a op rhs` where the left operand is already in register `a`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn binary_rhs(
        &mut self,
        op: BinOp,
        operand_ty: &Type,
        a: Reg,
        rhs: &Expr,
        ty: &Type,
        dst: Option<Reg>,
        span: Span,
    ) -> Result<Reg> {
        if *operand_ty == Type::Int
            && let Some(imm) = int_literal(rhs).and_then(|v| i32::try_from(v).ok())
        {
            let form = match op {
                BinOp::Add => Some((0, imm)),
                BinOp::Sub if imm != i32::MIN => Some((0, -imm)),
                BinOp::Mul => Some((1, imm)),
                BinOp::Div if imm != 0 => Some((2, imm)),
                BinOp::Rem if imm != 0 => Some((3, imm)),
                _ => None,
            };
            if let Some((kind, imm)) = form {
                self.release(a);
                let r = self.target(dst, ty, span)?;
                let op = match kind {
                    0 => Op::AddIImm { dst: r, a, imm },
                    1 => Op::MulIImm { dst: r, a, imm },
                    2 => Op::DivIImm { dst: r, a, imm },
                    _ => Op::RemIImm { dst: r, a, imm },
                };
                self.emit(op, span);
                return Ok(r);
            }
        }
        let b = self.expr(rhs, None)?;
        self.release(a);
        self.release(b);
        let r = self.target(dst, ty, span)?;
        self.binop_regs(op, operand_ty, r, a, b, span)?;
        Ok(r)
    }

    /// Emits `dst = a op b` for operands of type `operand_ty`.
    pub(super) fn binop_regs(
        &mut self,
        op: BinOp,
        operand_ty: &Type,
        dst: Reg,
        a: Reg,
        b: Reg,
        span: Span,
    ) -> Result<()> {
        use BinOp::*;
        let inst = match (operand_ty, op) {
            (Type::Int, Add) => Op::AddI { dst, a, b },
            (Type::Int, Sub) => Op::SubI { dst, a, b },
            (Type::Int, Mul) => Op::MulI { dst, a, b },
            (Type::Int, Div) => Op::DivI { dst, a, b },
            (Type::Int, Rem) => Op::RemI { dst, a, b },
            (Type::Int, BitAnd) => Op::AndI { dst, a, b },
            (Type::Int, BitOr) => Op::OrI { dst, a, b },
            (Type::Int, BitXor) => Op::XorI { dst, a, b },
            (Type::Int, Shl) => Op::ShlI { dst, a, b },
            (Type::Int, Shr) => Op::ShrI { dst, a, b },
            (Type::Int | Type::Bool, Eq) => Op::EqI { dst, a, b },
            (Type::Int | Type::Bool, Ne) => Op::NeI { dst, a, b },
            (Type::Int, Lt) => Op::LtI { dst, a, b },
            (Type::Int, Le) => Op::LeI { dst, a, b },
            (Type::Int, Gt) => Op::LtI { dst, a: b, b: a },
            (Type::Int, Ge) => Op::LeI { dst, a: b, b: a },
            (Type::Float, Add) => Op::AddF { dst, a, b },
            (Type::Float, Sub) => Op::SubF { dst, a, b },
            (Type::Float, Mul) => Op::MulF { dst, a, b },
            (Type::Float, Div) => Op::DivF { dst, a, b },
            (Type::Float, Rem) => Op::RemF { dst, a, b },
            (Type::Float, Eq) => Op::EqF { dst, a, b },
            (Type::Float, Ne) => Op::NeF { dst, a, b },
            (Type::Float, Lt) => Op::LtF { dst, a, b },
            (Type::Float, Le) => Op::LeF { dst, a, b },
            (Type::Float, Gt) => Op::LtF { dst, a: b, b: a },
            (Type::Float, Ge) => Op::LeF { dst, a: b, b: a },
            (Type::Str, Add) => Op::Concat { dst, a, b },
            (Type::Str, Eq) => Op::EqS { dst, a, b },
            (Type::Str, Ne) => Op::NeS { dst, a, b },
            (Type::Str, Lt) => Op::LtS { dst, a, b },
            (Type::Str, Le) => Op::LeS { dst, a, b },
            (Type::Str, Gt) => Op::LtS { dst, a: b, b: a },
            (Type::Str, Ge) => Op::LeS { dst, a: b, b: a },
            _ => {
                return Err(Diagnostic::new(
                    span,
                    format!(
                        "internal error: no instruction for `{}` on {operand_ty}",
                        op.symbol()
                    ),
                ));
            }
        };
        self.emit(inst, span);
        Ok(())
    }

    pub(super) fn call(
        &mut self,
        callee: Callee,
        args: &[Expr],
        ty: &Type,
        dst: Option<Reg>,
        span: Span,
    ) -> Result<Reg> {
        match callee {
            Callee::Builtin(b) => self.builtin(b, args, ty, dst, span),
            Callee::Function(index) => {
                let func = u16::try_from(index)
                    .ok()
                    .filter(|&i| (i as usize) < self.program.functions.len())
                    .ok_or_else(|| Diagnostic::new(span, "internal error: bad callee"))?;
                if args.iter().all(is_simple) {
                    for (k, arg) in args.iter().enumerate() {
                        let slot = self.arg_reg(k, arg.span)?;
                        self.expr(arg, Some(slot))?;
                    }
                } else {
                    let mut regs = Vec::with_capacity(args.len());
                    for arg in args {
                        regs.push(self.expr(arg, None)?);
                    }
                    for (k, &r) in regs.iter().enumerate() {
                        let slot = self.arg_reg(k, args[k].span)?;
                        self.emit(Op::Move { dst: slot, src: r }, args[k].span);
                    }
                    for r in regs {
                        self.release(r);
                    }
                }
                let base = self.arg_reg(0, span)?;
                if *ty == Type::Void {
                    self.emit(
                        Op::Call {
                            func,
                            base,
                            dst: base,
                        },
                        span,
                    );
                    return Ok(base);
                }
                let r = self.target(dst, ty, span)?;
                self.emit(Op::Call { func, base, dst: r }, span);
                Ok(r)
            }
            Callee::Unresolved => Err(Diagnostic::new(span, "internal error: unresolved call")),
        }
    }

    pub(super) fn builtin(
        &mut self,
        b: Builtin,
        args: &[Expr],
        ty: &Type,
        dst: Option<Reg>,
        span: Span,
    ) -> Result<Reg> {
        let mut regs = Vec::with_capacity(args.len());
        for arg in args {
            regs.push(self.expr(arg, None)?);
        }
        for &r in &regs {
            self.release(r);
        }
        let arg_ty = args.first().map(|a| a.ty.clone()).unwrap_or(Type::Void);
        let src = regs.first().copied().unwrap_or(0);
        let bad = || {
            Diagnostic::new(
                span,
                format!("internal error: bad call of builtin `{}`", b.name()),
            )
        };
        if regs.len() != args.len()
            || (args.is_empty() && !matches!(b, Builtin::Clock | Builtin::Args))
        {
            return Err(bad());
        }
        match b {
            Builtin::Print => {
                let ty = self.type_id(&arg_ty, span)?;
                self.emit(Op::Print { src, ty }, span);
                Ok(src)
            }
            Builtin::Push => {
                let val = *regs.get(1).ok_or_else(bad)?;
                self.emit(Op::Push { arr: src, val }, span);
                Ok(src)
            }
            // Conversions to the type the value already has are no-ops.
            Builtin::Int | Builtin::Float | Builtin::Str if arg_ty == *ty => match dst {
                Some(d) if d != src => {
                    self.emit(Op::Move { dst: d, src }, span);
                    Ok(d)
                }
                Some(d) => Ok(d),
                None => {
                    // Keep the value alive in a register we own.
                    let t = self.temp(ty, span)?;
                    self.emit(Op::Move { dst: t, src }, span);
                    Ok(t)
                }
            },
            _ => {
                let r = self.target(dst, ty, span)?;
                let op = match b {
                    Builtin::Len if arg_ty == Type::Str => Op::LenS { dst: r, src },
                    Builtin::Len => Op::LenA { dst: r, src },
                    Builtin::Pop => Op::Pop { dst: r, arr: src },
                    Builtin::Sqrt => Op::Sqrt { dst: r, src },
                    Builtin::Clock => Op::Clock { dst: r },
                    Builtin::Args => Op::Args { dst: r },
                    Builtin::ParseInt => Op::ParseInt { dst: r, src },
                    Builtin::ParseFloat => Op::ParseFloat { dst: r, src },
                    Builtin::Int => Op::FloatToInt { dst: r, src },
                    Builtin::Float => Op::IntToFloat { dst: r, src },
                    Builtin::Str => {
                        let ty = self.type_id(&arg_ty, span)?;
                        Op::ToStr { dst: r, src, ty }
                    }
                    Builtin::Print | Builtin::Push => return Err(bad()),
                };
                self.emit(op, span);
                Ok(r)
            }
        }
    }
}
