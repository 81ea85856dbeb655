//! The interpreter's dispatch, checked on the machine code of the release
//! binary: every instruction has a handler function
//! (`vm::interp::handlers::<Name>`), and every handler continues with a
//! tail *jump* to the next handler, never a call.
//!
//! Rust does not guarantee tail calls; LLVM makes them here because all
//! handlers share one signature and keep nothing on the stack past the
//! call (see `vm/src/interp/mod.rs`). If a change ever made one handler
//! `call` the next instead, each instruction it runs would leave a frame
//! behind and a long loop would overflow the native stack; this test fails
//! first. It also checks that every handler keeps the frame pointer
//! (`push rbp; mov rbp, rsp`), so that `perf record -g` walks through the
//! interpreter.
//!
//! x86-64 only: it reads the handlers' machine code with an x86-64
//! disassembler (the aarch64 stage, `tools/aarch64-tests`, lists it).
#![cfg(target_arch = "x86_64")]

use std::collections::BTreeMap;

use iced_x86::{Code, Decoder, DecoderOptions, Instruction, Mnemonic, OpKind, Register};
use object::{Object, ObjectSection, ObjectSymbol, SymbolKind};

/// The handler name in a legacy-mangled `vm::interp::handlers::<Name>`
/// symbol (`_ZN2vm6interp8handlers4MulF17h...E`), if it is one.
fn handler_name(symbol: &str) -> Option<&str> {
    let rest = symbol.strip_prefix("_ZN2vm6interp8handlers")?;
    let digits = rest.chars().take_while(|c| c.is_ascii_digit()).count();
    let len: usize = rest[..digits].parse().ok()?;
    let name = rest.get(digits..digits + len)?;
    rest[digits + len..].starts_with("17h").then_some(name)
}

/// One handler's code.
struct Handler {
    /// Its symbol's handler name: the instruction's own, or that of an
    /// identical handler LLVM merged it with (`ForPrep` and `JmpIfNotLtI`
    /// are the same code).
    symbol: String,
    code: Vec<Instruction>,
}

/// The handler of every opcode, read from the release `toyvm` binary: the
/// entries of its handler table `table` (`HANDLERS`, or `LINE_START_HANDLERS`
/// for vmprof lines mode) through their relocations
/// in a position-independent binary, each decoded up to its symbol's size.
fn handlers(table_name: &str) -> Vec<Handler> {
    let path = env!("CARGO_BIN_EXE_toyvm");
    let data = std::fs::read(path).expect("read the toyvm binary");
    let file = object::File::parse(&*data).expect("parse the toyvm binary");
    let mut functions = BTreeMap::new();
    let mut table = None;
    for symbol in file.symbols() {
        let Some(name) = symbol.name().ok().and_then(handler_name) else {
            continue;
        };
        match symbol.kind() {
            SymbolKind::Data if name == table_name => table = Some(symbol),
            SymbolKind::Text if symbol.size() > 0 => {
                functions.insert(symbol.address(), (name.to_string(), symbol));
            }
            _ => {}
        }
    }
    let table = table.unwrap_or_else(|| panic!("no symbol for the {table_name} table"));
    let count = vm::bytecode::Op::COUNT;
    assert_eq!(
        table.size(),
        8 * count as u64,
        "HANDLERS has one entry per opcode"
    );
    // A PIE binary stores each entry as a relative relocation's addend;
    // a fixed-address one, in the section data.
    let mut entries = vec![0u64; count];
    for (offset, reloc) in file.dynamic_relocations().into_iter().flatten() {
        if (table.address()..table.address() + table.size()).contains(&offset) {
            entries[((offset - table.address()) / 8) as usize] = reloc.addend() as u64;
        }
    }
    if entries.iter().all(|&e| e == 0) {
        let section = file
            .section_by_index(table.section_index().unwrap())
            .unwrap();
        let bytes = section
            .data_range(table.address(), table.size())
            .unwrap()
            .unwrap();
        for (i, chunk) in bytes.chunks(8).enumerate() {
            entries[i] = u64::from_le_bytes(chunk.try_into().unwrap());
        }
    }
    entries
        .iter()
        .enumerate()
        .map(|(op, address)| {
            let (symbol, sym) = functions.get(address).unwrap_or_else(|| {
                panic!(
                    "HANDLERS[{op}] ({}) = {address:#x} is no handler function",
                    vm::bytecode::Op::NAMES[op]
                )
            });
            let section = file.section_by_index(sym.section_index().unwrap()).unwrap();
            let bytes = section
                .data_range(sym.address(), sym.size())
                .unwrap()
                .unwrap();
            let mut decoder = Decoder::with_ip(64, bytes, sym.address(), DecoderOptions::NONE);
            Handler {
                symbol: symbol.clone(),
                code: decoder.iter().collect(),
            }
        })
        .collect()
}

/// A `call` or `jmp` to a computed address: through a register, or through
/// memory addressed by registers (a table entry, like the dispatch). A
/// `call [rip+X]` calls a library function through its GOT slot (`fmod`,
/// `memcmp`), a fixed target, and does not count.
fn is_computed(i: &Instruction, mnemonic: Mnemonic) -> bool {
    i.mnemonic() == mnemonic
        && match i.op0_kind() {
            OpKind::Register => true,
            OpKind::Memory => i.memory_base() != Register::RIP,
            _ => false,
        }
}

#[test]
fn every_instruction_has_a_handler_that_jumps_to_the_next() {
    let mut problems = Vec::new();
    let tables = ["HANDLERS", "LINE_START_HANDLERS"].map(|t| (t, handlers(t)));
    for (table, handlers) in &tables {
        for (h, name) in handlers.iter().zip(vm::bytecode::Op::NAMES) {
            let name = if h.symbol == name {
                format!("{table}[{name}]")
            } else {
                format!("{table}[{name}] (merged into {})", h.symbol)
            };
            // The frame pointer is kept: perf walks through the interpreter.
            let prologue: Vec<Code> = h.code.iter().take(2).map(|i| i.code()).collect();
            let keeps_rbp = prologue == [Code::Push_r64, Code::Mov_rm64_r64]
                && h.code[0].op0_register() == Register::RBP
                && h.code[1].op0_register() == Register::RBP
                && h.code[1].op1_register() == Register::RSP;
            if !keeps_rbp {
                problems.push(format!(
                    "{name}: does not start with push rbp; mov rbp, rsp"
                ));
            }
            // No call of a handler through the table: only `Call` calls a
            // computed address (the callee's entry), exactly once.
            let indirect_calls = h
                .code
                .iter()
                .filter(|i| is_computed(i, Mnemonic::Call))
                .count();
            let wanted_calls = usize::from(h.symbol == "Call");
            if indirect_calls != wanted_calls {
                problems.push(format!(
                    "{name}: {indirect_calls} calls of a computed address, expected {wanted_calls}"
                ));
            }
            // It continues with a jump to a computed address (the dispatch),
            // unless it only ever returns.
            let returns_only = matches!(h.symbol.as_str(), "Return" | "ReturnVoid");
            let jumps = h.code.iter().any(|i| is_computed(i, Mnemonic::Jmp));
            if !returns_only && !jumps {
                problems.push(format!("{name}: no indirect jump to the next handler"));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_mangled_name_parser_reads_handler_symbols() {
    assert_eq!(
        handler_name("_ZN2vm6interp8handlers4MulF17h0123456789abcdefE"),
        Some("MulF")
    );
    assert_eq!(
        handler_name("_ZN2vm6interp8handlers8HANDLERS17h0123456789abcdefE"),
        Some("HANDLERS")
    );
    assert_eq!(handler_name("_ZN2vm6interp12interp_entry17h0E"), None);
}

/// The handlers' addresses depend only on the handlers: they are linked
/// into `.text.hot` (the `link_section` in `vm/src/interp/handlers.rs`,
/// `-z keep-text-section-prefix` in `.cargo/config.toml`), which starts on
/// a page, so a change elsewhere in the binary does not move them modulo
/// 4096 (it changed `nbody` and `mandelbrot` in the interpreter by 10-18%;
/// see `bench/RESULTS.md`).
#[test]
fn the_handlers_live_in_a_page_aligned_section_of_their_own() {
    let path = env!("CARGO_BIN_EXE_toyvm");
    let data = std::fs::read(path).expect("read the toyvm binary");
    let file = object::File::parse(&*data).expect("parse the toyvm binary");
    let hot = file
        .section_by_name(".text.hot")
        .expect("a .text.hot section (is -z keep-text-section-prefix in the link flags?)");
    assert_eq!(hot.address() % 4096, 0, ".text.hot starts on a page");
    let in_hot = |symbol: &object::Symbol<'_, '_>| {
        symbol.section_index() == Some(hot.index()) && symbol.kind() == SymbolKind::Text
    };
    let mut hot_handlers = std::collections::BTreeSet::new();
    let mut entry_in_hot = false;
    for symbol in file.symbols() {
        let Ok(name) = symbol.name() else { continue };
        if let Some(handler) = handler_name(name)
            && in_hot(&symbol)
        {
            hot_handlers.insert(handler.to_string());
        }
        if name.starts_with("_ZN2vm6interp12interp_entry") && in_hot(&symbol) {
            entry_in_hot = true;
        }
    }
    for name in [
        "AddI", "MulF", "GetElem", "SetElem", "Jmp", "ForLoop", "Call", "Return",
    ] {
        assert!(
            hot_handlers.contains(name),
            "{name} not in .text.hot: {hot_handlers:?}"
        );
    }
    assert!(entry_in_hot, "interp_entry is not in .text.hot");
}
