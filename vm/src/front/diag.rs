//! Compile-time diagnostics and how they are shown to the user.
//!
//! [`render`] prints a [`Diagnostic`] like rustc does:
//!
//! ```text
//! fib.toy:3:17: error: mismatched types: expected int, found bool
//!    3 |     let x = 1 + true;
//!      |                 ^
//! ```
//!
//! The first line is the format of LANGUAGE.md, "Compile errors". The line number is right
//! aligned in a gutter of at least four characters, then ` | ` and the source
//! line. Tabs are shown as four spaces and other control characters as a
//! space, so that the caret, which counts characters, lands under the
//! offending one for any column.

use crate::front::ast::Span;

/// One compile error: where it is and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    /// The position of the offending token.
    pub span: Span,
    /// What is wrong, lower case, without the `error: ` prefix.
    pub message: String,
}

impl Diagnostic {
    /// A diagnostic at `span` with `message` (lower case, no final period).
    pub fn new(span: Span, message: impl Into<String>) -> Diagnostic {
        Diagnostic {
            span,
            message: message.into(),
        }
    }
}

/// How many columns a tab occupies in the rendered source line.
const TAB_WIDTH: usize = 4;

/// A longer source line is shown as this many characters around the
/// column, with `…` where it is cut (a 10 MB line must not print 10 MB).
const MAX_SHOWN_CHARS: usize = 160;

/// Formats `d` for the user: `PATH:LINE:COL: error: MESSAGE`, the source
/// line and a caret under the reported column, each line ending in `\n`.
///
/// A span past the end of its line (such as "unexpected end of file")
/// puts the caret just after the last character; a line past the end of
/// the source shows an empty line.
pub fn render(path: &str, source: &str, d: &Diagnostic) -> String {
    let Span { line, col } = d.span;
    let mut out = format!("{path}:{line}:{col}: error: {}\n", d.message);
    let text = source_line(source, line);
    let number = line.to_string();
    let gutter = number.len().max(4);
    let mut shown = String::new();
    let mut caret_offset = None;
    let target = usize::try_from(col.max(1) - 1).unwrap_or(usize::MAX);
    let length = text.chars().count();
    let first = target
        .min(length)
        .saturating_sub(MAX_SHOWN_CHARS / 2)
        .min(length.saturating_sub(MAX_SHOWN_CHARS));
    if first > 0 {
        shown.push('…');
    }
    for (index, c) in text.chars().enumerate().skip(first).take(MAX_SHOWN_CHARS) {
        if index == target {
            caret_offset = Some(shown.len());
        }
        match c {
            '\t' => shown.push_str(&" ".repeat(TAB_WIDTH)),
            c if c.is_control() => shown.push(' '),
            c => shown.push(c),
        }
    }
    let cut_end = first + MAX_SHOWN_CHARS < length;
    // Columns past the end of the line point just after it. `shown.len()`
    // is in bytes, so count characters for the caret's indentation.
    let caret_chars = match caret_offset {
        Some(offset) => shown[..offset].chars().count(),
        None => shown.chars().count(),
    };
    if cut_end {
        shown.push('…');
    }
    out.push_str(&format!("{number:>gutter$} | {shown}\n"));
    out.push_str(&format!("{:gutter$} | {}^\n", "", " ".repeat(caret_chars)));
    out
}

/// The text of 1-based line `line` without its line terminator; empty when
/// the source has fewer lines.
fn source_line(source: &str, line: u32) -> &str {
    // The lexer skips a leading byte order mark without counting a column.
    let source = source
        .strip_prefix(crate::front::lexer::BYTE_ORDER_MARK)
        .unwrap_or(source);
    let index = usize::try_from(line.max(1) - 1).unwrap_or(usize::MAX);
    let text = source.split('\n').nth(index).unwrap_or("");
    text.strip_suffix('\r').unwrap_or(text)
}

/// The diagnostic for a file that is not UTF-8: the position of the first
/// invalid byte, counting the characters of the valid prefix.
pub fn utf8_error(bytes: &[u8], err: std::str::Utf8Error) -> Diagnostic {
    let valid_len = err.valid_up_to().min(bytes.len());
    // The prefix is valid by definition of `valid_up_to`; fall back to an
    // empty prefix rather than trusting a mismatched error.
    let prefix = std::str::from_utf8(&bytes[..valid_len]).unwrap_or("");
    let mut line: u32 = 1;
    let mut col: u32 = 1;
    for c in prefix.chars() {
        if c == '\n' {
            line = line.saturating_add(1);
            col = 1;
        } else {
            col = col.saturating_add(1);
        }
    }
    Diagnostic::new(Span::new(line, col), "file is not valid UTF-8")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(line: u32, col: u32, message: &str) -> Diagnostic {
        Diagnostic::new(Span::new(line, col), message)
    }

    #[test]
    fn renders_the_contract_line_source_and_caret() {
        let source = "fn f() {}\n\nlet x = 1 + true;\n";
        let d = at(3, 13, "mismatched types: expected int, found bool");
        assert_eq!(
            render("t.toy", source, &d),
            "t.toy:3:13: error: mismatched types: expected int, found bool\n\
             \x20  3 | let x = 1 + true;\n\
             \x20    |             ^\n"
        );
    }

    #[test]
    fn a_huge_line_is_shown_as_a_bounded_excerpt_around_the_column() {
        let source = format!("let x = {}+ true;\n", "1 + ".repeat(2_500_000));
        let col = source.find("true").unwrap() as u32 + 1;
        let text = render("big.toy", &source, &at(1, col, "mismatched types"));
        assert!(text.len() < 1000, "{} bytes", text.len());
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[1].contains("…") && lines[1].contains("+ true;"));
        let caret = lines[2].chars().position(|c| c == '^').unwrap();
        let t = lines[1].chars().collect::<Vec<_>>();
        assert_eq!(t[caret..caret + 4].iter().collect::<String>(), "true");
        // The start of a long line: cut at the end only.
        let text = render("big.toy", &source, &at(1, 5, "m"));
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[1].starts_with("   1 | let x") && lines[1].ends_with('…'));
    }

    #[test]
    fn tabs_expand_and_the_caret_follows() {
        let source = "\tlet\tx = y;";
        let d = at(1, 6, "unknown variable 'x'");
        let text = render("a.toy", source, &d);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[1], "   1 |     let    x = y;");
        assert_eq!(lines[2], "     |            ^");
        let x_at = lines[1].find('x').expect("x shown");
        assert_eq!(lines[2].find('^'), Some(x_at));
    }

    #[test]
    fn wide_line_numbers_widen_the_gutter() {
        let source = "\n".repeat(12345) + "abc";
        let d = at(12346, 2, "m");
        let text = render("p", &source, &d);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[1], "12346 | abc");
        assert_eq!(lines[2], "      |  ^");
    }

    #[test]
    fn non_ascii_and_crlf_lines() {
        let d = at(1, 4, "m");
        let text = render("p", "é€x!\r\nnext", &d);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[1], "   1 | é€x!");
        assert_eq!(lines[2], "     |    ^");
    }

    #[test]
    fn a_byte_order_mark_is_not_shown() {
        let text = render("p", "\u{feff}let x = y;", &at(1, 9, "unknown variable 'y'"));
        assert!(
            text.ends_with("   1 | let x = y;\n     |         ^\n"),
            "{text}"
        );
    }

    #[test]
    fn positions_past_the_end_stay_in_range() {
        let text = render("p", "ab", &at(1, 10, "unexpected end of file"));
        assert!(text.ends_with("   1 | ab\n     |   ^\n"), "{text}");
        let text = render("p", "ab\n", &at(2, 1, "unexpected end of file"));
        assert!(text.ends_with("   2 | \n     | ^\n"), "{text}");
        let text = render("p", "", &at(0, 0, "m"));
        assert!(text.starts_with("p:0:0: error: m\n"), "{text}");
        let text = render("p", "", &at(u32::MAX, u32::MAX, "m"));
        assert!(text.ends_with('\n'));
    }

    #[test]
    fn utf8_errors_point_at_the_first_bad_byte() {
        let bytes: &[u8] = &[b"let x = 1;\nlet \xc3\xa9".as_slice(), b"\xff = 2;"].concat();
        let err = std::str::from_utf8(bytes).expect_err("invalid");
        assert_eq!(utf8_error(bytes, err), at(2, 6, "file is not valid UTF-8"));
        let bytes: &[u8] = &[0x80u8][..];
        let err = std::str::from_utf8(std::hint::black_box(bytes)).expect_err("invalid");
        assert_eq!(utf8_error(bytes, err), at(1, 1, "file is not valid UTF-8"));
    }
}
