//! The front end on arbitrary bytes: lexing, parsing, type checking,
//! compiling and verifying must end in a module or a rendered diagnostic,
//! never a panic or a hang. A diagnostic names the script's path.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match vm::driver::load("fuzz.toy", data) {
        Ok(module) => {
            // What `toyvm disasm` prints must render too.
            let _ = vm::bytecode::disasm::disassemble(&module);
        }
        Err(diagnostic) => assert!(diagnostic.starts_with("fuzz.toy"), "{diagnostic}"),
    }
});
