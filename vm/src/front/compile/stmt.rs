//! Statements: blocks and scopes, assignments, `if`, loops.

use super::*;

/// True if any statement in `block` assigns local `id`.
pub(super) fn assigns(block: &Block, id: LocalId) -> bool {
    block.stmts.iter().any(|s| match &s.kind {
        StmtKind::Assign { target, .. } => {
            matches!(target.kind, ExprKind::Local { local, .. } if local == id)
        }
        StmtKind::If {
            then_block,
            else_block,
            ..
        } => assigns(then_block, id) || else_block.as_ref().is_some_and(|b| assigns(b, id)),
        StmtKind::While { body, .. } | StmtKind::For { body, .. } | StmtKind::Block(body) => {
            assigns(body, id)
        }
        _ => false,
    })
}

impl FnCompiler<'_> {
    pub(super) fn block(&mut self, block: &Block) -> Result<()> {
        self.scopes.push(Vec::new());
        for stmt in &block.stmts {
            self.stmt(stmt)?;
        }
        for r in self.scopes.pop().unwrap_or_default() {
            self.owners[r as usize] = Owner::Free;
        }
        Ok(())
    }

    pub(super) fn stmt(&mut self, stmt: &Stmt) -> Result<()> {
        let span = stmt.span;
        match &stmt.kind {
            StmtKind::Let { init, local, .. } => {
                let r = self.declare(*local, span)?;
                self.expr(init, Some(r))?;
            }
            StmtKind::Assign { target, op, value } => self.assign(target, *op, value, span)?,
            StmtKind::If {
                cond,
                then_block,
                else_block,
            } => {
                let mut to_else = Vec::new();
                self.jump_if_false(cond, &mut to_else)?;
                self.block(then_block)?;
                match else_block {
                    Some(else_block) => {
                        let to_end = self.emit(Op::Jmp { target: UNPATCHED }, span);
                        self.patch_here(&to_else);
                        self.block(else_block)?;
                        self.patch_here(&[to_end]);
                    }
                    None => self.patch_here(&to_else),
                }
            }
            StmtKind::While { cond, body } => {
                // Test at the top once, then at the bottom of each
                // iteration: one branch per iteration instead of two.
                self.loop_depth += 1;
                let mut exits = Vec::new();
                self.jump_if_false(cond, &mut exits)?;
                let body_start = self.here();
                self.loops.push(LoopCtx::default());
                self.block(body)?;
                let ctx = self.loops.pop().unwrap_or_default();
                self.patch_here(&ctx.continues);
                let mut again = Vec::new();
                self.cond_jump(cond, true, &mut again)?;
                for j in again {
                    self.patch(j, body_start);
                }
                self.loop_depth -= 1;
                self.patch_here(&exits);
                self.patch_here(&ctx.breaks);
            }
            StmtKind::For {
                start,
                end,
                body,
                local,
                var_span,
                ..
            } => self.for_loop(start, end, body, *local, *var_span, span)?,
            StmtKind::Break => {
                let j = self.emit(Op::Jmp { target: UNPATCHED }, span);
                if let Some(ctx) = self.loops.last_mut() {
                    ctx.breaks.push(j);
                }
            }
            StmtKind::Continue => match self.loops.last().and_then(|c| c.continue_to) {
                Some(target) => {
                    self.emit(
                        Op::Jmp {
                            target: target as u32,
                        },
                        span,
                    );
                }
                None => {
                    let j = self.emit(Op::Jmp { target: UNPATCHED }, span);
                    if let Some(ctx) = self.loops.last_mut() {
                        ctx.continues.push(j);
                    }
                }
            },
            StmtKind::Return(None) => {
                self.emit(Op::ReturnVoid, span);
            }
            StmtKind::Return(Some(e)) => {
                let r = self.expr(e, None)?;
                self.emit(Op::Return { src: r }, span);
                self.release(r);
            }
            StmtKind::Expr(e) => {
                let r = self.expr(e, None)?;
                // A void call "returns" a register it does not own.
                if e.ty != Type::Void {
                    self.release(r);
                }
            }
            StmtKind::Block(b) => self.block(b)?,
        }
        Ok(())
    }

    pub(super) fn for_loop(
        &mut self,
        start: &Expr,
        end: &Expr,
        body: &Block,
        local: LocalId,
        var_span: Span,
        span: Span,
    ) -> Result<()> {
        // The loop variable lives in the scope of the loop only.
        self.scopes.push(Vec::new());
        let var = self.declare(local, var_span)?;
        // If the body never assigns the variable, it can be the counter.
        let counter = if assigns(body, local) {
            self.temp(&Type::Int, span)?
        } else {
            var
        };
        self.expr(start, Some(counter))?;
        let end_reg = self.temp(&Type::Int, span)?;
        self.expr(end, Some(end_reg))?;
        let prep = self.emit(
            Op::ForPrep {
                counter,
                end: end_reg,
                target: UNPATCHED,
            },
            span,
        );
        let body_start = self.here();
        if counter != var {
            self.emit(
                Op::Move {
                    dst: var,
                    src: counter,
                },
                var_span,
            );
        }
        self.loops.push(LoopCtx::default());
        self.loop_depth += 1;
        self.block(body)?;
        self.loop_depth -= 1;
        let ctx = self.loops.pop().unwrap_or_default();
        self.patch_here(&ctx.continues);
        self.emit(
            Op::ForLoop {
                counter,
                end: end_reg,
                target: body_start,
            },
            span,
        );
        self.patch_here(&[prep]);
        self.patch_here(&ctx.breaks);
        self.release(end_reg);
        self.release(counter);
        for r in self.scopes.pop().unwrap_or_default() {
            self.owners[r as usize] = Owner::Free;
        }
        Ok(())
    }

    pub(super) fn assign(
        &mut self,
        target: &Expr,
        op: Option<BinOp>,
        value: &Expr,
        span: Span,
    ) -> Result<()> {
        match &target.kind {
            ExprKind::Local { local, .. } => {
                let r = self.local_reg(*local, target.span)?;
                match op {
                    None => {
                        self.expr(value, Some(r))?;
                    }
                    Some(op) => {
                        self.binary_rhs(op, &target.ty, r, value, &target.ty, Some(r), span)?;
                    }
                }
            }
            ExprKind::Index { array, index } => {
                let arr = self.expr(array, None)?;
                let idx = self.expr(index, None)?;
                match op {
                    None => {
                        let val = self.expr(value, None)?;
                        self.emit(Op::SetElem { arr, idx, val }, target.span);
                        self.release(val);
                    }
                    Some(op) => {
                        let t = self.temp(&target.ty, span)?;
                        self.emit(Op::GetElem { dst: t, arr, idx }, target.span);
                        self.binary_rhs(op, &target.ty, t, value, &target.ty, Some(t), span)?;
                        self.emit(Op::SetElem { arr, idx, val: t }, target.span);
                        self.release(t);
                    }
                }
                self.release(idx);
                self.release(arr);
            }
            _ => {
                return Err(Diagnostic::new(
                    target.span,
                    "internal error: invalid assignment target",
                ));
            }
        }
        Ok(())
    }
}
