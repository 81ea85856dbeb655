//! The types of the builtin functions (LANGUAGE.md, "Builtins").

use super::expr::arity_error;
use super::{FnChecker, expect_type, mismatch};
use crate::ast::{Builtin, Expr, Span, Type};
use crate::diag::Diagnostic;

impl FnChecker<'_> {
    /// Checks the arguments of a builtin call and returns its result type.
    pub(super) fn builtin(
        &mut self,
        builtin: Builtin,
        args: &mut [Expr],
        span: Span,
    ) -> Result<Type, Diagnostic> {
        let name = builtin.name();
        match builtin {
            Builtin::Clock | Builtin::Args => {
                if !args.is_empty() {
                    return Err(arity_error(name, 0, args.len(), span));
                }
                Ok(if builtin == Builtin::Clock {
                    Type::Float
                } else {
                    Type::Array(Box::new(Type::Str))
                })
            }
            Builtin::Push => {
                let [array, value] = args else {
                    return Err(arity_error(name, 2, args.len(), span));
                };
                let element = self.array_argument(array)?;
                self.value(value, Some(&element))?;
                expect_type(value, &element)?;
                Ok(Type::Void)
            }
            _ => {
                let [arg] = args else {
                    return Err(arity_error(name, 1, args.len(), span));
                };
                self.unary_builtin(builtin, arg)
            }
        }
    }

    /// The builtins of one argument.
    fn unary_builtin(&mut self, builtin: Builtin, arg: &mut Expr) -> Result<Type, Diagnostic> {
        if builtin == Builtin::Pop {
            return self.array_argument(arg);
        }
        self.value(arg, None)?;
        let ty = &arg.ty;
        let (accepted, wanted, result) = match builtin {
            Builtin::Print => (true, "", Type::Void),
            Builtin::Len => (
                matches!(ty, Type::Array(_) | Type::Str),
                "an array or str",
                Type::Int,
            ),
            Builtin::Sqrt => (*ty == Type::Float, "float", Type::Float),
            Builtin::ParseInt => (*ty == Type::Str, "str", Type::Int),
            Builtin::ParseFloat => (*ty == Type::Str, "str", Type::Float),
            Builtin::Int => (
                matches!(ty, Type::Int | Type::Float),
                "int or float",
                Type::Int,
            ),
            Builtin::Float => (
                matches!(ty, Type::Int | Type::Float),
                "int or float",
                Type::Float,
            ),
            Builtin::Str => (
                matches!(ty, Type::Int | Type::Float | Type::Bool | Type::Str),
                "int, float, bool or str",
                Type::Str,
            ),
            // Handled in `builtin` and above; listed to keep the match total.
            Builtin::Pop | Builtin::Push | Builtin::Clock | Builtin::Args => (true, "", Type::Void),
        };
        if accepted {
            Ok(result)
        } else {
            Err(mismatch(arg, wanted))
        }
    }

    /// Checks an argument that must be an array; returns its element type.
    fn array_argument(&mut self, array: &mut Expr) -> Result<Type, Diagnostic> {
        self.value(array, None)?;
        match &array.ty {
            Type::Array(element) => Ok(element.as_ref().clone()),
            _ => Err(mismatch(array, "an array")),
        }
    }
}
