//! Name resolution and type checking.
//!
//! [`check`] walks every function and the script body (`<main>`), and
//! fills in what the parser left open: the `ty` of every expression (`Void`
//! only for calls of functions without `-> T`), the [`LocalId`] of every
//! variable use and declaration, the [`crate::front::ast::Callee`] of every call, and each
//! function's [`FnDecl::locals`] (parameters first, then every `let` and
//! `for` variable in source order, each with a fresh id).
//!
//! The rules are those of LANGUAGE.md, "Names and scopes" to "Indexing"; in brief:
//! - An empty array literal `[]` takes its type from what is expected where
//!   it stands: a `let` annotation, the variable or element assigned to, a
//!   parameter of a user function, `return` in a `-> [T]` function, the
//!   element of `push(a, [])`, or an enclosing array literal or `[[]; n]`
//!   whose type is known that way. Elsewhere it is an error.
//! - A `-> T` function must not reach the end of its body. The analysis is
//!   syntactic: a statement always returns if it is a `return`, a block
//!   holding a statement that always returns, an `if` with an `else` whose
//!   branches both always return, or `while true { ... }` (the literal)
//!   without a `break` leaving it. No other loop counts, whatever its
//!   condition (the `returns` module has the details).
//! - A [`LocalInfo::span`] is the parameter's name, the `let` keyword, or
//!   the `for` loop's variable.
//! - Errors carry the position of the offending token: an operator for an
//!   operator applied to the wrong type, the start of an operand or argument
//!   whose type is wrong, a call's callee name for calls. When a program has
//!   several errors, the one earliest in the source is reported (functions
//!   and the script body are checked separately and the first error of
//!   each is compared).

mod builtins;
mod expr;
mod returns;
mod scopes;
mod stmt;

#[cfg(test)]
mod tests;

use std::collections::HashMap;

use crate::front::ast::{Builtin, Expr, ExprKind, FnDecl, LocalId, LocalInfo, Program, Span, Type};
use crate::front::diag::Diagnostic;
use scopes::Scopes;

/// Resolves names and checks types, filling in `ty`, `local` and `callee`.
pub fn check(program: &mut Program) -> Result<(), Diagnostic> {
    // Checking bodies against a table with duplicate or builtin names would
    // only add confusing follow-up errors, so such a problem ends here.
    let functions = Functions::collect(&program.functions)?;
    let mut errors = Vec::new();
    for function in &mut program.functions {
        if let Err(error) = FnChecker::run(&functions, function) {
            errors.push(error);
        }
    }
    if let Err(error) = FnChecker::run(&functions, &mut program.main) {
        errors.push(error);
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(error_first_in_source(errors))
    }
}

fn error_first_in_source(errors: Vec<Diagnostic>) -> Diagnostic {
    errors
        .into_iter()
        .min_by_key(|d| d.span)
        .unwrap_or_else(|| Diagnostic::new(Span::new(1, 1), "internal error: no diagnostic"))
}

/// What a call needs to know about a user function.
struct Signature {
    params: Vec<Type>,
    ret: Option<Type>,
}

/// The user functions of the program, by name.
struct Functions {
    by_name: HashMap<String, u32>,
    signatures: Vec<Signature>,
}

impl Functions {
    /// Builds the table, rejecting duplicate names and builtin names.
    fn collect(decls: &[FnDecl]) -> Result<Functions, Diagnostic> {
        let mut by_name = HashMap::new();
        let mut signatures = Vec::with_capacity(decls.len());
        for (index, decl) in decls.iter().enumerate() {
            if Builtin::from_name(&decl.name).is_some() {
                return Err(Diagnostic::new(
                    decl.span,
                    format!("cannot redefine builtin function '{}'", decl.name),
                ));
            }
            let index = u32::try_from(index)
                .map_err(|_| Diagnostic::new(decl.span, "too many functions"))?;
            if by_name.insert(decl.name.clone(), index).is_some() {
                return Err(Diagnostic::new(
                    decl.span,
                    format!("function '{}' is already defined", decl.name),
                ));
            }
            signatures.push(Signature {
                params: decl.params.iter().map(|p| p.ty.clone()).collect(),
                ret: decl.ret.clone(),
            });
        }
        Ok(Functions {
            by_name,
            signatures,
        })
    }

    fn get(&self, name: &str) -> Option<(u32, &Signature)> {
        let index = *self.by_name.get(name)?;
        let signature = self.signatures.get(usize::try_from(index).ok()?)?;
        Some((index, signature))
    }
}

/// Checks one function body (or the script body).
struct FnChecker<'a> {
    functions: &'a Functions,
    /// The function's name, for messages.
    name: &'a str,
    ret: Option<Type>,
    locals: Vec<LocalInfo>,
    scopes: Scopes,
    /// How many loops enclose the current statement.
    loop_depth: u32,
}

impl<'a> FnChecker<'a> {
    /// Checks `decl` and fills in its locals.
    fn run(functions: &'a Functions, decl: &mut FnDecl) -> Result<(), Diagnostic> {
        // A copy of the name, because the body is borrowed mutably below.
        let name = decl.name.clone();
        let mut checker = FnChecker {
            functions,
            name: &name,
            ret: decl.ret.clone(),
            locals: Vec::new(),
            scopes: Scopes::default(),
            loop_depth: 0,
        };
        checker.scopes.push();
        for param in &mut decl.params {
            if checker.scopes.declared_in_innermost(&param.name) {
                return Err(Diagnostic::new(
                    param.span,
                    format!("parameter '{}' is declared more than once", param.name),
                ));
            }
            param.local = checker.declare(&param.name, param.ty.clone(), param.span)?;
        }
        checker.block(&mut decl.body)?;
        checker.scopes.pop();
        if let Some(ret) = &decl.ret
            && !returns::block_always_returns(&decl.body)
        {
            return Err(Diagnostic::new(
                decl.span,
                format!(
                    "missing return: function '{name}' can reach the end of its body without returning {ret}"
                ),
            ));
        }
        decl.locals = checker.locals;
        Ok(())
    }

    /// Adds a local visible from now on in the innermost scope.
    fn declare(&mut self, name: &str, ty: Type, span: Span) -> Result<LocalId, Diagnostic> {
        let id = LocalId::try_from(self.locals.len())
            .ok()
            .filter(|&id| id != crate::front::ast::UNRESOLVED)
            .ok_or_else(|| Diagnostic::new(span, "too many local variables in one function"))?;
        self.locals.push(LocalInfo {
            name: name.to_string(),
            ty,
            span,
        });
        self.scopes.declare(name, id);
        Ok(id)
    }

    /// The type of local `id`.
    fn local_type(&self, id: LocalId) -> Option<&Type> {
        self.locals.get(usize::try_from(id).ok()?).map(|l| &l.ty)
    }

    /// How this function is named in messages.
    fn describe_function(&self) -> String {
        if self.name == "<main>" {
            "the script body".to_string()
        } else {
            format!("function '{}'", self.name)
        }
    }
}

/// Where an expression starts in the source: the leftmost token of its
/// tree (binary operators and indexes are positioned at their operator).
fn start(mut e: &Expr) -> Span {
    loop {
        match &e.kind {
            ExprKind::Binary { lhs, .. } | ExprKind::Logic { lhs, .. } => e = lhs,
            ExprKind::Index { array, .. } => e = array,
            _ => return e.span,
        }
    }
}

/// "mismatched types: expected WANT, found GOT" at the start of `e`.
fn mismatch(e: &Expr, want: impl std::fmt::Display) -> Diagnostic {
    Diagnostic::new(
        start(e),
        format!("mismatched types: expected {want}, found {}", e.ty),
    )
}

/// Fails unless `e` (already checked) has type `want`.
fn expect_type(e: &Expr, want: &Type) -> Result<(), Diagnostic> {
    if e.ty == *want {
        Ok(())
    } else {
        Err(mismatch(e, want))
    }
}
