//! Register allocation: typed registers for locals and temporaries, and
//! the call area.

use super::*;

impl FnCompiler<'_> {
    pub(super) fn too_complex(&self, span: Span) -> Diagnostic {
        Diagnostic::new(
            span,
            format!(
                "function `{}` needs too many registers (the limit is {MAX_REGS})",
                self.decl.name
            ),
        )
    }

    /// A free register of type `ty` (reused if one exists).
    pub(super) fn alloc(&mut self, ty: &Type, owner: Owner, span: Span) -> Result<Reg> {
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

    pub(super) fn temp(&mut self, ty: &Type, span: Span) -> Result<Reg> {
        self.alloc(ty, Owner::Temp, span)
    }

    /// Frees `r` if it is a temporary (locals live until their block ends).
    pub(super) fn release(&mut self, r: Reg) {
        if let Some(o) = self.owners.get_mut(r as usize)
            && *o == Owner::Temp
        {
            *o = Owner::Free;
        }
    }

    pub(super) fn name_reg(&mut self, r: Reg, name: &str) {
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

    pub(super) fn bind(&mut self, local: LocalId, r: Reg, span: Span) -> Result<()> {
        match self.local_regs.get_mut(local as usize) {
            Some(slot) => {
                *slot = Some(r);
                Ok(())
            }
            None => Err(Diagnostic::new(span, "internal error: unresolved local")),
        }
    }

    pub(super) fn local_reg(&self, local: LocalId, span: Span) -> Result<Reg> {
        self.local_regs
            .get(local as usize)
            .copied()
            .flatten()
            .ok_or_else(|| Diagnostic::new(span, "internal error: unresolved local"))
    }

    /// The `k`-th call-area register.
    pub(super) fn arg_reg(&mut self, k: usize, span: Span) -> Result<Reg> {
        self.call_area = self.call_area.max(k + 1);
        let r = self.call_base + k;
        if r >= MAX_REGS {
            return Err(self.too_complex(span));
        }
        Ok(r as Reg)
    }

    /// Allocates the register of a newly declared local in the open block.
    pub(super) fn declare(&mut self, local: LocalId, span: Span) -> Result<Reg> {
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
}
