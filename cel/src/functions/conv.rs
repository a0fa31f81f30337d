//! `size` and the type conversion functions.

use std::sync::Arc;

use super::{bad_args, err, Func};
use crate::cost::Cost;
use crate::error::EvalError;
use crate::value::{format_double, Value};

/// Largest doubles that still convert to i64 / u64 (exclusive bounds).
const I64_BOUND: f64 = 9.223_372_036_854_776e18;
const U64_BOUND: f64 = 1.844_674_407_370_955_2e19;

pub(super) fn call(func: Func, args: &[Value], cost: &mut Cost) -> Result<Value, EvalError> {
    let [arg] = args else {
        return Err(bad_args(func, args));
    };
    let bad = || bad_args(func, args);
    Ok(match func {
        Func::Size => Value::Int(match arg {
            Value::String(s) => {
                cost.bytes(s.len())?;
                s.chars().count() as i64
            }
            Value::Bytes(b) => b.len() as i64,
            Value::List(l) => l.len() as i64,
            Value::Map(m) => m.entries.len() as i64,
            _ => return Err(bad()),
        }),
        Func::Int => Value::Int(match arg {
            Value::Int(i) => *i,
            Value::Uint(u) => i64::try_from(*u).map_err(|_| EvalError::IntegerOverflow)?,
            Value::Double(d) => {
                if !(d.is_finite() && *d > -I64_BOUND && *d < I64_BOUND) {
                    return Err(EvalError::IntegerOverflow);
                }
                d.trunc() as i64
            }
            Value::String(s) => {
                cost.bytes(s.len())?;
                s.parse::<i64>()
                    .map_err(|_| err(format!("cannot convert string '{s}' to int")))?
            }
            _ => return Err(bad()),
        }),
        Func::Uint => Value::Uint(match arg {
            Value::Uint(u) => *u,
            Value::Int(i) => u64::try_from(*i).map_err(|_| EvalError::IntegerOverflow)?,
            Value::Double(d) => {
                if !(d.is_finite() && *d > -1.0 && *d < U64_BOUND) {
                    return Err(EvalError::IntegerOverflow);
                }
                d.trunc() as u64
            }
            Value::String(s) => {
                cost.bytes(s.len())?;
                s.parse::<u64>()
                    .map_err(|_| err(format!("cannot convert string '{s}' to uint")))?
            }
            _ => return Err(bad()),
        }),
        Func::Double => Value::Double(match arg {
            Value::Double(d) => *d,
            Value::Int(i) => *i as f64,
            Value::Uint(u) => *u as f64,
            Value::String(s) => {
                cost.bytes(s.len())?;
                s.parse::<f64>()
                    .map_err(|_| err(format!("cannot convert string '{s}' to double")))?
            }
            _ => return Err(bad()),
        }),
        Func::String => match arg {
            Value::String(_) => arg.clone(),
            Value::Int(i) => Value::string(i.to_string()),
            Value::Uint(u) => Value::string(u.to_string()),
            Value::Double(d) => Value::string(format_double(*d)),
            Value::Bool(b) => Value::string(b.to_string()),
            Value::Bytes(b) => {
                cost.bytes(b.len())?;
                let s = std::str::from_utf8(b)
                    .map_err(|_| err("invalid UTF-8 in bytes, cannot convert to string"))?;
                Value::string(s)
            }
            _ => return Err(bad()),
        },
        Func::Bool => match arg {
            Value::Bool(_) => arg.clone(),
            Value::String(s) => Value::Bool(match &**s {
                "1" | "t" | "T" | "TRUE" | "true" | "True" => true,
                "0" | "f" | "F" | "FALSE" | "false" | "False" => false,
                _ => {
                    return Err(err(format!(
                        "type conversion error from 'string' to 'bool': {s}"
                    )))
                }
            }),
            _ => return Err(bad()),
        },
        Func::Bytes => match arg {
            Value::Bytes(_) => arg.clone(),
            Value::String(s) => {
                cost.bytes(s.len())?;
                Value::Bytes(Arc::from(s.as_bytes()))
            }
            _ => return Err(bad()),
        },
        Func::Dyn => arg.clone(),
        _ => return Err(bad()),
    })
}
