//! Code names in the `class:func_name:line:file` form the vmprof tools parse.
//!
//! `vmprofshow` splits a name only when it has **exactly three colons**, so
//! every colon inside a part is replaced by [`COLON_REPLACEMENT`] (`_`):
//! a function `a::b` becomes `a__b`, a file `C:/x.toy` becomes `C_/x.toy`.
//! A name is at most [`MAX_CODE_NAME`] bytes (the C writer's cap); when the
//! parts are longer the function name and the file name are shortened, each
//! on a char boundary, so the three colons always survive.

use super::format::truncate_on_char_boundary;

/// The longest code name written, in bytes (as PyPy's `MAX_FUNC_NAME`).
pub const MAX_CODE_NAME: usize = 1023;
/// The longest class prefix accepted by
/// [`super::register_code_object_class`], in bytes.
pub const MAX_CLASS_PREFIX: usize = 64;
/// What replaces a `:` inside a function or file name.
pub const COLON_REPLACEMENT: char = '_';

// ANCHOR: code_name
/// Builds `class:func_name:line:file`, sanitised and capped at
/// [`MAX_CODE_NAME`] bytes.
///
/// `class` must already be a valid prefix (no colon, at most
/// [`MAX_CLASS_PREFIX`] bytes), which [`super::CodeClass`] guarantees.
pub fn code_name(class: &str, func_name: &str, line: u32, file: &str) -> String {
    let func = func_name.replace(':', "_");
    let file = file.replace(':', "_");
    let line = line.to_string();
    // Three colons plus the fixed parts; the rest is shared by func and file.
    let fixed = class.len() + line.len() + 3;
    let budget = MAX_CODE_NAME.saturating_sub(fixed);
    let (func, file) = if func.len() + file.len() <= budget {
        (func.as_str(), file.as_str())
    } else {
        // Keep as much of the function name as possible, but leave the file
        // at least half of the budget (or all it needs, if it is short).
        let file_keep = file.len().min(budget / 2);
        let func = truncate_on_char_boundary(&func, budget - file_keep);
        let file = truncate_on_char_boundary(&file, budget - func.len());
        (func, file)
    };
    format!("{class}:{func}:{line}:{file}")
}
// ANCHOR_END: code_name

/// Whether `prefix` can be a code-object class: non-empty, at most
/// [`MAX_CLASS_PREFIX`] bytes, no colon, no control character.
pub fn is_valid_class_prefix(prefix: &str) -> bool {
    !prefix.is_empty()
        && prefix.len() <= MAX_CLASS_PREFIX
        && !prefix.chars().any(|c| c == ':' || c.is_control())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn colons(s: &str) -> usize {
        s.matches(':').count()
    }

    #[test]
    fn plain_names_are_unchanged() {
        assert_eq!(
            code_name("toy", "fib", 3, "examples/fib.toy"),
            "toy:fib:3:examples/fib.toy"
        );
    }

    #[test]
    fn colons_inside_parts_are_replaced() {
        let name = code_name("toy", "a::b", 1, "C:/x/fib.toy");
        assert_eq!(name, "toy:a__b:1:C_/x/fib.toy");
        assert_eq!(colons(&name), 3);
    }

    #[test]
    fn long_names_are_cut_on_char_boundaries_keeping_three_colons() {
        for (func_len, file_len) in [(5000, 3), (3, 5000), (2000, 2000), (1010, 1)] {
            let func = "é".repeat(func_len);
            let file = "ü".repeat(file_len);
            let name = code_name("toy", &func, 4_000_000_000, &file);
            assert!(name.len() <= MAX_CODE_NAME, "{}", name.len());
            assert!(
                name.len() >= MAX_CODE_NAME - 1,
                "wasteful cut: {}",
                name.len()
            );
            assert_eq!(colons(&name), 3);
            let parts: Vec<&str> = name.split(':').collect();
            assert_eq!(parts[2], "4000000000");
            assert!(!parts[3].is_empty(), "the file keeps a share");
        }
    }

    #[test]
    fn class_prefix_rules() {
        assert!(is_valid_class_prefix("toy"));
        assert!(!is_valid_class_prefix(""));
        assert!(!is_valid_class_prefix("a:b"));
        assert!(!is_valid_class_prefix("a\nb"));
        assert!(!is_valid_class_prefix(&"x".repeat(MAX_CLASS_PREFIX + 1)));
    }
}
