//! The syntax tree of a Toy program.
//!
//! The parser builds it; the checker ([`crate::front::check`]) fills in the
//! `ty` of every expression and resolves every local variable to a
//! [`LocalId`]; the bytecode compiler reads the checked tree. Nothing here
//! knows about bytecode.

pub use crate::types::{Span, Type};

/// Index of a local variable (parameter, `let`, or `for` variable) within
/// its function's [`FnDecl::locals`]. Assigned by the checker; every
/// declaration gets a fresh id, so shadowing never reuses one.
pub type LocalId = u32;

/// Placeholder for a [`LocalId`] the checker has not assigned yet.
pub const UNRESOLVED: LocalId = u32::MAX;

/// A whole script: its functions and the statements of its body (`<main>`).
#[derive(Clone, Debug, Default)]
pub struct Program {
    pub functions: Vec<FnDecl>,
    /// The script body, run top to bottom as the function `<main>`.
    pub main: FnDecl,
}

/// A function declaration. The script body is also represented as one,
/// named `<main>`, with no parameters and no return type.
#[derive(Clone, Debug, Default)]
pub struct FnDecl {
    pub name: String,
    /// Position of the `fn` keyword (1:1 for `<main>`).
    pub span: Span,
    pub params: Vec<Param>,
    /// `None` for functions without `-> T`.
    pub ret: Option<Type>,
    pub body: Block,
    /// Every local of the function, indexed by [`LocalId`]; parameters
    /// first, in order. Filled by the checker.
    pub locals: Vec<LocalInfo>,
}

#[derive(Clone, Debug)]
pub struct Param {
    pub name: String,
    pub ty: Type,
    pub span: Span,
    /// Set by the checker (parameters get ids `0..params.len()`).
    pub local: LocalId,
}

/// What the checker knows about one local variable.
#[derive(Clone, Debug)]
pub struct LocalInfo {
    pub name: String,
    pub ty: Type,
    pub span: Span,
}

#[derive(Clone, Debug, Default)]
pub struct Block {
    pub stmts: Vec<Stmt>,
    /// Position of the `{`.
    pub span: Span,
}

#[derive(Clone, Debug)]
pub struct Stmt {
    pub kind: StmtKind,
    pub span: Span,
}

#[derive(Clone, Debug)]
pub enum StmtKind {
    /// `let name [: ty] = init;`
    Let {
        name: String,
        ty: Option<Type>,
        init: Expr,
        /// Set by the checker.
        local: LocalId,
    },
    /// `target = value;` or `target op= value;`. `target` is a
    /// [`ExprKind::Local`] or an [`ExprKind::Index`]; `op` is `Some` for
    /// compound assignment.
    Assign {
        target: Expr,
        op: Option<BinOp>,
        value: Expr,
    },
    /// `if cond { } [else if ... | else { }]`; an `else if` chain is an
    /// `else` block holding one `If` statement.
    If {
        cond: Expr,
        then_block: Block,
        else_block: Option<Block>,
    },
    While {
        cond: Expr,
        body: Block,
    },
    /// `for var in start..end { body }`.
    For {
        var: String,
        var_span: Span,
        start: Expr,
        end: Expr,
        body: Block,
        /// Set by the checker: the loop variable, fresh per loop.
        local: LocalId,
    },
    Break,
    Continue,
    Return(Option<Expr>),
    /// An expression statement (must be a call).
    Expr(Expr),
    /// A nested `{ ... }` block.
    Block(Block),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
    Rem,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    BitAnd,
    BitOr,
    BitXor,
    Shl,
    Shr,
}

impl BinOp {
    pub fn symbol(self) -> &'static str {
        match self {
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Mul => "*",
            BinOp::Div => "/",
            BinOp::Rem => "%",
            BinOp::Eq => "==",
            BinOp::Ne => "!=",
            BinOp::Lt => "<",
            BinOp::Le => "<=",
            BinOp::Gt => ">",
            BinOp::Ge => ">=",
            BinOp::BitAnd => "&",
            BinOp::BitOr => "|",
            BinOp::BitXor => "^",
            BinOp::Shl => "<<",
            BinOp::Shr => ">>",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnOp {
    Neg,
    Not,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LogicOp {
    And,
    Or,
}

/// The builtin functions (LANGUAGE.md, "Builtins").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Builtin {
    Print,
    Len,
    Push,
    Pop,
    Sqrt,
    Clock,
    Args,
    ParseInt,
    ParseFloat,
    Int,
    Float,
    Str,
}

impl Builtin {
    pub const ALL: [Builtin; 12] = [
        Builtin::Print,
        Builtin::Len,
        Builtin::Push,
        Builtin::Pop,
        Builtin::Sqrt,
        Builtin::Clock,
        Builtin::Args,
        Builtin::ParseInt,
        Builtin::ParseFloat,
        Builtin::Int,
        Builtin::Float,
        Builtin::Str,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Builtin::Print => "print",
            Builtin::Len => "len",
            Builtin::Push => "push",
            Builtin::Pop => "pop",
            Builtin::Sqrt => "sqrt",
            Builtin::Clock => "clock",
            Builtin::Args => "args",
            Builtin::ParseInt => "parse_int",
            Builtin::ParseFloat => "parse_float",
            Builtin::Int => "int",
            Builtin::Float => "float",
            Builtin::Str => "str",
        }
    }

    pub fn from_name(name: &str) -> Option<Builtin> {
        Builtin::ALL.into_iter().find(|b| b.name() == name)
    }
}

/// What a call's name refers to; set by the checker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Callee {
    Unresolved,
    Builtin(Builtin),
    /// Index into [`Program::functions`].
    Function(u32),
}

#[derive(Clone, Debug)]
pub struct Expr {
    pub kind: ExprKind,
    /// Where the expression starts; for a binary operator, the operator's
    /// position (that is what an error such as division by zero points at).
    pub span: Span,
    /// Filled by the checker; `Type::Void` until then.
    pub ty: Type,
}

#[derive(Clone, Debug)]
pub enum ExprKind {
    Int(i64),
    Float(f64),
    Bool(bool),
    Str(String),
    /// A use of a local variable; `local` is set by the checker.
    Local {
        name: String,
        local: LocalId,
    },
    Unary {
        op: UnOp,
        operand: Box<Expr>,
    },
    Binary {
        op: BinOp,
        lhs: Box<Expr>,
        rhs: Box<Expr>,
    },
    /// `&&` / `||`, short-circuit.
    Logic {
        op: LogicOp,
        lhs: Box<Expr>,
        rhs: Box<Expr>,
    },
    Call {
        name: String,
        args: Vec<Expr>,
        /// Set by the checker.
        callee: Callee,
    },
    Index {
        array: Box<Expr>,
        index: Box<Expr>,
    },
    /// `[e1, e2, ...]`; the empty literal takes its element type from the
    /// `let` annotation (the checker sets `ty`).
    ArrayLit(Vec<Expr>),
    /// `[value; count]`.
    ArrayRepeat {
        value: Box<Expr>,
        count: Box<Expr>,
    },
}

impl Expr {
    pub fn new(kind: ExprKind, span: Span) -> Expr {
        Expr {
            kind,
            span,
            ty: Type::Void,
        }
    }
}
