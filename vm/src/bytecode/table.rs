//! The machinery behind the instruction table in [`super`]: the macro that
//! turns one row per instruction into [`super::Op`] and everything every
//! tier asks about an instruction, and the operand vocabulary it speaks.
//!
//! A row reads
//!
//! ```text
//! /// doc line(s)
//! Name { field: role(class), ... } [FLAG | FLAG];
//! ```
//!
//! The **role** of a field fixes its Rust type and what it means:
//!
//! | role | type | meaning |
//! |---|---|---|
//! | `read(C)` | [`Reg`] | a register the instruction reads, of class `C` |
//! | `write(C)` | [`Reg`] | a register it writes |
//! | `update(C)` | [`Reg`] | a register it reads and writes |
//! | `window` | [`Reg`] | the first slot of a call window (call area) |
//! | `target` | `u32` | a jump target, an instruction index |
//! | `konst` | `u16` | a constant-pool index |
//! | `func` | `u16` | a function index |
//! | `ty` | `u16` | an index into [`super::Module::types`] |
//! | `imm` / `imm16` | `i32` / `i16` | an immediate integer |
//! | `flag` | `bool` | a named flag |
//! | `num8` / `num16` | `u8` / `u16` | a named small number |
//!
//! The **class** ([`RegClass`]) of a register operand is the type the
//! verifier requires of it. The **flags** ([`Flags`]) say how control and
//! failure behave. Fields are listed in the order the disassembler shows
//! them (the written register first).

use super::Reg;

/// Which Toy types a register operand may have (checked by
/// [`super::verify`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RegClass {
    /// `int`.
    Int,
    /// `float`.
    Float,
    /// `bool`.
    Bool,
    /// `str`.
    Str,
    /// `int` or `bool` (both are integers in a register).
    IntOrBool,
    /// Any array type.
    Array,
    /// Any type; the verifier relates it to other operands (see
    /// `verify::related_types`).
    Any,
}

/// How an instruction uses a register operand.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Read only.
    Read,
    /// Written only.
    Write,
    /// Read, then written (a `for` loop counter).
    ReadWrite,
    /// The base of a call window: the arguments are read from there, the
    /// callee's frame lives there.
    Window,
}

impl Access {
    /// Whether the instruction reads the register (a window counts: its
    /// arguments are read).
    pub fn reads(self) -> bool {
        !matches!(self, Access::Write)
    }

    /// Whether the instruction defines the register.
    pub fn writes(self) -> bool {
        matches!(self, Access::Write | Access::ReadWrite)
    }
}

/// A register operand.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegOperand {
    /// The field's name (`dst`, `a`, ...).
    pub name: &'static str,
    /// The register.
    pub reg: Reg,
    /// Read, written or both.
    pub access: Access,
    /// The types it may hold.
    pub class: RegClass,
}

/// One operand of an instruction, in the order of its table row.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Operand {
    /// A register.
    Reg(RegOperand),
    /// An immediate integer.
    Imm(i64),
    /// A constant-pool index.
    Const(u16),
    /// A jump target (instruction index).
    Target(u32),
    /// A function index.
    Func(u16),
    /// An index into [`super::Module::types`].
    Type(u16),
    /// A named flag.
    Flag(&'static str, bool),
    /// A named small number.
    Num(&'static str, u32),
}

/// Most operands of one instruction (`RepeatArray` has five).
pub const MAX_OPERANDS: usize = 5;

/// The operands of one instruction, without allocating.
#[derive(Clone, Copy, Debug)]
pub struct Operands {
    items: [Operand; MAX_OPERANDS],
    len: usize,
}

impl Operands {
    /// The operands in `list` (at most [`MAX_OPERANDS`]; the table's rows
    /// are checked against that by a test).
    pub fn new(list: &[Operand]) -> Operands {
        let mut items = [Operand::Imm(0); MAX_OPERANDS];
        items[..list.len()].copy_from_slice(list);
        Operands {
            items,
            len: list.len(),
        }
    }
}

impl std::ops::Deref for Operands {
    type Target = [Operand];
    fn deref(&self) -> &[Operand] {
        &self.items[..self.len]
    }
}

impl IntoIterator for Operands {
    type Item = Operand;
    type IntoIter = std::iter::Take<std::array::IntoIter<Operand, MAX_OPERANDS>>;
    fn into_iter(self) -> Self::IntoIter {
        self.items.into_iter().take(self.len)
    }
}

/// Properties of an instruction, as a small bit set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Flags(u8);

impl Flags {
    /// Runs out of line ([`crate::interp::run_slow_op`]): allocates,
    /// prints, parses or reads the clock. Set for the table's `slow` rows.
    pub const SLOW: Flags = Flags(1);
    /// Can raise a run-time error.
    pub const CAN_FAIL: Flags = Flags(2);
    /// Ends a basic block (a jump or a return).
    pub const ENDS_BLOCK: Flags = Flags(4);
    /// Never continues with the next instruction (unconditional jump,
    /// return).
    pub const NO_FALLTHROUGH: Flags = Flags(8);
    /// May appear in a callee the JIT inlines: cannot fail, allocate, call
    /// or touch memory.
    pub const INLINABLE: Flags = Flags(16);

    /// The union of `flags`.
    pub const fn of(flags: &[Flags]) -> Flags {
        let mut bits = 0;
        let mut i = 0;
        while i < flags.len() {
            bits |= flags[i].0;
            i += 1;
        }
        Flags(bits)
    }

    /// Whether every flag of `other` is set.
    pub const fn contains(self, other: Flags) -> bool {
        self.0 & other.0 == other.0
    }
}

/// The Rust type of a field with the given role.
macro_rules! operand_type {
    (read) => {
        $crate::bytecode::Reg
    };
    (write) => {
        $crate::bytecode::Reg
    };
    (update) => {
        $crate::bytecode::Reg
    };
    (window) => {
        $crate::bytecode::Reg
    };
    (target) => {
        u32
    };
    (konst) => {
        u16
    };
    (func) => {
        u16
    };
    (ty) => {
        u16
    };
    (imm) => {
        i32
    };
    (imm16) => {
        i16
    };
    (flag) => {
        bool
    };
    (num8) => {
        u8
    };
    (num16) => {
        u16
    };
}

/// `Some(field)` for the field whose role is `target`, else `found` (the
/// other fields are only named, so that binding them is not unused).
macro_rules! target_field {
    (target, $field:ident, $found:ident) => {{
        let _ = $found;
        Some($field)
    }};
    ($role:ident, $field:ident, $found:ident) => {{
        let _ = $field;
        $found
    }};
}

/// The [`Operand`] for field `$name` with value `$v`.
macro_rules! operand {
    (@reg $name:expr, $v:expr, $access:ident, $class:ident) => {
        $crate::bytecode::Operand::Reg($crate::bytecode::RegOperand {
            name: $name,
            reg: $v,
            access: $crate::bytecode::Access::$access,
            class: $crate::bytecode::RegClass::$class,
        })
    };
    (read, $name:expr, $v:expr, $class:ident) => { operand!(@reg $name, $v, Read, $class) };
    (write, $name:expr, $v:expr, $class:ident) => { operand!(@reg $name, $v, Write, $class) };
    (update, $name:expr, $v:expr, $class:ident) => { operand!(@reg $name, $v, ReadWrite, $class) };
    (window, $name:expr, $v:expr) => { operand!(@reg $name, $v, Window, Any) };
    (target, $name:expr, $v:expr) => { $crate::bytecode::Operand::Target($v) };
    (konst, $name:expr, $v:expr) => { $crate::bytecode::Operand::Const($v) };
    (func, $name:expr, $v:expr) => { $crate::bytecode::Operand::Func($v) };
    (ty, $name:expr, $v:expr) => { $crate::bytecode::Operand::Type($v) };
    (imm, $name:expr, $v:expr) => { $crate::bytecode::Operand::Imm($v as i64) };
    (imm16, $name:expr, $v:expr) => { $crate::bytecode::Operand::Imm($v as i64) };
    (flag, $name:expr, $v:expr) => { $crate::bytecode::Operand::Flag($name, $v) };
    (num8, $name:expr, $v:expr) => { $crate::bytecode::Operand::Num($name, $v as u32) };
    (num16, $name:expr, $v:expr) => { $crate::bytecode::Operand::Num($name, $v as u32) };
}

/// Generates [`super::Op`], its `opcode`, `name`, `operands` and `flags`,
/// and the `with_instruction_names!` callback from the rows of the table:
/// an `inline` section and a `slow` section (whose rows get
/// [`Flags::SLOW`]).
macro_rules! instruction_table {
    (
        inline {
            $(
                $(#[doc = $doc:literal])*
                $name:ident $({ $($field:ident : $role:ident $(($class:ident))?),* })?
                [$($flag:ident)|*];
            )*
        }
        slow {
            $(
                $(#[doc = $sdoc:literal])*
                $sname:ident $({ $($sfield:ident : $srole:ident $(($sclass:ident))?),* })?
                [$($sflag:ident)|*];
            )*
        }
    ) => {
        instruction_table!(@emit [$($sname)*]
            $(
                $(#[doc = $doc])*
                $name $({ $($field : $role $(($class))?),* })? [$($flag)|*];
            )*
            $(
                $(#[doc = $sdoc])*
                $sname $({ $($sfield : $srole $(($sclass))?),* })? [SLOW $(| $sflag)*];
            )*
        );
    };
    (@emit [$($slow:ident)*]
        $(
            $(#[doc = $doc:literal])*
            $name:ident $({ $($field:ident : $role:ident $(($class:ident))?),* })?
            [$($flag:ident)|*];
        )*
    ) => {
        /// One bytecode instruction, generated from the table in
        /// [`crate::bytecode`] (see there for the field conventions).
        ///
        /// `#[repr(u8)]`: the first byte is the discriminant, numbered in
        /// table order from 0 ([`Op::opcode`]), which the interpreter uses
        /// to index its handler table.
        #[repr(u8)]
        #[derive(Clone, Copy, Debug, PartialEq)]
        #[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
        pub enum Op {
            $(
                $(#[doc = $doc])*
                $name $({ $($field: operand_type!($role)),* })?,
            )*
        }

        // `Operands` holds at most `MAX_OPERANDS`: checked per row, at
        // compile time.
        $(
            const _: () = assert!(
                (&[$($(stringify!($field)),*)?] as &[&str]).len() <= $crate::bytecode::MAX_OPERANDS
            );
        )*

        impl Op {
            /// Every instruction's name, in opcode order.
            pub const NAMES: [&'static str; Op::COUNT] = [$(stringify!($name)),*];

            /// How many instructions the table declares.
            pub const COUNT: usize = [$(stringify!($name)),*].len();

            /// The instruction's opcode: its row in the table, `0..COUNT`.
            #[inline(always)]
            pub fn opcode(&self) -> u8 {
                // SAFETY: `Op` is `#[repr(u8)]`, so its first byte is the
                // discriminant (RFC 2195), and every `Op` is initialized.
                unsafe { *(self as *const Op).cast::<u8>() }
            }

            /// The instruction's name, as the disassembler shows it.
            pub fn name(&self) -> &'static str {
                match self {
                    $(Op::$name { .. } => stringify!($name),)*
                }
            }

            /// The operands in table order (the written register first).
            pub fn operands(&self) -> $crate::bytecode::Operands {
                match *self {
                    $(
                        Op::$name $({ $($field),* })? => $crate::bytecode::Operands::new(&[
                            $($(operand!($role, stringify!($field), $field $(, $class)?)),*)?
                        ]),
                    )*
                }
            }

            /// The jump target of an instruction that has one (a field
            /// whose role is `target`), to write: the compiler emits a jump
            /// before it knows where to ([`UNPATCHED`](crate::bytecode::UNPATCHED))
            /// and patches it here.
            pub fn target_mut(&mut self) -> Option<&mut u32> {
                match self {
                    $(
                        Op::$name $({ $($field),* })? => {
                            let found: Option<&mut u32> = None;
                            $($(let found = target_field!($role, $field, found);)*)?
                            found
                        }
                    )*
                }
            }

            /// The instruction's [`Flags`](crate::bytecode::Flags).
            pub fn flags(&self) -> $crate::bytecode::Flags {
                use $crate::bytecode::Flags;
                match self {
                    $(Op::$name { .. } => Flags::of(&[$(Flags::$flag),*]),)*
                }
            }
        }

        /// Calls `$callback!` with the name of every instruction, in
        /// opcode order, then the names of the `slow` section:
        /// `$callback!([Move LoadInt ...] [Concat NewArray ...])`. The
        /// interpreter builds its handler table with it, so a row without
        /// a handler does not compile. Crate-internal (textual scope:
        /// `#[macro_use] mod bytecode`).
        macro_rules! with_instruction_names {
            ($callback:ident) => { $callback!([$($name)*] [$($slow)*]); };
        }
    };
}
