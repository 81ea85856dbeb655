//! "Every path returns": can control reach the end of a `-> T` function?
//!
//! A deliberately simple, syntactic analysis (no constant folding). A
//! statement *always returns* when it is:
//! - `return` (with or without a value);
//! - a block `{ ... }` containing a statement that always returns;
//! - an `if` with an `else` where both branches always return (an
//!   `else if` chain therefore needs a final `else`);
//! - `while true { ... }` (the literal `true`) whose body has no `break`
//!   leaving this loop: such a loop can only be left by `return`.
//!
//! `for` loops, other `while` loops and `if` without `else` never count,
//! even when their condition happens to be constant. Code after a statement
//! that always returns is allowed (it is unreachable, not an error).

use crate::front::ast::{Block, ExprKind, Stmt, StmtKind};

/// True if control can never fall off the end of `block`.
pub(super) fn block_always_returns(block: &Block) -> bool {
    block.stmts.iter().any(always_returns)
}

fn always_returns(stmt: &Stmt) -> bool {
    match &stmt.kind {
        StmtKind::Return(_) => true,
        StmtKind::Block(block) => block_always_returns(block),
        StmtKind::If {
            then_block,
            else_block: Some(else_block),
            ..
        } => block_always_returns(then_block) && block_always_returns(else_block),
        StmtKind::While { cond, body } => {
            matches!(cond.kind, ExprKind::Bool(true)) && !breaks_out(body)
        }
        _ => false,
    }
}

/// True if `block` contains a `break` that leaves the loop whose body it
/// is. Breaks inside nested loops belong to those loops.
fn breaks_out(block: &Block) -> bool {
    block.stmts.iter().any(|stmt| match &stmt.kind {
        StmtKind::Break => true,
        StmtKind::Block(block) => breaks_out(block),
        StmtKind::If {
            then_block,
            else_block,
            ..
        } => breaks_out(then_block) || else_block.as_ref().is_some_and(breaks_out),
        _ => false,
    })
}
