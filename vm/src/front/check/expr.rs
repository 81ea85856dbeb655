//! Checking expressions.
//!
//! `expr` is recursive over the tree; the parser caps the tree's depth
//! ([`crate::front::parser::MAX_EXPR_DEPTH`]), and each kind of node is handled in
//! its own small function so that the recursive frame stays small.

use super::{FnChecker, expect_type};
use crate::front::ast::{BinOp, Builtin, Callee, Expr, ExprKind, LocalId, Span, Type, UnOp};
use crate::front::diag::Diagnostic;

impl FnChecker<'_> {
    /// Checks `e` where a value is needed: a call of a function that
    /// returns nothing is an error here. `expected` is the type the context
    /// wants, used to type empty array literals; the caller still compares.
    pub(super) fn value(
        &mut self,
        e: &mut Expr,
        expected: Option<&Type>,
    ) -> Result<(), Diagnostic> {
        self.expr(e, expected)?;
        if e.ty == Type::Void {
            let name = match &e.kind {
                ExprKind::Call { name, .. } => name.as_str(),
                _ => "?",
            };
            return Err(Diagnostic::new(
                e.span,
                format!("function '{name}' does not return a value"),
            ));
        }
        Ok(())
    }

    /// Checks `e` and sets its type; `Void` is allowed (call statements).
    pub(super) fn expr(&mut self, e: &mut Expr, expected: Option<&Type>) -> Result<(), Diagnostic> {
        let span = e.span;
        let ty = match &mut e.kind {
            ExprKind::Int(_) => Type::Int,
            ExprKind::Float(_) => Type::Float,
            ExprKind::Bool(_) => Type::Bool,
            ExprKind::Str(_) => Type::Str,
            ExprKind::Local { name, local } => self.variable(name, local, span)?,
            ExprKind::Unary { op, operand } => self.unary(*op, operand, span)?,
            ExprKind::Binary { op, lhs, rhs } => self.binary(*op, lhs, rhs, span)?,
            ExprKind::Logic { lhs, rhs, .. } => self.logic(lhs, rhs)?,
            ExprKind::Call { name, args, callee } => self.call(name, args, callee, span)?,
            ExprKind::Index { array, index } => self.index(array, index, span)?,
            ExprKind::ArrayLit(items) => self.array_literal(items, span, expected)?,
            ExprKind::ArrayRepeat { value, count } => self.array_repeat(value, count, expected)?,
        };
        e.ty = ty;
        Ok(())
    }

    fn variable(
        &mut self,
        name: &str,
        local: &mut LocalId,
        span: Span,
    ) -> Result<Type, Diagnostic> {
        let Some(id) = self.scopes.lookup(name) else {
            let message =
                if self.functions.get(name).is_some() || Builtin::from_name(name).is_some() {
                    format!("'{name}' is a function, not a variable")
                } else {
                    format!("unknown variable '{name}'")
                };
            return Err(Diagnostic::new(span, message));
        };
        *local = id;
        self.local_type(id).cloned().ok_or_else(|| {
            Diagnostic::new(span, format!("internal error: local '{name}' has no type"))
        })
    }

    fn unary(&mut self, op: UnOp, operand: &mut Expr, span: Span) -> Result<Type, Diagnostic> {
        self.value(operand, None)?;
        let ok = match op {
            UnOp::Neg => matches!(operand.ty, Type::Int | Type::Float),
            UnOp::Not => operand.ty == Type::Bool,
        };
        if !ok {
            let symbol = match op {
                UnOp::Neg => "-",
                UnOp::Not => "!",
            };
            return Err(Diagnostic::new(
                span,
                format!(
                    "operator '{symbol}' cannot be applied to type {}",
                    operand.ty
                ),
            ));
        }
        Ok(operand.ty.clone())
    }

    /// Both operands have the same type, one the operator accepts; the
    /// left one decides, so an error names the right one as mismatched.
    fn binary(
        &mut self,
        op: BinOp,
        lhs: &mut Expr,
        rhs: &mut Expr,
        span: Span,
    ) -> Result<Type, Diagnostic> {
        self.value(lhs, None)?;
        if !operator_applies(op, &lhs.ty) {
            let note = if matches!(lhs.ty, Type::Array(_)) && matches!(op, BinOp::Eq | BinOp::Ne) {
                " (arrays cannot be compared)"
            } else {
                ""
            };
            return Err(Diagnostic::new(
                span,
                format!(
                    "operator '{}' cannot be applied to type {}{note}",
                    op.symbol(),
                    lhs.ty
                ),
            ));
        }
        self.value(rhs, Some(&lhs.ty))?;
        expect_type(rhs, &lhs.ty)?;
        Ok(if is_comparison(op) {
            Type::Bool
        } else {
            lhs.ty.clone()
        })
    }

    fn logic(&mut self, lhs: &mut Expr, rhs: &mut Expr) -> Result<Type, Diagnostic> {
        for operand in [lhs, rhs] {
            self.value(operand, Some(&Type::Bool))?;
            expect_type(operand, &Type::Bool)?;
        }
        Ok(Type::Bool)
    }

    fn call(
        &mut self,
        name: &str,
        args: &mut [Expr],
        callee: &mut Callee,
        span: Span,
    ) -> Result<Type, Diagnostic> {
        if let Some(builtin) = Builtin::from_name(name) {
            *callee = Callee::Builtin(builtin);
            return self.builtin(builtin, args, span);
        }
        // Copy the table reference so the signature does not borrow `self`.
        let functions = self.functions;
        let Some((index, signature)) = functions.get(name) else {
            let message = if self.scopes.lookup(name).is_some() {
                format!("'{name}' is a variable, not a function")
            } else {
                format!("unknown function '{name}'")
            };
            return Err(Diagnostic::new(span, message));
        };
        if args.len() != signature.params.len() {
            return Err(arity_error(name, signature.params.len(), args.len(), span));
        }
        for (arg, param) in args.iter_mut().zip(&signature.params) {
            self.value(arg, Some(param))?;
            expect_type(arg, param)?;
        }
        *callee = Callee::Function(index);
        Ok(signature.ret.clone().unwrap_or(Type::Void))
    }

    fn index(
        &mut self,
        array: &mut Expr,
        index: &mut Expr,
        span: Span,
    ) -> Result<Type, Diagnostic> {
        self.value(array, None)?;
        let Type::Array(element) = &array.ty else {
            return Err(Diagnostic::new(
                span,
                format!("cannot index into a value of type {}", array.ty),
            ));
        };
        let element = element.as_ref().clone();
        self.value(index, Some(&Type::Int))?;
        expect_type(index, &Type::Int)?;
        Ok(element)
    }

    /// `[e1, e2, ...]`: all elements have one type. The expected array type,
    /// if known, gives the element type; otherwise the first element does.
    fn array_literal(
        &mut self,
        items: &mut [Expr],
        span: Span,
        expected: Option<&Type>,
    ) -> Result<Type, Diagnostic> {
        if items.is_empty() {
            return match expected {
                Some(ty @ Type::Array(_)) => Ok(ty.clone()),
                _ => Err(Diagnostic::new(
                    span,
                    "cannot infer the type of an empty array literal; annotate it",
                )),
            };
        }
        let mut element = expected_element(expected);
        for item in items {
            self.value(item, element.as_ref())?;
            match &element {
                Some(ty) => expect_type(item, ty)?,
                None => element = Some(item.ty.clone()),
            }
        }
        let element = element.unwrap_or(Type::Void);
        Ok(Type::Array(Box::new(element)))
    }

    /// `[value; count]`.
    fn array_repeat(
        &mut self,
        value: &mut Expr,
        count: &mut Expr,
        expected: Option<&Type>,
    ) -> Result<Type, Diagnostic> {
        let element = expected_element(expected);
        self.value(value, element.as_ref())?;
        if let Some(element) = &element {
            expect_type(value, element)?;
        }
        self.value(count, Some(&Type::Int))?;
        expect_type(count, &Type::Int)?;
        Ok(Type::Array(Box::new(value.ty.clone())))
    }
}

/// The element type of an expected array type.
fn expected_element(expected: Option<&Type>) -> Option<Type> {
    match expected {
        Some(Type::Array(element)) => Some(element.as_ref().clone()),
        _ => None,
    }
}

/// "function 'f' expects 2 arguments, found 3" at the callee name.
pub(super) fn arity_error(name: &str, expected: usize, found: usize, span: Span) -> Diagnostic {
    let plural = if expected == 1 { "" } else { "s" };
    Diagnostic::new(
        span,
        format!("function '{name}' expects {expected} argument{plural}, found {found}"),
    )
}

fn is_comparison(op: BinOp) -> bool {
    matches!(
        op,
        BinOp::Eq | BinOp::Ne | BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge
    )
}

/// Whether `op` accepts operands of type `ty` (LANGUAGE.md, "Operators and precedence").
fn operator_applies(op: BinOp, ty: &Type) -> bool {
    match op {
        BinOp::Add => matches!(ty, Type::Int | Type::Float | Type::Str),
        BinOp::Sub | BinOp::Mul | BinOp::Div | BinOp::Rem => matches!(ty, Type::Int | Type::Float),
        BinOp::Eq | BinOp::Ne => matches!(ty, Type::Int | Type::Float | Type::Bool | Type::Str),
        BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge => {
            matches!(ty, Type::Int | Type::Float | Type::Str)
        }
        BinOp::BitAnd | BinOp::BitOr | BinOp::BitXor | BinOp::Shl | BinOp::Shr => *ty == Type::Int,
    }
}
