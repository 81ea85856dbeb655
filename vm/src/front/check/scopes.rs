//! Which local a name refers to at each point of a function body.

use std::collections::HashMap;

use crate::front::ast::LocalId;

/// Nested block scopes. Lookups cost one hash probe however many locals a
/// function has; a later `let` of the same name hides the earlier one until
/// its scope ends, also within one block (shadowing).
#[derive(Default)]
pub(super) struct Scopes {
    /// For each name, the ids it has been bound to, innermost last.
    visible: HashMap<String, Vec<LocalId>>,
    /// Every name bound in an open scope, in binding order.
    bound: Vec<String>,
    /// For each open scope, the length of `bound` when it opened.
    marks: Vec<usize>,
}

impl Scopes {
    /// Opens a scope.
    pub(super) fn push(&mut self) {
        self.marks.push(self.bound.len());
    }

    /// Closes the innermost scope, unbinding what it bound.
    pub(super) fn pop(&mut self) {
        let mark = self.marks.pop().unwrap_or(0);
        for name in self.bound.drain(mark..) {
            if let Some(ids) = self.visible.get_mut(&name) {
                ids.pop();
                if ids.is_empty() {
                    self.visible.remove(&name);
                }
            }
        }
    }

    /// Binds `name` to `id` in the innermost scope.
    pub(super) fn declare(&mut self, name: &str, id: LocalId) {
        self.visible.entry(name.to_string()).or_default().push(id);
        self.bound.push(name.to_string());
    }

    /// The local `name` refers to here, if any.
    pub(super) fn lookup(&self, name: &str) -> Option<LocalId> {
        self.visible.get(name)?.last().copied()
    }

    /// True if the innermost scope already binds `name`.
    pub(super) fn declared_in_innermost(&self, name: &str) -> bool {
        let mark = self.marks.last().copied().unwrap_or(0);
        self.bound
            .get(mark..)
            .is_some_and(|names| names.iter().any(|n| n == name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shadowing_and_scope_exit() {
        let mut scopes = Scopes::default();
        scopes.push();
        scopes.declare("x", 0);
        scopes.declare("x", 1);
        assert_eq!(scopes.lookup("x"), Some(1));
        scopes.push();
        assert!(!scopes.declared_in_innermost("x"));
        scopes.declare("x", 2);
        scopes.declare("y", 3);
        assert!(scopes.declared_in_innermost("y"));
        assert_eq!(scopes.lookup("x"), Some(2));
        scopes.pop();
        assert_eq!(scopes.lookup("x"), Some(1));
        assert_eq!(scopes.lookup("y"), None);
        scopes.pop();
        assert_eq!(scopes.lookup("x"), None);
        // Popping with nothing open is harmless.
        scopes.pop();
    }
}
