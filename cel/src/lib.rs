//! A cost-bounded CEL (Common Expression Language) subset for Kubernetes
//! Dynamic Resource Allocation device selectors.
//!
//! Upstream (kube-scheduler) evaluates selectors with cel-go under a runtime
//! cost limit. The general-purpose Rust `cel` crate has no cost limit, so a
//! hostile selector could pin a scheduler thread or exhaust memory. This
//! crate implements exactly the subset DRA needs, with cost accounting that
//! bounds both time and memory, and hard limits on nesting so that no input
//! can overflow the stack.
//!
//! ```
//! use switchyard_cel::{AttributeValue, DeviceValue, Program, Quantity, DEFAULT_COST_LIMIT};
//!
//! let prog = Program::compile(
//!     r#"device.attributes["gpu.example.com"].model == "a100" &&
//!        device.capacity["gpu.example.com"].memory.compareTo(quantity("40Gi")) >= 0"#,
//! ).unwrap();
//! let dev = DeviceValue::new(
//!     "gpu.example.com",
//!     vec![("model".into(), AttributeValue::String("a100".into()))],
//!     vec![("memory".into(), Quantity::parse("80Gi").unwrap())],
//!     None,
//! );
//! assert_eq!(prog.eval_device(&dev, DEFAULT_COST_LIMIT), Ok(true));
//! ```

mod ast;
mod check;
mod cost;
mod error;
mod eval;
mod functions;
mod lexer;
mod parser;
mod quantity;
mod semver;
mod types;
mod value;

use std::collections::BTreeMap;
use std::sync::Arc;

pub use error::{CompileError, EvalError};
pub use parser::MAX_RECURSION_DEPTH;
pub use quantity::{Quantity, QuantityError};
pub use semver::Semver;

use value::{MapKey, MapValue, Value};

/// Maximum expression length in bytes (`CELSelectorExpressionMaxLength`).
pub const MAX_EXPRESSION_LEN: usize = 10 * 1024;

/// Default runtime cost limit (`CELSelectorExpressionMaxCost`).
pub const DEFAULT_COST_LIMIT: u64 = 1_000_000;

/// A compiled expression. Cheap to clone (`Arc` inside), `Send + Sync`.
#[derive(Clone, Debug)]
pub struct Program {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    source: String,
    expr: ast::Expr,
    regexes: functions::RegexCache,
}

impl Program {
    /// Parses and checks `src` for the DRA device-selector environment (the
    /// only variable is `device`).
    ///
    /// Errors: too long (> [`MAX_EXPRESSION_LEN`] bytes), syntax errors (with
    /// line:column), nesting beyond [`MAX_RECURSION_DEPTH`], unknown
    /// variables, unknown functions, statically impossible operator uses,
    /// invalid constant regular expressions, and a result type that is
    /// statically known and not bool.
    pub fn compile(src: &str) -> Result<Program, CompileError> {
        if src.len() > MAX_EXPRESSION_LEN {
            return Err(CompileError::TooLong {
                len: src.len(),
                max: MAX_EXPRESSION_LEN,
            });
        }
        let mut expr = parser::parse(src)?;
        let mut regexes = functions::RegexCache::new();
        check::Checker::new(&mut regexes).check_root(&mut expr)?;
        Ok(Program {
            inner: Arc::new(Inner {
                source: src.to_string(),
                expr,
                regexes,
            }),
        })
    }

    /// Evaluates against a device with the given runtime cost limit.
    pub fn eval_device(&self, device: &DeviceValue, cost_limit: u64) -> Result<bool, EvalError> {
        eval::run(
            &self.inner.expr,
            &device.value,
            &self.inner.regexes,
            cost_limit,
        )
    }

    /// Whether both are the same compiled program (not merely equal text): a cache key
    /// that cannot alias while the program is kept alive.
    pub fn same(&self, other: &Program) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// The source text this program was compiled from.
    pub fn source(&self) -> &str {
        &self.inner.source
    }
}

/// The value of a device attribute.
#[derive(Clone, Debug, PartialEq)]
pub enum AttributeValue {
    Int(i64),
    Bool(bool),
    String(String),
    Version(Semver),
}

/// A DRA device as CEL sees it. Devices are immutable, so build this once
/// per device and reuse it for every evaluation; evaluation never copies it.
#[derive(Clone, Debug)]
pub struct DeviceValue {
    value: Value,
}

/// Splits a qualified name into (domain, id); unqualified names belong to
/// the driver's domain (upstream `parseQualifiedName`).
fn split_qualified<'n>(name: &'n str, driver: &'n str) -> (&'n str, &'n str) {
    match name.split_once('/') {
        Some((domain, id)) => (domain, id),
        None => (driver, name),
    }
}

/// Builds `map(domain, map(id, value))`; looking up a missing domain yields
/// an empty map, a missing id is `no such key`.
fn two_level(driver: &str, items: Vec<(String, Value)>) -> Value {
    let mut domains: BTreeMap<String, BTreeMap<MapKey, Value>> = BTreeMap::new();
    for (name, v) in items {
        let (domain, id) = split_qualified(&name, driver);
        domains
            .entry(domain.to_string())
            .or_default()
            .insert(MapKey::String(Arc::from(id)), v);
    }
    let outer = domains
        .into_iter()
        .map(|(d, ids)| {
            (
                MapKey::String(Arc::from(d)),
                Value::map(MapValue::new(ids, false)),
            )
        })
        .collect();
    Value::map(MapValue::new(outer, true))
}

impl DeviceValue {
    /// Builds the `device` variable.
    ///
    /// `allow_multiple_allocations: None` reads as `false`, matching
    /// upstream's `ptr.Deref(input.AllowMultipleAllocations, false)`.
    /// Later duplicates of the same qualified name replace earlier ones.
    pub fn new(
        driver: &str,
        attributes: Vec<(String, AttributeValue)>,
        capacity: Vec<(String, Quantity)>,
        allow_multiple_allocations: Option<bool>,
    ) -> DeviceValue {
        let attrs = attributes
            .into_iter()
            .map(|(n, a)| {
                let v = match a {
                    AttributeValue::Int(i) => Value::Int(i),
                    AttributeValue::Bool(b) => Value::Bool(b),
                    AttributeValue::String(s) => Value::string(s),
                    AttributeValue::Version(v) => Value::Semver(Arc::new(v)),
                };
                (n, v)
            })
            .collect();
        let caps = capacity
            .into_iter()
            .map(|(n, q)| (n, Value::Quantity(Arc::new(q))))
            .collect();
        let mut fields = BTreeMap::new();
        fields.insert(MapKey::String(Arc::from("driver")), Value::string(driver));
        fields.insert(
            MapKey::String(Arc::from("attributes")),
            two_level(driver, attrs),
        );
        fields.insert(
            MapKey::String(Arc::from("capacity")),
            two_level(driver, caps),
        );
        fields.insert(
            MapKey::String(Arc::from("allowMultipleAllocations")),
            Value::Bool(allow_multiple_allocations.unwrap_or(false)),
        );
        DeviceValue {
            value: Value::map(MapValue::new(fields, false)),
        }
    }
}

#[cfg(test)]
mod tests;
