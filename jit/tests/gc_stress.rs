//! Compiled code keeps the GC root invariant: with a collection at every
//! allocation (`gc_stress`, which poisons what it frees), programs that
//! keep strings and arrays in locals, parameters, arrays and across calls
//! print the same in the interpreter and in every JIT tier.

use std::sync::Arc;

use vm::driver::{Options, TierUpFactory, load, run_with};

const PROGRAM: &str = r#"
fn make(n: int) -> [[str]] {
    let rows: [[str]] = [];
    for i in 0..n {
        let row: [str] = [];
        for j in 0..3 { push(row, str(i) + ":" + str(j)); }
        push(rows, row);
    }
    return rows;
}
fn churn(depth: int, keep: [int], s: str) -> int {
    let junk = [0; 100];
    junk[0] = depth;
    let t = s + str(depth);
    if depth == 0 { return len(keep) + len(t); }
    return churn(depth - 1, keep, t) + junk[0] - depth;
}
fn pair(a: str, b: str) -> [str] { return [a, b]; }
let keep = make(10);
let total = 0;
let words: [str] = [];
for round in 0..6 {
    let garbage = make(3);
    total += len(garbage);
    total += churn(4, [1, 2, 3], "x" + str(round));
    push(words, "w" + str(round));
    let p = pair(str(round), words[round]);
    total += len(p[1]);
}
let grid = [[1.5, 2.5]; 3];
grid[1][0] = grid[0][1] * 2.0;
print(total);
print(keep[0]);
print(keep[9][2]);
print(words);
print(grid);
print(pop(words) + "!");
"#;

fn run(tier: Option<u32>) -> (i32, String, String) {
    let module = load("gc.toy", PROGRAM.as_bytes()).expect("compiles");
    let tier_up: Option<TierUpFactory> = tier.map(|threshold| {
        let make = move || {
            jit::tier_up(jit::JitOptions {
                threshold: Some(threshold),
                ..jit::JitOptions::default()
            })
        };
        Arc::new(make) as TierUpFactory
    });
    let options = Options {
        gc_stress: true,
        tier_up,
        ..Options::default()
    };
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let status = run_with(&module, Vec::new(), &options, &mut out, &mut err);
    (
        status,
        String::from_utf8_lossy(&out).into_owned(),
        String::from_utf8_lossy(&err).into_owned(),
    )
}

#[test]
fn compiled_code_keeps_every_live_reference_rooted() {
    let reference = run(None);
    assert_eq!(reference.0, 0, "{}", reference.2);
    assert!(
        reference.1.contains("[\"0:0\", \"0:1\", \"0:2\"]"),
        "{}",
        reference.1
    );
    for threshold in [0, 1, 3] {
        assert_eq!(run(Some(threshold)), reference, "threshold {threshold}");
    }
}
