//! Labels, label selectors and node selectors, compiled once at ingest so matching in
//! the filter loop is a few binary searches and no string building.

use std::fmt;

/// A label map as a sorted vector: lookups are binary searches and iteration order is
/// the map's key order, as Go's sorted maps print. Keys and values share one buffer, so
/// a lookup in the filter loop touches one or two cache lines instead of chasing a
/// pointer per string.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct Labels {
    /// (key start, key end, value end) into `text`; the value starts at the key's end.
    entries: Box<[(u32, u32, u32)]>,
    text: Box<str>,
}

impl Labels {
    pub fn new<I, K, V>(pairs: I) -> Self
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<Box<str>>,
        V: Into<Box<str>>,
    {
        let mut v: Vec<(Box<str>, Box<str>)> = pairs
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v.dedup_by(|a, b| a.0 == b.0);
        let mut text = String::with_capacity(v.iter().map(|(k, v)| k.len() + v.len()).sum());
        let mut entries = Vec::with_capacity(v.len());
        for (k, val) in &v {
            let start = text.len() as u32;
            text.push_str(k);
            let key_end = text.len() as u32;
            text.push_str(val);
            entries.push((start, key_end, text.len() as u32));
        }
        Labels {
            entries: entries.into_boxed_slice(),
            text: text.into_boxed_str(),
        }
    }

    fn key_at(&self, e: &(u32, u32, u32)) -> &str {
        self.text
            .get(e.0 as usize..e.1 as usize)
            .unwrap_or_default()
    }

    fn value_at(&self, e: &(u32, u32, u32)) -> &str {
        self.text
            .get(e.1 as usize..e.2 as usize)
            .unwrap_or_default()
    }

    /// The entry for `key`. A node's few labels are scanned comparing key lengths, which
    /// live in `entries`, so the text is read only for keys of the right length: a
    /// binary search compared the text of log₂(n) keys, on a line the filter loop
    /// otherwise never touches.
    fn find(&self, key: &str) -> Option<usize> {
        if self.entries.len() <= 16 {
            let want = key.len();
            let text = self.text.as_bytes();
            return self.entries.iter().position(|e| {
                (e.1.wrapping_sub(e.0)) as usize == want
                    && text.get(e.0 as usize..e.1 as usize) == Some(key.as_bytes())
            });
        }
        self.entries
            .binary_search_by(|e| self.key_at(e).cmp(key))
            .ok()
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.find(key).map(|i| self.value_at(&self.entries[i]))
    }

    pub fn contains_key(&self, key: &str) -> bool {
        self.find(key).is_some()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.entries
            .iter()
            .map(|e| (self.key_at(e), self.value_at(e)))
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

impl fmt::Debug for Labels {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

/// Upstream `validation.IsValidLabelValue`: at most 63 characters, alphanumerics with
/// `-`, `_` and `.` inside; empty is allowed.
pub fn is_valid_label_value(v: &str) -> bool {
    v.is_empty() || (v.len() <= 63 && is_dns_like_name(v))
}

/// Upstream `validation.IsQualifiedName`: an optional DNS subdomain prefix and `/`,
/// then a name of at most 63 characters.
pub fn is_qualified_name(v: &str) -> bool {
    let (prefix, name) = match v.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, v),
    };
    if let Some(p) = prefix {
        let subdomain_ok = !p.is_empty()
            && p.len() <= 253
            && p.split('.').all(|label| {
                !label.is_empty()
                    && label
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                    && !label.starts_with('-')
                    && !label.ends_with('-')
            });
        if !subdomain_ok {
            return false;
        }
    }
    !name.is_empty() && name.len() <= 63 && is_dns_like_name(name)
}

fn is_dns_like_name(v: &str) -> bool {
    let b = v.as_bytes();
    let alnum = |c: u8| c.is_ascii_alphanumeric();
    alnum(b[0])
        && alnum(b[b.len() - 1])
        && b.iter()
            .all(|&c| alnum(c) || c == b'-' || c == b'_' || c == b'.')
}

/// Selector operators, covering both label selectors and node selector requirements.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Operator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
    Gt,
    Lt,
}

impl Operator {
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "In" => Operator::In,
            "NotIn" => Operator::NotIn,
            "Exists" => Operator::Exists,
            "DoesNotExist" => Operator::DoesNotExist,
            "Gt" => Operator::Gt,
            "Lt" => Operator::Lt,
            _ => return None,
        })
    }
}

/// One compiled requirement: `key op values`. Values are sorted for binary search;
/// for Gt/Lt the single value is pre-parsed.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Requirement {
    pub key: Box<str>,
    pub op: Operator,
    pub values: Box<[Box<str>]>,
    bound: i64,
}

/// Why a label requirement is invalid, worded as upstream `labels.NewRequirement`
/// words it (the field first), so a refused object reads as the API server would say.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RequirementError {
    #[error("key: Invalid value: {0:?}: name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character")]
    Key(String),
    #[error("values: Invalid value: {0:?}: a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character")]
    Value(String),
    #[error("values: must be specified when `operator` is '{0:?}'")]
    ValuesRequired(Operator),
    #[error("values: may not be specified when `operator` is '{0:?}'")]
    ValuesForbidden(Operator),
    #[error("values: must be specified single value when `operator` is '{0:?}'")]
    SingleValue(Operator),
    #[error("values[0]: for '{0:?}' operator, the value must be an integer")]
    NotInteger(Operator),
}

impl Requirement {
    /// Builds a requirement, validating values as upstream `labels.NewRequirement` does
    /// for the operators the scheduler uses.
    pub fn new(key: &str, op: Operator, values: Vec<String>) -> Result<Self, RequirementError> {
        if !is_qualified_name(key) {
            return Err(RequirementError::Key(key.to_string()));
        }
        if let Some(bad) = values.iter().find(|v| !is_valid_label_value(v)) {
            return Err(RequirementError::Value(bad.clone()));
        }
        let mut bound = 0;
        match op {
            Operator::In | Operator::NotIn => {
                if values.is_empty() {
                    return Err(RequirementError::ValuesRequired(op));
                }
            }
            Operator::Exists | Operator::DoesNotExist => {
                if !values.is_empty() {
                    return Err(RequirementError::ValuesForbidden(op));
                }
            }
            Operator::Gt | Operator::Lt => {
                if values.len() != 1 {
                    return Err(RequirementError::SingleValue(op));
                }
                bound = values[0]
                    .parse::<i64>()
                    .map_err(|_| RequirementError::NotInteger(op))?;
            }
        }
        let mut values: Vec<Box<str>> = values.into_iter().map(Into::into).collect();
        values.sort();
        values.dedup();
        Ok(Requirement {
            key: key.into(),
            op,
            values: values.into_boxed_slice(),
            bound,
        })
    }

    /// A field-selector requirement (`matchFields`): values are not label values, so
    /// they are not validated (node names may be longer than 63 characters).
    pub fn field(key: &str, op: Operator, value: &str) -> Self {
        Requirement {
            key: key.into(),
            op,
            values: Box::new([value.into()]),
            bound: 0,
        }
    }

    /// Whether a value (or its absence) satisfies this requirement.
    pub fn matches_value(&self, value: Option<&str>) -> bool {
        match self.op {
            Operator::In => value.is_some_and(|v| self.has_value(v)),
            Operator::NotIn => value.is_none_or(|v| !self.has_value(v)),
            Operator::Exists => value.is_some(),
            Operator::DoesNotExist => value.is_none(),
            Operator::Gt => value
                .and_then(|v| v.parse::<i64>().ok())
                .is_some_and(|v| v > self.bound),
            Operator::Lt => value
                .and_then(|v| v.parse::<i64>().ok())
                .is_some_and(|v| v < self.bound),
        }
    }

    pub fn matches(&self, labels: &Labels) -> bool {
        self.matches_value(labels.get(&self.key))
    }

    fn has_value(&self, v: &str) -> bool {
        self.values.binary_search_by(|x| (**x).cmp(v)).is_ok()
    }
}

/// A compiled `metav1.LabelSelector`. Upstream distinguishes a nil selector (matches
/// nothing) from an empty one (matches everything); `Nothing` models the former.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum LabelSelector {
    Nothing,
    Requirements(Box<[Requirement]>),
}

impl LabelSelector {
    pub fn everything() -> Self {
        LabelSelector::Requirements(Box::new([]))
    }

    pub fn matches(&self, labels: &Labels) -> bool {
        match self {
            LabelSelector::Nothing => false,
            LabelSelector::Requirements(reqs) => reqs.iter().all(|r| r.matches(labels)),
        }
    }

    pub fn is_empty(&self) -> bool {
        matches!(self, LabelSelector::Requirements(r) if r.is_empty())
    }
}

/// The `metadata.name` field, the only field a node selector term may match.
pub const NODE_FIELD_NAME: &str = "metadata.name";

/// The well-known node label naming the node (`v1.LabelHostname`).
pub const LABEL_HOSTNAME: &str = "kubernetes.io/hostname";

/// One `nodeSelectorTerm`: all expressions and fields must match. A term that failed to
/// parse, or that is empty, matches no node (upstream `LazyErrorNodeSelector`).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct NodeSelectorTerm {
    pub match_expressions: Box<[Requirement]>,
    /// Field requirements; only `metadata.name` has a value (others read as "").
    pub match_fields: Box<[Requirement]>,
    /// The node names this term pins with `metadata.name In [...]` (intersected), as
    /// NodeAffinity's PreFilter reads them; `None` when the term pins no names.
    pub name_pins: Option<Box<[Box<str>]>>,
    /// False when some expression failed to parse: the term then matches nothing.
    pub valid: bool,
}

impl NodeSelectorTerm {
    pub fn is_empty(&self) -> bool {
        self.match_expressions.is_empty() && self.match_fields.is_empty()
    }

    pub fn matches(&self, node_name: &str, labels: &Labels) -> bool {
        if !self.valid || self.is_empty() {
            return false;
        }
        self.match_expressions.iter().all(|r| r.matches(labels))
            && self.match_fields.iter().all(|r| {
                let value = if &*r.key == NODE_FIELD_NAME {
                    node_name
                } else {
                    ""
                };
                match r.op {
                    Operator::In => *r.values[0] == *value,
                    _ => *r.values[0] != *value,
                }
            })
    }
}

/// A `NodeSelector`: terms are ORed.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct NodeSelector {
    pub terms: Box<[NodeSelectorTerm]>,
}

impl NodeSelector {
    pub fn matches(&self, node_name: &str, labels: &Labels) -> bool {
        self.terms.iter().any(|t| t.matches(node_name, labels))
    }
}

/// A weighted preferred node-affinity term.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PreferredSchedulingTerm {
    pub weight: i32,
    pub term: NodeSelectorTerm,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        Labels::new(pairs.iter().map(|(k, v)| (*k, *v)))
    }

    #[test]
    fn get_finds_keys_in_small_and_large_maps() {
        for n in [0usize, 1, 3, 16, 17, 40] {
            // Keys of equal length, so the scan must compare the text too.
            let l = Labels::new((0..n).map(|i| (format!("k{i:03}"), format!("v{i}"))));
            for i in 0..n {
                assert_eq!(l.get(&format!("k{i:03}")), Some(format!("v{i}").as_str()));
            }
            assert_eq!(l.get("k999"), None);
            assert_eq!(l.get("k"), None);
            assert!(!l.contains_key("x000"));
            assert_eq!(l.contains_key("k000"), n > 0);
        }
    }

    #[test]
    fn requirements_follow_upstream_semantics() {
        let l = labels(&[("zone", "a"), ("cores", "8")]);
        let r = |k: &str, op, vals: &[&str]| {
            Requirement::new(k, op, vals.iter().map(|s| s.to_string()).collect()).unwrap()
        };
        assert!(r("zone", Operator::In, &["a", "b"]).matches(&l));
        assert!(!r("zone", Operator::In, &["b"]).matches(&l));
        assert!(r("missing", Operator::NotIn, &["b"]).matches(&l));
        assert!(!r("zone", Operator::NotIn, &["a"]).matches(&l));
        assert!(r("zone", Operator::Exists, &[]).matches(&l));
        assert!(r("missing", Operator::DoesNotExist, &[]).matches(&l));
        assert!(r("cores", Operator::Gt, &["4"]).matches(&l));
        assert!(!r("cores", Operator::Lt, &["4"]).matches(&l));
        assert!(!r("zone", Operator::Gt, &["4"]).matches(&l));
        assert!(Requirement::new("x", Operator::In, vec![]).is_err());
        assert!(Requirement::new("x", Operator::Gt, vec!["a".into()]).is_err());
        assert!(Requirement::new("x", Operator::Exists, vec!["a".into()]).is_err());
        // Gt values must be valid label values too: "-5" is not.
        assert!(Requirement::new("x", Operator::Gt, vec!["-5".into()]).is_err());
        assert!(Requirement::new("bad key!", Operator::Exists, vec![]).is_err());
        assert!(is_qualified_name("topology.kubernetes.io/zone"));
        assert!(!is_qualified_name("/zone"));
    }

    #[test]
    fn nil_selector_matches_nothing_and_empty_matches_everything() {
        let l = labels(&[("a", "b")]);
        assert!(!LabelSelector::Nothing.matches(&l));
        assert!(LabelSelector::everything().matches(&l));
    }

    #[test]
    fn empty_or_invalid_node_selector_term_matches_nothing() {
        let l = labels(&[("a", "b")]);
        let empty = NodeSelectorTerm {
            valid: true,
            ..Default::default()
        };
        assert!(!empty.matches("n", &l));
        let field = NodeSelectorTerm {
            match_fields: Box::new([Requirement::field(NODE_FIELD_NAME, Operator::In, "n")]),
            valid: true,
            ..Default::default()
        };
        assert!(field.matches("n", &l));
        assert!(!field.matches("m", &l));
        let invalid = NodeSelectorTerm {
            valid: false,
            ..field
        };
        assert!(!invalid.matches("n", &l));
    }
}
