//! Error types. Messages follow cel-go / Kubernetes wording where one exists
//! so that users see the same text the API server would show.

/// Why an expression could not be compiled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CompileError {
    /// The source exceeds [`crate::MAX_EXPRESSION_LEN`] bytes.
    #[error("expression too long ({len} bytes, maximum {max})")]
    TooLong { len: usize, max: usize },
    /// Lexical or grammatical error.
    #[error("syntax error at {line}:{column}: {message}")]
    Syntax {
        line: u32,
        column: u32,
        message: String,
    },
    /// Nesting exceeds the parser's recursion limit.
    #[error(
        "syntax error at {line}:{column}: expression recursion limit exceeded (max depth {max})"
    )]
    TooDeep { line: u32, column: u32, max: usize },
    /// An identifier that is neither `device` nor a bound variable.
    #[error("{line}:{column}: undeclared reference to '{name}'")]
    UndeclaredReference {
        name: String,
        line: u32,
        column: u32,
    },
    /// A function or method this implementation does not know (with that arity).
    #[error("{line}:{column}: undeclared reference to function '{name}' with {arity} argument(s){}", if *.receiver { " (receiver call)" } else { "" })]
    UnknownFunction {
        name: String,
        arity: usize,
        receiver: bool,
        line: u32,
        column: u32,
    },
    /// A statically detectable type problem, e.g. `device.nosuchfield`.
    #[error("{line}:{column}: {message}")]
    Type {
        message: String,
        line: u32,
        column: u32,
    },
    /// The expression's static type is known and not bool.
    #[error("must evaluate to bool or the unknown type, not {found}")]
    NotBool { found: String },
}

/// Why an evaluation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EvalError {
    /// The runtime cost limit was reached; evaluation was aborted.
    #[error("operation cancelled: actual cost limit exceeded")]
    CostLimitExceeded,
    /// Map lookup of a key that is not present.
    #[error("no such key: {0}")]
    NoSuchKey(String),
    /// An operator or function was applied to argument types it does not support.
    #[error("no such overload: {0}")]
    NoSuchOverload(String),
    /// Signed or unsigned integer arithmetic overflowed.
    #[error("integer overflow")]
    IntegerOverflow,
    /// `x / 0` on integers.
    #[error("division by zero")]
    DivisionByZero,
    /// `x % 0` on integers.
    #[error("modulus by zero")]
    ModulusByZero,
    /// The expression produced a value that is not a bool.
    #[error("CEL result of type {0} could not be converted to bool")]
    NotBool(String),
    /// Any other runtime error (index out of range, bad conversion, ...).
    #[error("{0}")]
    Other(String),
}

impl EvalError {
    /// Fatal errors must not be absorbed by `||`, `&&`, `all` or `exists`:
    /// the cost limit is a hard stop, not a CEL error value.
    pub(crate) fn is_fatal(&self) -> bool {
        matches!(self, EvalError::CostLimitExceeded)
    }
}
