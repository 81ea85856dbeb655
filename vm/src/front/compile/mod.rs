//! The bytecode compiler: checked syntax tree → [`Module`].
//!
//! One pass over each function's tree emits typed instructions (the checker
//! has put a type on every expression, so each operator picks its opcode
//! statically). Notable choices:
//!
//! * **Registers.** Parameters are registers `0..n`. Every other local gets
//!   a register when declared, released at the end of its block; temporaries
//!   are released as soon as they are consumed. A released register is
//!   reused only for a value of the *same* type, so each register keeps one
//!   type for the whole function (the GC root-map invariant of
//!   [`crate::bytecode`]). Reading a local needs no instruction: its
//!   register is used as the operand directly.
//! * **Calls.** The call area starts right after the typed registers,
//!   which are only known once the whole function is compiled, so each
//!   function is compiled twice: the first pass counts registers, the
//!   second (identical apart from the call-area numbers) emits the code.
//!   Arguments that cannot allocate or call are computed straight into the
//!   call area; otherwise they are computed into typed registers first and
//!   moved there just before the call, so no collection can happen while a
//!   reference sits in the (unscanned) call area.
//! * **Fast paths.** Integer constants that fit become immediates
//!   (`AddIImm`, `JmpIfNotLtIImm`, ...); conditions of `if`/`while` compile
//!   to fused compare-and-branch instructions; `for` uses `ForPrep`/
//!   `ForLoop`, and when the body never assigns the loop variable the
//!   variable itself is the counter.

use std::collections::HashMap;

use crate::bytecode::{Const, Function, MAX_REGS, Module, Op, Reg, UNPATCHED};
use crate::front::ast::{
    BinOp, Block, Builtin, Callee, Expr, ExprKind, FnDecl, LocalId, LogicOp, Program, Span, Stmt,
    StmtKind, Type, UnOp,
};
use crate::front::diag::Diagnostic;

mod cond;
mod expr;
mod regs;
mod stmt;

use expr::int_literal;

type Result<T> = std::result::Result<T, Diagnostic>;

/// Compiles a checked program. `path` is kept for tracebacks.
pub fn compile(program: &Program, path: &str) -> Result<Module> {
    if program.functions.len() >= u16::MAX as usize {
        return Err(Diagnostic::new(
            program.main.span,
            "too many functions (the limit is 65534)",
        ));
    }
    let mut shared = Shared::default();
    let mut functions = Vec::with_capacity(program.functions.len() + 1);
    for decl in program
        .functions
        .iter()
        .chain(std::iter::once(&program.main))
    {
        functions.push(compile_function(program, decl, &mut shared)?);
    }
    Ok(Module {
        path: path.to_string(),
        main: program.functions.len() as u32,
        functions,
        strings: shared.strings,
        types: shared.types,
        source: String::new(),
        line_entries: Default::default(),
    })
}

/// Most float constants kept in registers for a whole call.
const MAX_HOISTED: usize = 16;

/// Compiles one function in three passes. Pass 1 finds the float constants
/// used inside loops; pass 2, with those constants hoisted into registers,
/// counts the typed registers; pass 3 emits the code with the call area
/// right after them. Passes 2 and 3 allocate identically: only the
/// call-area register numbers differ.
fn compile_function(program: &Program, decl: &FnDecl, shared: &mut Shared) -> Result<Function> {
    let first = FnCompiler::new(program, decl, shared, 0, Vec::new());
    let (_, candidates) = first.run()?;
    let hoisted: Vec<f64> = candidates.into_iter().take(MAX_HOISTED).collect();
    let attempt = |shared: &mut Shared, hoisted: Vec<f64>| -> Result<Function> {
        let (counted, _) = FnCompiler::new(program, decl, shared, 0, hoisted.clone()).run()?;
        let call_base = counted.reg_types.len();
        let (function, _) = FnCompiler::new(program, decl, shared, call_base, hoisted).run()?;
        // The call area must start right after the typed registers.
        if function.num_typed() != call_base {
            return Err(Diagnostic::new(
                decl.span,
                "internal error: register allocation is not deterministic",
            ));
        }
        Ok(function)
    };
    match attempt(shared, hoisted) {
        Ok(f) => Ok(f),
        // Hoisting costs registers; a function at the limit goes without.
        Err(_) => attempt(shared, Vec::new()),
    }
}

/// Tables shared by all functions of a module.
#[derive(Default)]
struct Shared {
    strings: Vec<String>,
    string_ids: HashMap<String, u32>,
    types: Vec<Type>,
    type_ids: HashMap<Type, u16>,
}

/// Who currently owns a register.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Owner {
    Free,
    Temp,
    Local,
}

/// Jumps to patch when a loop's `break`/`continue` targets become known.
#[derive(Default)]
struct LoopCtx {
    breaks: Vec<usize>,
    /// `Some` when the continue target (a `while` condition) is known.
    continue_to: Option<usize>,
    continues: Vec<usize>,
}

/// Constant-pool key (floats by bits, so `-0.0` and NaNs stay distinct).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum ConstKey {
    Int(i64),
    Float(u64),
    Str(u32),
}

struct FnCompiler<'a> {
    program: &'a Program,
    decl: &'a FnDecl,
    shared: &'a mut Shared,
    /// First call-area register (0 in the counting pass).
    call_base: usize,
    /// Call-area slots needed (arguments, or 1 for a result).
    call_area: usize,
    reg_types: Vec<Type>,
    reg_names: Vec<Option<String>>,
    owners: Vec<Owner>,
    /// Per register: allocated for locals (true) or temporaries.
    local_pool: Vec<bool>,
    local_regs: Vec<Option<Reg>>,
    /// Registers of the locals declared in each open block.
    scopes: Vec<Vec<Reg>>,
    loops: Vec<LoopCtx>,
    /// Float constants to keep in registers, loaded on entry.
    hoist: Vec<f64>,
    /// Registers holding hoisted constants, by bit pattern.
    hoisted_regs: HashMap<u64, Reg>,
    /// Float constants seen inside loops (pass 1 output), in order.
    loop_floats: Vec<f64>,
    /// Number of loops (conditions included) around the code compiled now.
    loop_depth: usize,
    consts: Vec<Const>,
    const_ids: HashMap<ConstKey, u16>,
    code: Vec<Op>,
    spans: Vec<Span>,
}

impl<'a> FnCompiler<'a> {
    fn new(
        program: &'a Program,
        decl: &'a FnDecl,
        shared: &'a mut Shared,
        call_base: usize,
        hoist: Vec<f64>,
    ) -> Self {
        FnCompiler {
            program,
            decl,
            shared,
            call_base,
            call_area: 0,
            reg_types: Vec::new(),
            reg_names: Vec::new(),
            owners: Vec::new(),
            local_pool: Vec::new(),
            local_regs: vec![None; decl.locals.len()],
            scopes: Vec::new(),
            loops: Vec::new(),
            hoist,
            hoisted_regs: HashMap::new(),
            loop_floats: Vec::new(),
            loop_depth: 0,
            consts: Vec::new(),
            const_ids: HashMap::new(),
            code: Vec::new(),
            spans: Vec::new(),
        }
    }

    /// Compiles the function; also returns the float constants used in
    /// loops (candidates for hoisting).
    fn run(mut self) -> Result<(Function, Vec<f64>)> {
        let decl = self.decl;
        for p in &decl.params {
            let r = self.alloc(&p.ty, Owner::Local, p.span)?;
            self.name_reg(r, &p.name);
            self.bind(p.local, r, p.span)?;
        }
        for x in std::mem::take(&mut self.hoist) {
            let r = self.alloc(&Type::Float, Owner::Local, decl.span)?;
            self.name_reg(r, &format!("{x:?}"));
            let k = self.constant(ConstKey::Float(x.to_bits()), Const::Float(x), decl.span)?;
            self.emit(Op::LoadConst { dst: r, k }, decl.span);
            self.hoisted_regs.insert(x.to_bits(), r);
        }
        self.block(&decl.body)?;
        self.emit(Op::ReturnVoid, decl.body.span);
        let frame_size = self.reg_types.len() + self.call_area;
        if frame_size > MAX_REGS {
            return Err(Diagnostic::new(
                decl.span,
                format!(
                    "function `{}` needs too many registers (the limit is {MAX_REGS})",
                    decl.name
                ),
            ));
        }
        let ref_regs = (0..self.reg_types.len())
            .filter(|&r| self.reg_types[r].is_ref())
            .map(|r| r as Reg)
            .collect();
        let function = Function {
            name: decl.name.clone(),
            params: decl
                .params
                .iter()
                .map(|p| (p.name.clone(), p.ty.clone()))
                .collect(),
            ret: decl.ret.clone(),
            span: decl.span,
            reg_types: self.reg_types,
            reg_names: self.reg_names,
            ref_regs,
            frame_size: frame_size as u32,
            consts: self.consts,
            code: self.code,
            spans: self.spans,
        };
        Ok((function, self.loop_floats))
    }

    fn constant(&mut self, key: ConstKey, value: Const, span: Span) -> Result<u16> {
        if let Some(&k) = self.const_ids.get(&key) {
            return Ok(k);
        }
        if self.consts.len() > u16::MAX as usize {
            return Err(Diagnostic::new(span, "too many constants in one function"));
        }
        let k = self.consts.len() as u16;
        self.consts.push(value);
        self.const_ids.insert(key, k);
        Ok(k)
    }

    fn string(&mut self, s: &str) -> u32 {
        if let Some(&id) = self.shared.string_ids.get(s) {
            return id;
        }
        let id = self.shared.strings.len() as u32;
        self.shared.strings.push(s.to_string());
        self.shared.string_ids.insert(s.to_string(), id);
        id
    }

    fn type_id(&mut self, ty: &Type, span: Span) -> Result<u16> {
        if let Some(&id) = self.shared.type_ids.get(ty) {
            return Ok(id);
        }
        if self.shared.types.len() >= u16::MAX as usize {
            return Err(Diagnostic::new(span, "too many distinct types"));
        }
        let id = self.shared.types.len() as u16;
        self.shared.types.push(ty.clone());
        self.shared.type_ids.insert(ty.clone(), id);
        Ok(id)
    }

    fn emit(&mut self, op: Op, span: Span) -> usize {
        self.code.push(op);
        self.spans.push(span);
        self.code.len() - 1
    }

    fn here(&self) -> u32 {
        self.code.len() as u32
    }

    /// Points the jump at `at` to `target`.
    fn patch(&mut self, at: usize, target: u32) {
        let op = &mut self.code[at];
        debug_assert!(op.target_mut().is_some(), "patching {op:?}, not a jump");
        if let Some(t) = op.target_mut() {
            *t = target;
        }
    }

    fn patch_here(&mut self, jumps: &[usize]) {
        let here = self.here();
        for &j in jumps {
            self.patch(j, here);
        }
    }
}

#[cfg(test)]
mod tests;
