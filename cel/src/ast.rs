//! Abstract syntax tree. Macros are expanded by the parser into dedicated
//! nodes (instead of cel-go's generic comprehension) because that keeps the
//! evaluator simple and makes per-iteration cost accounting obvious.

use std::sync::Arc;

use crate::functions::Func;
use crate::lexer::Pos;

#[derive(Clone, Debug)]
pub(crate) struct Expr {
    pub kind: ExprKind,
    pub pos: Pos,
    /// Tree depth of this node, bounded by the parser.
    pub depth: u32,
}

#[derive(Clone, Debug)]
pub(crate) enum Literal {
    Null,
    Bool(bool),
    Int(i64),
    Uint(u64),
    Double(f64),
    String(Arc<str>),
    Bytes(Arc<[u8]>),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum UnaryOp {
    Not,
    Neg,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BinaryOp {
    Add,
    Sub,
    Mul,
    Div,
    Rem,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    In,
}

impl BinaryOp {
    pub(crate) fn symbol(self) -> &'static str {
        match self {
            BinaryOp::Add => "_+_",
            BinaryOp::Sub => "_-_",
            BinaryOp::Mul => "_*_",
            BinaryOp::Div => "_/_",
            BinaryOp::Rem => "_%_",
            BinaryOp::Eq => "_==_",
            BinaryOp::Ne => "_!=_",
            BinaryOp::Lt => "_<_",
            BinaryOp::Le => "_<=_",
            BinaryOp::Gt => "_>_",
            BinaryOp::Ge => "_>=_",
            BinaryOp::In => "@in",
        }
    }
}

/// The comprehension macros.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MacroKind {
    All,
    Exists,
    ExistsOne,
    /// `map(x, t)`; with a filter when `filter` is set (`map(x, p, t)`).
    Map,
    Filter,
}

#[derive(Clone, Debug)]
pub(crate) enum ExprKind {
    Literal(Literal),
    Ident(String),
    Select {
        operand: Box<Expr>,
        field: String,
        optional: bool,
    },
    Index {
        operand: Box<Expr>,
        index: Box<Expr>,
        optional: bool,
    },
    /// A call as written; the checker replaces it with [`ExprKind::Call`].
    RawCall {
        target: Option<Box<Expr>>,
        name: String,
        args: Vec<Expr>,
    },
    /// A resolved call. For receiver-style calls the receiver is `args[0]`.
    Call {
        func: Func,
        args: Vec<Expr>,
    },
    Unary(UnaryOp, Box<Expr>),
    Binary(BinaryOp, Box<Expr>, Box<Expr>),
    /// n-ary `&&` (`is_and`) or `||`: flat so long chains do not nest deeply.
    Logical {
        is_and: bool,
        operands: Vec<Expr>,
    },
    Cond(Box<Expr>, Box<Expr>, Box<Expr>),
    /// List literal; the flag marks `?e` optional elements.
    List(Vec<(Expr, bool)>),
    /// Map literal; the flag marks `?k: v` optional entries.
    Map(Vec<(Expr, Expr, bool)>),
    Has {
        operand: Box<Expr>,
        field: String,
    },
    Comprehension {
        kind: MacroKind,
        range: Box<Expr>,
        var: String,
        /// Predicate for all/exists/exists_one/filter, filter for map(x,p,t).
        pred: Option<Box<Expr>>,
        /// Transform for map.
        transform: Option<Box<Expr>>,
    },
    Bind {
        var: String,
        init: Box<Expr>,
        body: Box<Expr>,
    },
}
