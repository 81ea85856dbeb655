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

use crate::ast::{
    BinOp, Block, Builtin, Callee, Expr, ExprKind, FnDecl, LocalId, LogicOp, Program, Span, Stmt,
    StmtKind, Type, UnOp,
};
use crate::bytecode::{Const, Function, MAX_REGS, Module, Op, Reg};
use crate::diag::Diagnostic;

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

/// Integer value of a literal (also `-literal`), for immediate operands.
fn int_literal(e: &Expr) -> Option<i64> {
    match &e.kind {
        ExprKind::Int(v) => Some(*v),
        ExprKind::Unary {
            op: UnOp::Neg,
            operand,
        } => match operand.kind {
            ExprKind::Int(v) => Some(v.wrapping_neg()),
            _ => None,
        },
        _ => None,
    }
}

/// True if evaluating `e` can neither call a function nor allocate, so it
/// may be computed straight into the call area.
fn is_simple(e: &Expr) -> bool {
    match &e.kind {
        ExprKind::Int(_) | ExprKind::Float(_) | ExprKind::Bool(_) | ExprKind::Str(_) => true,
        ExprKind::Local { .. } => true,
        ExprKind::Unary { operand, .. } => is_simple(operand),
        ExprKind::Binary { op, lhs, rhs } => {
            !(*op == BinOp::Add && lhs.ty == Type::Str) && is_simple(lhs) && is_simple(rhs)
        }
        ExprKind::Logic { lhs, rhs, .. } => is_simple(lhs) && is_simple(rhs),
        ExprKind::Index { array, index } => is_simple(array) && is_simple(index),
        ExprKind::Call { .. } | ExprKind::ArrayLit(_) | ExprKind::ArrayRepeat { .. } => false,
    }
}

/// True if any statement in `block` assigns local `id`.
fn assigns(block: &Block, id: LocalId) -> bool {
    block.stmts.iter().any(|s| match &s.kind {
        StmtKind::Assign { target, .. } => {
            matches!(target.kind, ExprKind::Local { local, .. } if local == id)
        }
        StmtKind::If {
            then_block,
            else_block,
            ..
        } => assigns(then_block, id) || else_block.as_ref().is_some_and(|b| assigns(b, id)),
        StmtKind::While { body, .. } | StmtKind::For { body, .. } | StmtKind::Block(body) => {
            assigns(body, id)
        }
        _ => false,
    })
}

/// Array nesting depth of a type (`[int]` 1, `[[int]]` 2, scalars 0).
fn array_depth(ty: &Type) -> usize {
    match ty {
        Type::Array(inner) => 1 + array_depth(inner),
        _ => 0,
    }
}

fn elem_type(ty: &Type) -> Type {
    match ty {
        Type::Array(inner) => (**inner).clone(),
        _ => Type::Void,
    }
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

    // ----- registers, constants, emission -----

    fn too_complex(&self, span: Span) -> Diagnostic {
        Diagnostic::new(
            span,
            format!(
                "function `{}` needs too many registers (the limit is {MAX_REGS})",
                self.decl.name
            ),
        )
    }

    /// A free register of type `ty` (reused if one exists).
    fn alloc(&mut self, ty: &Type, owner: Owner, span: Span) -> Result<Reg> {
        // Locals and temporaries use separate registers, so a register's
        // name in the disassembly always means what it says.
        let is_local = owner == Owner::Local;
        let found = (0..self.reg_types.len()).find(|&r| {
            self.owners[r] == Owner::Free
                && self.reg_types[r] == *ty
                && self.local_pool[r] == is_local
        });
        let r = match found {
            Some(r) => r,
            None => {
                // Leave room for the call area (at least one slot).
                if self.reg_types.len() + 1 >= MAX_REGS {
                    return Err(self.too_complex(span));
                }
                self.reg_types.push(ty.clone());
                self.reg_names.push(None);
                self.owners.push(Owner::Free);
                self.local_pool.push(is_local);
                self.reg_types.len() - 1
            }
        };
        self.owners[r] = owner;
        Ok(r as Reg)
    }

    fn temp(&mut self, ty: &Type, span: Span) -> Result<Reg> {
        self.alloc(ty, Owner::Temp, span)
    }

    /// Frees `r` if it is a temporary (locals live until their block ends).
    fn release(&mut self, r: Reg) {
        if let Some(o) = self.owners.get_mut(r as usize)
            && *o == Owner::Temp
        {
            *o = Owner::Free;
        }
    }

    fn name_reg(&mut self, r: Reg, name: &str) {
        let slot = &mut self.reg_names[r as usize];
        match slot {
            Some(names) if names.split('/').any(|n| n == name) => {}
            Some(names) => {
                names.push('/');
                names.push_str(name);
            }
            None => *slot = Some(name.to_string()),
        }
    }

    fn bind(&mut self, local: LocalId, r: Reg, span: Span) -> Result<()> {
        match self.local_regs.get_mut(local as usize) {
            Some(slot) => {
                *slot = Some(r);
                Ok(())
            }
            None => Err(Diagnostic::new(span, "internal error: unresolved local")),
        }
    }

    fn local_reg(&self, local: LocalId, span: Span) -> Result<Reg> {
        self.local_regs
            .get(local as usize)
            .copied()
            .flatten()
            .ok_or_else(|| Diagnostic::new(span, "internal error: unresolved local"))
    }

    /// The `k`-th call-area register.
    fn arg_reg(&mut self, k: usize, span: Span) -> Result<Reg> {
        self.call_area = self.call_area.max(k + 1);
        let r = self.call_base + k;
        if r >= MAX_REGS {
            return Err(self.too_complex(span));
        }
        Ok(r as Reg)
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
        match &mut self.code[at] {
            Op::Jmp { target: t }
            | Op::JmpIf { target: t, .. }
            | Op::JmpIfNot { target: t, .. }
            | Op::JmpIfNotLtI { target: t, .. }
            | Op::JmpIfNotLeI { target: t, .. }
            | Op::JmpIfNotEqI { target: t, .. }
            | Op::JmpIfNotNeI { target: t, .. }
            | Op::JmpIfNotLtIImm { target: t, .. }
            | Op::JmpIfNotLeIImm { target: t, .. }
            | Op::JmpIfNotGtIImm { target: t, .. }
            | Op::JmpIfNotGeIImm { target: t, .. }
            | Op::JmpIfNotEqIImm { target: t, .. }
            | Op::JmpIfNotNeIImm { target: t, .. }
            | Op::JmpIfNotLtF { target: t, .. }
            | Op::JmpIfNotLeF { target: t, .. }
            | Op::JmpIfLtF { target: t, .. }
            | Op::JmpIfLeF { target: t, .. }
            | Op::ForPrep { target: t, .. }
            | Op::ForLoop { target: t, .. } => *t = target,
            _ => {}
        }
    }

    fn patch_here(&mut self, jumps: &[usize]) {
        let here = self.here();
        for &j in jumps {
            self.patch(j, here);
        }
    }

    // ----- statements -----

    fn block(&mut self, block: &Block) -> Result<()> {
        self.scopes.push(Vec::new());
        for stmt in &block.stmts {
            self.stmt(stmt)?;
        }
        for r in self.scopes.pop().unwrap_or_default() {
            self.owners[r as usize] = Owner::Free;
        }
        Ok(())
    }

    /// Allocates the register of a newly declared local in the open block.
    fn declare(&mut self, local: LocalId, span: Span) -> Result<Reg> {
        let info = self
            .decl
            .locals
            .get(local as usize)
            .ok_or_else(|| Diagnostic::new(span, "internal error: unresolved local"))?;
        let (ty, name) = (info.ty.clone(), info.name.clone());
        let r = self.alloc(&ty, Owner::Local, span)?;
        self.name_reg(r, &name);
        self.bind(local, r, span)?;
        if let Some(scope) = self.scopes.last_mut() {
            scope.push(r);
        }
        Ok(r)
    }

    fn stmt(&mut self, stmt: &Stmt) -> Result<()> {
        let span = stmt.span;
        match &stmt.kind {
            StmtKind::Let { init, local, .. } => {
                let r = self.declare(*local, span)?;
                self.expr(init, Some(r))?;
            }
            StmtKind::Assign { target, op, value } => self.assign(target, *op, value, span)?,
            StmtKind::If {
                cond,
                then_block,
                else_block,
            } => {
                let mut to_else = Vec::new();
                self.jump_if_false(cond, &mut to_else)?;
                self.block(then_block)?;
                match else_block {
                    Some(else_block) => {
                        let to_end = self.emit(Op::Jmp { target: 0 }, span);
                        self.patch_here(&to_else);
                        self.block(else_block)?;
                        self.patch_here(&[to_end]);
                    }
                    None => self.patch_here(&to_else),
                }
            }
            StmtKind::While { cond, body } => {
                // Test at the top once, then at the bottom of each
                // iteration: one branch per iteration instead of two.
                self.loop_depth += 1;
                let mut exits = Vec::new();
                self.jump_if_false(cond, &mut exits)?;
                let body_start = self.here();
                self.loops.push(LoopCtx::default());
                self.block(body)?;
                let ctx = self.loops.pop().unwrap_or_default();
                self.patch_here(&ctx.continues);
                let mut again = Vec::new();
                self.cond_jump(cond, true, &mut again)?;
                for j in again {
                    self.patch(j, body_start);
                }
                self.loop_depth -= 1;
                self.patch_here(&exits);
                self.patch_here(&ctx.breaks);
            }
            StmtKind::For {
                start,
                end,
                body,
                local,
                var_span,
                ..
            } => self.for_loop(start, end, body, *local, *var_span, span)?,
            StmtKind::Break => {
                let j = self.emit(Op::Jmp { target: 0 }, span);
                if let Some(ctx) = self.loops.last_mut() {
                    ctx.breaks.push(j);
                }
            }
            StmtKind::Continue => match self.loops.last().and_then(|c| c.continue_to) {
                Some(target) => {
                    self.emit(
                        Op::Jmp {
                            target: target as u32,
                        },
                        span,
                    );
                }
                None => {
                    let j = self.emit(Op::Jmp { target: 0 }, span);
                    if let Some(ctx) = self.loops.last_mut() {
                        ctx.continues.push(j);
                    }
                }
            },
            StmtKind::Return(None) => {
                self.emit(Op::ReturnVoid, span);
            }
            StmtKind::Return(Some(e)) => {
                let r = self.expr(e, None)?;
                self.emit(Op::Return { src: r }, span);
                self.release(r);
            }
            StmtKind::Expr(e) => {
                let r = self.expr(e, None)?;
                // A void call "returns" a register it does not own.
                if e.ty != Type::Void {
                    self.release(r);
                }
            }
            StmtKind::Block(b) => self.block(b)?,
        }
        Ok(())
    }

    fn for_loop(
        &mut self,
        start: &Expr,
        end: &Expr,
        body: &Block,
        local: LocalId,
        var_span: Span,
        span: Span,
    ) -> Result<()> {
        // The loop variable lives in the scope of the loop only.
        self.scopes.push(Vec::new());
        let var = self.declare(local, var_span)?;
        // If the body never assigns the variable, it can be the counter.
        let counter = if assigns(body, local) {
            self.temp(&Type::Int, span)?
        } else {
            var
        };
        self.expr(start, Some(counter))?;
        let end_reg = self.temp(&Type::Int, span)?;
        self.expr(end, Some(end_reg))?;
        let prep = self.emit(
            Op::ForPrep {
                counter,
                end: end_reg,
                target: 0,
            },
            span,
        );
        let body_start = self.here();
        if counter != var {
            self.emit(
                Op::Move {
                    dst: var,
                    src: counter,
                },
                var_span,
            );
        }
        self.loops.push(LoopCtx::default());
        self.loop_depth += 1;
        self.block(body)?;
        self.loop_depth -= 1;
        let ctx = self.loops.pop().unwrap_or_default();
        self.patch_here(&ctx.continues);
        self.emit(
            Op::ForLoop {
                counter,
                end: end_reg,
                target: body_start,
            },
            span,
        );
        self.patch_here(&[prep]);
        self.patch_here(&ctx.breaks);
        self.release(end_reg);
        self.release(counter);
        for r in self.scopes.pop().unwrap_or_default() {
            self.owners[r as usize] = Owner::Free;
        }
        Ok(())
    }

    fn assign(&mut self, target: &Expr, op: Option<BinOp>, value: &Expr, span: Span) -> Result<()> {
        match &target.kind {
            ExprKind::Local { local, .. } => {
                let r = self.local_reg(*local, target.span)?;
                match op {
                    None => {
                        self.expr(value, Some(r))?;
                    }
                    Some(op) => {
                        self.binary_rhs(op, &target.ty, r, value, &target.ty, Some(r), span)?;
                    }
                }
            }
            ExprKind::Index { array, index } => {
                let arr = self.expr(array, None)?;
                let idx = self.expr(index, None)?;
                match op {
                    None => {
                        let val = self.expr(value, None)?;
                        self.emit(Op::SetElem { arr, idx, val }, target.span);
                        self.release(val);
                    }
                    Some(op) => {
                        let t = self.temp(&target.ty, span)?;
                        self.emit(Op::GetElem { dst: t, arr, idx }, target.span);
                        self.binary_rhs(op, &target.ty, t, value, &target.ty, Some(t), span)?;
                        self.emit(Op::SetElem { arr, idx, val: t }, target.span);
                        self.release(t);
                    }
                }
                self.release(idx);
                self.release(arr);
            }
            _ => {
                return Err(Diagnostic::new(
                    target.span,
                    "internal error: invalid assignment target",
                ));
            }
        }
        Ok(())
    }

    // ----- conditions -----

    /// Emits code that jumps (to a target patched later, pushed on
    /// `jumps`) when `cond` is false, and falls through when it is true.
    fn jump_if_false(&mut self, cond: &Expr, jumps: &mut Vec<usize>) -> Result<()> {
        self.cond_jump(cond, false, jumps)
    }

    /// Emits a jump taken when `cond == when`; falls through otherwise.
    fn cond_jump(&mut self, cond: &Expr, when: bool, jumps: &mut Vec<usize>) -> Result<()> {
        let span = cond.span;
        match &cond.kind {
            ExprKind::Bool(b) => {
                if *b == when {
                    jumps.push(self.emit(Op::Jmp { target: 0 }, span));
                }
                return Ok(());
            }
            ExprKind::Unary {
                op: UnOp::Not,
                operand,
            } => return self.cond_jump(operand, !when, jumps),
            ExprKind::Logic { op, lhs, rhs } => {
                // `a && b` is false if either is; `a || b` true if either is.
                let short_circuits_to_target = (*op == LogicOp::And) != when;
                if short_circuits_to_target {
                    self.cond_jump(lhs, when, jumps)?;
                    self.cond_jump(rhs, when, jumps)?;
                } else {
                    let mut skip = Vec::new();
                    self.cond_jump(lhs, !when, &mut skip)?;
                    self.cond_jump(rhs, when, jumps)?;
                    self.patch_here(&skip);
                }
                return Ok(());
            }
            ExprKind::Binary { op, lhs, rhs } if lhs.ty == Type::Int || lhs.ty == Type::Bool => {
                if let Some(j) = self.int_branch(*op, lhs, rhs, when, span)? {
                    jumps.push(j);
                    return Ok(());
                }
            }
            ExprKind::Binary { op, lhs, rhs } if lhs.ty == Type::Float => {
                if matches!(op, BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge) {
                    let a = self.expr(lhs, None)?;
                    let b = self.expr(rhs, None)?;
                    self.release(a);
                    self.release(b);
                    // A float comparison cannot be negated (NaN), so each
                    // polarity has its own instruction; `>`/`>=` swap.
                    let (a, b) = if matches!(op, BinOp::Gt | BinOp::Ge) {
                        (b, a)
                    } else {
                        (a, b)
                    };
                    let strict = matches!(op, BinOp::Lt | BinOp::Gt);
                    let op = match (strict, when) {
                        (true, false) => Op::JmpIfNotLtF { a, b, target: 0 },
                        (false, false) => Op::JmpIfNotLeF { a, b, target: 0 },
                        (true, true) => Op::JmpIfLtF { a, b, target: 0 },
                        (false, true) => Op::JmpIfLeF { a, b, target: 0 },
                    };
                    jumps.push(self.emit(op, span));
                    return Ok(());
                }
            }
            _ => {}
        }
        let r = self.expr(cond, None)?;
        self.release(r);
        let op = if when {
            Op::JmpIf { a: r, target: 0 }
        } else {
            Op::JmpIfNot { a: r, target: 0 }
        };
        jumps.push(self.emit(op, span));
        Ok(())
    }

    /// A fused int (or bool) compare-and-branch taken when `lhs op rhs ==
    /// when`; `None` if `op` is not a comparison.
    fn int_branch(
        &mut self,
        op: BinOp,
        lhs: &Expr,
        rhs: &Expr,
        when: bool,
        span: Span,
    ) -> Result<Option<usize>> {
        use BinOp::*;
        if !matches!(op, Eq | Ne | Lt | Le | Gt | Ge) {
            return Ok(None);
        }
        // Jump when `op` is false, i.e. when its negation holds; a jump
        // "when true" uses the negated comparison instead.
        let op = if when {
            match op {
                Eq => Ne,
                Ne => Eq,
                Lt => Ge,
                Le => Gt,
                Gt => Le,
                _ => Lt,
            }
        } else {
            op
        };
        let a = self.expr(lhs, None)?;
        if let Some(imm) = int_literal(rhs).and_then(|v| i16::try_from(v).ok()) {
            self.release(a);
            let op = match op {
                Eq => Op::JmpIfNotEqIImm { a, imm, target: 0 },
                Ne => Op::JmpIfNotNeIImm { a, imm, target: 0 },
                Lt => Op::JmpIfNotLtIImm { a, imm, target: 0 },
                Le => Op::JmpIfNotLeIImm { a, imm, target: 0 },
                Gt => Op::JmpIfNotGtIImm { a, imm, target: 0 },
                _ => Op::JmpIfNotGeIImm { a, imm, target: 0 },
            };
            return Ok(Some(self.emit(op, span)));
        }
        let b = self.expr(rhs, None)?;
        self.release(a);
        self.release(b);
        let op = match op {
            Eq => Op::JmpIfNotEqI { a, b, target: 0 },
            Ne => Op::JmpIfNotNeI { a, b, target: 0 },
            Lt => Op::JmpIfNotLtI { a, b, target: 0 },
            Le => Op::JmpIfNotLeI { a, b, target: 0 },
            Gt => Op::JmpIfNotLtI {
                a: b,
                b: a,
                target: 0,
            },
            _ => Op::JmpIfNotLeI {
                a: b,
                b: a,
                target: 0,
            },
        };
        Ok(Some(self.emit(op, span)))
    }

    // ----- expressions -----

    /// `dst` if given, else a new temporary of type `ty`.
    fn target(&mut self, dst: Option<Reg>, ty: &Type, span: Span) -> Result<Reg> {
        match dst {
            Some(d) => Ok(d),
            None => self.temp(ty, span),
        }
    }

    /// Compiles `e`. The value ends up in `dst` if given; otherwise in the
    /// returned register (a local's own register, or a temporary the caller
    /// must [`release`](Self::release)).
    fn expr(&mut self, e: &Expr, dst: Option<Reg>) -> Result<Reg> {
        let span = e.span;
        match &e.kind {
            ExprKind::Int(v) => {
                let r = self.target(dst, &Type::Int, span)?;
                self.load_int(r, *v, span)?;
                Ok(r)
            }
            ExprKind::Bool(b) => {
                let r = self.target(dst, &Type::Bool, span)?;
                self.emit(
                    Op::LoadInt {
                        dst: r,
                        imm: *b as i32,
                    },
                    span,
                );
                Ok(r)
            }
            ExprKind::Float(x) => {
                if let Some(&r) = self.hoisted_regs.get(&x.to_bits()) {
                    return match dst {
                        Some(d) => {
                            self.emit(Op::Move { dst: d, src: r }, span);
                            Ok(d)
                        }
                        None => Ok(r),
                    };
                }
                if self.loop_depth > 0
                    && !self.loop_floats.iter().any(|y| y.to_bits() == x.to_bits())
                {
                    self.loop_floats.push(*x);
                }
                let r = self.target(dst, &Type::Float, span)?;
                let k = self.constant(ConstKey::Float(x.to_bits()), Const::Float(*x), span)?;
                self.emit(Op::LoadConst { dst: r, k }, span);
                Ok(r)
            }
            ExprKind::Str(s) => {
                let r = self.target(dst, &Type::Str, span)?;
                let id = self.string(s);
                let k = self.constant(ConstKey::Str(id), Const::Str(id), span)?;
                self.emit(Op::LoadConst { dst: r, k }, span);
                Ok(r)
            }
            ExprKind::Local { local, .. } => {
                let r = self.local_reg(*local, span)?;
                match dst {
                    Some(d) if d != r => {
                        self.emit(Op::Move { dst: d, src: r }, span);
                        Ok(d)
                    }
                    _ => Ok(r),
                }
            }
            ExprKind::Unary { op, operand } => {
                if let (UnOp::Neg, Some(v)) = (op, int_literal(e)) {
                    let r = self.target(dst, &Type::Int, span)?;
                    self.load_int(r, v, span)?;
                    return Ok(r);
                }
                let src = self.expr(operand, None)?;
                self.release(src);
                let r = self.target(dst, &e.ty, span)?;
                let op = match (op, &e.ty) {
                    (UnOp::Not, _) => Op::Not { dst: r, src },
                    (UnOp::Neg, Type::Float) => Op::NegF { dst: r, src },
                    (UnOp::Neg, _) => Op::NegI { dst: r, src },
                };
                self.emit(op, span);
                Ok(r)
            }
            ExprKind::Binary { op, lhs, rhs } => self.binary(*op, lhs, rhs, &e.ty, dst, span),
            ExprKind::Logic { .. } => {
                // Computed in a fresh temporary: `dst` may be read by the
                // right operand.
                let t = self.temp(&Type::Bool, span)?;
                let mut when_false = Vec::new();
                self.jump_if_false(e, &mut when_false)?;
                self.emit(Op::LoadInt { dst: t, imm: 1 }, span);
                let to_end = self.emit(Op::Jmp { target: 0 }, span);
                self.patch_here(&when_false);
                self.emit(Op::LoadInt { dst: t, imm: 0 }, span);
                self.patch_here(&[to_end]);
                self.move_to_dst(t, dst, span)
            }
            ExprKind::Call { args, callee, .. } => self.call(*callee, args, &e.ty, dst, span),
            ExprKind::Index { array, index } => {
                let arr = self.expr(array, None)?;
                let idx = self.expr(index, None)?;
                self.release(arr);
                self.release(idx);
                let r = self.target(dst, &e.ty, span)?;
                self.emit(Op::GetElem { dst: r, arr, idx }, span);
                Ok(r)
            }
            ExprKind::ArrayLit(elems) => {
                let t = self.temp(&e.ty, span)?;
                let refs = elem_type(&e.ty).is_ref();
                let cap = elems.len().min(u16::MAX as usize) as u16;
                self.emit(Op::NewArray { dst: t, refs, cap }, span);
                for el in elems {
                    let v = self.expr(el, None)?;
                    self.emit(Op::Push { arr: t, val: v }, el.span);
                    self.release(v);
                }
                self.move_to_dst(t, dst, span)
            }
            ExprKind::ArrayRepeat { value, count } => {
                let val = self.expr(value, None)?;
                let cnt = self.expr(count, None)?;
                self.release(val);
                self.release(cnt);
                let depth = array_depth(&value.ty);
                let depth = u8::try_from(depth)
                    .map_err(|_| Diagnostic::new(span, "array type nested too deeply"))?;
                let r = self.target(dst, &e.ty, span)?;
                let op = Op::RepeatArray {
                    dst: r,
                    val,
                    count: cnt,
                    depth,
                    refs: value.ty.is_ref(),
                };
                self.emit(op, span);
                Ok(r)
            }
        }
    }

    /// Moves temporary `t` into `dst` (if given) and frees it.
    fn move_to_dst(&mut self, t: Reg, dst: Option<Reg>, span: Span) -> Result<Reg> {
        match dst {
            Some(d) => {
                self.emit(Op::Move { dst: d, src: t }, span);
                self.release(t);
                Ok(d)
            }
            None => Ok(t),
        }
    }

    fn load_int(&mut self, r: Reg, v: i64, span: Span) -> Result<()> {
        match i32::try_from(v) {
            Ok(imm) => self.emit(Op::LoadInt { dst: r, imm }, span),
            Err(_) => {
                let k = self.constant(ConstKey::Int(v), Const::Int(v), span)?;
                self.emit(Op::LoadConst { dst: r, k }, span)
            }
        };
        Ok(())
    }

    fn binary(
        &mut self,
        op: BinOp,
        lhs: &Expr,
        rhs: &Expr,
        ty: &Type,
        dst: Option<Reg>,
        span: Span,
    ) -> Result<Reg> {
        // `3 * x`: a literal has no effects, so the operands may swap to
        // use the immediate form.
        let small = |e: &Expr| int_literal(e).is_some_and(|v| i32::try_from(v).is_ok());
        if lhs.ty == Type::Int && matches!(op, BinOp::Add | BinOp::Mul) && small(lhs) && !small(rhs)
        {
            return self.binary(op, rhs, lhs, ty, dst, span);
        }
        let a = self.expr(lhs, None)?;
        self.binary_rhs(op, &lhs.ty, a, rhs, ty, dst, span)
    }

    /// Emits `a op rhs` where the left operand is already in register `a`.
    #[allow(clippy::too_many_arguments)]
    fn binary_rhs(
        &mut self,
        op: BinOp,
        operand_ty: &Type,
        a: Reg,
        rhs: &Expr,
        ty: &Type,
        dst: Option<Reg>,
        span: Span,
    ) -> Result<Reg> {
        if *operand_ty == Type::Int
            && let Some(imm) = int_literal(rhs).and_then(|v| i32::try_from(v).ok())
        {
            let form = match op {
                BinOp::Add => Some((0, imm)),
                BinOp::Sub if imm != i32::MIN => Some((0, -imm)),
                BinOp::Mul => Some((1, imm)),
                BinOp::Div if imm != 0 => Some((2, imm)),
                BinOp::Rem if imm != 0 => Some((3, imm)),
                _ => None,
            };
            if let Some((kind, imm)) = form {
                self.release(a);
                let r = self.target(dst, ty, span)?;
                let op = match kind {
                    0 => Op::AddIImm { dst: r, a, imm },
                    1 => Op::MulIImm { dst: r, a, imm },
                    2 => Op::DivIImm { dst: r, a, imm },
                    _ => Op::RemIImm { dst: r, a, imm },
                };
                self.emit(op, span);
                return Ok(r);
            }
        }
        let b = self.expr(rhs, None)?;
        self.release(a);
        self.release(b);
        let r = self.target(dst, ty, span)?;
        self.binop_regs(op, operand_ty, r, a, b, span)?;
        Ok(r)
    }

    /// Emits `dst = a op b` for operands of type `operand_ty`.
    fn binop_regs(
        &mut self,
        op: BinOp,
        operand_ty: &Type,
        dst: Reg,
        a: Reg,
        b: Reg,
        span: Span,
    ) -> Result<()> {
        use BinOp::*;
        let inst = match (operand_ty, op) {
            (Type::Int, Add) => Op::AddI { dst, a, b },
            (Type::Int, Sub) => Op::SubI { dst, a, b },
            (Type::Int, Mul) => Op::MulI { dst, a, b },
            (Type::Int, Div) => Op::DivI { dst, a, b },
            (Type::Int, Rem) => Op::RemI { dst, a, b },
            (Type::Int, BitAnd) => Op::AndI { dst, a, b },
            (Type::Int, BitOr) => Op::OrI { dst, a, b },
            (Type::Int, BitXor) => Op::XorI { dst, a, b },
            (Type::Int, Shl) => Op::ShlI { dst, a, b },
            (Type::Int, Shr) => Op::ShrI { dst, a, b },
            (Type::Int | Type::Bool, Eq) => Op::EqI { dst, a, b },
            (Type::Int | Type::Bool, Ne) => Op::NeI { dst, a, b },
            (Type::Int, Lt) => Op::LtI { dst, a, b },
            (Type::Int, Le) => Op::LeI { dst, a, b },
            (Type::Int, Gt) => Op::LtI { dst, a: b, b: a },
            (Type::Int, Ge) => Op::LeI { dst, a: b, b: a },
            (Type::Float, Add) => Op::AddF { dst, a, b },
            (Type::Float, Sub) => Op::SubF { dst, a, b },
            (Type::Float, Mul) => Op::MulF { dst, a, b },
            (Type::Float, Div) => Op::DivF { dst, a, b },
            (Type::Float, Rem) => Op::RemF { dst, a, b },
            (Type::Float, Eq) => Op::EqF { dst, a, b },
            (Type::Float, Ne) => Op::NeF { dst, a, b },
            (Type::Float, Lt) => Op::LtF { dst, a, b },
            (Type::Float, Le) => Op::LeF { dst, a, b },
            (Type::Float, Gt) => Op::LtF { dst, a: b, b: a },
            (Type::Float, Ge) => Op::LeF { dst, a: b, b: a },
            (Type::Str, Add) => Op::Concat { dst, a, b },
            (Type::Str, Eq) => Op::EqS { dst, a, b },
            (Type::Str, Ne) => Op::NeS { dst, a, b },
            (Type::Str, Lt) => Op::LtS { dst, a, b },
            (Type::Str, Le) => Op::LeS { dst, a, b },
            (Type::Str, Gt) => Op::LtS { dst, a: b, b: a },
            (Type::Str, Ge) => Op::LeS { dst, a: b, b: a },
            _ => {
                return Err(Diagnostic::new(
                    span,
                    format!(
                        "internal error: no instruction for `{}` on {operand_ty}",
                        op.symbol()
                    ),
                ));
            }
        };
        self.emit(inst, span);
        Ok(())
    }

    fn call(
        &mut self,
        callee: Callee,
        args: &[Expr],
        ty: &Type,
        dst: Option<Reg>,
        span: Span,
    ) -> Result<Reg> {
        match callee {
            Callee::Builtin(b) => self.builtin(b, args, ty, dst, span),
            Callee::Function(index) => {
                let func = u16::try_from(index)
                    .ok()
                    .filter(|&i| (i as usize) < self.program.functions.len())
                    .ok_or_else(|| Diagnostic::new(span, "internal error: bad callee"))?;
                if args.iter().all(is_simple) {
                    for (k, arg) in args.iter().enumerate() {
                        let slot = self.arg_reg(k, arg.span)?;
                        self.expr(arg, Some(slot))?;
                    }
                } else {
                    let mut regs = Vec::with_capacity(args.len());
                    for arg in args {
                        regs.push(self.expr(arg, None)?);
                    }
                    for (k, &r) in regs.iter().enumerate() {
                        let slot = self.arg_reg(k, args[k].span)?;
                        self.emit(Op::Move { dst: slot, src: r }, args[k].span);
                    }
                    for r in regs {
                        self.release(r);
                    }
                }
                let base = self.arg_reg(0, span)?;
                if *ty == Type::Void {
                    self.emit(
                        Op::Call {
                            func,
                            base,
                            dst: base,
                        },
                        span,
                    );
                    return Ok(base);
                }
                let r = self.target(dst, ty, span)?;
                self.emit(Op::Call { func, base, dst: r }, span);
                Ok(r)
            }
            Callee::Unresolved => Err(Diagnostic::new(span, "internal error: unresolved call")),
        }
    }

    fn builtin(
        &mut self,
        b: Builtin,
        args: &[Expr],
        ty: &Type,
        dst: Option<Reg>,
        span: Span,
    ) -> Result<Reg> {
        let mut regs = Vec::with_capacity(args.len());
        for arg in args {
            regs.push(self.expr(arg, None)?);
        }
        for &r in &regs {
            self.release(r);
        }
        let arg_ty = args.first().map(|a| a.ty.clone()).unwrap_or(Type::Void);
        let src = regs.first().copied().unwrap_or(0);
        let bad = || {
            Diagnostic::new(
                span,
                format!("internal error: bad call of builtin `{}`", b.name()),
            )
        };
        if regs.len() != args.len()
            || (args.is_empty() && !matches!(b, Builtin::Clock | Builtin::Args))
        {
            return Err(bad());
        }
        match b {
            Builtin::Print => {
                let ty = self.type_id(&arg_ty, span)?;
                self.emit(Op::Print { src, ty }, span);
                Ok(src)
            }
            Builtin::Push => {
                let val = *regs.get(1).ok_or_else(bad)?;
                self.emit(Op::Push { arr: src, val }, span);
                Ok(src)
            }
            // Conversions to the type the value already has are no-ops.
            Builtin::Int | Builtin::Float | Builtin::Str if arg_ty == *ty => match dst {
                Some(d) if d != src => {
                    self.emit(Op::Move { dst: d, src }, span);
                    Ok(d)
                }
                Some(d) => Ok(d),
                None => {
                    // Keep the value alive in a register we own.
                    let t = self.temp(ty, span)?;
                    self.emit(Op::Move { dst: t, src }, span);
                    Ok(t)
                }
            },
            _ => {
                let r = self.target(dst, ty, span)?;
                let op = match b {
                    Builtin::Len if arg_ty == Type::Str => Op::LenS { dst: r, src },
                    Builtin::Len => Op::LenA { dst: r, src },
                    Builtin::Pop => Op::Pop { dst: r, arr: src },
                    Builtin::Sqrt => Op::Sqrt { dst: r, src },
                    Builtin::Clock => Op::Clock { dst: r },
                    Builtin::Args => Op::Args { dst: r },
                    Builtin::ParseInt => Op::ParseInt { dst: r, src },
                    Builtin::ParseFloat => Op::ParseFloat { dst: r, src },
                    Builtin::Int => Op::FloatToInt { dst: r, src },
                    Builtin::Float => Op::IntToFloat { dst: r, src },
                    Builtin::Str => {
                        let ty = self.type_id(&arg_ty, span)?;
                        Op::ToStr { dst: r, src, ty }
                    }
                    Builtin::Print | Builtin::Push => return Err(bad()),
                };
                self.emit(op, span);
                Ok(r)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bytecode::verify;
    use crate::{check, parser};

    fn compile_src(src: &str) -> Module {
        let mut program = parser::parse(src).expect("parses");
        check::check(&mut program).expect("checks");
        let module = compile(&program, "t.toy").expect("compiles");
        verify(&module).expect("verifies");
        module
    }

    fn main_code(src: &str) -> Vec<Op> {
        let m = compile_src(src);
        m.functions[m.main as usize].code.clone()
    }

    #[test]
    fn int_constants_become_immediates() {
        let code = main_code("let x = 5; x = x * 3 + 1; x = x - 2; x = x / 4; x = x % 7;");
        assert!(
            code.contains(&Op::MulIImm {
                dst: 1,
                a: 0,
                imm: 3
            }),
            "{code:?}"
        );
        assert!(
            code.iter()
                .any(|op| matches!(op, Op::AddIImm { imm: 1, .. }))
        );
        assert!(
            code.iter()
                .any(|op| matches!(op, Op::AddIImm { imm: -2, .. }))
        );
        assert!(
            code.iter()
                .any(|op| matches!(op, Op::DivIImm { imm: 4, .. }))
        );
        assert!(
            code.iter()
                .any(|op| matches!(op, Op::RemIImm { imm: 7, .. }))
        );
        // Division by a literal zero must keep its run-time check.
        let code = main_code("let x = 5; print(x / 0);");
        assert!(code.iter().any(|op| matches!(op, Op::DivI { .. })));
    }

    #[test]
    fn conditions_compile_to_fused_branches() {
        let code =
            main_code("let a = 1; let b = 2; if a < b { print(1); } if a >= 3 { print(2); }");
        assert!(
            code.contains(&Op::JmpIfNotLtI {
                a: 0,
                b: 1,
                target: 5
            }),
            "{code:?}"
        );
        assert!(
            code.iter()
                .any(|op| matches!(op, Op::JmpIfNotGeIImm { imm: 3, .. }))
        );
        assert!(
            !code
                .iter()
                .any(|op| matches!(op, Op::LtI { .. } | Op::JmpIfNot { .. }))
        );
    }

    #[test]
    fn for_loops_use_forprep_and_forloop() {
        let code = main_code("let s = 0; for i in 0..10 { s += i; }");
        let prep = code
            .iter()
            .position(|op| matches!(op, Op::ForPrep { .. }))
            .unwrap();
        let back = code
            .iter()
            .position(|op| matches!(op, Op::ForLoop { .. }))
            .unwrap();
        assert!(prep < back);
        assert_eq!(
            code[back],
            Op::ForLoop {
                counter: 1,
                end: 2,
                target: prep as u32 + 1
            }
        );
    }

    #[test]
    fn registers_keep_one_type_and_refs_are_listed() {
        let m = compile_src(
            "fn f(a: str, n: int, xs: [int]) -> int { let t = a + a; return n + len(xs) + len(t); }",
        );
        let f = &m.functions[0];
        assert_eq!(
            &f.reg_types[..3],
            &[Type::Str, Type::Int, Type::Array(Box::new(Type::Int))]
        );
        for &r in &f.ref_regs {
            assert!(f.reg_types[r as usize].is_ref());
        }
        let refs = f.reg_types.iter().filter(|t| t.is_ref()).count();
        assert_eq!(f.ref_regs.len(), refs);
    }

    #[test]
    fn calls_use_the_call_area_after_the_typed_registers() {
        let m = compile_src(
            "fn g(a: int, b: int) -> int { return a + b; }\nlet x = 1;\nprint(g(x, 2));",
        );
        let main = &m.functions[m.main as usize];
        let base = main.num_typed() as u8;
        assert!(
            main.code.contains(&Op::Move { dst: base, src: 0 }),
            "{:?}",
            main.code
        );
        assert!(main.code.contains(&Op::LoadInt {
            dst: base + 1,
            imm: 2
        }));
        assert!(
            main.code
                .iter()
                .any(|op| matches!(op, Op::Call { func: 0, base: b, .. } if *b == base))
        );
        assert_eq!(main.frame_size as usize, main.num_typed() + 2);
    }

    #[test]
    fn arguments_that_allocate_go_through_typed_registers() {
        let m = compile_src("fn g(a: str, b: str) {}\nlet s = \"x\";\ng(s, s + s);");
        let main = &m.functions[m.main as usize];
        let concat = main
            .code
            .iter()
            .position(|op| matches!(op, Op::Concat { .. }))
            .unwrap();
        let base = main.num_typed() as u8;
        // The first argument is moved into the call area only after the
        // concatenation (which may collect) has run.
        let first_arg = main
            .code
            .iter()
            .position(|op| matches!(op, Op::Move { dst, .. } if *dst == base))
            .unwrap();
        assert!(first_arg > concat, "{:?}", main.code);
    }

    #[test]
    fn float_constants_in_loops_are_hoisted() {
        let m = compile_src("let x = 0.0; while x < 10.0 { x = x + 0.5; }");
        let main = &m.functions[m.main as usize];
        let loads = main
            .code
            .iter()
            .filter(|op| matches!(op, Op::LoadConst { .. }))
            .count();
        // 0.0 once (not in a loop); 10.0 and 0.5 once each at entry.
        assert_eq!(loads, 3, "{:?}", main.code);
        assert!(
            main.code[..2]
                .iter()
                .all(|op| matches!(op, Op::LoadConst { .. }))
        );
    }

    #[test]
    fn every_function_ends_in_a_return_and_has_a_span_per_instruction() {
        let m = compile_src("fn f() { }\nfn g(x: int) -> int { return x; }\nf();\n");
        for f in &m.functions {
            assert_eq!(f.code.len(), f.spans.len());
            assert!(matches!(
                f.code.last(),
                Some(Op::Return { .. } | Op::ReturnVoid)
            ));
        }
    }
}
