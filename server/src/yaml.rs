//! YAML reading with one set of rules everywhere: only `true`/`false` are booleans
//! (YAML 1.2), so a node named `n` or a label value `no` stays a string.
//!
//! Limits stop bombs, not big clusters. Everything that grows with the text itself
//! (nodes, events, scalar bytes) is allowed in proportion to the text's length, so a
//! 40 MB `kind: List` of 100,000 pods loads; what can grow faster than the text is capped
//! at serde-saphyr's defaults: aliases and anchors (50,000 each, and at most 10 aliases
//! per anchor beyond the first 100), the events aliases replay (1,000,000), and nesting
//! depth (64; a Kubernetes object needs under 20). The text itself is bounded by the
//! reader's `--max-input-bytes`.

use serde::de::DeserializeOwned;

/// Nodes (mappings, sequences and scalars) allowed per byte of text beyond the floor:
/// the shortest node, `a: 1` in flow style, takes about 2 bytes.
const NODES_PER_BYTE_DIVISOR: usize = 2;

fn options(text_len: usize) -> serde_saphyr::Options {
    let mut o = serde_saphyr::Options::default();
    o.strict_booleans = true;
    let mut b = serde_saphyr::Budget::default();
    b.max_nodes = b.max_nodes.max(text_len / NODES_PER_BYTE_DIVISOR + 1);
    b.max_events = b.max_events.max(text_len + 1);
    b.max_total_scalar_bytes = b.max_total_scalar_bytes.max(text_len + 1);
    b.max_documents = b.max_documents.max(text_len / 4 + 1);
    o.budget = Some(b);
    o
}

/// A YAML error; a breached limit says which, and why it exists.
#[derive(Debug)]
pub struct Error(serde_saphyr::Error);

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use serde_saphyr::budget::BudgetBreach as B;
        let serde_saphyr::Error::Budget { breach, .. } = &self.0 else {
            return self.0.fmt(f);
        };
        let what = match breach {
            B::Aliases { aliases } => format!("{aliases} aliases (limit 50000)"),
            B::Anchors { anchors } => format!("{anchors} anchors (limit 50000)"),
            B::Depth { depth } => format!("nesting {depth} deep (limit 64)"),
            B::AliasAnchorRatio { aliases, anchors } => {
                format!("{aliases} aliases for {anchors} anchors (at most 10 per anchor)")
            }
            other => format!("{other:?}"),
        };
        write!(
            f,
            "refused as a YAML bomb: {what}; aliases and nesting that expand far beyond \
             the text are capped (see docs/reliability.md, \"Limits\")"
        )
    }
}

impl std::error::Error for Error {}

pub fn from_str<T: DeserializeOwned>(text: &str) -> Result<T, Error> {
    serde_saphyr::from_str_with_options(text, options(text.len())).map_err(Error)
}

pub fn from_multiple<T: DeserializeOwned>(text: &str) -> Result<Vec<T>, Error> {
    serde_saphyr::from_multiple_with_options(text, options(text.len())).map_err(Error)
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_true_and_false_are_booleans() {
        let v: serde_json::Value = super::from_str("{a: n, b: yes, c: true, d: 'on'}").unwrap();
        assert_eq!(v["a"], "n");
        assert_eq!(v["b"], "yes");
        assert_eq!(v["c"], true);
    }
}
