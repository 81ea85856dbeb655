//! The code registry: one unique id and one name per code object.
//!
//! This mirrors PyPy's `rvmprof` (`register_code_object_class`,
//! `register_code`, `get_unique_id`):
//!
//! * a VM first registers its code-object *class*, a short prefix such as
//!   `toy` (Python uses `py`, native frames `n`);
//! * each code object embeds a [`CodeIdCell`]; [`register_code`] gives it an
//!   id once and records its name `class:func_name:line:file`;
//! * [`get_unique_id`] reads the id back, e.g. for a JIT that emits it as an
//!   immediate in inline push code.
//!
//! Ids are `8, 12, 16, …`: multiples of 4 starting at 8, as in PyPy, so they
//! are positive and even (the readers take odd ids for native frames and
//! ids ≤ 0 for line numbers), unique for the life of the process, and the two
//! low bits stay free for tags. The registry sits behind a mutex: it is
//! touched when code is created, never on the call path.
//!
//! **Code that dies** ([`retire_code`]): a VM that drops its code objects
//! (a VM dropped by its host, code evicted) retires their ids. An id is
//! never handed out again, and a retired name is left out of every profile
//! started afterwards, so a host that profiles VM after VM gets files that
//! name only the code of the VMs that ran while each was on. A name retired
//! during a profile stays until that profile ends (its samples need it).

use std::sync::OnceLock;

use super::fork::ForkSafeLock;

use super::VmprofError;
use super::names::{code_name, is_valid_class_prefix};

/// The first id handed out.
pub const FIRST_CODE_ID: usize = 8;
/// The distance between consecutive ids.
pub const CODE_ID_STEP: usize = 4;

/// A registered code object's unique id: positive, even, never reused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CodeId(usize);

impl CodeId {
    /// Wraps a raw id, for tests of code that only moves ids around.
    #[cfg(test)]
    pub(crate) const fn from_raw(raw: usize) -> CodeId {
        CodeId(raw)
    }

    /// The id whose raw value is `raw` (what a C VM keeps), if `raw` has
    /// the shape of one (at least 8, a multiple of 4).
    pub fn from_raw_id(raw: usize) -> Option<CodeId> {
        (raw >= FIRST_CODE_ID && raw.is_multiple_of(CODE_ID_STEP)).then_some(CodeId(raw))
    }

    /// The raw id, as stored in the shadow stack and in profile files.
    pub fn get(self) -> usize {
        self.0
    }
}

/// A code-object class, from [`register_code_object_class`]: the prefix of
/// every name registered through it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CodeClass {
    prefix: String,
}

impl CodeClass {
    /// The class prefix, e.g. `toy`.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }
}

/// The slot in a VM's code object that holds its vmprof id (PyPy's
/// `_vmprof_unique_id` attribute). Empty until [`register_code`].
#[derive(Debug, Default)]
pub struct CodeIdCell(OnceLock<CodeId>);

impl CodeIdCell {
    /// An empty cell, for a code object not registered yet.
    pub const fn new() -> CodeIdCell {
        CodeIdCell(OnceLock::new())
    }
}

/// One registered code object's name.
pub(super) struct Entry {
    /// `None` once retired and no profile needs it.
    name: Option<String>,
    /// Retired while a profile was on: forgotten when the next starts.
    retired: bool,
}

/// Every registered name, in id order (`names[i]` has id `8 + 4 i`).
pub(super) static NAMES: ForkSafeLock<Vec<Entry>> = ForkSafeLock::new(Vec::new());

/// Declares a code-object class with the name prefix `prefix` (e.g. `toy`).
///
/// Fails with [`VmprofError::InvalidClassPrefix`] if the prefix is empty,
/// longer than [`super::MAX_CLASS_PREFIX`] bytes, or contains a colon or a
/// control character. Registering the same prefix twice is allowed.
pub fn register_code_object_class(prefix: &str) -> Result<CodeClass, VmprofError> {
    if !is_valid_class_prefix(prefix) {
        return Err(VmprofError::InvalidClassPrefix(prefix.to_owned()));
    }
    Ok(CodeClass {
        prefix: prefix.to_owned(),
    })
}

// ANCHOR: register_code
/// Gives the code object owning `cell` a unique id and the name
/// `class:func_name:line:file` (see [`super::code_name`] for the
/// sanitising rules), and returns the id.
///
/// Idempotent: a cell already registered keeps its id and name. Codes
/// registered while profiling is on are named in the open profile too.
pub fn register_code(
    cell: &CodeIdCell,
    class: &CodeClass,
    func_name: &str,
    line: u32,
    file: &str,
) -> CodeId {
    *cell.0.get_or_init(|| {
        let name = code_name(&class.prefix, func_name, line, file);
        super::fork::follow_forks();
        let mut names = NAMES.lock();
        names.push(Entry {
            name: Some(name),
            retired: false,
        });
        CodeId(FIRST_CODE_ID + (names.len() - 1) * CODE_ID_STEP)
    })
}
// ANCHOR_END: register_code

/// The id [`register_code`] gave to `cell`, or `None` if it was never
/// registered (PyPy answers 0).
pub fn get_unique_id(cell: &CodeIdCell) -> Option<CodeId> {
    cell.0.get().copied()
}

/// The registered name of `id`, if any (none once retired and forgotten).
pub fn code_name_of(id: CodeId) -> Option<String> {
    let index = (id.0.checked_sub(FIRST_CODE_ID)?) / CODE_ID_STEP;
    NAMES.lock().get(index).and_then(|e| e.name.clone())
}

// ANCHOR: retire_code
/// Retires `ids`: their code is gone (see the module docs). The ids are
/// never reused; profiles started from now on do not name them.
pub fn retire_code(ids: impl IntoIterator<Item = CodeId>) {
    let profiling = super::is_enabled();
    let mut names = NAMES.lock();
    for id in ids {
        let Some(index) = id.0.checked_sub(FIRST_CODE_ID).map(|i| i / CODE_ID_STEP) else {
            continue;
        };
        if let Some(entry) = names.get_mut(index) {
            if profiling {
                entry.retired = true;
            } else {
                entry.name = None;
            }
        }
    }
}
// ANCHOR_END: retire_code

/// Forgets the names retired during the last profile (a new one starts).
pub(crate) fn forget_retired() {
    for entry in NAMES.lock().iter_mut().filter(|e| e.retired) {
        entry.name = None;
        entry.retired = false;
    }
}

/// Calls `visit(id, name)` for every code registered at index `from` or
/// later, and returns the number of codes registered so far. The writer uses
/// it to name codes registered after `enable`.
pub(crate) fn for_each_code_from(from: usize, mut visit: impl FnMut(u64, &str)) -> usize {
    let names = NAMES.lock();
    for (index, entry) in names.iter().enumerate().skip(from) {
        if let Some(name) = &entry.name {
            visit((FIRST_CODE_ID + index * CODE_ID_STEP) as u64, name);
        }
    }
    names.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_positive_even_unique_and_stable() {
        let class = register_code_object_class("toy").unwrap();
        let cells: Vec<CodeIdCell> = (0..10).map(|_| CodeIdCell::new()).collect();
        let ids: Vec<CodeId> = cells
            .iter()
            .enumerate()
            .map(|(i, c)| register_code(c, &class, &format!("f{i}"), 1, "a.toy"))
            .collect();
        for (i, id) in ids.iter().enumerate() {
            assert!(id.get() >= FIRST_CODE_ID && id.get() % CODE_ID_STEP == 0);
            assert_eq!(get_unique_id(&cells[i]), Some(*id));
            assert_eq!(code_name_of(*id).unwrap(), format!("toy:f{i}:1:a.toy"));
        }
        // Strictly increasing, so unique (other tests may register in
        // between, which only widens the gaps).
        assert!(ids.windows(2).all(|pair| pair[0] < pair[1]), "{ids:?}");
        // Registering again keeps the first id and name.
        assert_eq!(
            register_code(&cells[0], &class, "other", 9, "b.toy"),
            ids[0]
        );
        assert_eq!(code_name_of(ids[0]).unwrap(), "toy:f0:1:a.toy");
    }

    #[test]
    fn unregistered_cells_have_no_id() {
        assert_eq!(get_unique_id(&CodeIdCell::new()), None);
        assert_eq!(code_name_of(CodeId(2)), None);
    }

    #[test]
    fn bad_prefixes_are_rejected() {
        assert!(matches!(
            register_code_object_class("a:b"),
            Err(VmprofError::InvalidClassPrefix(_))
        ));
    }
}
