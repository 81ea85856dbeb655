//! The Toy language (LANGUAGE.md, "Overview"): front end, typed bytecode,
//! interpreter and runtime.
//!
//! The crate is five components, each a folder (or file) of its own, with
//! edges that go one way only (from top to bottom here;
//! `tests/architecture.rs` checks the `use` graph):
//!
//! | component | module | job |
//! |---|---|---|
//! | host API | [`driver`], [`vmprof`] | load a script, run it, profile it |
//! | front end | [`front`] | text → tokens → tree → checked tree → bytecode |
//! | abi | [`abi`] | the one façade a tier (a JIT) uses |
//! | execution core | [`interp`] | the [`interp::Vm`], the interpreter, the tier-up protocol |
//! | runtime services | [`runtime`] | heap and GC, output, printing, builtins, errors, native stack |
//! | bytecode | [`bytecode`] | the instruction table, modules, the verifier, listings |
//! | vocabulary | [`types`] | types and source positions every stage shares |
//!
//! A JIT plugs in through [`abi::TierUp`] and touches the VM only through
//! [`abi`] and [`bytecode`] (its input).
//!
//! Compile errors are [`front::diag::Diagnostic`]s rendered as
//! `PATH:LINE:COL: error: MESSAGE` with the source line and a caret.

pub mod abi;
// `#[macro_use]`: `with_instruction_names!`, which the table generates.
#[macro_use]
pub mod bytecode;
pub mod driver;
pub mod front;
pub mod interp;
pub mod runtime;
pub mod types;
pub mod vmprof;
