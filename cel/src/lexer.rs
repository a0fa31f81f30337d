//! Tokenizer for the CEL grammar.
//!
//! The lexer works on `char`s so that columns in error messages count code
//! points, like cel-go does. It never recurses and never panics: every
//! malformed literal becomes a [`CompileError::Syntax`].

use crate::error::CompileError;

/// A source position, 1-based line and column (in code points).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(crate) struct Pos {
    pub line: u32,
    pub col: u32,
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Tok {
    Ident(String),
    /// Unsigned magnitude of an int literal; the parser applies the sign so
    /// that `-9223372036854775808` is representable.
    Int(u64),
    Uint(u64),
    Double(f64),
    Str(String),
    Bytes(Vec<u8>),
    True,
    False,
    Null,
    In,
    LParen,
    RParen,
    LBracket,
    RBracket,
    LBrace,
    RBrace,
    Dot,
    Comma,
    Colon,
    Question,
    Plus,
    Minus,
    Star,
    Slash,
    Percent,
    Bang,
    EqEq,
    NotEq,
    Lt,
    Le,
    Gt,
    Ge,
    AndAnd,
    OrOr,
    Eof,
}

/// Words the CEL grammar reserves; using them as identifiers is an error.
const RESERVED: &[&str] = &[
    "as",
    "break",
    "const",
    "continue",
    "else",
    "for",
    "function",
    "if",
    "import",
    "let",
    "loop",
    "package",
    "namespace",
    "return",
    "var",
    "void",
    "while",
];

pub(crate) struct Lexer {
    chars: Vec<char>,
    i: usize,
    line: u32,
    col: u32,
}

fn syntax(pos: Pos, msg: impl Into<String>) -> CompileError {
    CompileError::Syntax {
        line: pos.line,
        column: pos.col,
        message: msg.into(),
    }
}

impl Lexer {
    pub(crate) fn new(src: &str) -> Lexer {
        Lexer {
            chars: src.chars().collect(),
            i: 0,
            line: 1,
            col: 1,
        }
    }

    /// Tokenizes the whole input.
    pub(crate) fn tokenize(mut self) -> Result<Vec<(Tok, Pos)>, CompileError> {
        let mut out = Vec::new();
        loop {
            let (t, p) = self.next_token()?;
            let eof = t == Tok::Eof;
            out.push((t, p));
            if eof {
                return Ok(out);
            }
        }
    }

    fn peek(&self, off: usize) -> Option<char> {
        self.chars.get(self.i + off).copied()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.chars.get(self.i).copied()?;
        self.i += 1;
        if c == '\n' {
            self.line += 1;
            self.col = 1;
        } else {
            self.col += 1;
        }
        Some(c)
    }

    fn pos(&self) -> Pos {
        Pos {
            line: self.line,
            col: self.col,
        }
    }

    fn skip_ws(&mut self) {
        loop {
            match self.peek(0) {
                Some(' ' | '\t' | '\n' | '\r' | '\x0c') => {
                    self.bump();
                }
                Some('/') if self.peek(1) == Some('/') => {
                    while let Some(c) = self.peek(0) {
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

    fn next_token(&mut self) -> Result<(Tok, Pos), CompileError> {
        self.skip_ws();
        let pos = self.pos();
        let c = match self.peek(0) {
            None => return Ok((Tok::Eof, pos)),
            Some(c) => c,
        };
        let two = |a: char, b: char| c == a && self.peek(1) == Some(b);
        let tok = if two('=', '=') {
            self.i_skip(2);
            Tok::EqEq
        } else if two('!', '=') {
            self.i_skip(2);
            Tok::NotEq
        } else if two('<', '=') {
            self.i_skip(2);
            Tok::Le
        } else if two('>', '=') {
            self.i_skip(2);
            Tok::Ge
        } else if two('&', '&') {
            self.i_skip(2);
            Tok::AndAnd
        } else if two('|', '|') {
            self.i_skip(2);
            Tok::OrOr
        } else if c.is_ascii_digit()
            || (c == '.' && self.peek(1).is_some_and(|d| d.is_ascii_digit()))
        {
            self.number(pos)?
        } else if c == '"' || c == '\'' {
            self.string(pos, false, false)?
        } else if c.is_ascii_alphabetic() || c == '_' {
            // String prefixes: r, b, rb, br in any case.
            let lower = |o: usize| self.peek(o).map(|c| c.to_ascii_lowercase());
            let q = |o: usize| matches!(self.peek(o), Some('"' | '\''));
            match (lower(0), lower(1)) {
                (Some('r'), _) if q(1) => {
                    self.bump();
                    self.string(pos, true, false)?
                }
                (Some('b'), _) if q(1) => {
                    self.bump();
                    self.string(pos, false, true)?
                }
                (Some('r'), Some('b')) | (Some('b'), Some('r')) if q(2) => {
                    self.bump();
                    self.bump();
                    self.string(pos, true, true)?
                }
                _ => self.ident(pos)?,
            }
        } else {
            self.bump();
            match c {
                '(' => Tok::LParen,
                ')' => Tok::RParen,
                '[' => Tok::LBracket,
                ']' => Tok::RBracket,
                '{' => Tok::LBrace,
                '}' => Tok::RBrace,
                '.' => Tok::Dot,
                ',' => Tok::Comma,
                ':' => Tok::Colon,
                '?' => Tok::Question,
                '+' => Tok::Plus,
                '-' => Tok::Minus,
                '*' => Tok::Star,
                '/' => Tok::Slash,
                '%' => Tok::Percent,
                '!' => Tok::Bang,
                '<' => Tok::Lt,
                '>' => Tok::Gt,
                _ => return Err(syntax(pos, format!("token recognition error at: '{c}'"))),
            }
        };
        Ok((tok, pos))
    }

    fn i_skip(&mut self, n: usize) {
        for _ in 0..n {
            self.bump();
        }
    }

    fn ident(&mut self, pos: Pos) -> Result<Tok, CompileError> {
        let mut s = String::new();
        while let Some(c) = self.peek(0) {
            if c.is_ascii_alphanumeric() || c == '_' {
                s.push(c);
                self.bump();
            } else {
                break;
            }
        }
        Ok(match s.as_str() {
            "true" => Tok::True,
            "false" => Tok::False,
            "null" => Tok::Null,
            "in" => Tok::In,
            w if RESERVED.contains(&w) => {
                return Err(syntax(pos, format!("reserved identifier: {w}")));
            }
            _ => Tok::Ident(s),
        })
    }

    fn number(&mut self, pos: Pos) -> Result<Tok, CompileError> {
        // Hexadecimal integers.
        if self.peek(0) == Some('0') && matches!(self.peek(1), Some('x' | 'X')) {
            self.i_skip(2);
            let mut digits = String::new();
            while let Some(c) = self.peek(0).filter(|c| c.is_ascii_hexdigit()) {
                digits.push(c);
                self.bump();
            }
            let v = u64::from_str_radix(&digits, 16)
                .map_err(|_| syntax(pos, format!("invalid hex literal: 0x{digits}")))?;
            return Ok(self.int_suffix(v));
        }
        let mut text = String::new();
        let mut is_double = false;
        while let Some(c) = self.peek(0).filter(|c| c.is_ascii_digit()) {
            text.push(c);
            self.bump();
        }
        if self.peek(0) == Some('.') && self.peek(1).is_some_and(|c| c.is_ascii_digit()) {
            is_double = true;
            text.push('.');
            self.bump();
            while let Some(c) = self.peek(0).filter(|c| c.is_ascii_digit()) {
                text.push(c);
                self.bump();
            }
        }
        if matches!(self.peek(0), Some('e' | 'E')) {
            let sign = matches!(self.peek(1), Some('+' | '-'));
            let digit_at = if sign { 2 } else { 1 };
            if self.peek(digit_at).is_some_and(|c| c.is_ascii_digit()) {
                is_double = true;
                text.push('e');
                self.bump();
                if sign {
                    text.extend(self.bump());
                }
                while let Some(c) = self.peek(0).filter(|c| c.is_ascii_digit()) {
                    text.push(c);
                    self.bump();
                }
            }
        }
        if is_double {
            let v: f64 = text
                .parse()
                .map_err(|_| syntax(pos, format!("invalid double literal: {text}")))?;
            return Ok(Tok::Double(v));
        }
        let v: u64 = text
            .parse()
            .map_err(|_| syntax(pos, format!("invalid int literal: {text}")))?;
        Ok(self.int_suffix(v))
    }

    fn int_suffix(&mut self, v: u64) -> Tok {
        if matches!(self.peek(0), Some('u' | 'U')) {
            self.bump();
            Tok::Uint(v)
        } else {
            Tok::Int(v)
        }
    }

    /// Lexes a quoted literal; the cursor is on the opening quote.
    fn string(&mut self, pos: Pos, raw: bool, bytes: bool) -> Result<Tok, CompileError> {
        let q = self.bump().unwrap_or('"');
        let triple = self.peek(0) == Some(q) && self.peek(1) == Some(q);
        if triple {
            self.i_skip(2);
        }
        let mut out: Vec<u8> = Vec::new();
        let unterminated = || syntax(pos, "unterminated string literal");
        loop {
            let c = self.peek(0).ok_or_else(unterminated)?;
            if c == q {
                if !triple {
                    self.bump();
                    break;
                }
                if self.peek(1) == Some(q) && self.peek(2) == Some(q) {
                    self.i_skip(3);
                    break;
                }
            }
            if !triple && (c == '\n' || c == '\r') {
                return Err(unterminated());
            }
            self.bump();
            if c == '\\' && !raw {
                self.escape(pos, bytes, &mut out)?;
            } else if c == '\\' {
                // Raw strings keep the backslash, but an escaped quote does
                // not terminate the literal.
                out.push(b'\\');
                if self.peek(0) == Some(q) && !triple {
                    self.bump();
                    push_char(&mut out, q);
                }
            } else {
                push_char(&mut out, c);
            }
        }
        if bytes {
            Ok(Tok::Bytes(out))
        } else {
            String::from_utf8(out)
                .map(Tok::Str)
                .map_err(|_| syntax(pos, "invalid UTF-8 in string literal"))
        }
    }

    fn escape(&mut self, pos: Pos, bytes: bool, out: &mut Vec<u8>) -> Result<(), CompileError> {
        let bad = |m: &str| syntax(pos, format!("invalid escape sequence: {m}"));
        let c = self.bump().ok_or_else(|| bad("\\ at end of input"))?;
        let simple = match c {
            'a' => Some(0x07u8),
            'b' => Some(0x08),
            'f' => Some(0x0c),
            'n' => Some(b'\n'),
            'r' => Some(b'\r'),
            't' => Some(b'\t'),
            'v' => Some(0x0b),
            '\\' => Some(b'\\'),
            '\'' => Some(b'\''),
            '"' => Some(b'"'),
            '`' => Some(b'`'),
            '?' => Some(b'?'),
            _ => None,
        };
        if let Some(b) = simple {
            out.push(b);
            return Ok(());
        }
        let (digits, radix) = match c {
            'x' | 'X' => (2, 16),
            'u' => (4, 16),
            'U' => (8, 16),
            '0'..='3' => (2, 8),
            _ => return Err(bad(&format!("\\{c}"))),
        };
        let mut v: u32 = if radix == 8 { c as u32 - '0' as u32 } else { 0 };
        for _ in 0..digits {
            let d = self
                .bump()
                .and_then(|d| d.to_digit(radix))
                .ok_or_else(|| bad(&format!("\\{c}")))?;
            v = v * radix + d;
        }
        let byte_escape = matches!(c, 'x' | 'X' | '0'..='3');
        if bytes && byte_escape {
            // In bytes literals \x and octal escapes denote raw octets.
            out.push(v as u8);
            return Ok(());
        }
        let ch = char::from_u32(v).ok_or_else(|| bad("invalid code point"))?;
        push_char(out, ch);
        Ok(())
    }
}

fn push_char(out: &mut Vec<u8>, c: char) {
    let mut buf = [0u8; 4];
    out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(s: &str) -> Vec<Tok> {
        Lexer::new(s)
            .tokenize()
            .unwrap()
            .into_iter()
            .map(|t| t.0)
            .collect()
    }

    #[test]
    fn literals() {
        assert_eq!(
            toks("0x1F 7u 1.5 .5 2e3"),
            vec![
                Tok::Int(31),
                Tok::Uint(7),
                Tok::Double(1.5),
                Tok::Double(0.5),
                Tok::Double(2000.0),
                Tok::Eof
            ]
        );
        assert_eq!(
            toks(r#"'a\n\x41\101\u00e9' r'\n' b'\xff'"#),
            vec![
                Tok::Str("a\nAAé".into()),
                Tok::Str("\\n".into()),
                Tok::Bytes(vec![0xff]),
                Tok::Eof
            ]
        );
        assert_eq!(
            toks("'''a\n'b'''"),
            vec![Tok::Str("a\n'b".into()), Tok::Eof]
        );
    }

    #[test]
    fn errors() {
        assert!(Lexer::new("'abc").tokenize().is_err());
        assert!(Lexer::new("'\\q'").tokenize().is_err());
        assert!(Lexer::new("#").tokenize().is_err());
        assert!(Lexer::new("99999999999999999999").tokenize().is_err());
        assert!(Lexer::new("while").tokenize().is_err());
        assert!(Lexer::new("'\\uD800'").tokenize().is_err());
    }
}
