//! A minimal runner for the interpreter, for benchmarks and debugging
//! before the real CLI exists: `toyrun [--max-depth N] [--gc-stress] [--dis] SCRIPT [ARGS...]`.

use std::process::ExitCode;

use vm::driver::{self, Options};

fn main() -> ExitCode {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mut options = Options::default();
    let mut dis = false;
    loop {
        match args.first().map(String::as_str) {
            Some("--gc-stress") => {
                options.gc_stress = true;
                args.remove(0);
            }
            Some("--dis") => {
                dis = true;
                args.remove(0);
            }
            Some("--max-depth") if args.len() > 1 => {
                options.max_depth = match args[1].parse() {
                    Ok(n) => n,
                    Err(_) => {
                        eprintln!("error: --max-depth needs a number");
                        return ExitCode::from(2);
                    }
                };
                args.drain(..2);
            }
            _ => break,
        }
    }
    if args.is_empty() {
        eprintln!("usage: toyrun [--max-depth N] [--gc-stress] [--dis] SCRIPT [ARGS...]");
        return ExitCode::from(2);
    }
    let path = args.remove(0);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("error: cannot read {path}: {e}");
            return ExitCode::from(1);
        }
    };
    let module = match driver::load(&path, &bytes) {
        Ok(m) => m,
        Err(text) => {
            eprint!("{text}");
            return ExitCode::from(1);
        }
    };
    if dis {
        print!("{}", vm::disasm::disassemble(&module));
        return ExitCode::SUCCESS;
    }
    ExitCode::from(driver::run(&module, args, &options) as u8)
}
