//! The function table and runtime dispatch.
//!
//! Every callable name is listed once in [`SIGNATURES`]; the checker refuses
//! anything else, so an unsupported function is always a compile error and
//! never a silent runtime surprise.

mod conv;
mod k8s;
mod lists;
mod strings;

use std::collections::HashMap;

use regex::Regex;

use crate::cost::Cost;
use crate::error::EvalError;
use crate::types::Ty;
use crate::value::{no_overload, Value};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Func {
    // Standard library.
    Size,
    Int,
    Uint,
    Double,
    String,
    Bool,
    Bytes,
    Dyn,
    Matches,
    StartsWith,
    EndsWith,
    Contains,
    // Strings extension.
    CharAt,
    IndexOf,
    LastIndexOf,
    LowerAscii,
    UpperAscii,
    Replace,
    Split,
    Substring,
    Trim,
    Join,
    Reverse,
    Quote,
    // Lists extension and Kubernetes list library.
    IsSorted,
    Sum,
    Min,
    Max,
    Slice,
    Flatten,
    Distinct,
    Sort,
    Range,
    SetsContains,
    SetsEquivalent,
    SetsIntersects,
    // Optionals.
    OptionalOf,
    OptionalNone,
    OptionalOfNonZero,
    HasValue,
    Value,
    OrValue,
    Or,
    // Kubernetes quantity and semver libraries.
    Quantity,
    IsQuantity,
    Semver,
    IsSemver,
    IsLessThan,
    IsGreaterThan,
    CompareTo,
    Add,
    Sub,
    AsInteger,
    IsInteger,
    AsApproximateFloat,
    Sign,
    Major,
    Minor,
    Patch,
}

/// One callable form: name, receiver style, argument count range (without
/// the receiver), the function, and its static result type (`Dyn` when it
/// depends on the arguments).
pub(crate) struct Signature {
    pub name: &'static str,
    pub receiver: bool,
    pub min: usize,
    pub max: usize,
    pub func: Func,
    pub ret: Ty,
}

macro_rules! sig {
    ($name:literal, $recv:literal, $min:literal, $max:literal, $func:ident, $ret:expr) => {
        Signature {
            name: $name,
            receiver: $recv,
            min: $min,
            max: $max,
            func: Func::$func,
            ret: $ret,
        }
    };
}

pub(crate) const SIGNATURES: &[Signature] = &[
    sig!("size", false, 1, 1, Size, Ty::Int),
    sig!("size", true, 0, 0, Size, Ty::Int),
    sig!("int", false, 1, 1, Int, Ty::Int),
    sig!("uint", false, 1, 1, Uint, Ty::Uint),
    sig!("double", false, 1, 1, Double, Ty::Double),
    sig!("string", false, 1, 1, String, Ty::String),
    sig!("bool", false, 1, 1, Bool, Ty::Bool),
    sig!("bytes", false, 1, 1, Bytes, Ty::Bytes),
    sig!("dyn", false, 1, 1, Dyn, Ty::Dyn),
    sig!("matches", false, 2, 2, Matches, Ty::Bool),
    sig!("matches", true, 1, 1, Matches, Ty::Bool),
    sig!("startsWith", true, 1, 1, StartsWith, Ty::Bool),
    sig!("endsWith", true, 1, 1, EndsWith, Ty::Bool),
    sig!("contains", true, 1, 1, Contains, Ty::Bool),
    sig!("charAt", true, 1, 1, CharAt, Ty::String),
    sig!("indexOf", true, 1, 2, IndexOf, Ty::Int),
    sig!("lastIndexOf", true, 1, 2, LastIndexOf, Ty::Int),
    sig!("lowerAscii", true, 0, 0, LowerAscii, Ty::String),
    sig!("upperAscii", true, 0, 0, UpperAscii, Ty::String),
    sig!("replace", true, 2, 3, Replace, Ty::String),
    sig!("split", true, 1, 2, Split, Ty::List),
    sig!("substring", true, 1, 2, Substring, Ty::String),
    sig!("trim", true, 0, 0, Trim, Ty::String),
    sig!("join", true, 0, 1, Join, Ty::String),
    sig!("reverse", true, 0, 0, Reverse, Ty::Dyn),
    sig!("strings.quote", false, 1, 1, Quote, Ty::String),
    sig!("isSorted", true, 0, 0, IsSorted, Ty::Bool),
    sig!("sum", true, 0, 0, Sum, Ty::Dyn),
    sig!("min", true, 0, 0, Min, Ty::Dyn),
    sig!("max", true, 0, 0, Max, Ty::Dyn),
    sig!("slice", true, 2, 2, Slice, Ty::List),
    sig!("flatten", true, 0, 1, Flatten, Ty::List),
    sig!("distinct", true, 0, 0, Distinct, Ty::List),
    sig!("sort", true, 0, 0, Sort, Ty::List),
    sig!("lists.range", false, 1, 1, Range, Ty::List),
    sig!("sets.contains", false, 2, 2, SetsContains, Ty::Bool),
    sig!("sets.equivalent", false, 2, 2, SetsEquivalent, Ty::Bool),
    sig!("sets.intersects", false, 2, 2, SetsIntersects, Ty::Bool),
    sig!("optional.of", false, 1, 1, OptionalOf, Ty::Optional),
    sig!("optional.none", false, 0, 0, OptionalNone, Ty::Optional),
    sig!(
        "optional.ofNonZeroValue",
        false,
        1,
        1,
        OptionalOfNonZero,
        Ty::Optional
    ),
    sig!("hasValue", true, 0, 0, HasValue, Ty::Bool),
    sig!("value", true, 0, 0, Value, Ty::Dyn),
    sig!("orValue", true, 1, 1, OrValue, Ty::Dyn),
    sig!("or", true, 1, 1, Or, Ty::Optional),
    sig!("quantity", false, 1, 1, Quantity, Ty::Quantity),
    sig!("isQuantity", false, 1, 1, IsQuantity, Ty::Bool),
    sig!("semver", false, 1, 1, Semver, Ty::Semver),
    sig!("isSemver", false, 1, 1, IsSemver, Ty::Bool),
    sig!("isLessThan", true, 1, 1, IsLessThan, Ty::Bool),
    sig!("isGreaterThan", true, 1, 1, IsGreaterThan, Ty::Bool),
    sig!("compareTo", true, 1, 1, CompareTo, Ty::Int),
    sig!("add", true, 1, 1, Add, Ty::Quantity),
    sig!("sub", true, 1, 1, Sub, Ty::Quantity),
    sig!("asInteger", true, 0, 0, AsInteger, Ty::Int),
    sig!("isInteger", true, 0, 0, IsInteger, Ty::Bool),
    sig!(
        "asApproximateFloat",
        true,
        0,
        0,
        AsApproximateFloat,
        Ty::Double
    ),
    sig!("sign", true, 0, 0, Sign, Ty::Int),
    sig!("major", true, 0, 0, Major, Ty::Int),
    sig!("minor", true, 0, 0, Minor, Ty::Int),
    sig!("patch", true, 0, 0, Patch, Ty::Int),
];

/// Finds the signature for a call form.
pub(crate) fn lookup(name: &str, receiver: bool, argc: usize) -> Option<&'static Signature> {
    SIGNATURES
        .iter()
        .find(|s| s.name == name && s.receiver == receiver && (s.min..=s.max).contains(&argc))
}

/// True if `name` is some known function (used to pick the better error).
pub(crate) fn is_known_name(name: &str) -> bool {
    SIGNATURES.iter().any(|s| s.name == name)
}

pub(crate) fn name_of(f: Func) -> &'static str {
    SIGNATURES
        .iter()
        .find(|s| s.func == f)
        .map(|s| s.name)
        .unwrap_or("function")
}

/// Compiled regular expressions for constant patterns, built at compile time.
pub(crate) type RegexCache = HashMap<String, Regex>;

/// Size limit for compiled regexes, so a huge (computed) pattern cannot make
/// the regex compiler itself a memory or time sink.
const REGEX_SIZE_LIMIT: usize = 1 << 20;

pub(crate) fn compile_regex(pattern: &str) -> Result<Regex, String> {
    regex::RegexBuilder::new(pattern)
        .size_limit(REGEX_SIZE_LIMIT)
        .dfa_size_limit(REGEX_SIZE_LIMIT)
        .build()
        .map_err(|e| e.to_string())
}

/// Shared argument-type error for `func` applied to `args`.
pub(crate) fn bad_args(func: Func, args: &[Value]) -> EvalError {
    let refs: Vec<&Value> = args.iter().collect();
    no_overload(name_of(func), &refs)
}

pub(crate) fn err(msg: impl Into<String>) -> EvalError {
    EvalError::Other(msg.into())
}

/// Calls a strict function: all arguments are already evaluated; for
/// receiver-style calls `args[0]` is the receiver. The caller has charged
/// the base call cost; size-dependent costs are charged here.
pub(crate) fn call(
    func: Func,
    args: &[Value],
    cost: &mut Cost,
    regexes: &RegexCache,
) -> Result<Value, EvalError> {
    use Func as F;
    match func {
        F::Size | F::Int | F::Uint | F::Double | F::String | F::Bool | F::Bytes | F::Dyn => {
            conv::call(func, args, cost)
        }
        F::Matches => match args {
            [Value::String(s), Value::String(p)] => {
                // cel-go: string traversal cost times regex size cost.
                let units = (s.len() as u64 / 10 + 1).saturating_mul(p.len() as u64 / 4 + 1);
                cost.charge(units)?;
                let is_match = match regexes.get(&**p) {
                    Some(re) => re.is_match(s),
                    None => {
                        cost.bytes(p.len())?;
                        compile_regex(p).map_err(err)?.is_match(s)
                    }
                };
                Ok(Value::Bool(is_match))
            }
            _ => Err(bad_args(func, args)),
        },
        F::StartsWith
        | F::EndsWith
        | F::Contains
        | F::CharAt
        | F::LowerAscii
        | F::UpperAscii
        | F::Replace
        | F::Split
        | F::Substring
        | F::Trim
        | F::Join
        | F::Quote => strings::call(func, args, cost),
        F::IndexOf | F::LastIndexOf | F::Reverse => match args.first() {
            Some(Value::String(_)) => strings::call(func, args, cost),
            _ => lists::call(func, args, cost),
        },
        F::IsSorted
        | F::Sum
        | F::Min
        | F::Max
        | F::Slice
        | F::Flatten
        | F::Distinct
        | F::Sort
        | F::Range
        | F::SetsContains
        | F::SetsEquivalent
        | F::SetsIntersects => lists::call(func, args, cost),
        F::OptionalOf => match args {
            [v] => Value::some(v.clone()).check_nesting(),
            _ => Err(bad_args(func, args)),
        },
        F::OptionalNone => Ok(Value::Optional(None)),
        F::OptionalOfNonZero => match args {
            [v] if v.is_zero() => Ok(Value::Optional(None)),
            [v] => Value::some(v.clone()).check_nesting(),
            _ => Err(bad_args(func, args)),
        },
        F::HasValue => match args {
            [Value::Optional(o)] => Ok(Value::Bool(o.is_some())),
            _ => Err(bad_args(func, args)),
        },
        F::Value => match args {
            [Value::Optional(Some(v))] => Ok((**v).clone()),
            [Value::Optional(None)] => Err(err("optional.none() dereference")),
            _ => Err(bad_args(func, args)),
        },
        // Normally short-circuited by the evaluator; kept strict here.
        F::OrValue => match args {
            [Value::Optional(Some(v)), _] => Ok((**v).clone()),
            [Value::Optional(None), d] => Ok(d.clone()),
            _ => Err(bad_args(func, args)),
        },
        F::Or => match args {
            [o @ Value::Optional(Some(_)), _] => Ok(o.clone()),
            [Value::Optional(None), o @ Value::Optional(_)] => Ok(o.clone()),
            _ => Err(bad_args(func, args)),
        },
        F::Quantity
        | F::IsQuantity
        | F::Semver
        | F::IsSemver
        | F::IsLessThan
        | F::IsGreaterThan
        | F::CompareTo
        | F::Add
        | F::Sub
        | F::AsInteger
        | F::IsInteger
        | F::AsApproximateFloat
        | F::Sign
        | F::Major
        | F::Minor
        | F::Patch => k8s::call(func, args, cost),
    }
}
