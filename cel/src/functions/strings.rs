//! String functions: the standard `startsWith`/`endsWith`/`contains` and the
//! cel-go strings extension (as enabled by Kubernetes). Indices are in code
//! points, as in cel-go. Every function computes its output size and charges
//! for it before allocating.

use std::sync::Arc;

use super::{bad_args, err, Func};
use crate::cost::Cost;
use crate::error::EvalError;
use crate::value::Value;

fn out_of_range(i: i64) -> EvalError {
    err(format!("index out of range: {i}"))
}

/// Returns the string result after charging for its size.
fn produce(s: String, cost: &mut Cost) -> Result<Value, EvalError> {
    cost.bytes(s.len())?;
    Ok(Value::string(s))
}

pub(super) fn call(func: Func, args: &[Value], cost: &mut Cost) -> Result<Value, EvalError> {
    use Value::{Int, List, String as S};
    let bad = || bad_args(func, args);
    match (func, args) {
        (Func::StartsWith, [S(s), S(p)]) => {
            cost.bytes(p.len())?;
            Ok(Value::Bool(s.starts_with(&**p)))
        }
        (Func::EndsWith, [S(s), S(p)]) => {
            cost.bytes(p.len())?;
            Ok(Value::Bool(s.ends_with(&**p)))
        }
        (Func::Contains, [S(s), S(p)]) => {
            cost.bytes(s.len())?;
            Ok(Value::Bool(s.contains(&**p)))
        }
        (Func::CharAt, [S(s), Int(i)]) => {
            cost.bytes(s.len())?;
            let n = s.chars().count() as i64;
            if *i < 0 || *i > n {
                return Err(out_of_range(*i));
            }
            Ok(Value::string(
                s.chars()
                    .nth(*i as usize)
                    .map(String::from)
                    .unwrap_or_default(),
            ))
        }
        (Func::IndexOf, [S(s), S(sub)]) => {
            cost.bytes(s.len())?;
            Ok(Int(index_of(s, sub, 0)?))
        }
        (Func::IndexOf, [S(s), S(sub), Int(off)]) => {
            cost.bytes(s.len())?;
            if sub.is_empty() {
                return Ok(Int(*off));
            }
            let n = s.chars().count() as i64;
            if *off < 0 || *off >= n {
                return Err(out_of_range(*off));
            }
            Ok(Int(index_of(s, sub, *off as usize)?))
        }
        (Func::LastIndexOf, [S(s), S(sub)]) => {
            cost.bytes(s.len())?;
            let n = s.chars().count() as i64;
            if sub.is_empty() {
                return Ok(Int(n));
            }
            Ok(Int(last_index_of(s, sub, n)))
        }
        (Func::LastIndexOf, [S(s), S(sub), Int(off)]) => {
            cost.bytes(s.len())?;
            if sub.is_empty() {
                return Ok(Int(*off));
            }
            let n = s.chars().count() as i64;
            if *off < 0 || *off >= n {
                return Err(out_of_range(*off));
            }
            Ok(Int(last_index_of(s, sub, *off)))
        }
        (Func::LowerAscii, [S(s)]) => produce(s.to_ascii_lowercase(), cost),
        (Func::UpperAscii, [S(s)]) => produce(s.to_ascii_uppercase(), cost),
        (Func::Replace, [S(s), S(old), S(new)]) => replace(s, old, new, -1, cost),
        (Func::Replace, [S(s), S(old), S(new), Int(n)]) => replace(s, old, new, *n, cost),
        (Func::Split, [S(s), S(sep)]) => split(s, sep, -1, cost),
        (Func::Split, [S(s), S(sep), Int(n)]) => split(s, sep, *n, cost),
        (Func::Substring, [S(s), Int(start)]) => {
            cost.bytes(s.len())?;
            let n = s.chars().count() as i64;
            substring(s, *start, n)
        }
        (Func::Substring, [S(s), Int(start), Int(end)]) => {
            cost.bytes(s.len())?;
            substring(s, *start, *end)
        }
        (Func::Trim, [S(s)]) => produce(s.trim().to_string(), cost),
        (Func::Reverse, [S(s)]) => produce(s.chars().rev().collect(), cost),
        (Func::Join, [List(l)]) => join(l, "", cost),
        (Func::Join, [List(l), S(sep)]) => join(l, sep, cost),
        (Func::Quote, [S(s)]) => {
            cost.bytes(s.len().saturating_mul(2))?;
            let mut out = String::with_capacity(s.len() + 2);
            out.push('"');
            for c in s.chars() {
                match c {
                    '\x07' => out.push_str("\\a"),
                    '\x08' => out.push_str("\\b"),
                    '\x0c' => out.push_str("\\f"),
                    '\n' => out.push_str("\\n"),
                    '\r' => out.push_str("\\r"),
                    '\t' => out.push_str("\\t"),
                    '\x0b' => out.push_str("\\v"),
                    '\\' => out.push_str("\\\\"),
                    '"' => out.push_str("\\\""),
                    c => out.push(c),
                }
            }
            out.push('"');
            Ok(Value::string(out))
        }
        _ => Err(bad()),
    }
}

/// Code-point index of `sub` in `s` at or after code point `from`, or -1.
fn index_of(s: &str, sub: &str, from: usize) -> Result<i64, EvalError> {
    let start = s
        .char_indices()
        .nth(from)
        .map(|(b, _)| b)
        .unwrap_or(s.len());
    Ok(match s[start..].find(sub) {
        Some(b) => (from + s[start..start + b].chars().count()) as i64,
        None => -1,
    })
}

/// Code-point index of the last `sub` starting at or before code point `off`.
fn last_index_of(s: &str, sub: &str, off: i64) -> i64 {
    let chars: Vec<char> = s.chars().collect();
    let subc: Vec<char> = sub.chars().collect();
    if subc.len() > chars.len() {
        return -1;
    }
    let mut i = off.min((chars.len() - subc.len()) as i64);
    while i >= 0 {
        let iu = i as usize;
        if chars[iu..iu + subc.len()] == subc[..] {
            return i;
        }
        i -= 1;
    }
    -1
}

fn substring(s: &str, start: i64, end: i64) -> Result<Value, EvalError> {
    let n = s.chars().count() as i64;
    if start < 0 || start > n {
        return Err(out_of_range(start));
    }
    if end < 0 || end > n {
        return Err(out_of_range(end));
    }
    if start > end {
        return Err(err(format!(
            "invalid substring range. start: {start}, end: {end}"
        )));
    }
    Ok(Value::string(
        s.chars()
            .skip(start as usize)
            .take((end - start) as usize)
            .collect::<String>(),
    ))
}

/// Go `strings.Replace` semantics (`n < 0` replaces all; an empty `old`
/// inserts `new` at every code point boundary).
fn replace(s: &str, old: &str, new: &str, n: i64, cost: &mut Cost) -> Result<Value, EvalError> {
    cost.bytes(s.len())?;
    let limit = if n < 0 { usize::MAX } else { n as usize };
    let available = if old.is_empty() {
        s.chars().count() + 1
    } else {
        s.matches(old).count()
    };
    let count = available.min(limit);
    let out_len = (s.len() - count * old.len()).saturating_add(count.saturating_mul(new.len()));
    cost.bytes(out_len)?;
    let mut out = String::with_capacity(out_len);
    if old.is_empty() {
        let mut done = 0;
        for c in s.chars() {
            if done < count {
                out.push_str(new);
                done += 1;
            }
            out.push(c);
        }
        if done < count {
            out.push_str(new);
        }
    } else {
        out.push_str(&s.replacen(old, new, count));
    }
    Ok(Value::string(out))
}

/// Go `strings.SplitN` semantics.
fn split(s: &str, sep: &str, n: i64, cost: &mut Cost) -> Result<Value, EvalError> {
    cost.bytes(s.len())?;
    if n == 0 {
        return Ok(Value::list(Vec::new()));
    }
    let limit = if n < 0 { usize::MAX } else { n as usize };
    let pieces = if sep.is_empty() {
        s.chars().count()
    } else {
        s.matches(sep).count().saturating_add(1)
    }
    .min(limit);
    cost.items(pieces)?;
    cost.bytes(s.len())?;
    let parts: Vec<Value> = if sep.is_empty() {
        let mut v: Vec<Value> = Vec::with_capacity(pieces);
        let mut it = s.char_indices();
        while v.len() + 1 < pieces {
            match it.next() {
                Some((_, c)) => v.push(Value::string(c.to_string())),
                None => break,
            }
        }
        if let Some((b, _)) = it.next() {
            v.push(Value::string(&s[b..]));
        }
        v
    } else {
        s.splitn(pieces, sep).map(Value::string).collect()
    };
    Ok(Value::list(parts))
}

fn join(l: &[Value], sep: &str, cost: &mut Cost) -> Result<Value, EvalError> {
    let mut total: usize = 0;
    for (i, v) in l.iter().enumerate() {
        match v {
            Value::String(s) => {
                total = total.saturating_add(s.len());
                if i > 0 {
                    total = total.saturating_add(sep.len());
                }
            }
            other => {
                return Err(err(format!(
                    "join: list element {i} has type {}, not string",
                    other.type_name()
                )))
            }
        }
    }
    cost.items(l.len())?;
    cost.bytes(total)?;
    let mut out = String::with_capacity(total);
    for (i, v) in l.iter().enumerate() {
        if i > 0 {
            out.push_str(sep);
        }
        if let Value::String(s) = v {
            out.push_str(s);
        }
    }
    Ok(Value::String(Arc::from(out)))
}
