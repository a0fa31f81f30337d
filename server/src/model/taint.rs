//! Taints and tolerations, with upstream `Toleration.ToleratesTaint` semantics.

use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TaintEffect {
    NoSchedule,
    PreferNoSchedule,
    NoExecute,
}

impl TaintEffect {
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "NoSchedule" => TaintEffect::NoSchedule,
            "PreferNoSchedule" => TaintEffect::PreferNoSchedule,
            "NoExecute" => TaintEffect::NoExecute,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            TaintEffect::NoSchedule => "NoSchedule",
            TaintEffect::PreferNoSchedule => "PreferNoSchedule",
            TaintEffect::NoExecute => "NoExecute",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Taint {
    pub key: Box<str>,
    pub value: Box<str>,
    pub effect: TaintEffect,
}

impl fmt::Display for Taint {
    /// Formats as upstream does in FailedScheduling messages: `{key: value}`, or `{key}`
    /// when the taint has no value.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.value.is_empty() {
            write!(f, "{{{}}}", self.key)
        } else {
            write!(f, "{{{}: {}}}", self.key, self.value)
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TolerationOperator {
    Equal,
    Exists,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Toleration {
    /// Empty key with `Exists` tolerates every taint.
    pub key: Box<str>,
    pub operator: TolerationOperator,
    pub value: Box<str>,
    /// `None` tolerates every effect.
    pub effect: Option<TaintEffect>,
    pub toleration_seconds: Option<i64>,
}

impl Toleration {
    /// Upstream `(*Toleration).ToleratesTaint`.
    pub fn tolerates(&self, taint: &Taint) -> bool {
        if let Some(effect) = self.effect {
            if effect != taint.effect {
                return false;
            }
        }
        if !self.key.is_empty() && self.key != taint.key {
            return false;
        }
        match self.operator {
            TolerationOperator::Exists => true,
            TolerationOperator::Equal => self.value == taint.value,
        }
    }
}

/// Upstream `v1helper.TolerationsTolerateTaint`.
pub fn tolerations_tolerate_taint(tolerations: &[Toleration], taint: &Taint) -> bool {
    tolerations.iter().any(|t| t.tolerates(taint))
}

/// Upstream `v1helper.FindMatchingUntoleratedTaint`: the first taint, among those whose
/// effect passes `filter`, that no toleration tolerates.
pub fn find_matching_untolerated_taint<'a>(
    taints: &'a [Taint],
    tolerations: &[Toleration],
    filter: impl Fn(&Taint) -> bool,
) -> Option<&'a Taint> {
    taints
        .iter()
        .filter(|t| filter(t))
        .find(|t| !tolerations_tolerate_taint(tolerations, t))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taint(k: &str, v: &str, e: TaintEffect) -> Taint {
        Taint {
            key: k.into(),
            value: v.into(),
            effect: e,
        }
    }
    fn tol(k: &str, op: TolerationOperator, v: &str, e: Option<TaintEffect>) -> Toleration {
        Toleration {
            key: k.into(),
            operator: op,
            value: v.into(),
            effect: e,
            toleration_seconds: None,
        }
    }

    #[test]
    fn toleration_matching() {
        let t = taint("dedicated", "gpu", TaintEffect::NoSchedule);
        assert!(tol(
            "dedicated",
            TolerationOperator::Equal,
            "gpu",
            Some(TaintEffect::NoSchedule)
        )
        .tolerates(&t));
        assert!(tol("dedicated", TolerationOperator::Equal, "gpu", None).tolerates(&t));
        assert!(!tol("dedicated", TolerationOperator::Equal, "cpu", None).tolerates(&t));
        assert!(tol("dedicated", TolerationOperator::Exists, "", None).tolerates(&t));
        assert!(tol("", TolerationOperator::Exists, "", None).tolerates(&t));
        assert!(!tol(
            "",
            TolerationOperator::Exists,
            "",
            Some(TaintEffect::NoExecute)
        )
        .tolerates(&t));
        assert!(!tol("other", TolerationOperator::Exists, "", None).tolerates(&t));
    }

    #[test]
    fn taint_display_matches_upstream() {
        assert_eq!(
            taint("dedicated", "gpu", TaintEffect::NoSchedule).to_string(),
            "{dedicated: gpu}"
        );
        assert_eq!(
            taint(
                "node.kubernetes.io/unschedulable",
                "",
                TaintEffect::NoSchedule
            )
            .to_string(),
            "{node.kubernetes.io/unschedulable}"
        );
    }
}
