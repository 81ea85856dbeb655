//! The front end: source text to a verified [`crate::bytecode::Module`].
//!
//! | stage | module | output |
//! |---|---|---|
//! | text → tokens | [`lexer`] | `Vec<Token>` |
//! | tokens → tree | [`parser`] | [`ast::Program`] |
//! | names and types | [`check`] | the same tree, typed and resolved |
//! | tree → bytecode | [`compile`] | [`crate::bytecode::Module`] |
//!
//! Errors at any stage are [`diag::Diagnostic`]s, rendered as
//! `PATH:LINE:COL: error: MESSAGE` with the source line and a caret.
//! [`crate::driver::load`] runs the stages in order. The front end depends
//! on [`crate::types`] and [`crate::bytecode`], never on execution.

pub mod ast;
pub mod check;
pub mod compile;
pub mod diag;
pub mod lexer;
pub mod parser;
pub mod slow_line;
