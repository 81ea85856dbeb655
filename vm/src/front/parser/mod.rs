//! Recursive-descent parser: tokens → [`crate::front::ast::Program`].
//!
//! # Shape of the tree
//! Top-level `fn`s go to [`Program::functions`] in source order; top-level
//! statements form [`Program::main`], a function named `<main>` at 1:1 with
//! no parameters and no return type. An `else if` is an `else` block (span
//! of the `if`) holding one `If` statement. Parentheses leave no node.
//!
//! # Spans
//! - [`Expr::span`]: a binary operator's (also `&&`, `||`) own position; a
//!   call's callee name; an index expression's `[`; a unary operator's
//!   position; an array literal's `[`; literals and names their first
//!   character. `-9223372036854775808` becomes one `Int` literal at the `-`.
//! - [`Stmt::span`]: the keyword for `let`, `if`, `while`, `for`, `break`,
//!   `continue` and `return`; the `{` for a nested block; the first token of
//!   the call for an expression statement; and for an assignment the
//!   assignment operator (`=`, `+=`, ...), which is where a runtime error in
//!   `x /= 0` points.
//! - [`FnDecl::span`]: the `fn` keyword; [`Block::span`]: its `{`.
//!
//! # Limits
//! The parser never overflows the stack of the 512 MiB front-end thread,
//! and the tree it builds can be walked recursively by later stages:
//! - expressions nest at most [`MAX_NESTING`] levels (parentheses, unary
//!   operators, array literals, index brackets, call argument lists, and
//!   brackets of a type): "expression nested too deeply";
//! - blocks and `else if` links nest at most [`MAX_NESTING`] levels
//!   together, because each `else if` nests the rest of its chain one level
//!   deeper in the tree (a chain of N `else if`s uses N + 1 levels):
//!   "blocks nested too deeply";
//! - an expression tree is at most [`MAX_EXPR_DEPTH`] nodes deep. Chains of
//!   left-associative operators (`1 + 1 + ...`) are parsed in a loop, so
//!   such a chain of 20,000 terms is fine; a longer one ends in "expression
//!   too long" rather than a crash.

use crate::front::ast::{
    BinOp, Block, Callee, Expr, ExprKind, FnDecl, LogicOp, Param, Program, Span, Stmt, StmtKind,
    Type, UNRESOLVED, UnOp,
};
use crate::front::diag::Diagnostic;
use crate::front::lexer::{INT_TOO_LARGE, Lexer, Token, TokenKind};

/// How deeply expressions, types and blocks may nest.
pub const MAX_NESTING: u32 = 1000;

/// How deep one expression tree may be (operator chains included).
pub const MAX_EXPR_DEPTH: u32 = 100_000;

/// Parses a whole script.
pub fn parse(source: &str) -> Result<Program, Diagnostic> {
    let mut parser = Parser::new(source)?;
    parser.program()
}

/// An expression together with the depth of its tree, so that depth limits
/// are enforced while parsing instead of by a recursive walk afterwards.
struct Parsed {
    expr: Expr,
    depth: u32,
}

impl Parsed {
    fn leaf(kind: ExprKind, span: Span) -> Parsed {
        Parsed {
            expr: Expr::new(kind, span),
            depth: 1,
        }
    }
}

/// What a binary operator token builds.
#[derive(Clone, Copy)]
enum BinaryKind {
    Arith(BinOp),
    Logic(LogicOp),
}

/// Precedence level (1 = loosest, 10 = tightest) and meaning of a binary
/// operator token, per LANGUAGE.md, "Operators and precedence".
fn binary_operator(kind: &TokenKind) -> Option<(u8, BinaryKind)> {
    use BinaryKind::{Arith, Logic};
    Some(match kind {
        TokenKind::OrOr => (1, Logic(LogicOp::Or)),
        TokenKind::AndAnd => (2, Logic(LogicOp::And)),
        TokenKind::EqEq => (3, Arith(BinOp::Eq)),
        TokenKind::NotEq => (3, Arith(BinOp::Ne)),
        TokenKind::Lt => (4, Arith(BinOp::Lt)),
        TokenKind::Le => (4, Arith(BinOp::Le)),
        TokenKind::Gt => (4, Arith(BinOp::Gt)),
        TokenKind::Ge => (4, Arith(BinOp::Ge)),
        TokenKind::Pipe => (5, Arith(BinOp::BitOr)),
        TokenKind::Caret => (6, Arith(BinOp::BitXor)),
        TokenKind::Amp => (7, Arith(BinOp::BitAnd)),
        TokenKind::Shl => (8, Arith(BinOp::Shl)),
        TokenKind::Shr => (8, Arith(BinOp::Shr)),
        TokenKind::Plus => (9, Arith(BinOp::Add)),
        TokenKind::Minus => (9, Arith(BinOp::Sub)),
        TokenKind::Star => (10, Arith(BinOp::Mul)),
        TokenKind::Slash => (10, Arith(BinOp::Div)),
        TokenKind::Percent => (10, Arith(BinOp::Rem)),
        _ => return None,
    })
}

/// The operator of an assignment token: `Some(None)` for `=`,
/// `Some(Some(op))` for `op=`.
fn assignment_operator(kind: &TokenKind) -> Option<Option<BinOp>> {
    Some(match kind {
        TokenKind::Assign => None,
        TokenKind::PlusAssign => Some(BinOp::Add),
        TokenKind::MinusAssign => Some(BinOp::Sub),
        TokenKind::StarAssign => Some(BinOp::Mul),
        TokenKind::SlashAssign => Some(BinOp::Div),
        TokenKind::PercentAssign => Some(BinOp::Rem),
        _ => return None,
    })
}

struct Parser<'src> {
    lexer: Lexer<'src>,
    /// The current (not yet consumed) token.
    token: Token,
    /// Current expression nesting, see [`MAX_NESTING`].
    expr_nesting: u32,
    /// Current block nesting, see [`MAX_NESTING`].
    block_nesting: u32,
}

impl<'src> Parser<'src> {
    fn new(source: &'src str) -> Result<Parser<'src>, Diagnostic> {
        let mut lexer = Lexer::new(source);
        let token = lexer.next_token()?;
        Ok(Parser {
            lexer,
            token,
            expr_nesting: 0,
            block_nesting: 0,
        })
    }

    /// Consumes the current token and returns it.
    fn advance(&mut self) -> Result<Token, Diagnostic> {
        let next = self.lexer.next_token()?;
        Ok(std::mem::replace(&mut self.token, next))
    }

    fn at(&self, kind: &TokenKind) -> bool {
        self.token.kind == *kind
    }

    /// Consumes the current token if it is `kind`.
    fn eat(&mut self, kind: &TokenKind) -> Result<bool, Diagnostic> {
        if self.at(kind) {
            self.advance()?;
            Ok(true)
        } else {
            Ok(false)
        }
    }

    /// An error at the current token: "expected WHAT, found TOKEN".
    fn unexpected(&self, what: &str) -> Diagnostic {
        Diagnostic::new(
            self.token.span,
            format!("expected {what}, found {}", self.token.kind.describe()),
        )
    }

    /// Consumes a punctuation or keyword token of kind `kind`, or fails.
    fn expect(&mut self, kind: &TokenKind) -> Result<Token, Diagnostic> {
        if self.at(kind) {
            self.advance()
        } else {
            Err(self.unexpected(&format!("'{}'", kind.symbol())))
        }
    }

    /// Consumes an identifier, or fails saying `what` was expected.
    fn expect_ident(&mut self, what: &str) -> Result<(String, Span), Diagnostic> {
        match &mut self.token.kind {
            TokenKind::Ident(name) => {
                // The token is consumed just below, so its name can be moved.
                let name = std::mem::take(name);
                let span = self.advance()?.span;
                Ok((name, span))
            }
            _ => Err(self.unexpected(what)),
        }
    }

    fn enter_expr(&mut self, span: Span) -> Result<(), Diagnostic> {
        self.expr_nesting += 1;
        if self.expr_nesting > MAX_NESTING {
            return Err(Diagnostic::new(
                span,
                format!("expression nested too deeply (the limit is {MAX_NESTING} levels)"),
            ));
        }
        Ok(())
    }

    fn leave_expr(&mut self) {
        self.expr_nesting -= 1;
    }

    /// Enters a block or an `else if` link: both nest the tree one level.
    fn enter_block(&mut self, span: Span) -> Result<(), Diagnostic> {
        self.block_nesting += 1;
        if self.block_nesting > MAX_NESTING {
            return Err(Diagnostic::new(
                span,
                format!(
                    "blocks nested too deeply (the limit is {MAX_NESTING} levels; each 'else if' counts as one)"
                ),
            ));
        }
        Ok(())
    }

    fn leave_block(&mut self) {
        self.block_nesting -= 1;
    }

    // ----- declarations and statements -----

    fn program(&mut self) -> Result<Program, Diagnostic> {
        let mut functions = Vec::new();
        let mut stmts = Vec::new();
        loop {
            match self.token.kind {
                TokenKind::Eof => break,
                TokenKind::Fn => functions.push(self.function()?),
                _ => stmts.push(self.statement()?),
            }
        }
        let start = Span::new(1, 1);
        Ok(Program {
            functions,
            main: FnDecl {
                name: "<main>".to_string(),
                span: start,
                params: Vec::new(),
                ret: None,
                body: Block { stmts, span: start },
                locals: Vec::new(),
            },
        })
    }

    fn function(&mut self) -> Result<FnDecl, Diagnostic> {
        let span = self.expect(&TokenKind::Fn)?.span;
        let (name, _) = self.expect_ident("a function name")?;
        self.expect(&TokenKind::LParen)?;
        let mut params = Vec::new();
        while !self.at(&TokenKind::RParen) {
            let (name, span) = self.expect_ident("a parameter name")?;
            self.expect(&TokenKind::Colon)?;
            let ty = self.ty()?;
            params.push(Param {
                name,
                ty,
                span,
                local: UNRESOLVED,
            });
            if !self.eat(&TokenKind::Comma)? {
                break;
            }
        }
        self.expect(&TokenKind::RParen)?;
        let ret = if self.eat(&TokenKind::Arrow)? {
            Some(self.ty()?)
        } else {
            None
        };
        let body = self.block()?;
        Ok(FnDecl {
            name,
            span,
            params,
            ret,
            body,
            locals: Vec::new(),
        })
    }

    /// A type: `int`, `float`, `bool`, `str` or `[T]`. The brackets are
    /// counted in a loop, so a deep type costs no recursion here.
    fn ty(&mut self) -> Result<Type, Diagnostic> {
        let mut brackets = 0u32;
        while self.at(&TokenKind::LBracket) {
            let span = self.advance()?.span;
            brackets += 1;
            if brackets > MAX_NESTING {
                return Err(Diagnostic::new(
                    span,
                    format!("type nested too deeply (the limit is {MAX_NESTING} levels)"),
                ));
            }
        }
        let (name, span) = self.expect_ident("a type")?;
        let mut ty = match name.as_str() {
            "int" => Type::Int,
            "float" => Type::Float,
            "bool" => Type::Bool,
            "str" => Type::Str,
            _ => return Err(Diagnostic::new(span, format!("unknown type '{name}'"))),
        };
        for _ in 0..brackets {
            self.expect(&TokenKind::RBracket)?;
            ty = Type::Array(Box::new(ty));
        }
        Ok(ty)
    }

    fn block(&mut self) -> Result<Block, Diagnostic> {
        let span = self.expect(&TokenKind::LBrace)?.span;
        self.enter_block(span)?;
        let mut stmts = Vec::new();
        while !self.at(&TokenKind::RBrace) {
            if self.at(&TokenKind::Eof) {
                return Err(self.unexpected("'}'"));
            }
            stmts.push(self.statement()?);
        }
        self.advance()?;
        self.leave_block();
        Ok(Block { stmts, span })
    }

    fn statement(&mut self) -> Result<Stmt, Diagnostic> {
        let span = self.token.span;
        let kind = match self.token.kind {
            TokenKind::Let => self.let_statement()?,
            TokenKind::If => return self.if_statement(),
            TokenKind::While => {
                self.advance()?;
                let cond = self.expr()?;
                let body = self.block()?;
                StmtKind::While { cond, body }
            }
            TokenKind::For => self.for_statement()?,
            TokenKind::Break => {
                self.advance()?;
                self.expect(&TokenKind::Semi)?;
                StmtKind::Break
            }
            TokenKind::Continue => {
                self.advance()?;
                self.expect(&TokenKind::Semi)?;
                StmtKind::Continue
            }
            TokenKind::Return => {
                self.advance()?;
                let value = if self.at(&TokenKind::Semi) {
                    None
                } else {
                    Some(self.expr()?)
                };
                self.expect(&TokenKind::Semi)?;
                StmtKind::Return(value)
            }
            TokenKind::LBrace => StmtKind::Block(self.block()?),
            TokenKind::Fn => {
                return Err(Diagnostic::new(
                    span,
                    "functions can only be declared at the top level",
                ));
            }
            _ => return self.expression_statement(),
        };
        Ok(Stmt { kind, span })
    }

    fn let_statement(&mut self) -> Result<StmtKind, Diagnostic> {
        self.expect(&TokenKind::Let)?;
        let (name, _) = self.expect_ident("a variable name")?;
        let ty = if self.eat(&TokenKind::Colon)? {
            Some(self.ty()?)
        } else {
            None
        };
        self.expect(&TokenKind::Assign)?;
        let init = self.expr()?;
        self.expect(&TokenKind::Semi)?;
        Ok(StmtKind::Let {
            name,
            ty,
            init,
            local: UNRESOLVED,
        })
    }

    /// `if c { } else if c2 { } else { }`. Each `else if` nests one level
    /// deeper in the tree, so it counts against the block nesting limit.
    fn if_statement(&mut self) -> Result<Stmt, Diagnostic> {
        let span = self.expect(&TokenKind::If)?.span;
        let cond = self.expr()?;
        let then_block = self.block()?;
        let else_block = if self.eat(&TokenKind::Else)? {
            if self.at(&TokenKind::If) {
                let if_span = self.token.span;
                self.enter_block(if_span)?;
                let nested = self.if_statement()?;
                self.leave_block();
                Some(Block {
                    stmts: vec![nested],
                    span: if_span,
                })
            } else {
                Some(self.block()?)
            }
        } else {
            None
        };
        Ok(Stmt {
            kind: StmtKind::If {
                cond,
                then_block,
                else_block,
            },
            span,
        })
    }

    fn for_statement(&mut self) -> Result<StmtKind, Diagnostic> {
        self.expect(&TokenKind::For)?;
        let (var, var_span) = self.expect_ident("a loop variable name")?;
        self.expect(&TokenKind::In)?;
        let start = self.expr()?;
        self.expect(&TokenKind::DotDot)?;
        let end = self.expr()?;
        let body = self.block()?;
        Ok(StmtKind::For {
            var,
            var_span,
            start,
            end,
            body,
            local: UNRESOLVED,
        })
    }

    /// An assignment or a call statement.
    fn expression_statement(&mut self) -> Result<Stmt, Diagnostic> {
        let start = self.token.span;
        let target = self.expr()?;
        if let Some(op) = assignment_operator(&self.token.kind) {
            let op_span = self.advance()?.span;
            if !matches!(target.kind, ExprKind::Local { .. } | ExprKind::Index { .. }) {
                return Err(Diagnostic::new(
                    start,
                    "invalid left-hand side of assignment: expected a variable or an array element",
                ));
            }
            let value = self.expr()?;
            self.expect(&TokenKind::Semi)?;
            return Ok(Stmt {
                kind: StmtKind::Assign { target, op, value },
                span: op_span,
            });
        }
        self.expect(&TokenKind::Semi)?;
        if !matches!(target.kind, ExprKind::Call { .. }) {
            return Err(Diagnostic::new(
                start,
                "expression statement must be a call",
            ));
        }
        Ok(Stmt {
            kind: StmtKind::Expr(target),
            span: start,
        })
    }

    // ----- expressions -----

    fn expr(&mut self) -> Result<Expr, Diagnostic> {
        Ok(self.binary(1)?.expr)
    }

    /// Precedence climbing: operators of level `min_level` and tighter.
    /// Operators of one level are folded in a loop (left associative), so
    /// only a change of level recurses, at most ten calls deep.
    fn binary(&mut self, min_level: u8) -> Result<Parsed, Diagnostic> {
        let mut lhs = self.unary()?;
        while let Some((level, kind)) = binary_operator(&self.token.kind) {
            if level < min_level {
                break;
            }
            let span = self.advance()?.span;
            let rhs = self.binary(level + 1)?;
            let depth = deeper(lhs.depth.max(rhs.depth), span)?;
            let (lhs_expr, rhs_expr) = (Box::new(lhs.expr), Box::new(rhs.expr));
            let kind = match kind {
                BinaryKind::Arith(op) => ExprKind::Binary {
                    op,
                    lhs: lhs_expr,
                    rhs: rhs_expr,
                },
                BinaryKind::Logic(op) => ExprKind::Logic {
                    op,
                    lhs: lhs_expr,
                    rhs: rhs_expr,
                },
            };
            lhs = Parsed {
                expr: Expr::new(kind, span),
                depth,
            };
        }
        Ok(lhs)
    }

    fn unary(&mut self) -> Result<Parsed, Diagnostic> {
        let op = match self.token.kind {
            TokenKind::Minus => UnOp::Neg,
            TokenKind::Bang => UnOp::Not,
            _ => return self.postfix(),
        };
        let span = self.advance()?.span;
        if op == UnOp::Neg && self.token.kind == TokenKind::Int(1 << 63) {
            return self.most_negative_literal(span);
        }
        self.enter_expr(span)?;
        let operand = self.unary()?;
        self.leave_expr();
        let depth = deeper(operand.depth, span)?;
        Ok(Parsed {
            expr: Expr::new(
                ExprKind::Unary {
                    op,
                    operand: Box::new(operand.expr),
                },
                span,
            ),
            depth,
        })
    }

    /// `-9223372036854775808`: the literal alone does not fit in an `int`,
    /// but negated it is exactly `i64::MIN`, so (as in Rust) the pair is
    /// accepted as one literal at the `-`. When a call or index binds the
    /// literal first (`-9223372036854775808[0]`) it is out of range.
    fn most_negative_literal(&mut self, minus: Span) -> Result<Parsed, Diagnostic> {
        let literal = self.advance()?.span;
        if self.at(&TokenKind::LBracket) || self.at(&TokenKind::LParen) {
            return Err(Diagnostic::new(literal, INT_TOO_LARGE));
        }
        Ok(Parsed::leaf(ExprKind::Int(i64::MIN), minus))
    }

    /// A primary expression followed by any number of `[index]`s, folded in
    /// a loop.
    fn postfix(&mut self) -> Result<Parsed, Diagnostic> {
        let mut value = self.primary()?;
        while self.at(&TokenKind::LBracket) {
            let span = self.advance()?.span;
            self.enter_expr(span)?;
            let index = self.binary(1)?;
            self.expect(&TokenKind::RBracket)?;
            self.leave_expr();
            let depth = deeper(value.depth.max(index.depth), span)?;
            value = Parsed {
                expr: Expr::new(
                    ExprKind::Index {
                        array: Box::new(value.expr),
                        index: Box::new(index.expr),
                    },
                    span,
                ),
                depth,
            };
        }
        Ok(value)
    }

    fn primary(&mut self) -> Result<Parsed, Diagnostic> {
        let span = self.token.span;
        let kind = match &mut self.token.kind {
            TokenKind::Int(value) => match i64::try_from(*value) {
                Ok(value) => ExprKind::Int(value),
                Err(_) => return Err(Diagnostic::new(span, INT_TOO_LARGE)),
            },
            TokenKind::Float(value) => ExprKind::Float(*value),
            // The token is consumed just below, so its text can be moved.
            TokenKind::Str(text) => ExprKind::Str(std::mem::take(text)),
            TokenKind::True => ExprKind::Bool(true),
            TokenKind::False => ExprKind::Bool(false),
            TokenKind::Ident(_) => return self.name(),
            TokenKind::LParen => {
                self.advance()?;
                self.enter_expr(span)?;
                let inner = self.binary(1)?;
                self.expect(&TokenKind::RParen)?;
                self.leave_expr();
                return Ok(inner);
            }
            TokenKind::LBracket => return self.array_literal(),
            _ => return Err(self.unexpected("an expression")),
        };
        self.advance()?;
        Ok(Parsed::leaf(kind, span))
    }

    /// A variable use, or a call `name(args)`.
    fn name(&mut self) -> Result<Parsed, Diagnostic> {
        let (name, span) = self.expect_ident("a name")?;
        if !self.at(&TokenKind::LParen) {
            return Ok(Parsed::leaf(
                ExprKind::Local {
                    name,
                    local: UNRESOLVED,
                },
                span,
            ));
        }
        let open = self.advance()?.span;
        self.enter_expr(open)?;
        let (args, depth) = self.list(&TokenKind::RParen)?;
        self.leave_expr();
        Ok(Parsed {
            expr: Expr::new(
                ExprKind::Call {
                    name,
                    args,
                    callee: Callee::Unresolved,
                },
                span,
            ),
            depth: deeper(depth, span)?,
        })
    }

    /// Comma-separated expressions up to and including `close` (a trailing
    /// comma is allowed), with the depth of the deepest.
    fn list(&mut self, close: &TokenKind) -> Result<(Vec<Expr>, u32), Diagnostic> {
        let mut items = Vec::new();
        let mut depth = 0;
        while !self.at(close) {
            let item = self.binary(1)?;
            depth = depth.max(item.depth);
            items.push(item.expr);
            if !self.eat(&TokenKind::Comma)? {
                break;
            }
        }
        self.expect(close)?;
        Ok((items, depth))
    }

    /// `[e1, e2, ...]` or `[value; count]`.
    fn array_literal(&mut self) -> Result<Parsed, Diagnostic> {
        let span = self.expect(&TokenKind::LBracket)?.span;
        self.enter_expr(span)?;
        let parsed = if self.at(&TokenKind::RBracket) {
            self.advance()?;
            Parsed::leaf(ExprKind::ArrayLit(Vec::new()), span)
        } else {
            let first = self.binary(1)?;
            if self.eat(&TokenKind::Semi)? {
                let count = self.binary(1)?;
                self.expect(&TokenKind::RBracket)?;
                Parsed {
                    depth: deeper(first.depth.max(count.depth), span)?,
                    expr: Expr::new(
                        ExprKind::ArrayRepeat {
                            value: Box::new(first.expr),
                            count: Box::new(count.expr),
                        },
                        span,
                    ),
                }
            } else {
                let mut depth = first.depth;
                let mut items = vec![first.expr];
                if self.eat(&TokenKind::Comma)? {
                    let (rest, rest_depth) = self.list(&TokenKind::RBracket)?;
                    depth = depth.max(rest_depth);
                    items.extend(rest);
                } else {
                    self.expect(&TokenKind::RBracket)?;
                }
                Parsed {
                    depth: deeper(depth, span)?,
                    expr: Expr::new(ExprKind::ArrayLit(items), span),
                }
            }
        };
        self.leave_expr();
        Ok(parsed)
    }
}

/// The depth of a node above a child of depth `child`, checked against
/// [`MAX_EXPR_DEPTH`].
fn deeper(child: u32, span: Span) -> Result<u32, Diagnostic> {
    let depth = child + 1;
    if depth > MAX_EXPR_DEPTH {
        return Err(Diagnostic::new(
            span,
            format!(
                "expression too long or too deeply nested (the limit is {MAX_EXPR_DEPTH} levels)"
            ),
        ));
    }
    Ok(depth)
}

#[cfg(test)]
mod tests;
