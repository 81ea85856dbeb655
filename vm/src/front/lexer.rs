//! Lexer: source text → [`Token`]s, one at a time.
//!
//! The parser pulls tokens on demand with [`Lexer::next_token`], so a large
//! file never exists as a token vector; [`tokenize`] collects them for tests
//! and tools.
//!
//! Positions are 1-based lines and columns, where a column counts Unicode
//! scalar values (a tab is one column; [`crate::front::diag::render`] expands it
//! for display). Counters saturate instead of overflowing.
//!
//! Lexical rules (LANGUAGE.md, "Lexical structure", in brief):
//! - `//` comments run to the end of the line. Whitespace is space, tab,
//!   `\r` and `\n`. A byte order mark at the very start is ignored.
//! - Identifiers are ASCII `[A-Za-z_][A-Za-z0-9_]*`; any other character
//!   outside strings and comments is an error.
//! - Integer literals are decimal or `0x` hexadecimal, with `_` allowed
//!   between and after digits. The lexer keeps the value as a `u64`, so that
//!   the parser can accept `-9223372036854775808` (the one literal that only
//!   fits when negated); a value above `u64::MAX` is an error here already.
//! - Float literals need a digit on both sides of `.` (`1.5`), or an exponent
//!   (`1e9`, `2.5e-3`); `_` is allowed in their digit runs too. A float that
//!   overflows to infinity is an error, like in Rust.
//! - A number may not run straight into a letter (`12abc`, `0x1g`).
//! - Strings are `"..."`, may span lines, and know the escapes
//!   `\n \t \r \\ \" \0`; any other escape is an error at the backslash.

use crate::front::ast::Span;
use crate::front::diag::Diagnostic;

/// The message for an integer literal outside the `i64` range; shared with
/// the parser, which applies the signed limit.
pub const INT_TOO_LARGE: &str = "integer literal does not fit in a signed 64-bit integer";

/// U+FEFF, which some editors put at the start of UTF-8 files.
pub const BYTE_ORDER_MARK: char = '\u{feff}';

/// One token and where it starts.
#[derive(Clone, Debug, PartialEq)]
pub struct Token {
    /// What the token is, with its value for literals and identifiers.
    pub kind: TokenKind,
    /// The position of the token's first character.
    pub span: Span,
}

/// Every kind of token in Toy.
#[derive(Clone, Debug, PartialEq)]
pub enum TokenKind {
    /// An integer literal's value; the parser checks the `i64` range.
    Int(u64),
    Float(f64),
    /// A string literal with its escapes already decoded.
    Str(String),
    Ident(String),
    // Keywords.
    Fn,
    Let,
    If,
    Else,
    While,
    For,
    In,
    Break,
    Continue,
    Return,
    True,
    False,
    // Punctuation and operators.
    LParen,
    RParen,
    LBracket,
    RBracket,
    LBrace,
    RBrace,
    Comma,
    Semi,
    Colon,
    Arrow,
    DotDot,
    Plus,
    Minus,
    Star,
    Slash,
    Percent,
    Assign,
    PlusAssign,
    MinusAssign,
    StarAssign,
    SlashAssign,
    PercentAssign,
    EqEq,
    NotEq,
    Lt,
    Le,
    Gt,
    Ge,
    AndAnd,
    OrOr,
    Bang,
    Amp,
    Pipe,
    Caret,
    Shl,
    Shr,
    /// End of input; returned forever once reached.
    Eof,
}

impl TokenKind {
    /// How the token is named in error messages (`'}'`, `identifier 'x'`,
    /// `end of file`).
    pub fn describe(&self) -> String {
        match self {
            TokenKind::Int(_) => "integer literal".to_string(),
            TokenKind::Float(_) => "float literal".to_string(),
            TokenKind::Str(_) => "string literal".to_string(),
            TokenKind::Ident(name) => format!("identifier '{name}'"),
            TokenKind::Eof => "end of file".to_string(),
            other => format!("'{}'", other.symbol()),
        }
    }

    /// The source text of a keyword or punctuation token; empty for tokens
    /// that carry a value.
    pub fn symbol(&self) -> &'static str {
        match self {
            TokenKind::Int(_)
            | TokenKind::Float(_)
            | TokenKind::Str(_)
            | TokenKind::Ident(_)
            | TokenKind::Eof => "",
            TokenKind::Fn => "fn",
            TokenKind::Let => "let",
            TokenKind::If => "if",
            TokenKind::Else => "else",
            TokenKind::While => "while",
            TokenKind::For => "for",
            TokenKind::In => "in",
            TokenKind::Break => "break",
            TokenKind::Continue => "continue",
            TokenKind::Return => "return",
            TokenKind::True => "true",
            TokenKind::False => "false",
            TokenKind::LParen => "(",
            TokenKind::RParen => ")",
            TokenKind::LBracket => "[",
            TokenKind::RBracket => "]",
            TokenKind::LBrace => "{",
            TokenKind::RBrace => "}",
            TokenKind::Comma => ",",
            TokenKind::Semi => ";",
            TokenKind::Colon => ":",
            TokenKind::Arrow => "->",
            TokenKind::DotDot => "..",
            TokenKind::Plus => "+",
            TokenKind::Minus => "-",
            TokenKind::Star => "*",
            TokenKind::Slash => "/",
            TokenKind::Percent => "%",
            TokenKind::Assign => "=",
            TokenKind::PlusAssign => "+=",
            TokenKind::MinusAssign => "-=",
            TokenKind::StarAssign => "*=",
            TokenKind::SlashAssign => "/=",
            TokenKind::PercentAssign => "%=",
            TokenKind::EqEq => "==",
            TokenKind::NotEq => "!=",
            TokenKind::Lt => "<",
            TokenKind::Le => "<=",
            TokenKind::Gt => ">",
            TokenKind::Ge => ">=",
            TokenKind::AndAnd => "&&",
            TokenKind::OrOr => "||",
            TokenKind::Bang => "!",
            TokenKind::Amp => "&",
            TokenKind::Pipe => "|",
            TokenKind::Caret => "^",
            TokenKind::Shl => "<<",
            TokenKind::Shr => ">>",
        }
    }
}

/// The keyword spelled `word`, if it is one.
fn keyword(word: &str) -> Option<TokenKind> {
    Some(match word {
        "fn" => TokenKind::Fn,
        "let" => TokenKind::Let,
        "if" => TokenKind::If,
        "else" => TokenKind::Else,
        "while" => TokenKind::While,
        "for" => TokenKind::For,
        "in" => TokenKind::In,
        "break" => TokenKind::Break,
        "continue" => TokenKind::Continue,
        "return" => TokenKind::Return,
        "true" => TokenKind::True,
        "false" => TokenKind::False,
        _ => return None,
    })
}

/// Lexes a whole source into tokens, ending with [`TokenKind::Eof`].
pub fn tokenize(source: &str) -> Result<Vec<Token>, Diagnostic> {
    let mut lexer = Lexer::new(source);
    let mut tokens = Vec::new();
    loop {
        let token = lexer.next_token()?;
        let done = token.kind == TokenKind::Eof;
        tokens.push(token);
        if done {
            return Ok(tokens);
        }
    }
}

/// A cursor over the source that produces one token per call.
pub struct Lexer<'src> {
    source: &'src str,
    /// Byte offset of the next unread character.
    pos: usize,
    line: u32,
    col: u32,
}

impl<'src> Lexer<'src> {
    /// Starts lexing at the beginning of `source`. A leading byte order
    /// mark is skipped and takes no column, as editors show it.
    pub fn new(source: &'src str) -> Lexer<'src> {
        let pos = if source.starts_with(BYTE_ORDER_MARK) {
            BYTE_ORDER_MARK.len_utf8()
        } else {
            0
        };
        Lexer {
            source,
            pos,
            line: 1,
            col: 1,
        }
    }

    fn peek(&self) -> Option<char> {
        self.source[self.pos..].chars().next()
    }

    fn peek_second(&self) -> Option<char> {
        let mut chars = self.source[self.pos..].chars();
        chars.next();
        chars.next()
    }

    fn here(&self) -> Span {
        Span::new(self.line, self.col)
    }

    /// Consumes one character, keeping the line and column up to date.
    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.pos += c.len_utf8();
        if c == '\n' {
            self.line = self.line.saturating_add(1);
            self.col = 1;
        } else {
            self.col = self.col.saturating_add(1);
        }
        Some(c)
    }

    /// Consumes `c` if it is next.
    fn eat(&mut self, c: char) -> bool {
        if self.peek() == Some(c) {
            self.bump();
            true
        } else {
            false
        }
    }

    fn skip_whitespace_and_comments(&mut self) {
        loop {
            match self.peek() {
                Some(' ' | '\t' | '\r' | '\n') => {
                    self.bump();
                }
                Some('/') if self.peek_second() == Some('/') => {
                    while let Some(c) = self.peek() {
                        if c == '\n' {
                            break;
                        }
                        self.bump();
                    }
                }
                _ => return,
            }
        }
    }

    /// Produces the next token, or [`TokenKind::Eof`] at the end.
    pub fn next_token(&mut self) -> Result<Token, Diagnostic> {
        self.skip_whitespace_and_comments();
        let span = self.here();
        let Some(c) = self.bump() else {
            return Ok(Token {
                kind: TokenKind::Eof,
                span,
            });
        };
        let kind = match c {
            '0'..='9' => self.number(c, span)?,
            'a'..='z' | 'A'..='Z' | '_' => self.word(c),
            '"' => self.string(span)?,
            '(' => TokenKind::LParen,
            ')' => TokenKind::RParen,
            '[' => TokenKind::LBracket,
            ']' => TokenKind::RBracket,
            '{' => TokenKind::LBrace,
            '}' => TokenKind::RBrace,
            ',' => TokenKind::Comma,
            ';' => TokenKind::Semi,
            ':' => TokenKind::Colon,
            '^' => TokenKind::Caret,
            '.' if self.eat('.') => TokenKind::DotDot,
            '+' => self.with_assign(TokenKind::Plus, TokenKind::PlusAssign),
            '*' => self.with_assign(TokenKind::Star, TokenKind::StarAssign),
            '/' => self.with_assign(TokenKind::Slash, TokenKind::SlashAssign),
            '%' => self.with_assign(TokenKind::Percent, TokenKind::PercentAssign),
            '=' => self.with_assign(TokenKind::Assign, TokenKind::EqEq),
            '!' => self.with_assign(TokenKind::Bang, TokenKind::NotEq),
            '-' if self.eat('>') => TokenKind::Arrow,
            '-' => self.with_assign(TokenKind::Minus, TokenKind::MinusAssign),
            '<' if self.eat('<') => TokenKind::Shl,
            '<' => self.with_assign(TokenKind::Lt, TokenKind::Le),
            '>' if self.eat('>') => TokenKind::Shr,
            '>' => self.with_assign(TokenKind::Gt, TokenKind::Ge),
            '&' if self.eat('&') => TokenKind::AndAnd,
            '&' => TokenKind::Amp,
            '|' if self.eat('|') => TokenKind::OrOr,
            '|' => TokenKind::Pipe,
            other => {
                return Err(Diagnostic::new(
                    span,
                    format!("unexpected character '{}'", other.escape_debug()),
                ));
            }
        };
        Ok(Token { kind, span })
    }

    /// `plain`, or `with_eq` if the next character is `=`.
    fn with_assign(&mut self, plain: TokenKind, with_eq: TokenKind) -> TokenKind {
        if self.eat('=') { with_eq } else { plain }
    }

    fn word(&mut self, first: char) -> TokenKind {
        let start = self.pos - first.len_utf8();
        while matches!(self.peek(), Some(c) if c.is_ascii_alphanumeric() || c == '_') {
            self.bump();
        }
        let word = &self.source[start..self.pos];
        keyword(word).unwrap_or_else(|| TokenKind::Ident(word.to_string()))
    }

    /// Consumes digits of `radix` and `_` separators into `digits`.
    fn digits(&mut self, radix: u32, digits: &mut String) {
        while let Some(c) = self.peek() {
            if c.is_digit(radix) {
                digits.push(c);
            } else if c != '_' {
                return;
            }
            self.bump();
        }
    }

    fn number(&mut self, first: char, span: Span) -> Result<TokenKind, Diagnostic> {
        if first == '0' && matches!(self.peek(), Some('x' | 'X')) {
            self.bump();
            let mut digits = String::new();
            self.digits(16, &mut digits);
            if digits.is_empty() {
                return Err(Diagnostic::new(
                    span,
                    "hexadecimal literal has no digits after '0x'",
                ));
            }
            self.reject_suffix()?;
            return int_value(&digits, 16, span);
        }
        let mut text = String::from(first);
        self.digits(10, &mut text);
        let mut is_float = false;
        if self.peek() == Some('.') {
            match self.peek_second() {
                Some(c) if c.is_ascii_digit() => {
                    self.bump();
                    text.push('.');
                    self.digits(10, &mut text);
                    is_float = true;
                }
                // `1..5` is a range: leave the `..` for the next token.
                Some('.') => {}
                _ => {
                    return Err(Diagnostic::new(
                        self.here(),
                        "expected a digit after '.' in a float literal",
                    ));
                }
            }
        }
        if matches!(self.peek(), Some('e' | 'E')) {
            let exp_span = self.here();
            self.bump();
            text.push('e');
            if let Some(sign @ ('+' | '-')) = self.peek() {
                self.bump();
                text.push(sign);
            }
            let before = text.len();
            self.digits(10, &mut text);
            if text.len() == before {
                return Err(Diagnostic::new(
                    exp_span,
                    "float literal has no digits in its exponent",
                ));
            }
            is_float = true;
        }
        self.reject_suffix()?;
        if !is_float {
            return int_value(&text, 10, span);
        }
        match text.parse::<f64>() {
            Ok(value) if value.is_finite() => Ok(TokenKind::Float(value)),
            _ => Err(Diagnostic::new(
                span,
                "float literal does not fit in a 64-bit float",
            )),
        }
    }

    /// A number directly followed by a letter or digit (`12abc`, `0x1g`,
    /// `1.5.`) is one malformed token, not two.
    fn reject_suffix(&self) -> Result<(), Diagnostic> {
        match self.peek() {
            Some(c) if c.is_alphanumeric() || c == '_' => Err(Diagnostic::new(
                self.here(),
                format!("invalid character '{}' in number literal", c.escape_debug()),
            )),
            _ => Ok(()),
        }
    }

    fn string(&mut self, span: Span) -> Result<TokenKind, Diagnostic> {
        let mut value = String::new();
        loop {
            let here = self.here();
            match self.bump() {
                None => return Err(Diagnostic::new(span, "unterminated string literal")),
                Some('"') => return Ok(TokenKind::Str(value)),
                Some('\\') => {
                    let decoded = match self.bump() {
                        Some('n') => '\n',
                        Some('t') => '\t',
                        Some('r') => '\r',
                        Some('\\') => '\\',
                        Some('"') => '"',
                        Some('0') => '\0',
                        None => return Err(Diagnostic::new(span, "unterminated string literal")),
                        Some(other) => {
                            return Err(Diagnostic::new(
                                here,
                                format!("unknown escape sequence '\\{}'", other.escape_debug()),
                            ));
                        }
                    };
                    value.push(decoded);
                }
                Some(c) => value.push(c),
            }
        }
    }
}

/// The value of a run of digits (separators already removed).
fn int_value(digits: &str, radix: u32, span: Span) -> Result<TokenKind, Diagnostic> {
    u64::from_str_radix(digits, radix)
        .map(TokenKind::Int)
        .map_err(|_| Diagnostic::new(span, INT_TOO_LARGE))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(source: &str) -> Vec<TokenKind> {
        tokenize(source)
            .expect("valid tokens")
            .into_iter()
            .map(|t| t.kind)
            .collect()
    }

    fn error(source: &str) -> (u32, u32, String) {
        let d = tokenize(source).expect_err("a lexical error");
        (d.span.line, d.span.col, d.message)
    }

    #[test]
    fn empty_and_blank_input_is_just_eof() {
        assert_eq!(kinds(""), vec![TokenKind::Eof]);
        assert_eq!(kinds("  \n\t// only a comment"), vec![TokenKind::Eof]);
    }

    #[test]
    fn keywords_and_identifiers() {
        use TokenKind::*;
        assert_eq!(
            kinds("fn let if else while for in break continue return true false"),
            vec![
                Fn, Let, If, Else, While, For, In, Break, Continue, Return, True, False, Eof
            ]
        );
        assert_eq!(
            kinds("_x fnord x1 Let"),
            vec![
                Ident("_x".into()),
                Ident("fnord".into()),
                Ident("x1".into()),
                Ident("Let".into()),
                Eof
            ]
        );
    }

    #[test]
    fn operators_take_the_longest_match() {
        use TokenKind::*;
        assert_eq!(
            kinds("+ += - -= -> * *= / /= % %= = == ! != < <= << > >= >> & && | || ^ .."),
            vec![
                Plus,
                PlusAssign,
                Minus,
                MinusAssign,
                Arrow,
                Star,
                StarAssign,
                Slash,
                SlashAssign,
                Percent,
                PercentAssign,
                Assign,
                EqEq,
                Bang,
                NotEq,
                Lt,
                Le,
                Shl,
                Gt,
                Ge,
                Shr,
                Amp,
                AndAnd,
                Pipe,
                OrOr,
                Caret,
                DotDot,
                Eof
            ]
        );
        assert_eq!(
            kinds("()[]{},;:"),
            vec![
                LParen, RParen, LBracket, RBracket, LBrace, RBrace, Comma, Semi, Colon, Eof
            ]
        );
    }

    #[test]
    fn integer_literals() {
        use TokenKind::*;
        assert_eq!(
            kinds("0 42 1_000_000 0x2A 0XfF 0x_1_0 007 1_"),
            vec![
                Int(0),
                Int(42),
                Int(1_000_000),
                Int(42),
                Int(255),
                Int(16),
                Int(7),
                Int(1),
                Eof
            ]
        );
        // The lexer keeps u64 values; the parser applies the i64 range.
        assert_eq!(
            kinds("9223372036854775808 0xFFFFFFFFFFFFFFFF"),
            vec![Int(1 << 63), Int(u64::MAX), Eof]
        );
    }

    #[test]
    fn integer_literal_errors() {
        assert_eq!(
            error("x = 18446744073709551616;"),
            (1, 5, INT_TOO_LARGE.to_string())
        );
        assert_eq!(
            error("0x1_0000_0000_0000_0000"),
            (1, 1, INT_TOO_LARGE.to_string())
        );
        assert_eq!(
            error("0x;"),
            (
                1,
                1,
                "hexadecimal literal has no digits after '0x'".to_string()
            )
        );
        assert_eq!(
            error("12abc"),
            (1, 3, "invalid character 'a' in number literal".to_string())
        );
        assert_eq!(
            error("0x1g"),
            (1, 4, "invalid character 'g' in number literal".to_string())
        );
    }

    #[test]
    fn float_literals() {
        use TokenKind::*;
        assert_eq!(
            kinds("1.5 0.25 1e9 2.5e-3 3.0 1E+2 1_000.5"),
            vec![
                Float(1.5),
                Float(0.25),
                Float(1e9),
                Float(2.5e-3),
                Float(3.0),
                Float(100.0),
                Float(1000.5),
                Eof
            ]
        );
    }

    #[test]
    fn float_literal_errors() {
        assert_eq!(
            error("1."),
            (
                1,
                2,
                "expected a digit after '.' in a float literal".to_string()
            )
        );
        assert_eq!(
            error("1.x"),
            (
                1,
                2,
                "expected a digit after '.' in a float literal".to_string()
            )
        );
        assert_eq!(error(".5"), (1, 1, "unexpected character '.'".to_string()));
        assert_eq!(
            error("1e+"),
            (
                1,
                2,
                "float literal has no digits in its exponent".to_string()
            )
        );
        assert_eq!(
            error("1e999"),
            (
                1,
                1,
                "float literal does not fit in a 64-bit float".to_string()
            )
        );
        assert_eq!(
            error("1.5.2"),
            (1, 4, "unexpected character '.'".to_string())
        );
    }

    #[test]
    fn ranges_are_not_floats() {
        use TokenKind::*;
        assert_eq!(kinds("0..10"), vec![Int(0), DotDot, Int(10), Eof]);
    }

    #[test]
    fn string_literals_and_escapes() {
        assert_eq!(
            kinds(
                r#""a\n\t\r\\\"\0b" "" "multi
line" "héllo""#
            ),
            vec![
                TokenKind::Str("a\n\t\r\\\"\0b".into()),
                TokenKind::Str(String::new()),
                TokenKind::Str("multi\nline".into()),
                TokenKind::Str("héllo".into()),
                TokenKind::Eof
            ]
        );
    }

    #[test]
    fn string_errors() {
        assert_eq!(
            error(r#"let s = "ab\qc";"#),
            (1, 12, "unknown escape sequence '\\q'".to_string())
        );
        assert_eq!(
            error("\n  \"abc"),
            (2, 3, "unterminated string literal".to_string())
        );
        assert_eq!(
            error("\"abc\\"),
            (1, 1, "unterminated string literal".to_string())
        );
    }

    #[test]
    fn unexpected_characters() {
        assert_eq!(error("a @ b"), (1, 3, "unexpected character '@'".into()));
        assert_eq!(error("é"), (1, 1, "unexpected character 'é'".into()));
        assert_eq!(error("x\u{0}"), (1, 2, "unexpected character '\\0'".into()));
    }

    #[test]
    fn positions_count_lines_and_characters() {
        let tokens = tokenize("let x = \"é\";\n\t  y // c\n  z").expect("valid");
        let spans: Vec<(u32, u32)> = tokens.iter().map(|t| (t.span.line, t.span.col)).collect();
        assert_eq!(
            spans,
            vec![
                (1, 1),
                (1, 5),
                (1, 7),
                (1, 9),
                (1, 12),
                (2, 4),
                (3, 3),
                (3, 4)
            ]
        );
    }

    #[test]
    fn a_leading_byte_order_mark_is_skipped() {
        let tokens = tokenize("\u{feff}let x").expect("valid");
        assert_eq!(tokens[0].kind, TokenKind::Let);
        assert_eq!(tokens[0].span, Span::new(1, 1));
        assert_eq!(tokens[1].span, Span::new(1, 5));
        assert_eq!(
            error("x \u{feff}"),
            (1, 3, "unexpected character '\\u{feff}'".into())
        );
    }

    #[test]
    fn eof_repeats() {
        let mut lexer = Lexer::new("x");
        assert!(matches!(
            lexer.next_token().unwrap().kind,
            TokenKind::Ident(_)
        ));
        assert_eq!(lexer.next_token().unwrap().kind, TokenKind::Eof);
        assert_eq!(lexer.next_token().unwrap().kind, TokenKind::Eof);
    }

    #[test]
    fn descriptions_for_messages() {
        assert_eq!(TokenKind::RBrace.describe(), "'}'");
        assert_eq!(TokenKind::Ident("x".into()).describe(), "identifier 'x'");
        assert_eq!(TokenKind::Eof.describe(), "end of file");
        assert_eq!(TokenKind::Int(3).describe(), "integer literal");
    }
}
