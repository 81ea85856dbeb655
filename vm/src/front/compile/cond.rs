//! Conditions compiled to (fused) conditional jumps.

use super::*;

impl FnCompiler<'_> {
    /// Emits code that jumps (to a target patched later, pushed on
    /// `jumps`) when `cond` is false, and falls through when it is true.
    pub(super) fn jump_if_false(&mut self, cond: &Expr, jumps: &mut Vec<usize>) -> Result<()> {
        self.cond_jump(cond, false, jumps)
    }

    /// Emits a jump taken when `cond == when`; falls through otherwise.
    pub(super) fn cond_jump(
        &mut self,
        cond: &Expr,
        when: bool,
        jumps: &mut Vec<usize>,
    ) -> Result<()> {
        let span = cond.span;
        match &cond.kind {
            ExprKind::Bool(b) => {
                if *b == when {
                    jumps.push(self.emit(Op::Jmp { target: UNPATCHED }, span));
                }
                return Ok(());
            }
            ExprKind::Unary {
                op: UnOp::Not,
                operand,
            } => return self.cond_jump(operand, !when, jumps),
            ExprKind::Logic { op, lhs, rhs } => {
                // `a && b` is false if either is; `a || b` true if either is.
                let short_circuits_to_target = (*op == LogicOp::And) != when;
                if short_circuits_to_target {
                    self.cond_jump(lhs, when, jumps)?;
                    self.cond_jump(rhs, when, jumps)?;
                } else {
                    let mut skip = Vec::new();
                    self.cond_jump(lhs, !when, &mut skip)?;
                    self.cond_jump(rhs, when, jumps)?;
                    self.patch_here(&skip);
                }
                return Ok(());
            }
            ExprKind::Binary { op, lhs, rhs } if lhs.ty == Type::Int || lhs.ty == Type::Bool => {
                if let Some(j) = self.int_branch(*op, lhs, rhs, when, span)? {
                    jumps.push(j);
                    return Ok(());
                }
            }
            ExprKind::Binary { op, lhs, rhs } if lhs.ty == Type::Float => {
                if matches!(op, BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge) {
                    let a = self.expr(lhs, None)?;
                    let b = self.expr(rhs, None)?;
                    self.release(a);
                    self.release(b);
                    // A float comparison cannot be negated (NaN), so each
                    // polarity has its own instruction; `>`/`>=` swap.
                    let (a, b) = if matches!(op, BinOp::Gt | BinOp::Ge) {
                        (b, a)
                    } else {
                        (a, b)
                    };
                    let strict = matches!(op, BinOp::Lt | BinOp::Gt);
                    let op = match (strict, when) {
                        (true, false) => Op::JmpIfNotLtF {
                            a,
                            b,
                            target: UNPATCHED,
                        },
                        (false, false) => Op::JmpIfNotLeF {
                            a,
                            b,
                            target: UNPATCHED,
                        },
                        (true, true) => Op::JmpIfLtF {
                            a,
                            b,
                            target: UNPATCHED,
                        },
                        (false, true) => Op::JmpIfLeF {
                            a,
                            b,
                            target: UNPATCHED,
                        },
                    };
                    jumps.push(self.emit(op, span));
                    return Ok(());
                }
            }
            _ => {}
        }
        let r = self.expr(cond, None)?;
        self.release(r);
        let op = if when {
            Op::JmpIf {
                a: r,
                target: UNPATCHED,
            }
        } else {
            Op::JmpIfNot {
                a: r,
                target: UNPATCHED,
            }
        };
        jumps.push(self.emit(op, span));
        Ok(())
    }

    /// A fused int (or bool) compare-and-branch taken when `lhs op rhs ==
    /// when`; `None` if `op` is not a comparison.
    pub(super) fn int_branch(
        &mut self,
        op: BinOp,
        lhs: &Expr,
        rhs: &Expr,
        when: bool,
        span: Span,
    ) -> Result<Option<usize>> {
        use BinOp::*;
        if !matches!(op, Eq | Ne | Lt | Le | Gt | Ge) {
            return Ok(None);
        }
        // Jump when `op` is false, i.e. when its negation holds; a jump
        // "when true" uses the negated comparison instead.
        let op = if when {
            match op {
                Eq => Ne,
                Ne => Eq,
                Lt => Ge,
                Le => Gt,
                Gt => Le,
                _ => Lt,
            }
        } else {
            op
        };
        let a = self.expr(lhs, None)?;
        if let Some(imm) = int_literal(rhs).and_then(|v| i16::try_from(v).ok()) {
            self.release(a);
            let op = match op {
                Eq => Op::JmpIfNotEqIImm {
                    a,
                    imm,
                    target: UNPATCHED,
                },
                Ne => Op::JmpIfNotNeIImm {
                    a,
                    imm,
                    target: UNPATCHED,
                },
                Lt => Op::JmpIfNotLtIImm {
                    a,
                    imm,
                    target: UNPATCHED,
                },
                Le => Op::JmpIfNotLeIImm {
                    a,
                    imm,
                    target: UNPATCHED,
                },
                Gt => Op::JmpIfNotGtIImm {
                    a,
                    imm,
                    target: UNPATCHED,
                },
                _ => Op::JmpIfNotGeIImm {
                    a,
                    imm,
                    target: UNPATCHED,
                },
            };
            return Ok(Some(self.emit(op, span)));
        }
        let b = self.expr(rhs, None)?;
        self.release(a);
        self.release(b);
        let op = match op {
            Eq => Op::JmpIfNotEqI {
                a,
                b,
                target: UNPATCHED,
            },
            Ne => Op::JmpIfNotNeI {
                a,
                b,
                target: UNPATCHED,
            },
            Lt => Op::JmpIfNotLtI {
                a,
                b,
                target: UNPATCHED,
            },
            Le => Op::JmpIfNotLeI {
                a,
                b,
                target: UNPATCHED,
            },
            Gt => Op::JmpIfNotLtI {
                a: b,
                b: a,
                target: UNPATCHED,
            },
            _ => Op::JmpIfNotLeI {
                a: b,
                b: a,
                target: UNPATCHED,
            },
        };
        Ok(Some(self.emit(op, span)))
    }
}
