//! The types of the builtin functions (LANGUAGE.md, "Builtins").
//!
//! | call | arguments | result |
//! |---|---|---|
//! | `print(x)` | any value | none |
//! | `len(a)` | `[T]` or `str` | `int` |
//! | `push(a, x)` | `[T]`, `T` | none |
//! | `pop(a)` | `[T]` | `T` |
//! | `sqrt(f)` | `float` | `float` |
//! | `clock()` | | `float` |
//! | `args()` | | `[str]` |
//! | `parse_int(s)`, `parse_float(s)` | `str` | `int`, `float` |
//! | `int(x)`, `float(x)` | `int` or `float` | `int`, `float` |
//! | `str(x)` | `int`, `float`, `bool` or `str` | `str` |

use super::expr::arity_error;
use super::{FnChecker, expect_type, mismatch};
use crate::front::ast::{Builtin, Expr, Span, Type};
use crate::front::diag::Diagnostic;

impl FnChecker<'_> {
    /// Checks the arguments of a builtin call and returns its result type
    /// (`Void` for `print` and `push`).
    pub(super) fn builtin(
        &mut self,
        builtin: Builtin,
        args: &mut [Expr],
        span: Span,
    ) -> Result<Type, Diagnostic> {
        let name = builtin.name();
        match builtin {
            Builtin::Print => {
                let arg = one(name, args, span)?;
                self.value(arg, None)?;
                Ok(Type::Void)
            }
            Builtin::Len => {
                let arg = one(name, args, span)?;
                self.value(arg, None)?;
                match arg.ty {
                    Type::Array(_) | Type::Str => Ok(Type::Int),
                    _ => Err(mismatch(arg, "an array or str")),
                }
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
            Builtin::Pop => {
                let arg = one(name, args, span)?;
                self.array_argument(arg)
            }
            Builtin::Sqrt => self.simple(one(name, args, span)?, &[Type::Float], Type::Float),
            Builtin::Clock => {
                none(name, args, span)?;
                Ok(Type::Float)
            }
            Builtin::Args => {
                none(name, args, span)?;
                Ok(Type::Array(Box::new(Type::Str)))
            }
            Builtin::ParseInt => self.simple(one(name, args, span)?, &[Type::Str], Type::Int),
            Builtin::ParseFloat => self.simple(one(name, args, span)?, &[Type::Str], Type::Float),
            Builtin::Int => self.simple(one(name, args, span)?, &NUMBERS, Type::Int),
            Builtin::Float => self.simple(one(name, args, span)?, &NUMBERS, Type::Float),
            Builtin::Str => self.simple(one(name, args, span)?, &SCALARS, Type::Str),
        }
    }

    /// A one-argument builtin whose argument has one of the `accepted`
    /// types and whose result is always `result`.
    fn simple(
        &mut self,
        arg: &mut Expr,
        accepted: &[Type],
        result: Type,
    ) -> Result<Type, Diagnostic> {
        self.value(arg, None)?;
        if accepted.contains(&arg.ty) {
            Ok(result)
        } else {
            Err(mismatch(arg, one_of(accepted)))
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

/// What `int(x)` and `float(x)` convert from.
const NUMBERS: [Type; 2] = [Type::Int, Type::Float];

/// What `str(x)` converts from.
const SCALARS: [Type; 4] = [Type::Int, Type::Float, Type::Bool, Type::Str];

/// The only argument of a one-argument builtin.
fn one<'e>(name: &str, args: &'e mut [Expr], span: Span) -> Result<&'e mut Expr, Diagnostic> {
    match args {
        [arg] => Ok(arg),
        _ => Err(arity_error(name, 1, args.len(), span)),
    }
}

/// Fails unless a builtin without parameters got no arguments.
fn none(name: &str, args: &[Expr], span: Span) -> Result<(), Diagnostic> {
    if args.is_empty() {
        Ok(())
    } else {
        Err(arity_error(name, 0, args.len(), span))
    }
}

/// "int", "int or float", "int, float, bool or str".
fn one_of(types: &[Type]) -> String {
    let names: Vec<String> = types.iter().map(Type::to_string).collect();
    match names.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    }
}
