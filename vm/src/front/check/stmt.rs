//! Checking statements and blocks.

use super::{FnChecker, expect_type};
use crate::front::ast::{BinOp, Block, Expr, Span, Stmt, StmtKind, Type};
use crate::front::diag::Diagnostic;

impl FnChecker<'_> {
    /// Checks a block in a scope of its own.
    pub(super) fn block(&mut self, block: &mut Block) -> Result<(), Diagnostic> {
        self.scopes.push();
        for stmt in &mut block.stmts {
            self.stmt(stmt)?;
        }
        self.scopes.pop();
        Ok(())
    }

    fn stmt(&mut self, stmt: &mut Stmt) -> Result<(), Diagnostic> {
        let span = stmt.span;
        match &mut stmt.kind {
            StmtKind::Let {
                name,
                ty,
                init,
                local,
            } => {
                self.value(init, ty.as_ref())?;
                if let Some(ty) = ty {
                    expect_type(init, ty)?;
                }
                let ty = ty.clone().unwrap_or_else(|| init.ty.clone());
                // Declared after the initializer: `let x = x + 1;` reads the
                // outer `x`.
                *local = self.declare(name, ty, span)?;
            }
            StmtKind::Assign { target, op, value } => {
                // The target is an expression of the language (a variable
                // or an index), so checking it resolves and types it.
                self.value(target, None)?;
                if let Some(op) = op
                    && !compound_applies(*op, &target.ty)
                {
                    return Err(Diagnostic::new(
                        span,
                        format!(
                            "operator '{}=' cannot be applied to type {}",
                            op.symbol(),
                            target.ty
                        ),
                    ));
                }
                self.value(value, Some(&target.ty))?;
                expect_type(value, &target.ty)?;
            }
            StmtKind::If {
                cond,
                then_block,
                else_block,
            } => {
                self.condition(cond)?;
                self.block(then_block)?;
                if let Some(else_block) = else_block {
                    self.block(else_block)?;
                }
            }
            StmtKind::While { cond, body } => {
                self.condition(cond)?;
                self.loop_body(body)?;
            }
            StmtKind::For {
                var,
                var_span,
                start,
                end,
                body,
                local,
            } => {
                for bound in [&mut *start, &mut *end] {
                    self.value(bound, None)?;
                    expect_type(bound, &Type::Int)?;
                }
                self.scopes.push();
                *local = self.declare(var, Type::Int, *var_span)?;
                self.loop_body(body)?;
                self.scopes.pop();
            }
            StmtKind::Break => self.inside_loop("break", span)?,
            StmtKind::Continue => self.inside_loop("continue", span)?,
            StmtKind::Return(value) => self.return_stmt(value.as_mut(), span)?,
            // The parser only builds call statements; their value, if any,
            // is discarded, so a void call is fine here.
            StmtKind::Expr(expr) => self.expr(expr, None)?,
            StmtKind::Block(block) => self.block(block)?,
        }
        Ok(())
    }

    /// An `if` or `while` condition: a `bool`, no truthiness.
    fn condition(&mut self, cond: &mut Expr) -> Result<(), Diagnostic> {
        self.value(cond, Some(&Type::Bool))?;
        expect_type(cond, &Type::Bool)
    }

    /// `break` and `continue` need an enclosing loop in the same function.
    fn inside_loop(&self, keyword: &str, span: Span) -> Result<(), Diagnostic> {
        if self.loop_depth == 0 {
            return Err(Diagnostic::new(
                span,
                format!("'{keyword}' outside of a loop"),
            ));
        }
        Ok(())
    }

    fn loop_body(&mut self, body: &mut Block) -> Result<(), Diagnostic> {
        self.loop_depth += 1;
        let result = self.block(body);
        self.loop_depth -= 1;
        result
    }

    fn return_stmt(&mut self, value: Option<&mut Expr>, span: Span) -> Result<(), Diagnostic> {
        match (self.ret.clone(), value) {
            (None, None) => Ok(()),
            (None, Some(_)) => Err(Diagnostic::new(
                span,
                format!(
                    "unexpected return value: {} has no return type",
                    self.describe_function()
                ),
            )),
            (Some(ret), None) => Err(Diagnostic::new(
                span,
                format!(
                    "missing return value: {} returns {ret}",
                    self.describe_function()
                ),
            )),
            (Some(ret), Some(value)) => {
                self.value(value, Some(&ret))?;
                expect_type(value, &ret)
            }
        }
    }
}

/// Whether `target op= value` is defined for a target of type `ty`:
/// the arithmetic operators on `int` and `float`, and `+=` also on `str`.
fn compound_applies(op: BinOp, ty: &Type) -> bool {
    match ty {
        Type::Int | Type::Float => true,
        Type::Str => op == BinOp::Add,
        _ => false,
    }
}
