//! Def/use facts the translator needs before it starts.

use vm::bytecode::Op;

/// Which of a frame's `frame_size` registers some instruction of `code`
/// writes (the operands the translator defines; see `Translator::write`).
pub fn written_registers(code: &[Op], frame_size: usize) -> Vec<bool> {
    let mut written = vec![false; frame_size];
    for op in code {
        for r in op.regs().filter(|r| r.access.writes()) {
            if let Some(w) = written.get_mut(r.reg as usize) {
                *w = true;
            }
        }
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_registers_are_the_defined_and_updated_operands() {
        let code = [
            Op::AddI { dst: 2, a: 0, b: 1 },
            Op::ForLoop {
                counter: 3,
                end: 0,
                target: 0,
            },
            Op::Return { src: 2 },
        ];
        assert_eq!(
            written_registers(&code, 5),
            [false, false, true, true, false]
        );
    }

    #[test]
    fn a_register_outside_the_frame_is_ignored() {
        let code = [Op::LoadInt { dst: 7, imm: 1 }, Op::ReturnVoid];
        assert_eq!(written_registers(&code, 2), [false, false]);
    }
}
