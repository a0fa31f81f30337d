//! Tree-walking evaluator with cost accounting.
//!
//! Recursion follows the expression tree, whose depth the parser bounds, so
//! evaluation cannot overflow the stack. CEL errors are ordinary `Err`
//! values that `&&`, `||`, `all` and `exists` may absorb; the cost-limit
//! error is fatal and always propagates.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::ast::{BinaryOp, Expr, ExprKind, Literal, MacroKind, UnaryOp};
use crate::cost::Cost;
use crate::error::EvalError;
use crate::functions::{self, Func, RegexCache};
use crate::value::{compare, equals, find_key, no_overload, MapKey, MapValue, Value};

/// cel-go's `ListCreateBaseCost` and `MapCreateBaseCost`.
const LIST_CREATE_COST: u64 = 10;
const MAP_CREATE_COST: u64 = 30;

pub(crate) fn run(
    expr: &Expr,
    device: &Value,
    regexes: &RegexCache,
    limit: u64,
) -> Result<bool, EvalError> {
    let mut ev = Evaluator {
        cost: Cost::new(limit),
        device,
        locals: Vec::new(),
        regexes,
    };
    match ev.eval(expr)? {
        Value::Bool(b) => Ok(b),
        other => Err(EvalError::NotBool(other.type_name().to_string())),
    }
}

struct Evaluator<'a> {
    cost: Cost,
    device: &'a Value,
    locals: Vec<(&'a str, Value)>,
    regexes: &'a RegexCache,
}

fn literal(l: &Literal) -> Value {
    match l {
        Literal::Null => Value::Null,
        Literal::Bool(b) => Value::Bool(*b),
        Literal::Int(i) => Value::Int(*i),
        Literal::Uint(u) => Value::Uint(*u),
        Literal::Double(d) => Value::Double(*d),
        Literal::String(s) => Value::String(s.clone()),
        Literal::Bytes(b) => Value::Bytes(b.clone()),
    }
}

/// Optional wrapping for `.?`/`[?]` results and lookups through optionals.
fn wrap(v: Value, optional: bool) -> Result<Value, EvalError> {
    if optional {
        Value::some(v).check_nesting()
    } else {
        Ok(v)
    }
}

/// Field selection on a value (`v.field`, `v.?field`).
fn select(v: Value, field: &str, optional: bool) -> Result<Value, EvalError> {
    match v {
        Value::Optional(None) => Ok(Value::Optional(None)),
        Value::Optional(Some(inner)) => select((*inner).clone(), field, true),
        Value::Map(m) => match m.get(&Value::string(field)) {
            Some(found) => wrap(found.clone(), optional),
            None if m.default_empty => wrap(MapValue::empty(), optional),
            None if optional => Ok(Value::Optional(None)),
            None => Err(EvalError::NoSuchKey(field.to_string())),
        },
        other => Err(EvalError::Other(format!(
            "type '{}' does not support field selection",
            other.type_name()
        ))),
    }
}

/// Indexing (`v[i]`, `v[?i]`).
fn index(v: Value, i: Value, optional: bool) -> Result<Value, EvalError> {
    match (v, i) {
        (Value::Optional(None), _) => Ok(Value::Optional(None)),
        (Value::Optional(Some(inner)), i) => index((*inner).clone(), i, true),
        (Value::List(l), i) => {
            let idx: Option<i64> = match i {
                Value::Int(x) => Some(x),
                Value::Uint(x) => Some(i64::try_from(x).unwrap_or(i64::MAX)),
                Value::Double(d) if d.fract() == 0.0 && d.abs() < 9.2e18 => Some(d as i64),
                ref other => return Err(no_overload("_[_]", &[&Value::Null, other])),
            };
            let found = idx
                .and_then(|x| usize::try_from(x).ok())
                .and_then(|x| l.get(x));
            match found {
                Some(e) => wrap(e.clone(), optional),
                None if optional => Ok(Value::Optional(None)),
                None => Err(EvalError::Other(format!(
                    "index '{}' out of range in list size '{}'",
                    idx.unwrap_or_default(),
                    l.len()
                ))),
            }
        }
        (Value::Map(m), k) => match m.get(&k) {
            Some(found) => wrap(found.clone(), optional),
            None if m.default_empty => wrap(MapValue::empty(), optional),
            None if optional => Ok(Value::Optional(None)),
            None => Err(EvalError::NoSuchKey(match &k {
                Value::String(s) => s.to_string(),
                Value::Int(x) => x.to_string(),
                Value::Uint(x) => x.to_string(),
                Value::Double(x) => x.to_string(),
                Value::Bool(x) => x.to_string(),
                other => other.type_name().to_string(),
            })),
        },
        (v, i) => Err(no_overload("_[_]", &[&v, &i])),
    }
}

impl<'a> Evaluator<'a> {
    fn eval(&mut self, e: &'a Expr) -> Result<Value, EvalError> {
        match &e.kind {
            ExprKind::Literal(l) => Ok(literal(l)),
            ExprKind::Ident(name) => {
                self.cost.charge(1)?;
                self.lookup(name)
            }
            ExprKind::Select {
                operand,
                field,
                optional,
            } => {
                let v = self.eval(operand)?;
                self.cost.charge(1)?;
                select(v, field, *optional)
            }
            ExprKind::Index {
                operand,
                index: i,
                optional,
            } => {
                let v = self.eval(operand)?;
                let k = self.eval(i)?;
                self.cost.charge(1)?;
                index(v, k, *optional)
            }
            ExprKind::RawCall { name, .. } => {
                Err(EvalError::Other(format!("unresolved call to '{name}'")))
            }
            ExprKind::Call { func, args } => self.call(*func, args),
            ExprKind::Unary(op, a) => {
                let v = self.eval(a)?;
                self.cost.charge(1)?;
                match (op, v) {
                    (UnaryOp::Not, Value::Bool(b)) => Ok(Value::Bool(!b)),
                    (UnaryOp::Neg, Value::Int(i)) => i
                        .checked_neg()
                        .map(Value::Int)
                        .ok_or(EvalError::IntegerOverflow),
                    (UnaryOp::Neg, Value::Double(d)) => Ok(Value::Double(-d)),
                    (UnaryOp::Not, v) => Err(no_overload("!_", &[&v])),
                    (UnaryOp::Neg, v) => Err(no_overload("-_", &[&v])),
                }
            }
            ExprKind::Binary(op, a, b) => {
                let x = self.eval(a)?;
                let y = self.eval(b)?;
                self.cost.charge(1)?;
                self.binary(*op, x, y)
            }
            ExprKind::Logical { is_and, operands } => self.logical(*is_and, operands),
            ExprKind::Cond(c, t, f) => match self.eval(c)? {
                Value::Bool(true) => self.eval(t),
                Value::Bool(false) => self.eval(f),
                other => Err(no_overload("_?_:_", &[&other])),
            },
            ExprKind::List(items) => self.list(items),
            ExprKind::Map(items) => self.map(items),
            ExprKind::Has { operand, field } => {
                let v = self.eval(operand)?;
                self.cost.charge(1)?;
                match v {
                    Value::Map(m) => Ok(Value::Bool(
                        m.default_empty || m.contains(&Value::string(field.as_str())),
                    )),
                    other => Err(no_overload("has", &[&other])),
                }
            }
            ExprKind::Comprehension {
                kind,
                range,
                var,
                pred,
                transform,
            } => self.comprehension(*kind, range, var, pred.as_deref(), transform.as_deref()),
            ExprKind::Bind { var, init, body } => {
                let v = self.eval(init)?;
                self.with_local(var, v, body)
            }
        }
    }

    fn lookup(&self, name: &str) -> Result<Value, EvalError> {
        if let Some((_, v)) = self.locals.iter().rev().find(|(n, _)| *n == name) {
            return Ok(v.clone());
        }
        if name == "device" {
            return Ok(self.device.clone());
        }
        Err(EvalError::Other(format!(
            "undeclared reference to '{name}'"
        )))
    }

    /// Evaluates `body` with `name` bound, always restoring the scope (an
    /// absorbed error must not leave a stale binding behind).
    fn with_local(&mut self, name: &'a str, v: Value, body: &'a Expr) -> Result<Value, EvalError> {
        self.locals.push((name, v));
        let r = self.eval(body);
        self.locals.pop();
        r
    }

    fn call(&mut self, func: Func, args: &'a [Expr]) -> Result<Value, EvalError> {
        // `or` and `orValue` only evaluate their argument when needed.
        if let (Func::Or | Func::OrValue, [recv, alt]) = (func, args) {
            let r = self.eval(recv)?;
            self.cost.charge(1)?;
            return match r {
                Value::Optional(Some(v)) if func == Func::OrValue => Ok((*v).clone()),
                o @ Value::Optional(Some(_)) => Ok(o),
                Value::Optional(None) => match (func, self.eval(alt)?) {
                    (Func::OrValue, v) => Ok(v),
                    (_, o @ Value::Optional(_)) => Ok(o),
                    (_, other) => Err(no_overload("or", &[&Value::Optional(None), &other])),
                },
                other => Err(no_overload(functions::name_of(func), &[&other])),
            };
        }
        let mut vals = Vec::with_capacity(args.len());
        for a in args {
            vals.push(self.eval(a)?);
        }
        self.cost.charge(1)?;
        functions::call(func, &vals, &mut self.cost, self.regexes)
    }

    fn binary(&mut self, op: BinaryOp, x: Value, y: Value) -> Result<Value, EvalError> {
        use std::cmp::Ordering::*;
        let cost = &mut self.cost;
        let b = |v: bool| Ok(Value::Bool(v));
        match op {
            BinaryOp::Eq => b(equals(&x, &y, cost)?),
            BinaryOp::Ne => b(!equals(&x, &y, cost)?),
            BinaryOp::Lt => b(compare(op.symbol(), &x, &y, cost)? == Some(Less)),
            BinaryOp::Le => b(matches!(
                compare(op.symbol(), &x, &y, cost)?,
                Some(Less | Equal)
            )),
            BinaryOp::Gt => b(compare(op.symbol(), &x, &y, cost)? == Some(Greater)),
            BinaryOp::Ge => b(matches!(
                compare(op.symbol(), &x, &y, cost)?,
                Some(Greater | Equal)
            )),
            BinaryOp::In => match &y {
                Value::List(l) => {
                    for e in l.iter() {
                        cost.items(1)?;
                        if equals(&x, e, cost)? {
                            return b(true);
                        }
                    }
                    b(false)
                }
                Value::Map(m) => b(m.contains(&x)),
                _ => Err(no_overload(op.symbol(), &[&x, &y])),
            },
            _ => arith(op, x, y, cost),
        }
    }

    fn logical(&mut self, is_and: bool, operands: &'a [Expr]) -> Result<Value, EvalError> {
        let mut first_err: Option<EvalError> = None;
        for o in operands {
            match self.eval(o) {
                // `false` absorbs `&&`, `true` absorbs `||`, even errors.
                Ok(Value::Bool(v)) if v != is_and => return Ok(Value::Bool(v)),
                Ok(Value::Bool(_)) => {}
                Ok(other) => {
                    let op = if is_and { "_&&_" } else { "_||_" };
                    first_err.get_or_insert(no_overload(op, &[&other]));
                }
                Err(e) if e.is_fatal() => return Err(e),
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(Value::Bool(is_and)),
        }
    }

    fn list(&mut self, items: &'a [(Expr, bool)]) -> Result<Value, EvalError> {
        self.cost.charge(LIST_CREATE_COST)?;
        self.cost.items(items.len())?;
        let mut out = Vec::with_capacity(items.len());
        for (e, optional) in items {
            let v = self.eval(e)?;
            if *optional {
                match v {
                    Value::Optional(Some(inner)) => out.push((*inner).clone()),
                    Value::Optional(None) => {}
                    other => return Err(no_overload("optional list element", &[&other])),
                }
            } else {
                out.push(v);
            }
        }
        Value::list(out).check_nesting()
    }

    fn map(&mut self, items: &'a [(Expr, Expr, bool)]) -> Result<Value, EvalError> {
        self.cost.charge(MAP_CREATE_COST)?;
        self.cost.items(items.len())?;
        let mut entries = BTreeMap::new();
        for (k, v, optional) in items {
            let kv = self.eval(k)?;
            let vv = self.eval(v)?;
            let vv = if *optional {
                match vv {
                    Value::Optional(Some(inner)) => (*inner).clone(),
                    Value::Optional(None) => continue,
                    other => return Err(no_overload("optional map entry", &[&other])),
                }
            } else {
                vv
            };
            if find_key(&entries, &kv).is_some() {
                return Err(EvalError::Other(format!(
                    "Failed with repeated key: {}",
                    MapKey::from_value(&kv)?
                )));
            }
            entries.insert(MapKey::from_value(&kv)?, vv);
        }
        Value::map(MapValue::new(entries, false)).check_nesting()
    }

    fn comprehension(
        &mut self,
        kind: MacroKind,
        range: &'a Expr,
        var: &'a str,
        pred: Option<&'a Expr>,
        transform: Option<&'a Expr>,
    ) -> Result<Value, EvalError> {
        let range_value = self.eval(range)?;
        let keys: Vec<Value>;
        let items: &[Value] = match &range_value {
            Value::List(l) => l,
            Value::Map(m) => {
                self.cost.items(m.entries.len())?;
                keys = m.entries.keys().map(MapKey::to_value).collect();
                &keys
            }
            other => return Err(no_overload(macro_name(kind), &[other])),
        };
        let name = macro_name(kind);
        let mut first_err: Option<EvalError> = None;
        let mut count = 0usize;
        let mut out: Vec<Value> = Vec::new();
        for item in items.iter() {
            self.cost.charge(1)?;
            let keep = match pred {
                Some(p) => {
                    let r = self.with_local(var, item.clone(), p);
                    match (kind, r) {
                        (_, Err(e)) if e.is_fatal() => return Err(e),
                        (MacroKind::All | MacroKind::Exists, Err(e)) => {
                            first_err.get_or_insert(e);
                            continue;
                        }
                        (_, Err(e)) => return Err(e),
                        (_, Ok(Value::Bool(v))) => v,
                        (MacroKind::All | MacroKind::Exists, Ok(other)) => {
                            first_err.get_or_insert(no_overload(name, &[&other]));
                            continue;
                        }
                        (_, Ok(other)) => return Err(no_overload(name, &[&other])),
                    }
                }
                None => true,
            };
            match kind {
                MacroKind::All if !keep => return Ok(Value::Bool(false)),
                MacroKind::Exists if keep => return Ok(Value::Bool(true)),
                MacroKind::ExistsOne if keep => count += 1,
                MacroKind::Filter if keep => {
                    self.cost.items(1)?;
                    out.push(item.clone());
                }
                MacroKind::Map if keep => {
                    let t = transform
                        .ok_or_else(|| EvalError::Other("map() without transform".into()))?;
                    let v = self.with_local(var, item.clone(), t)?;
                    self.cost.items(1)?;
                    out.push(v);
                }
                _ => {}
            }
        }
        match kind {
            MacroKind::All | MacroKind::Exists => match first_err {
                Some(e) => Err(e),
                None => Ok(Value::Bool(kind == MacroKind::All)),
            },
            MacroKind::ExistsOne => Ok(Value::Bool(count == 1)),
            MacroKind::Map | MacroKind::Filter => Value::list(out).check_nesting(),
        }
    }
}

fn macro_name(kind: MacroKind) -> &'static str {
    match kind {
        MacroKind::All => "all",
        MacroKind::Exists => "exists",
        MacroKind::ExistsOne => "exists_one",
        MacroKind::Map => "map",
        MacroKind::Filter => "filter",
    }
}

/// `+ - * / %` with CEL's overflow and division-by-zero errors.
fn arith(op: BinaryOp, x: Value, y: Value, cost: &mut Cost) -> Result<Value, EvalError> {
    use Value::{Bytes, Double, Int, List, String as S, Uint};
    let ovf = EvalError::IntegerOverflow;
    Ok(match (op, &x, &y) {
        (BinaryOp::Add, Int(a), Int(b)) => Int(a.checked_add(*b).ok_or(ovf)?),
        (BinaryOp::Sub, Int(a), Int(b)) => Int(a.checked_sub(*b).ok_or(ovf)?),
        (BinaryOp::Mul, Int(a), Int(b)) => Int(a.checked_mul(*b).ok_or(ovf)?),
        (BinaryOp::Div, Int(_), Int(0)) => return Err(EvalError::DivisionByZero),
        (BinaryOp::Div, Int(a), Int(b)) => Int(a.checked_div(*b).ok_or(ovf)?),
        (BinaryOp::Rem, Int(_), Int(0)) => return Err(EvalError::ModulusByZero),
        (BinaryOp::Rem, Int(a), Int(b)) => Int(a.checked_rem(*b).ok_or(ovf)?),
        (BinaryOp::Add, Uint(a), Uint(b)) => Uint(a.checked_add(*b).ok_or(ovf)?),
        (BinaryOp::Sub, Uint(a), Uint(b)) => Uint(a.checked_sub(*b).ok_or(ovf)?),
        (BinaryOp::Mul, Uint(a), Uint(b)) => Uint(a.checked_mul(*b).ok_or(ovf)?),
        (BinaryOp::Div, Uint(_), Uint(0)) => return Err(EvalError::DivisionByZero),
        (BinaryOp::Div, Uint(a), Uint(b)) => Uint(a / b),
        (BinaryOp::Rem, Uint(_), Uint(0)) => return Err(EvalError::ModulusByZero),
        (BinaryOp::Rem, Uint(a), Uint(b)) => Uint(a % b),
        (BinaryOp::Add, Double(a), Double(b)) => Double(a + b),
        (BinaryOp::Sub, Double(a), Double(b)) => Double(a - b),
        (BinaryOp::Mul, Double(a), Double(b)) => Double(a * b),
        (BinaryOp::Div, Double(a), Double(b)) => Double(a / b),
        (BinaryOp::Add, S(a), S(b)) => {
            // Charge before allocating so doubling loops stop in time.
            cost.bytes(a.len().saturating_add(b.len()))?;
            let mut s = String::with_capacity(a.len() + b.len());
            s.push_str(a);
            s.push_str(b);
            Value::string(s)
        }
        (BinaryOp::Add, Bytes(a), Bytes(b)) => {
            cost.bytes(a.len().saturating_add(b.len()))?;
            let mut v = Vec::with_capacity(a.len() + b.len());
            v.extend_from_slice(a);
            v.extend_from_slice(b);
            Bytes(Arc::from(v))
        }
        (BinaryOp::Add, List(a), List(b)) => {
            cost.items(a.len().saturating_add(b.len()))?;
            let mut v = Vec::with_capacity(a.len() + b.len());
            v.extend(a.iter().cloned());
            v.extend(b.iter().cloned());
            Value::list(v)
        }
        _ => return Err(no_overload(op.symbol(), &[&x, &y])),
    })
}
