//! Runtime values. Aggregates are behind `Arc` so that copying a value (e.g.
//! binding it to a comprehension variable) is O(1); only operations that
//! build new data allocate, and those are charged by [`Cost`].

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use crate::cost::Cost;
use crate::error::EvalError;
use crate::quantity::Quantity;
use crate::semver::Semver;

#[derive(Clone, Debug)]
pub(crate) enum Value {
    Null,
    Bool(bool),
    Int(i64),
    Uint(u64),
    Double(f64),
    String(Arc<str>),
    Bytes(Arc<[u8]>),
    List(Arc<ListValue>),
    Map(Arc<MapValue>),
    Quantity(Arc<Quantity>),
    Semver(Arc<Semver>),
    Optional(Option<Arc<Value>>),
}

/// A map key. CEL allows bool, int, uint and string keys.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum MapKey {
    Bool(bool),
    Int(i64),
    Uint(u64),
    String(Arc<str>),
}

impl fmt::Display for MapKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MapKey::Bool(b) => write!(f, "{b}"),
            MapKey::Int(i) => write!(f, "{i}"),
            MapKey::Uint(u) => write!(f, "{u}"),
            MapKey::String(s) => f.write_str(s),
        }
    }
}

impl MapKey {
    pub(crate) fn to_value(&self) -> Value {
        match self {
            MapKey::Bool(b) => Value::Bool(*b),
            MapKey::Int(i) => Value::Int(*i),
            MapKey::Uint(u) => Value::Uint(*u),
            MapKey::String(s) => Value::String(s.clone()),
        }
    }

    /// Key for a map literal entry.
    pub(crate) fn from_value(v: &Value) -> Result<MapKey, EvalError> {
        Ok(match v {
            Value::Bool(b) => MapKey::Bool(*b),
            Value::Int(i) => MapKey::Int(*i),
            Value::Uint(u) => MapKey::Uint(*u),
            Value::String(s) => MapKey::String(s.clone()),
            other => {
                return Err(EvalError::Other(format!(
                    "unsupported key type: {}",
                    other.type_name()
                )))
            }
        })
    }

    /// All keys numerically equal to `v` (CEL's heterogeneous key lookup).
    fn candidates(v: &Value) -> Vec<MapKey> {
        match v {
            Value::Bool(b) => vec![MapKey::Bool(*b)],
            Value::String(s) => vec![MapKey::String(s.clone())],
            Value::Int(i) => {
                let mut c = vec![MapKey::Int(*i)];
                if let Ok(u) = u64::try_from(*i) {
                    c.push(MapKey::Uint(u));
                }
                c
            }
            Value::Uint(u) => {
                let mut c = vec![MapKey::Uint(*u)];
                if let Ok(i) = i64::try_from(*u) {
                    c.push(MapKey::Int(i));
                }
                c
            }
            Value::Double(d) if d.fract() == 0.0 => {
                let mut c = Vec::new();
                if *d >= -9.223_372_036_854_776e18 && *d < 9.223_372_036_854_776e18 {
                    c.push(MapKey::Int(*d as i64));
                }
                if *d >= 0.0 && *d < 1.844_674_407_370_955_2e19 {
                    c.push(MapKey::Uint(*d as u64));
                }
                c
            }
            _ => Vec::new(),
        }
    }
}

/// Looks `key` up with CEL's heterogeneous numeric key equality.
pub(crate) fn find_key<'m>(entries: &'m BTreeMap<MapKey, Value>, key: &Value) -> Option<&'m Value> {
    MapKey::candidates(key).iter().find_map(|k| entries.get(k))
}

/// Maximum nesting of container values (lists, maps, optionals).
///
/// Values can share structure, so nesting is not bounded by the expression
/// depth alone (`cel.bind` and comprehensions combine values from sibling
/// subtrees). Every recursive walk over values (equality, flatten, drop)
/// relies on this bound, which the evaluator enforces wherever nesting
/// grows: list/map literals, `map()` results and optional construction.
pub(crate) const MAX_VALUE_NESTING: u32 = 128;

/// A list with its cached nesting depth.
#[derive(Debug)]
pub(crate) struct ListValue {
    items: Vec<Value>,
    depth: u32,
}

impl std::ops::Deref for ListValue {
    type Target = [Value];
    fn deref(&self) -> &[Value] {
        &self.items
    }
}

#[derive(Debug, Default)]
pub(crate) struct MapValue {
    pub entries: BTreeMap<MapKey, Value>,
    /// Missing keys read as an empty map instead of an error. Used for
    /// `device.attributes` and `device.capacity`, mirroring upstream's
    /// `newStringInterfaceMapWithDefault`.
    pub default_empty: bool,
    depth: u32,
}

impl MapValue {
    pub(crate) fn new(entries: BTreeMap<MapKey, Value>, default_empty: bool) -> MapValue {
        let depth = 1 + entries.values().map(Value::depth).max().unwrap_or(0);
        MapValue {
            entries,
            default_empty,
            depth,
        }
    }

    pub(crate) fn get(&self, key: &Value) -> Option<&Value> {
        find_key(&self.entries, key)
    }

    pub(crate) fn contains(&self, key: &Value) -> bool {
        self.get(key).is_some()
    }

    pub(crate) fn empty() -> Value {
        Value::map(MapValue::new(BTreeMap::new(), false))
    }
}

impl Value {
    pub(crate) fn string(s: impl Into<Arc<str>>) -> Value {
        Value::String(s.into())
    }

    pub(crate) fn list(items: Vec<Value>) -> Value {
        let depth = 1 + items.iter().map(Value::depth).max().unwrap_or(0);
        Value::List(Arc::new(ListValue { items, depth }))
    }

    pub(crate) fn map(m: MapValue) -> Value {
        Value::Map(Arc::new(m))
    }

    pub(crate) fn some(v: Value) -> Value {
        Value::Optional(Some(Arc::new(v)))
    }

    /// Nesting depth; O(1) for lists and maps, and bounded by
    /// [`MAX_VALUE_NESTING`] through chains of optionals.
    pub(crate) fn depth(&self) -> u32 {
        match self {
            Value::List(l) => l.depth,
            Value::Map(m) => m.depth,
            Value::Optional(Some(v)) => v.depth().saturating_add(1),
            _ => 0,
        }
    }

    /// Rejects values nested deeper than [`MAX_VALUE_NESTING`].
    pub(crate) fn check_nesting(self) -> Result<Value, EvalError> {
        if self.depth() > MAX_VALUE_NESTING {
            Err(EvalError::Other(format!(
                "value nesting exceeds the limit of {MAX_VALUE_NESTING}"
            )))
        } else {
            Ok(self)
        }
    }

    pub(crate) fn type_name(&self) -> &'static str {
        match self {
            Value::Null => "null_type",
            Value::Bool(_) => "bool",
            Value::Int(_) => "int",
            Value::Uint(_) => "uint",
            Value::Double(_) => "double",
            Value::String(_) => "string",
            Value::Bytes(_) => "bytes",
            Value::List(_) => "list",
            Value::Map(_) => "map",
            Value::Quantity(_) => "kubernetes.Quantity",
            Value::Semver(_) => "kubernetes.Semver",
            Value::Optional(_) => "optional_type",
        }
    }

    /// The zero value test used by `optional.ofNonZeroValue`.
    pub(crate) fn is_zero(&self) -> bool {
        match self {
            Value::Null => true,
            Value::Bool(b) => !b,
            Value::Int(i) => *i == 0,
            Value::Uint(u) => *u == 0,
            Value::Double(d) => *d == 0.0,
            Value::String(s) => s.is_empty(),
            Value::Bytes(b) => b.is_empty(),
            Value::List(l) => l.is_empty(),
            Value::Map(m) => m.entries.is_empty(),
            Value::Quantity(q) => q.sign() == 0,
            Value::Semver(_) => false,
            Value::Optional(o) => o.is_none(),
        }
    }
}

/// Error for an operator/function applied to unsupported argument types.
pub(crate) fn no_overload(func: &str, args: &[&Value]) -> EvalError {
    let types: Vec<&str> = args.iter().map(|v| v.type_name()).collect();
    EvalError::NoSuchOverload(format!("{func}({})", types.join(", ")))
}

fn cmp_int_double(i: i64, d: f64) -> Option<Ordering> {
    if d.is_nan() {
        return None;
    }
    if d >= 9.223_372_036_854_776e18 {
        return Some(Ordering::Less);
    }
    if d < -9.223_372_036_854_776e18 {
        return Some(Ordering::Greater);
    }
    let t = d.trunc();
    Some(i.cmp(&(t as i64)).then(0f64.partial_cmp(&(d - t))?))
}

fn cmp_uint_double(u: u64, d: f64) -> Option<Ordering> {
    if d.is_nan() {
        return None;
    }
    if d < 0.0 {
        return Some(Ordering::Greater);
    }
    if d >= 1.844_674_407_370_955_2e19 {
        return Some(Ordering::Less);
    }
    let t = d.trunc();
    Some(u.cmp(&(t as u64)).then(0f64.partial_cmp(&(d - t))?))
}

fn cmp_int_uint(i: i64, u: u64) -> Ordering {
    match u64::try_from(i) {
        Ok(i) => i.cmp(&u),
        Err(_) => Ordering::Less,
    }
}

/// Numeric comparison across int, uint and double. `None` for non-numbers;
/// `Some(None)` when a NaN makes the values unordered.
fn cmp_numeric(a: &Value, b: &Value) -> Option<Option<Ordering>> {
    use Value::*;
    Some(match (a, b) {
        (Int(x), Int(y)) => Some(x.cmp(y)),
        (Uint(x), Uint(y)) => Some(x.cmp(y)),
        (Double(x), Double(y)) => x.partial_cmp(y),
        (Int(x), Uint(y)) => Some(cmp_int_uint(*x, *y)),
        (Uint(x), Int(y)) => Some(cmp_int_uint(*y, *x).reverse()),
        (Int(x), Double(y)) => cmp_int_double(*x, *y),
        (Double(x), Int(y)) => cmp_int_double(*y, *x).map(Ordering::reverse),
        (Uint(x), Double(y)) => cmp_uint_double(*x, *y),
        (Double(x), Uint(y)) => cmp_uint_double(*y, *x).map(Ordering::reverse),
        _ => return None,
    })
}

/// Ordering for `<`, `<=`, `>`, `>=`. `Ok(None)` means unordered (NaN).
pub(crate) fn compare(
    op: &str,
    a: &Value,
    b: &Value,
    cost: &mut Cost,
) -> Result<Option<Ordering>, EvalError> {
    if let Some(o) = cmp_numeric(a, b) {
        return Ok(o);
    }
    match (a, b) {
        (Value::String(x), Value::String(y)) => {
            cost.bytes(x.len().min(y.len()))?;
            Ok(Some(x.cmp(y)))
        }
        (Value::Bytes(x), Value::Bytes(y)) => {
            cost.bytes(x.len().min(y.len()))?;
            Ok(Some(x.cmp(y)))
        }
        (Value::Bool(x), Value::Bool(y)) => Ok(Some(x.cmp(y))),
        _ => Err(no_overload(op, &[a, b])),
    }
}

/// CEL equality (heterogeneous numeric equality, deep list/map equality).
///
/// Charges as it walks: values can share structure through `Arc`, so a
/// small amount of memory can describe a huge tree, and the walk itself
/// must be bounded.
pub(crate) fn equals(a: &Value, b: &Value, cost: &mut Cost) -> Result<bool, EvalError> {
    if let Some(o) = cmp_numeric(a, b) {
        return Ok(o == Some(Ordering::Equal));
    }
    Ok(match (a, b) {
        (Value::Null, Value::Null) => true,
        (Value::Bool(x), Value::Bool(y)) => x == y,
        (Value::String(x), Value::String(y)) => {
            cost.bytes(x.len().min(y.len()))?;
            x == y
        }
        (Value::Bytes(x), Value::Bytes(y)) => {
            cost.bytes(x.len().min(y.len()))?;
            x == y
        }
        (Value::List(x), Value::List(y)) => {
            if x.len() != y.len() {
                return Ok(false);
            }
            for (p, q) in x.iter().zip(y.iter()) {
                cost.items(1)?;
                if !equals(p, q, cost)? {
                    return Ok(false);
                }
            }
            true
        }
        (Value::Map(x), Value::Map(y)) => {
            if x.entries.len() != y.entries.len() {
                return Ok(false);
            }
            for (k, v) in &x.entries {
                cost.items(1)?;
                match y.get(&k.to_value()) {
                    Some(w) if equals(v, w, cost)? => {}
                    _ => return Ok(false),
                }
            }
            true
        }
        (Value::Quantity(x), Value::Quantity(y)) => x == y,
        (Value::Semver(x), Value::Semver(y)) => x == y,
        (Value::Optional(x), Value::Optional(y)) => match (x, y) {
            (None, None) => true,
            (Some(p), Some(q)) => equals(p, q, cost)?,
            _ => false,
        },
        _ => false,
    })
}

/// Formats a double like Go's `strconv.FormatFloat(d, 'g', -1, 64)`, which
/// is what cel-go's `string(double)` produces.
pub(crate) fn format_double(d: f64) -> String {
    if d.is_nan() {
        return "NaN".to_string();
    }
    if d.is_infinite() {
        return if d > 0.0 { "+Inf" } else { "-Inf" }.to_string();
    }
    if d == 0.0 {
        return if d.is_sign_negative() { "-0" } else { "0" }.to_string();
    }
    // Rust's `{:e}` gives the shortest round-trip digits, e.g. "-1.25e-7".
    let s = format!("{d:e}");
    let (mant, exp) = s.split_once('e').unwrap_or((&s, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (neg, mant) = match mant.strip_prefix('-') {
        Some(m) => (true, m),
        None => (false, mant),
    };
    let digits: String = mant.chars().filter(|c| *c != '.').collect();
    let mut out = String::new();
    if neg {
        out.push('-');
    }
    // Go switches to exponent form when exp < -4 || exp >= 6 for shortest.
    if !(-4..6).contains(&exp) {
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        out.push('e');
        out.push(if exp < 0 { '-' } else { '+' });
        out.push_str(&format!("{:02}", exp.abs()));
    } else if exp < 0 {
        out.push_str("0.");
        for _ in 0..(-exp - 1) {
            out.push('0');
        }
        out.push_str(&digits);
    } else {
        let point = exp as usize + 1;
        if digits.len() <= point {
            out.push_str(&digits);
            for _ in digits.len()..point {
                out.push('0');
            }
        } else {
            out.push_str(&digits[..point]);
            out.push('.');
            out.push_str(&digits[point..]);
        }
    }
    out
}
