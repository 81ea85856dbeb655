//! The Toy language (LANGUAGE.md, "Overview"): front end, typed bytecode,
//! interpreter and runtime.
//!
//! The pipeline, one module per stage:
//!
//! | stage | module | output |
//! |---|---|---|
//! | text → tokens | [`lexer`] | `Vec<Token>` |
//! | tokens → tree | [`parser`] | [`ast::Program`] |
//! | names and types | [`check`] | the same tree, typed and resolved |
//! | tree → bytecode | [`compile`] | [`bytecode::Module`] |
//! | bytecode → effects | [`interp`] + [`runtime`] | stdout, exit status |
//!
//! A JIT plugs in through [`runtime::tier`] and touches the VM only
//! through [`abi`].
//!
//! Compile errors are [`diag::Diagnostic`]s rendered as
//! `PATH:LINE:COL: error: MESSAGE` with the source line and a caret.

pub mod abi;
pub mod ast;
// `#[macro_use]`: `with_instruction_names!`, which the table generates.
#[macro_use]
pub mod bytecode;
pub mod check;
pub mod compile;
pub mod diag;
pub mod disasm;
pub mod driver;
pub mod interp;
pub mod lexer;
pub mod parser;
pub mod runtime;
pub mod vmprof;
