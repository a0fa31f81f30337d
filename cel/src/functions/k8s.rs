//! Kubernetes CEL libraries: quantity (k8s.io/apiserver/pkg/cel/library/quantity.go)
//! and semver (semverlib.go).

use std::cmp::Ordering;
use std::sync::Arc;

use super::{bad_args, err, Func};
use crate::cost::Cost;
use crate::error::EvalError;
use crate::quantity::Quantity;
use crate::semver::Semver;
use crate::value::Value;

fn ord_to_int(o: Ordering) -> Value {
    Value::Int(match o {
        Ordering::Less => -1,
        Ordering::Equal => 0,
        Ordering::Greater => 1,
    })
}

fn u64_to_int(v: u64) -> Result<Value, EvalError> {
    i64::try_from(v)
        .map(Value::Int)
        .map_err(|_| EvalError::IntegerOverflow)
}

fn out_of_range() -> EvalError {
    err("quantity out of range")
}

pub(super) fn call(func: Func, args: &[Value], cost: &mut Cost) -> Result<Value, EvalError> {
    use Value::{Quantity as Q, Semver as V, String as S};
    let ordering = match args {
        [Q(a), Q(b)] => Some(a.cmp(b)),
        [V(a), V(b)] => Some(a.cmp(b)),
        _ => None,
    };
    match (func, args) {
        (Func::Quantity, [S(s)]) => {
            cost.bytes(s.len())?;
            Quantity::parse(s)
                .map(|q| Value::Quantity(Arc::new(q)))
                .map_err(|e| err(format!("invalid quantity '{s}': {e}")))
        }
        (Func::IsQuantity, [S(s)]) => {
            cost.bytes(s.len())?;
            Ok(Value::Bool(Quantity::parse(s).is_ok()))
        }
        (Func::Semver, [S(s)]) => {
            cost.bytes(s.len())?;
            Semver::parse(s)
                .map(|v| Value::Semver(Arc::new(v)))
                .map_err(|e| err(format!("could not parse semver '{s}': {e}")))
        }
        (Func::IsSemver, [S(s)]) => {
            cost.bytes(s.len())?;
            Ok(Value::Bool(Semver::parse(s).is_ok()))
        }
        (Func::IsLessThan, _) if ordering.is_some() => {
            Ok(Value::Bool(ordering == Some(Ordering::Less)))
        }
        (Func::IsGreaterThan, _) if ordering.is_some() => {
            Ok(Value::Bool(ordering == Some(Ordering::Greater)))
        }
        (Func::CompareTo, _) if ordering.is_some() => {
            Ok(ordering.map(ord_to_int).unwrap_or(Value::Int(0)))
        }
        (Func::Add, [Q(a), Q(b)]) => a
            .checked_add(b)
            .map(|q| Value::Quantity(Arc::new(q)))
            .ok_or_else(out_of_range),
        (Func::Add, [Q(a), Value::Int(i)]) => a
            .checked_add(&Quantity::from_int(*i))
            .map(|q| Value::Quantity(Arc::new(q)))
            .ok_or_else(out_of_range),
        (Func::Sub, [Q(a), Q(b)]) => a
            .checked_sub(b)
            .map(|q| Value::Quantity(Arc::new(q)))
            .ok_or_else(out_of_range),
        (Func::Sub, [Q(a), Value::Int(i)]) => a
            .checked_sub(&Quantity::from_int(*i))
            .map(|q| Value::Quantity(Arc::new(q)))
            .ok_or_else(out_of_range),
        (Func::AsInteger, [Q(q)]) => q
            .as_i64()
            .map(Value::Int)
            .ok_or_else(|| err("cannot convert value to integer")),
        (Func::IsInteger, [Q(q)]) => Ok(Value::Bool(q.as_i64().is_some())),
        (Func::AsApproximateFloat, [Q(q)]) => Ok(Value::Double(q.as_approximate_f64())),
        (Func::Sign, [Q(q)]) => Ok(Value::Int(q.sign())),
        (Func::Major, [V(v)]) => u64_to_int(v.major()),
        (Func::Minor, [V(v)]) => u64_to_int(v.minor()),
        (Func::Patch, [V(v)]) => u64_to_int(v.patch()),
        _ => Err(bad_args(func, args)),
    }
}
