//! The vocabulary every stage shares: the language's types and positions
//! in the source text. The front end builds them, bytecode carries them
//! (register and parameter types, each instruction's span), and the
//! runtime prints values by type and tracebacks by position; this module
//! depends on nothing else in the crate.

use std::fmt;

/// A position in the source text: 1-based line and 1-based column, where the
/// column counts Unicode scalar values (characters), as editors and rustc do.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Span {
    pub line: u32,
    pub col: u32,
}

impl Span {
    pub fn new(line: u32, col: u32) -> Span {
        Span { line, col }
    }
}

impl fmt::Display for Span {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.line, self.col)
    }
}

/// A Toy type. `Void` is the "type" of a call to a function without `-> T`;
/// it is never the type of a variable.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Type {
    Int,
    Float,
    Bool,
    Str,
    Array(Box<Type>),
    Void,
}

impl Type {
    /// True for the types whose values live on the heap (a GC reference).
    pub fn is_ref(&self) -> bool {
        matches!(self, Type::Str | Type::Array(_))
    }
}

impl fmt::Display for Type {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Type::Int => f.write_str("int"),
            Type::Float => f.write_str("float"),
            Type::Bool => f.write_str("bool"),
            Type::Str => f.write_str("str"),
            Type::Array(t) => write!(f, "[{t}]"),
            Type::Void => f.write_str("void"),
        }
    }
}
