//! Code names: the `class:func_name:line:file` form the vmprof tools parse,
//! written by [`code_name`] and read back by [`parse_code_name`]. This file
//! is the one definition of the format.
//!
//! `vmprofshow` splits a name only when it has **exactly three colons**, so
//! the function and file parts are escaped, losslessly: `%` is written
//! `%25`, `:` is `%3A`, and a control character (a newline in a path) is
//! `%` and its two hex digits. A function `a::b` is written `a%3A%3Ab`, a
//! file `work:v2.toy` is `work%3Av2.toy`, and [`parse_code_name`] gives
//! back exactly `work:v2.toy`. (Colons were once replaced by `_`: a report
//! then showed the lines of `work_v2.toy`, another file.)
//!
//! A name is at most [`MAX_CODE_NAME`] bytes (the C writer's cap); when the
//! parts are longer the function name and the file name are shortened, each
//! on a character boundary and never inside an escape, and a shortened part
//! ends with [`CUT_MARK`], which no escaped text contains: a reader knows it
//! holds only the start of the name and opens no file by it.

use super::format::truncate_on_char_boundary;

/// The longest code name written, in bytes (as PyPy's `MAX_FUNC_NAME`).
pub const MAX_CODE_NAME: usize = 1023;
/// The longest class prefix accepted by
/// [`super::register_code_object_class`], in bytes.
pub const MAX_CLASS_PREFIX: usize = 64;
/// Ends a part that was shortened to fit [`MAX_CODE_NAME`] (`%` followed by
/// something that is not two hex digits: never produced by escaping).
pub const CUT_MARK: &str = "%~";

// ANCHOR: code_name
/// Builds `class:func_name:line:file`, escaped and capped at
/// [`MAX_CODE_NAME`] bytes (see the [module docs](self)).
///
/// `class` must already be a valid prefix (no colon, at most
/// [`MAX_CLASS_PREFIX`] bytes), which [`super::CodeClass`] guarantees.
pub fn code_name(class: &str, func_name: &str, line: u32, file: &str) -> String {
    let func = escape(func_name);
    let file = escape(file);
    let line = line.to_string();
    // Three colons plus the fixed parts; the rest is shared by func and file.
    let fixed = class.len() + line.len() + 3;
    let budget = MAX_CODE_NAME.saturating_sub(fixed);
    if func.len() + file.len() <= budget {
        return format!("{class}:{func}:{line}:{file}");
    }
    // Keep as much of the function name as possible, but leave the file at
    // least half of the budget (or all it needs, if it is short).
    let file_keep = file.len().min(budget / 2);
    let func = cut(&func, budget - file_keep);
    let file = cut(&file, budget - func.len());
    format!("{class}:{func}:{line}:{file}")
}
// ANCHOR_END: code_name

/// The parts of a code name, unescaped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodeName {
    /// The class prefix (`toy`, `py`, ...).
    pub class: String,
    /// The function name.
    pub func_name: String,
    /// The first line of the function.
    pub line: u32,
    /// The source file.
    pub file: String,
    /// True when the file part was shortened to fit [`MAX_CODE_NAME`]:
    /// `file` is only the start of the real name.
    pub file_cut: bool,
}

/// Splits a name written by [`code_name`] (or by another vmprof writer: an
/// unescaped file part may hold colons); `None` for any other shape.
pub fn parse_code_name(name: &str) -> Option<CodeName> {
    let mut parts = name.splitn(4, ':');
    let class = parts.next()?;
    let func = parts.next().filter(|f| !f.is_empty())?;
    let line = parts.next()?.parse().ok()?;
    let file = parts.next()?;
    let (file, file_cut) = match file.strip_suffix(CUT_MARK) {
        Some(start) => (start, true),
        None => (file, false),
    };
    let func = func.strip_suffix(CUT_MARK).unwrap_or(func);
    Some(CodeName {
        class: class.to_owned(),
        func_name: unescape(func),
        line,
        file: unescape(file),
        file_cut,
    })
}

/// Whether `prefix` can be a code-object class: non-empty, at most
/// [`MAX_CLASS_PREFIX`] bytes, no colon, no control character.
pub fn is_valid_class_prefix(prefix: &str) -> bool {
    !prefix.is_empty()
        && prefix.len() <= MAX_CLASS_PREFIX
        && !prefix.chars().any(|c| c == ':' || c.is_control())
}

/// `%`, `:` and control characters as `%XX` (XX: the byte in hex; a
/// control character outside ASCII as the `%XX` of each UTF-8 byte).
fn escape(part: &str) -> String {
    let mut out = String::with_capacity(part.len());
    for c in part.chars() {
        if c == '%' || c == ':' || c.is_control() {
            let mut bytes = [0u8; 4];
            for byte in c.encode_utf8(&mut bytes).bytes() {
                out.push_str(&format!("%{byte:02X}"));
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Undoes [`escape`]; a `%` not followed by two hex digits stays as it is
/// (names from other writers are not escaped).
fn unescape(part: &str) -> String {
    let bytes = part.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        // Two ASCII hex digits exactly (`from_str_radix` alone would take
        // `%+5` as 5).
        let hex = bytes
            .get(i + 1..i + 3)
            .filter(|h| h.iter().all(u8::is_ascii_hexdigit))
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// `escaped` if it fits in `max` bytes, else shortened to at most `max`
/// bytes, [`CUT_MARK`] included, on a
/// character boundary and never inside a `%XX` escape.
fn cut(escaped: &str, max: usize) -> String {
    if escaped.len() <= max {
        return escaped.to_owned();
    }
    let mut start = truncate_on_char_boundary(escaped, max.saturating_sub(CUT_MARK.len()));
    // Back off from a `%` or `%X` left at the end.
    for back in 1..=2 {
        if start.len() >= back && start.as_bytes()[start.len() - back] == b'%' {
            start = &start[..start.len() - back];
            break;
        }
    }
    format!("{start}{CUT_MARK}")
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
    fn colons_percents_and_control_characters_are_escaped_and_come_back() {
        let name = code_name("toy", "a::b", 1, "C:/x/work:v2 100%\n.toy");
        assert_eq!(name, "toy:a%3A%3Ab:1:C%3A/x/work%3Av2 100%25%0A.toy");
        assert_eq!(colons(&name), 3);
        let parsed = parse_code_name(&name).expect("parses");
        assert_eq!(parsed.func_name, "a::b");
        assert_eq!(parsed.file, "C:/x/work:v2 100%\n.toy");
        assert!(!parsed.file_cut);
    }

    #[test]
    fn names_of_other_writers_parse_with_colons_in_the_file() {
        let parsed = parse_code_name("py:f:12:C:/a 5%.py").expect("parses");
        assert_eq!((parsed.func_name.as_str(), parsed.line), ("f", 12));
        assert_eq!(parsed.file, "C:/a 5%.py");
        // Not an escape: a sign is not a hex digit.
        let parsed = parse_code_name("py:f:1:/x/a%+5.py").expect("parses");
        assert_eq!(parsed.file, "/x/a%+5.py");
        for odd in ["toy:f:x:a.toy", "toy::1:a.toy", "malloc", "n:f:1"] {
            assert_eq!(parse_code_name(odd), None, "{odd}");
        }
    }

    #[test]
    fn long_names_are_cut_on_char_boundaries_keeping_three_colons() {
        for (func_len, file_len) in [(5000, 3), (3, 5000), (2000, 2000), (1010, 1)] {
            let func = "é".repeat(func_len);
            let file = "ü".repeat(file_len);
            let name = code_name("toy", &func, 4_000_000_000, &file);
            assert!(name.len() <= MAX_CODE_NAME, "{}", name.len());
            assert!(
                name.len() >= MAX_CODE_NAME - 4,
                "wasteful cut: {}",
                name.len()
            );
            assert_eq!(colons(&name), 3);
            let parts: Vec<&str> = name.split(':').collect();
            assert_eq!(parts[2], "4000000000");
            assert!(!parts[3].is_empty(), "the file keeps a share");
            let parsed = parse_code_name(&name).expect("parses");
            assert_eq!(parsed.file_cut, file_len > 3);
            assert!(file.starts_with(&parsed.file));
        }
    }

    #[test]
    fn a_cut_never_splits_an_escape() {
        for pad in 0..4 {
            let file = format!("{}{}", "d".repeat(pad), ":".repeat(2000));
            let name = code_name("toy", "f", 1, &file);
            assert!(name.len() <= MAX_CODE_NAME);
            let parsed = parse_code_name(&name).expect("parses");
            assert!(parsed.file_cut);
            assert!(file.starts_with(&parsed.file), "{pad}: {:?}", parsed.file);
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
