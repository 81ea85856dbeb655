//! Runtime errors: their messages and the traceback printed with them.

use std::fmt;

use crate::bytecode::Module;

/// Why a script stopped. `Display` gives the exact message of LANGUAGE.md, "Runtime errors"
/// (printed after `error: `).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RuntimeError {
    /// Int `/` by zero.
    DivisionByZero,
    /// Int `%` by zero.
    ModuloByZero,
    /// An index outside `0..len` (also negative).
    IndexOutOfRange {
        /// The index used.
        index: i64,
        /// The array's length.
        len: usize,
    },
    /// `pop` of an empty array.
    PopEmpty,
    /// `[e; n]` with `n < 0`.
    NegativeLength(i64),
    /// `parse_int` of the given text.
    ParseInt(String),
    /// `parse_float` of the given text.
    ParseFloat(String),
    /// A call beyond `--max-depth` (the limit).
    DepthExceeded(usize),
    /// An array or string too large to allocate.
    OutOfMemory,
    /// Writing stdout failed (e.g. a closed pipe); the text is the OS error.
    Output(String),
}

impl fmt::Display for RuntimeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RuntimeError::DivisionByZero => f.write_str("integer division by zero"),
            RuntimeError::ModuloByZero => f.write_str("integer modulo by zero"),
            RuntimeError::IndexOutOfRange { index, len } => {
                write!(f, "index {index} out of range for array of length {len}")
            }
            RuntimeError::PopEmpty => f.write_str("pop from an empty array"),
            RuntimeError::NegativeLength(n) => write!(f, "negative array length: {n}"),
            RuntimeError::ParseInt(s) => write!(f, "parse_int: invalid integer {s:?}"),
            RuntimeError::ParseFloat(s) => write!(f, "parse_float: invalid float {s:?}"),
            RuntimeError::DepthExceeded(limit) => {
                write!(f, "call depth exceeded the limit of {limit} frames")
            }
            RuntimeError::OutOfMemory => f.write_str("out of memory"),
            RuntimeError::Output(e) => write!(f, "cannot write to stdout: {e}"),
        }
    }
}

/// One active frame at the time of an error: the function and the index of
/// the instruction it was executing (a call, or the failing operation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceEntry {
    /// Function index in the module.
    pub func: u32,
    /// Instruction index in that function.
    pub pc: u32,
}

/// Tracebacks longer than this are folded.
const FOLD_ABOVE: usize = 30;
/// Frames kept at each end of a folded traceback.
const FOLD_KEEP: usize = 10;

/// Renders `error: MESSAGE` and the traceback (innermost frame first), one
/// line each, every line ending in a newline. More than 30 frames are
/// folded to the 10 innermost, a `... N frames omitted ...` line and the 10
/// outermost.
pub fn render(module: &Module, error: &RuntimeError, trace: &[TraceEntry]) -> String {
    let mut out = format!("error: {error}\n");
    let line = |e: &TraceEntry| {
        let func = &module.functions[e.func as usize];
        let span = func.spans.get(e.pc as usize).copied().unwrap_or(func.span);
        format!(
            "  at {} ({}:{}:{})\n",
            func.name, module.path, span.line, span.col
        )
    };
    if trace.len() > FOLD_ABOVE {
        trace[..FOLD_KEEP].iter().for_each(|e| out += &line(e));
        let omitted = trace.len() - 2 * FOLD_KEEP;
        out += &format!("  ... {omitted} frames omitted ...\n");
        trace[trace.len() - FOLD_KEEP..]
            .iter()
            .for_each(|e| out += &line(e));
    } else {
        trace.iter().for_each(|e| out += &line(e));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bytecode::Function;
    use crate::types::Span;

    fn module() -> Module {
        let f = |name: &str| Function {
            name: name.into(),
            params: vec![],
            ret: None,
            span: Span::new(1, 1),
            reg_types: vec![],
            reg_names: vec![],
            ref_regs: vec![],
            frame_size: 1,
            consts: vec![],
            code: vec![],
            spans: vec![Span::new(3, 16)],
        };
        Module {
            path: "x.toy".into(),
            functions: vec![f("fib"), f("<main>")],
            main: 1,
            ..Module::default()
        }
    }

    #[test]
    fn messages_are_the_documented_ones() {
        assert_eq!(
            RuntimeError::IndexOutOfRange { index: 5, len: 3 }.to_string(),
            "index 5 out of range for array of length 3"
        );
        assert_eq!(
            RuntimeError::NegativeLength(-3).to_string(),
            "negative array length: -3"
        );
        assert_eq!(
            RuntimeError::ParseInt("abc".into()).to_string(),
            "parse_int: invalid integer \"abc\""
        );
        assert_eq!(
            RuntimeError::ParseFloat("abc".into()).to_string(),
            "parse_float: invalid float \"abc\""
        );
        assert_eq!(
            RuntimeError::DepthExceeded(10000).to_string(),
            "call depth exceeded the limit of 10000 frames"
        );
    }

    #[test]
    fn short_traces_are_printed_whole() {
        let m = module();
        let text = render(
            &m,
            &RuntimeError::PopEmpty,
            &[TraceEntry { func: 0, pc: 0 }, TraceEntry { func: 1, pc: 0 }],
        );
        assert_eq!(
            text,
            "error: pop from an empty array\n  at fib (x.toy:3:16)\n  at <main> (x.toy:3:16)\n"
        );
    }

    #[test]
    fn long_traces_are_folded() {
        let m = module();
        let mut trace = vec![TraceEntry { func: 0, pc: 0 }; 99];
        trace.push(TraceEntry { func: 1, pc: 0 });
        let text = render(&m, &RuntimeError::DepthExceeded(100), &trace);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 1 + 10 + 1 + 10);
        assert_eq!(lines[11], "  ... 80 frames omitted ...");
        assert_eq!(lines[21], "  at <main> (x.toy:3:16)");
    }
}
