//! What the compiler reads of the program ([`Source`]): the VM itself when
//! it runs on the interpreter's thread, an owned copy ([`Program`]) on the
//! compiler thread.

use vm::abi::{Locations, Vm};
use vm::bytecode::Module;

/// What the compiler reads of the program.
pub trait Source {
    /// The bytecode.
    fn module(&self) -> &Module;
    /// The runtime constant pool of `func` (as the VM built it).
    fn constants(&self, func: u32) -> &[u64];
    /// `--vmprof-inlined`: inlined calls get frame records.
    fn inlined_frames(&self) -> bool;
    /// `--vmprof-lines`: compiled code stores its call sites' locations
    /// in its record.
    fn vmprof_locations(&self) -> Option<&Locations>;
}

impl Source for Vm<'_> {
    fn module(&self) -> &Module {
        Vm::module(self)
    }
    fn constants(&self, func: u32) -> &[u64] {
        Vm::constants(self, func)
    }
    fn inlined_frames(&self) -> bool {
        self.vmprof_inlined_frames()
    }
    fn vmprof_locations(&self) -> Option<&Locations> {
        Vm::vmprof_locations(self)
    }
}

/// An owned copy of what [`Source`] gives, for the compiler thread (the VM
/// borrows its module for less than `'static`). The constants are the
/// VM's values (string objects that live as long as the VM), copied.
pub struct Program {
    module: Module,
    constants: Vec<Box<[u64]>>,
    inlined_frames: bool,
    vmprof_locations: Option<Locations>,
    vmprof_main: Option<perfsupport::vmprof::CodeId>,
}

impl Program {
    /// Copies what the compiler needs of `vm`.
    pub fn of(vm: &Vm<'_>) -> Program {
        let module = vm.module().clone();
        let constants = (0..module.functions.len() as u32)
            .map(|f| vm.constants(f).into())
            .collect();
        Program {
            module,
            constants,
            inlined_frames: vm.vmprof_inlined_frames(),
            vmprof_locations: vm.vmprof_locations().cloned(),
            vmprof_main: vm.vmprof_main(),
        }
    }

    /// The vmprof code id of `<main>` while a vmprof session runs
    /// ([`Vm::vmprof_main`]).
    pub fn vmprof_main(&self) -> Option<perfsupport::vmprof::CodeId> {
        self.vmprof_main
    }
}

impl Source for Program {
    fn module(&self) -> &Module {
        &self.module
    }
    fn constants(&self, func: u32) -> &[u64] {
        self.constants.get(func as usize).map_or(&[], |c| c)
    }
    fn inlined_frames(&self) -> bool {
        self.inlined_frames
    }
    fn vmprof_locations(&self) -> Option<&Locations> {
        self.vmprof_locations.as_ref()
    }
}
