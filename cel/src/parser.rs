//! Recursive-descent parser for CEL with macro expansion.
//!
//! Two independent limits keep it (and every later tree walk) from
//! overflowing the stack on hostile input: the parser's own recursion depth
//! and the depth of the tree it builds (long left-associative chains such as
//! `a+a+a+...` nest without parser recursion). `&&`/`||` chains are flattened
//! into n-ary nodes, so they do not count against the tree depth.

use std::sync::Arc;

use crate::ast::{BinaryOp, Expr, ExprKind, Literal, MacroKind, UnaryOp};
use crate::error::CompileError;
use crate::lexer::{Lexer, Pos, Tok};

/// Maximum nesting of the parse (brackets, parentheses, call arguments) and
/// of the resulting tree. cel-go's parser allows 250; we use a lower bound
/// because parser, checker and evaluator all recurse along the tree and the
/// worst case must fit comfortably in a default 2 MiB thread stack even in
/// unoptimized builds (measured: about 0.8 MiB for 50 nested parentheses in
/// a debug build, far less in release). Real selectors nest a handful deep.
pub const MAX_RECURSION_DEPTH: usize = 50;

pub(crate) fn parse(src: &str) -> Result<Expr, CompileError> {
    let tokens = Lexer::new(src).tokenize()?;
    let mut p = Parser {
        tokens,
        i: 0,
        rec: 0,
    };
    let e = p.expr()?;
    match p.peek() {
        Tok::Eof => Ok(e),
        t => Err(p.err_here(format!("mismatched input {}", describe(t)))),
    }
}

fn describe(t: &Tok) -> String {
    match t {
        Tok::Eof => "<EOF>".to_string(),
        Tok::Ident(s) => format!("'{s}'"),
        other => format!("{other:?}"),
    }
}

/// Depth of a node given its direct children; used to bound the tree depth.
fn depth_of(kind: &ExprKind) -> usize {
    let mut d = 0usize;
    let mut see = |e: &Expr| d = d.max(e.depth_hint());
    match kind {
        ExprKind::Literal(_) | ExprKind::Ident(_) => {}
        ExprKind::Select { operand, .. } | ExprKind::Has { operand, .. } => see(operand),
        ExprKind::Index { operand, index, .. } => {
            see(operand);
            see(index);
        }
        ExprKind::RawCall { target, args, .. } => {
            if let Some(t) = target {
                see(t);
            }
            args.iter().for_each(&mut see);
        }
        ExprKind::Call { args, .. } => args.iter().for_each(&mut see),
        ExprKind::Unary(_, a) => see(a),
        ExprKind::Binary(_, a, b) => {
            see(a);
            see(b);
        }
        ExprKind::Logical { operands, .. } => operands.iter().for_each(&mut see),
        ExprKind::Cond(a, b, c) => {
            see(a);
            see(b);
            see(c);
        }
        ExprKind::List(items) => items.iter().for_each(|(e, _)| see(e)),
        ExprKind::Map(items) => items.iter().for_each(|(k, v, _)| {
            see(k);
            see(v)
        }),
        ExprKind::Comprehension {
            range,
            pred,
            transform,
            ..
        } => {
            see(range);
            if let Some(p) = pred {
                see(p);
            }
            if let Some(t) = transform {
                see(t);
            }
        }
        ExprKind::Bind { init, body, .. } => {
            see(init);
            see(body);
        }
    }
    d + 1
}

impl Expr {
    /// Cached tree depth (computed at construction).
    pub(crate) fn depth_hint(&self) -> usize {
        self.depth as usize
    }
}

struct Parser {
    tokens: Vec<(Tok, Pos)>,
    i: usize,
    rec: usize,
}

impl Parser {
    fn peek(&self) -> &Tok {
        self.tokens.get(self.i).map(|t| &t.0).unwrap_or(&Tok::Eof)
    }

    fn pos(&self) -> Pos {
        self.tokens
            .get(self.i)
            .or_else(|| self.tokens.last())
            .map(|t| t.1)
            .unwrap_or_default()
    }

    fn advance(&mut self) -> Tok {
        let t = self.peek().clone();
        if self.i < self.tokens.len() {
            self.i += 1;
        }
        t
    }

    fn eat(&mut self, t: &Tok) -> bool {
        if self.peek() == t {
            self.advance();
            true
        } else {
            false
        }
    }

    fn expect(&mut self, t: &Tok, what: &str) -> Result<(), CompileError> {
        if self.eat(t) {
            Ok(())
        } else {
            let found = describe(self.peek());
            Err(self.err_here(format!("expected {what}, found {found}")))
        }
    }

    fn err_here(&self, message: String) -> CompileError {
        let p = self.pos();
        CompileError::Syntax {
            line: p.line,
            column: p.col,
            message,
        }
    }

    fn err_at(pos: Pos, message: impl Into<String>) -> CompileError {
        CompileError::Syntax {
            line: pos.line,
            column: pos.col,
            message: message.into(),
        }
    }

    /// Builds a node, enforcing the tree-depth limit.
    fn mk(&self, kind: ExprKind, pos: Pos) -> Result<Expr, CompileError> {
        let depth = depth_of(&kind);
        if depth > MAX_RECURSION_DEPTH {
            return Err(CompileError::TooDeep {
                line: pos.line,
                column: pos.col,
                max: MAX_RECURSION_DEPTH,
            });
        }
        Ok(Expr {
            kind,
            pos,
            depth: depth as u32,
        })
    }

    fn expr(&mut self) -> Result<Expr, CompileError> {
        self.rec += 1;
        if self.rec > MAX_RECURSION_DEPTH {
            let p = self.pos();
            return Err(CompileError::TooDeep {
                line: p.line,
                column: p.col,
                max: MAX_RECURSION_DEPTH,
            });
        }
        let r = self.conditional();
        self.rec -= 1;
        r
    }

    fn conditional(&mut self) -> Result<Expr, CompileError> {
        let pos = self.pos();
        let c = self.binary(1)?;
        if !self.eat(&Tok::Question) {
            return Ok(c);
        }
        let t = self.binary(1)?;
        self.expect(&Tok::Colon, "':'")?;
        let f = self.expr()?;
        self.mk(ExprKind::Cond(Box::new(c), Box::new(t), Box::new(f)), pos)
    }

    /// Precedence climbing over all binary operators. A single function
    /// (instead of one per precedence level) keeps the parser's stack use per
    /// nesting level small. Operators at the same level associate left;
    /// `&&`/`||` chains are collected into one n-ary node.
    fn binary(&mut self, min_prec: u8) -> Result<Expr, CompileError> {
        let mut lhs = self.unary()?;
        loop {
            let (prec, op) = match self.peek() {
                Tok::OrOr => (1, None),
                Tok::AndAnd => (2, None),
                Tok::EqEq => (3, Some(BinaryOp::Eq)),
                Tok::NotEq => (3, Some(BinaryOp::Ne)),
                Tok::Lt => (3, Some(BinaryOp::Lt)),
                Tok::Le => (3, Some(BinaryOp::Le)),
                Tok::Gt => (3, Some(BinaryOp::Gt)),
                Tok::Ge => (3, Some(BinaryOp::Ge)),
                Tok::In => (3, Some(BinaryOp::In)),
                Tok::Plus => (4, Some(BinaryOp::Add)),
                Tok::Minus => (4, Some(BinaryOp::Sub)),
                Tok::Star => (5, Some(BinaryOp::Mul)),
                Tok::Slash => (5, Some(BinaryOp::Div)),
                Tok::Percent => (5, Some(BinaryOp::Rem)),
                _ => return Ok(lhs),
            };
            if prec < min_prec {
                return Ok(lhs);
            }
            let pos = self.pos();
            self.advance();
            let rhs = self.binary(prec + 1)?;
            lhs = match op {
                Some(op) => self.mk(ExprKind::Binary(op, Box::new(lhs), Box::new(rhs)), pos)?,
                None => self.logical(prec == 2, lhs, rhs, pos)?,
            };
        }
    }

    /// Appends to an existing chain of the same operator or starts one.
    fn logical(&self, is_and: bool, lhs: Expr, rhs: Expr, pos: Pos) -> Result<Expr, CompileError> {
        match lhs.kind {
            ExprKind::Logical {
                is_and: lhs_and,
                mut operands,
            } if lhs_and == is_and => {
                operands.push(rhs);
                self.mk(ExprKind::Logical { is_and, operands }, lhs.pos)
            }
            kind => {
                let lhs = Expr { kind, ..lhs };
                self.mk(
                    ExprKind::Logical {
                        is_and,
                        operands: vec![lhs, rhs],
                    },
                    pos,
                )
            }
        }
    }

    fn unary(&mut self) -> Result<Expr, CompileError> {
        let mut ops = Vec::new();
        loop {
            match self.peek() {
                Tok::Bang => ops.push((UnaryOp::Not, self.pos())),
                Tok::Minus => ops.push((UnaryOp::Neg, self.pos())),
                _ => break,
            }
            self.advance();
            if ops.len() > MAX_RECURSION_DEPTH {
                let p = self.pos();
                return Err(CompileError::TooDeep {
                    line: p.line,
                    column: p.col,
                    max: MAX_RECURSION_DEPTH,
                });
            }
        }
        // A minus directly before an int literal negates the literal so that
        // i64::MIN can be written.
        let mut e = match (ops.last(), self.peek().clone()) {
            (Some((UnaryOp::Neg, pos)), Tok::Int(v)) if self.next_is_not_member() => {
                let pos = *pos;
                self.advance();
                ops.pop();
                let n = if v == 1u64 << 63 {
                    i64::MIN
                } else {
                    i64::try_from(v)
                        .map(|x| -x)
                        .map_err(|_| Self::err_at(pos, format!("invalid int literal: -{v}")))?
                };
                self.mk(ExprKind::Literal(Literal::Int(n)), pos)?
            }
            _ => self.member()?,
        };
        while let Some((op, pos)) = ops.pop() {
            e = self.mk(ExprKind::Unary(op, Box::new(e)), pos)?;
        }
        Ok(e)
    }

    /// True when the token after the current one does not start a member
    /// suffix, so `-1.foo()` is not folded into a literal first.
    fn next_is_not_member(&self) -> bool {
        !matches!(
            self.tokens.get(self.i + 1).map(|t| &t.0),
            Some(Tok::Dot | Tok::LBracket)
        )
    }

    fn member(&mut self) -> Result<Expr, CompileError> {
        let mut e = self.primary()?;
        loop {
            let pos = self.pos();
            if self.eat(&Tok::Dot) {
                let optional = self.eat(&Tok::Question);
                let name = match self.advance() {
                    Tok::Ident(s) => s,
                    t => {
                        return Err(Self::err_at(
                            pos,
                            format!("expected field name after '.', found {}", describe(&t)),
                        ))
                    }
                };
                if !optional && self.peek() == &Tok::LParen {
                    self.advance();
                    let args = self.args(&Tok::RParen)?;
                    e = self.receiver_call(e, name, args, pos)?;
                } else {
                    e = self.mk(
                        ExprKind::Select {
                            operand: Box::new(e),
                            field: name,
                            optional,
                        },
                        pos,
                    )?;
                }
            } else if self.eat(&Tok::LBracket) {
                let optional = self.eat(&Tok::Question);
                let index = self.expr()?;
                self.expect(&Tok::RBracket, "']'")?;
                e = self.mk(
                    ExprKind::Index {
                        operand: Box::new(e),
                        index: Box::new(index),
                        optional,
                    },
                    pos,
                )?;
            } else {
                return Ok(e);
            }
        }
    }

    /// Comma separated expressions up to `close` (trailing comma allowed).
    fn args(&mut self, close: &Tok) -> Result<Vec<Expr>, CompileError> {
        let mut out = Vec::new();
        if self.eat(close) {
            return Ok(out);
        }
        loop {
            out.push(self.expr()?);
            if self.eat(close) {
                return Ok(out);
            }
            self.expect(&Tok::Comma, "','")?;
            if self.eat(close) {
                return Ok(out);
            }
        }
    }

    fn receiver_call(
        &self,
        target: Expr,
        name: String,
        mut args: Vec<Expr>,
        pos: Pos,
    ) -> Result<Expr, CompileError> {
        let kind = match (name.as_str(), args.len()) {
            ("all", 2) => Some(MacroKind::All),
            ("exists", 2) => Some(MacroKind::Exists),
            ("exists_one", 2) => Some(MacroKind::ExistsOne),
            ("map", 2 | 3) => Some(MacroKind::Map),
            ("filter", 2) => Some(MacroKind::Filter),
            _ => None,
        };
        if let Some(kind) = kind {
            let var = match &args[0].kind {
                ExprKind::Ident(v) => v.clone(),
                _ => return Err(Self::err_at(args[0].pos, "argument must be a simple name")),
            };
            let last = args.pop().map(Box::new);
            let (pred, transform) = match (kind, args.len()) {
                (MacroKind::Map, 1) => (None, last),
                (MacroKind::Map, _) => (args.pop().map(Box::new), last),
                _ => (last, None),
            };
            return self.mk(
                ExprKind::Comprehension {
                    kind,
                    range: Box::new(target),
                    var,
                    pred,
                    transform,
                },
                pos,
            );
        }
        if name == "bind"
            && args.len() == 3
            && matches!(&target.kind, ExprKind::Ident(n) if n == "cel")
        {
            let var = match &args[0].kind {
                ExprKind::Ident(v) => v.clone(),
                _ => {
                    return Err(Self::err_at(
                        args[0].pos,
                        "cel.bind() variable name must be a simple identifier",
                    ))
                }
            };
            let body = args.pop().map(Box::new);
            let init = args.pop().map(Box::new);
            if let (Some(init), Some(body)) = (init, body) {
                return self.mk(ExprKind::Bind { var, init, body }, pos);
            }
        }
        self.mk(
            ExprKind::RawCall {
                target: Some(Box::new(target)),
                name,
                args,
            },
            pos,
        )
    }

    fn primary(&mut self) -> Result<Expr, CompileError> {
        let pos = self.pos();
        let lit = |l| ExprKind::Literal(l);
        let kind = match self.advance() {
            Tok::Int(v) => {
                lit(Literal::Int(i64::try_from(v).map_err(|_| {
                    Self::err_at(pos, format!("invalid int literal: {v}"))
                })?))
            }
            Tok::Uint(v) => lit(Literal::Uint(v)),
            Tok::Double(v) => lit(Literal::Double(v)),
            Tok::Str(s) => lit(Literal::String(Arc::from(s))),
            Tok::Bytes(b) => lit(Literal::Bytes(Arc::from(b))),
            Tok::True => lit(Literal::Bool(true)),
            Tok::False => lit(Literal::Bool(false)),
            Tok::Null => lit(Literal::Null),
            Tok::LParen => {
                let e = self.expr()?;
                self.expect(&Tok::RParen, "')'")?;
                return Ok(e);
            }
            Tok::LBracket => self.list_literal()?,
            Tok::LBrace => self.map_literal()?,
            Tok::Dot => match self.advance() {
                // Leading-dot (root-scoped) identifier: same as plain here.
                Tok::Ident(name) => return self.ident_or_call(name, pos),
                t => {
                    return Err(Self::err_at(
                        pos,
                        format!("unexpected {} after '.'", describe(&t)),
                    ))
                }
            },
            Tok::Ident(name) => return self.ident_or_call(name, pos),
            t => return Err(Self::err_at(pos, format!("unexpected {}", describe(&t)))),
        };
        self.mk(kind, pos)
    }

    fn list_literal(&mut self) -> Result<ExprKind, CompileError> {
        let mut items = Vec::new();
        if !self.eat(&Tok::RBracket) {
            loop {
                let optional = self.eat(&Tok::Question);
                items.push((self.expr()?, optional));
                if self.eat(&Tok::RBracket) {
                    break;
                }
                self.expect(&Tok::Comma, "',' or ']'")?;
                if self.eat(&Tok::RBracket) {
                    break;
                }
            }
        }
        Ok(ExprKind::List(items))
    }

    fn map_literal(&mut self) -> Result<ExprKind, CompileError> {
        let mut items = Vec::new();
        if !self.eat(&Tok::RBrace) {
            loop {
                let optional = self.eat(&Tok::Question);
                let k = self.expr()?;
                self.expect(&Tok::Colon, "':'")?;
                let v = self.expr()?;
                items.push((k, v, optional));
                if self.eat(&Tok::RBrace) {
                    break;
                }
                self.expect(&Tok::Comma, "',' or '}'")?;
                if self.eat(&Tok::RBrace) {
                    break;
                }
            }
        }
        Ok(ExprKind::Map(items))
    }

    fn ident_or_call(&mut self, name: String, pos: Pos) -> Result<Expr, CompileError> {
        if self.peek() == &Tok::LBrace {
            return Err(self.err_here("message construction is not supported".to_string()));
        }
        if !self.eat(&Tok::LParen) {
            return self.mk(ExprKind::Ident(name), pos);
        }
        let mut args = self.args(&Tok::RParen)?;
        if name == "has" {
            if args.len() != 1 {
                return Err(Self::err_at(pos, "invalid argument to has() macro"));
            }
            let arg = args.pop();
            return match arg.map(|a| a.kind) {
                Some(ExprKind::Select {
                    operand,
                    field,
                    optional: false,
                }) => self.mk(ExprKind::Has { operand, field }, pos),
                _ => Err(Self::err_at(pos, "invalid argument to has() macro")),
            };
        }
        self.mk(
            ExprKind::RawCall {
                target: None,
                name,
                args,
            },
            pos,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_limits() {
        assert!(parse("a.b[1].c(2, 3) ? -1 : !x").is_ok());
        assert!(parse("1 +").is_err());
        assert!(parse(&"(".repeat(10_000)).is_err());
        assert!(parse(&"!".repeat(10_000)).is_err());
        assert!(parse(&"-".repeat(10_000)).is_err());
        let chain = vec!["1"; 3000].join(" + ");
        assert!(matches!(parse(&chain), Err(CompileError::TooDeep { .. })));
        let ors = vec!["true"; 3000].join(" || ");
        assert!(parse(&ors).is_ok());
        assert!(parse("-9223372036854775808").is_ok());
        assert!(parse("9223372036854775808").is_err());
        assert!(parse("x.all(1, true)").is_err());
        assert!(parse("has(x)").is_err());
        assert!(parse("Foo{a: 1}").is_err());
    }
}
