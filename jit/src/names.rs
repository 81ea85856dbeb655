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

use crate::role::Role;

// ANCHOR: region_name
/// The name of the region of function `func` with role `role` (see the
/// module docs).
pub fn region_name(module: &Module, func: u32, role: Role) -> String {
    let f = &module.functions[func as usize];
    let (prefix, suffix) = match role {
        Role::Native => ("toy:jit", String::new()),
        Role::EntryShim => ("toy:jit-entry", String::new()),
        Role::Osr { pc } => ("toy:jit-osr", format!("@{pc}")),
        Role::Trampoline => ("toy:interp", String::new()),
    };
    format!(
        "{prefix}:{}:{}:{}{suffix}",
        f.name, module.path, f.span.line
    )
}
// ANCHOR_END: region_name
