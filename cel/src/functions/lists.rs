//! List functions (cel-go lists extension, the Kubernetes list library) and
//! the sets extension. Element comparisons go through the charged
//! [`equals`]/[`compare`], so quadratic functions stay within the cost limit.

use std::cmp::Ordering;

use super::{bad_args, err, Func};
use crate::cost::Cost;
use crate::error::EvalError;
use crate::value::{compare, equals, no_overload, Value};

fn contains(list: &[Value], v: &Value, cost: &mut Cost) -> Result<bool, EvalError> {
    for e in list {
        cost.items(1)?;
        if equals(e, v, cost)? {
            return Ok(true);
        }
    }
    Ok(false)
}

fn subset(of: &[Value], items: &[Value], cost: &mut Cost) -> Result<bool, EvalError> {
    for i in items {
        if !contains(of, i, cost)? {
            return Ok(false);
        }
    }
    Ok(true)
}

pub(super) fn call(func: Func, args: &[Value], cost: &mut Cost) -> Result<Value, EvalError> {
    use Value::{Int, List};
    match (func, args) {
        (Func::IndexOf, [List(l), v]) => {
            for (i, e) in l.iter().enumerate() {
                cost.items(1)?;
                if equals(e, v, cost)? {
                    return Ok(Int(i as i64));
                }
            }
            Ok(Int(-1))
        }
        (Func::LastIndexOf, [List(l), v]) => {
            for (i, e) in l.iter().enumerate().rev() {
                cost.items(1)?;
                if equals(e, v, cost)? {
                    return Ok(Int(i as i64));
                }
            }
            Ok(Int(-1))
        }
        (Func::Reverse, [List(l)]) => {
            cost.items(l.len())?;
            Ok(Value::list(l.iter().rev().cloned().collect()))
        }
        (Func::IsSorted, [List(l)]) => {
            for w in l.windows(2) {
                cost.items(1)?;
                if compare("isSorted", &w[0], &w[1], cost)? == Some(Ordering::Greater) {
                    return Ok(Value::Bool(false));
                }
            }
            Ok(Value::Bool(true))
        }
        (Func::Sum, [List(l)]) => sum(l, cost),
        (Func::Min, [List(l)]) => extreme(l, Ordering::Less, "min", cost),
        (Func::Max, [List(l)]) => extreme(l, Ordering::Greater, "max", cost),
        (Func::Slice, [List(l), Int(s), Int(e)]) => {
            if *s < 0 || *e < 0 {
                return Err(err(format!(
                    "cannot slice({s}, {e}), negative indexes not supported"
                )));
            }
            if s > e {
                return Err(err(format!(
                    "cannot slice({s}, {e}), start index must be less than or equal to end index"
                )));
            }
            if *e as u64 > l.len() as u64 {
                return Err(err(format!(
                    "cannot slice({s}, {e}), list is length {}",
                    l.len()
                )));
            }
            let (s, e) = (*s as usize, *e as usize);
            cost.items(e - s)?;
            Ok(Value::list(l[s..e].to_vec()))
        }
        (Func::Flatten, [List(l)]) => flatten_top(l, 1, cost),
        (Func::Flatten, [List(l), Int(d)]) => {
            if *d < 0 {
                return Err(err("level must be non-negative"));
            }
            flatten_top(l, *d, cost)
        }
        (Func::Distinct, [List(l)]) => {
            let mut out: Vec<Value> = Vec::new();
            for v in l.iter() {
                if !contains(&out, v, cost)? {
                    cost.items(1)?;
                    out.push(v.clone());
                }
            }
            Ok(Value::list(out))
        }
        (Func::Sort, [List(l)]) => sort(l, cost),
        (Func::Range, [Int(n)]) => {
            let n = (*n).max(0);
            cost.charge(n as u64)?;
            Ok(Value::list((0..n).map(Int).collect()))
        }
        (Func::SetsContains, [List(a), List(b)]) => Ok(Value::Bool(subset(a, b, cost)?)),
        (Func::SetsEquivalent, [List(a), List(b)]) => {
            Ok(Value::Bool(subset(a, b, cost)? && subset(b, a, cost)?))
        }
        (Func::SetsIntersects, [List(a), List(b)]) => {
            for v in b.iter() {
                if contains(a, v, cost)? {
                    return Ok(Value::Bool(true));
                }
            }
            Ok(Value::Bool(false))
        }
        _ => Err(bad_args(func, args)),
    }
}

fn sum(l: &[Value], cost: &mut Cost) -> Result<Value, EvalError> {
    let mut acc = match l.first() {
        None => return Ok(Value::Int(0)),
        Some(v) => v.clone(),
    };
    for v in &l[1..] {
        cost.items(1)?;
        acc = match (&acc, v) {
            (Value::Int(a), Value::Int(b)) => {
                Value::Int(a.checked_add(*b).ok_or(EvalError::IntegerOverflow)?)
            }
            (Value::Uint(a), Value::Uint(b)) => {
                Value::Uint(a.checked_add(*b).ok_or(EvalError::IntegerOverflow)?)
            }
            (Value::Double(a), Value::Double(b)) => Value::Double(a + b),
            _ => return Err(no_overload("sum", &[&acc, v])),
        };
    }
    match acc {
        Value::Int(_) | Value::Uint(_) | Value::Double(_) => Ok(acc),
        other => Err(no_overload("sum", &[&other])),
    }
}

fn extreme(l: &[Value], want: Ordering, name: &str, cost: &mut Cost) -> Result<Value, EvalError> {
    let mut best = l
        .first()
        .ok_or_else(|| err(format!("{name} called on empty list")))?;
    for v in &l[1..] {
        cost.items(1)?;
        if compare(name, v, best, cost)? == Some(want) {
            best = v;
        }
    }
    if l.len() == 1 {
        // Still type-check a single element.
        compare(name, best, best, cost)?;
    }
    Ok(best.clone())
}

fn flatten_top(l: &[Value], depth: i64, cost: &mut Cost) -> Result<Value, EvalError> {
    let mut out = Vec::new();
    flatten_into(l, depth, &mut out, cost)?;
    Ok(Value::list(out))
}

/// Recursion is bounded by the nesting of the value, which the parser's
/// depth limit bounds (values can only nest as deep as the expression).
fn flatten_into(
    l: &[Value],
    depth: i64,
    out: &mut Vec<Value>,
    cost: &mut Cost,
) -> Result<(), EvalError> {
    for v in l {
        match v {
            Value::List(inner) if depth > 0 => flatten_into(inner, depth - 1, out, cost)?,
            _ => {
                cost.items(1)?;
                out.push(v.clone());
            }
        }
    }
    Ok(())
}

/// Sorts lists of a single orderable type. Validating the element types
/// first keeps the comparator a total order (Rust's sort may panic
/// otherwise).
fn sort(l: &[Value], cost: &mut Cost) -> Result<Value, EvalError> {
    let n = l.len() as u64;
    cost.charge(n.saturating_mul(64 - n.leading_zeros() as u64 + 1))?;
    let mut v = l.to_vec();
    let same = |f: fn(&Value) -> bool| l.iter().all(f);
    if same(|x| matches!(x, Value::Int(_))) {
        v.sort_by_key(|x| if let Value::Int(i) = x { *i } else { 0 });
    } else if same(|x| matches!(x, Value::Uint(_))) {
        v.sort_by_key(|x| if let Value::Uint(i) = x { *i } else { 0 });
    } else if same(|x| matches!(x, Value::Double(_))) {
        v.sort_by(|a, b| match (a, b) {
            (Value::Double(x), Value::Double(y)) => x.total_cmp(y),
            _ => Ordering::Equal,
        });
    } else if same(|x| matches!(x, Value::String(_))) {
        let total: usize = l
            .iter()
            .map(|x| if let Value::String(s) = x { s.len() } else { 0 })
            .sum();
        cost.bytes(total)?;
        v.sort_by(|a, b| match (a, b) {
            (Value::String(x), Value::String(y)) => x.cmp(y),
            _ => Ordering::Equal,
        });
    } else if same(|x| matches!(x, Value::Bool(_))) {
        v.sort_by_key(|x| matches!(x, Value::Bool(true)));
    } else {
        return Err(err(
            "sort: list elements must all have the same comparable type",
        ));
    }
    Ok(Value::list(v))
}
