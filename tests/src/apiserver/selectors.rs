//! Label and field selectors as the API server parses and applies them
//! (apimachinery `pkg/labels/selector.go` and `pkg/fields/selector.go`; the field
//! labels each kind supports from `pkg/registry/*/strategy.go`, e.g. pods'
//! `ToSelectableFields`). A selector the server cannot parse, or a field label the
//! kind does not index, is a 400 BadRequest in the server's words.

use serde_json::Value;

use super::{Kind, NODES, PODS};

#[derive(Clone, Debug, PartialEq)]
enum LabelOp {
    Equals(String),
    NotEquals(String),
    In(Vec<String>),
    NotIn(Vec<String>),
    Exists,
    DoesNotExist,
    Gt(i64),
    Lt(i64),
}

#[derive(Clone, Debug, PartialEq)]
struct FieldTerm {
    field: String,
    value: String,
    equal: bool,
}

/// What a list or watch selects: its namespace, labels and fields.
#[derive(Clone, Debug, Default)]
pub struct Selection {
    namespace: Option<String>,
    labels: Vec<(String, LabelOp)>,
    fields: Vec<FieldTerm>,
}

/// Splits at commas outside parentheses (`a in (x,y),b` is two requirements).
fn split_top(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

fn label_requirement(term: &str) -> Result<(String, LabelOp), String> {
    let t = term.trim();
    let bad = || format!("unable to parse requirement: found '{t}', expected: identifier");
    if let Some(key) = t.strip_prefix('!') {
        let key = key.trim();
        return if key.is_empty() {
            Err(bad())
        } else {
            Ok((key.to_string(), LabelOp::DoesNotExist))
        };
    }
    let set = |rest: &str| -> Result<Vec<String>, String> {
        let rest = rest.trim();
        let inner = rest
            .strip_prefix('(')
            .and_then(|r| r.strip_suffix(')'))
            .ok_or_else(|| format!("unable to parse requirement: found '{rest}', expected: '('"))?;
        Ok(inner
            .split(',')
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
            .collect())
    };
    for (word, not) in [(" notin ", true), (" in ", false)] {
        if let Some((key, rest)) = t.split_once(word) {
            let values = set(rest)?;
            let key = key.trim().to_string();
            return Ok(if not {
                (key, LabelOp::NotIn(values))
            } else {
                (key, LabelOp::In(values))
            });
        }
    }
    for (sym, which) in [("!=", 0), ("==", 1), ("=", 1), (">", 2), ("<", 3)] {
        if let Some((key, value)) = t.split_once(sym) {
            let (key, value) = (key.trim().to_string(), value.trim().to_string());
            if key.is_empty() {
                return Err(bad());
            }
            let int = || {
                value.parse::<i64>().map_err(|_| {
                    format!("unable to parse requirement: for 'Gt', 'Lt' operators, the value must be an integer (got {value:?})")
                })
            };
            return Ok(match which {
                0 => (key, LabelOp::NotEquals(value)),
                1 => (key, LabelOp::Equals(value)),
                2 => (key, LabelOp::Gt(int()?)),
                _ => (key, LabelOp::Lt(int()?)),
            });
        }
    }
    if t.contains(char::is_whitespace) || t.contains('(') {
        return Err(bad());
    }
    Ok((t.to_string(), LabelOp::Exists))
}

/// The field labels a kind's registry indexes (others are refused).
fn supported_fields(kind: Kind) -> &'static [&'static str] {
    if kind == PODS {
        &[
            "metadata.name",
            "metadata.namespace",
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ]
    } else if kind == NODES {
        &["metadata.name", "spec.unschedulable"]
    } else if kind.namespaced {
        &["metadata.name", "metadata.namespace"]
    } else {
        &["metadata.name"]
    }
}

/// A field's value as the registry's selectable fields render it (absent is "").
fn field_value(o: &Value, field: &str) -> String {
    let mut v = o;
    for part in field.split('.') {
        v = &v[part];
    }
    match v {
        Value::String(s) => s.clone(),
        Value::Bool(b) => b.to_string(),
        Value::Null if field == "spec.hostNetwork" || field == "spec.unschedulable" => {
            "false".into()
        }
        Value::Null if field == "status.phase" => String::new(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

impl Selection {
    /// Parses `labelSelector` and `fieldSelector` for `kind`; the error is the
    /// server's 400 message.
    pub fn parse(
        kind: Kind,
        namespace: Option<&str>,
        label_selector: Option<&str>,
        field_selector: Option<&str>,
    ) -> Result<Selection, String> {
        let mut sel = Selection {
            namespace: namespace.map(str::to_string),
            ..Default::default()
        };
        if let Some(ls) = label_selector.filter(|s| !s.trim().is_empty()) {
            for term in split_top(ls) {
                sel.labels.push(label_requirement(term)?);
            }
        }
        if let Some(fs) = field_selector.filter(|s| !s.trim().is_empty()) {
            for term in fs.split(',') {
                let (field, value, equal) = if let Some((f, v)) = term.split_once("!=") {
                    (f, v, false)
                } else if let Some((f, v)) = term.split_once("==") {
                    (f, v, true)
                } else if let Some((f, v)) = term.split_once('=') {
                    (f, v, true)
                } else {
                    return Err(format!(
                        "invalid selector: '{fs}'; can't understand '{term}'"
                    ));
                };
                let field = field.trim();
                if !supported_fields(kind).contains(&field) {
                    return Err(format!("field label not supported: {field}"));
                }
                sel.fields.push(FieldTerm {
                    field: field.to_string(),
                    value: value.trim().to_string(),
                    equal,
                });
            }
        }
        Ok(sel)
    }

    /// No label or field selector: the server then counts the remaining items.
    pub fn is_everything(&self) -> bool {
        self.labels.is_empty() && self.fields.is_empty()
    }

    pub fn matches(&self, o: &Value) -> bool {
        if let Some(ns) = &self.namespace {
            if o["metadata"]["namespace"].as_str() != Some(ns.as_str()) {
                return false;
            }
        }
        let labels = &o["metadata"]["labels"];
        let label_ok = |(key, op): &(String, LabelOp)| {
            let v = labels[key.as_str()].as_str();
            match op {
                LabelOp::Equals(x) => v == Some(x.as_str()),
                LabelOp::NotEquals(x) => v != Some(x.as_str()),
                LabelOp::In(xs) => v.is_some_and(|v| xs.iter().any(|x| x == v)),
                LabelOp::NotIn(xs) => !v.is_some_and(|v| xs.iter().any(|x| x == v)),
                LabelOp::Exists => v.is_some(),
                LabelOp::DoesNotExist => v.is_none(),
                LabelOp::Gt(n) => v
                    .and_then(|v| v.parse::<i64>().ok())
                    .is_some_and(|v| v > *n),
                LabelOp::Lt(n) => v
                    .and_then(|v| v.parse::<i64>().ok())
                    .is_some_and(|v| v < *n),
            }
        };
        if !self.labels.iter().all(label_ok) {
            return false;
        }
        self.fields
            .iter()
            .all(|t| (field_value(o, &t.field) == t.value) == t.equal)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod() -> Value {
        json!({"metadata": {"name": "p", "namespace": "ns", "labels": {"app": "web", "tier": "3"}},
               "spec": {"schedulerName": "s"}, "status": {"phase": "Running"}})
    }

    fn sel(l: &str, f: &str) -> Result<Selection, String> {
        Selection::parse(PODS, None, Some(l), Some(f))
    }

    #[test]
    fn label_selectors_select_as_the_server_does() {
        let p = pod();
        for (l, want) in [
            ("app=web", true),
            ("app==web,tier", true),
            ("app!=web", false),
            ("app in (api, web)", true),
            ("app notin (web)", false),
            ("!missing", true),
            ("!app", false),
            ("tier>2,tier<4", true),
            ("tier>3", false),
            ("app in (api,db),tier", false),
        ] {
            assert_eq!(sel(l, "").expect(l).matches(&p), want, "{l}");
        }
        assert!(sel("tier>x", "").is_err());
        assert!(sel("app in web", "").is_err());
    }

    #[test]
    fn field_selectors_select_indexed_fields_and_refuse_others() {
        let p = pod();
        assert!(sel("", "spec.nodeName=").unwrap().matches(&p));
        assert!(sel("", "status.phase!=Failed,spec.schedulerName=s")
            .unwrap()
            .matches(&p));
        assert!(!sel("", "metadata.name==q").unwrap().matches(&p));
        assert_eq!(
            sel("", "spec.priority=1").unwrap_err(),
            "field label not supported: spec.priority"
        );
        assert!(
            Selection::parse(NODES, None, None, Some("spec.unschedulable=false"))
                .unwrap()
                .matches(&json!({"metadata": {"name": "n"}}))
        );
    }
}
