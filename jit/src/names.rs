//! The names compiled regions carry in perf maps, jitdump objects and
//! `disasm --jit` listings. One scheme, for every kind of region:
//!
//! | region | name |
//! |---|---|
//! | compiled function (native variant) | `toy:jit:<function>:<script>:<line>` |
//! | its entry shim (entry ABI → native call) | `toy:jit-entry:<function>:<script>:<line>` |
//! | OSR variant entering at loop header `pc` | `toy:jit-osr:<function>:<script>:<line>@<pc>` |
//! | interpreter-entry trampoline (`--perf`, `--perf-jitdump`) | `toy:interp:<function>:<script>:<line>` |
//!
//! `<function>` is the Toy name (`<main>` for the script body), `<script>`
//! the script path exactly as given on the command line, `<line>` the line
//! of the `fn` keyword (1 for `<main>`), and `<pc>` a bytecode index (as in
//! `toyvm disasm`). Names are plain text with no spaces unless the path has
//! some; perf's map parser reads the rest of the line, so spaces are fine.

use vm::bytecode::Module;

/// What a region is, for its name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NameKind {
    Jit,
    Entry,
    Osr(u32),
    Interp,
}

// ANCHOR: region_name
/// The name of region `kind` of function `func` (see the module docs).
pub fn region_name(module: &Module, func: u32, kind: NameKind) -> String {
    let f = &module.functions[func as usize];
    let (prefix, suffix) = match kind {
        NameKind::Jit => ("toy:jit", String::new()),
        NameKind::Entry => ("toy:jit-entry", String::new()),
        NameKind::Osr(pc) => ("toy:jit-osr", format!("@{pc}")),
        NameKind::Interp => ("toy:interp", String::new()),
    };
    format!(
        "{prefix}:{}:{}:{}{suffix}",
        f.name, module.path, f.span.line
    )
}
// ANCHOR_END: region_name
