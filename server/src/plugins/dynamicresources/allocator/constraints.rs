//! A claim's `matchAttribute` and `distinctAttribute` constraints during the search:
//! each device taken adds its attribute, each undo takes it back.

use std::sync::Arc;

use super::Search;
use crate::model::dra::{AttributeValue, ConstraintKind, Device};
use crate::plugins::dynamicresources::allocation::RequestData;

/// Per constraint: (value fixed, devices counted), or the distinct values taken.
pub(super) enum ConstraintState {
    Match(Option<AttributeValue>, usize),
    Distinct(Vec<AttributeValue>),
}

impl Search<'_> {
    fn constraint_applies(requests: &[Arc<str>], rd: &RequestData) -> bool {
        requests.is_empty()
            || requests
                .iter()
                .any(|r| *r == rd.base || *r == rd.result_name)
    }

    /// Adds the device to the claim's constraints; false (nothing added) if one fails.
    pub(super) fn add_constraints(&mut self, ci: usize, rd: &RequestData, device: &Device) -> bool {
        let cons = &self.prep.claims[ci].claim.spec.constraints;
        for (k, c) in cons.iter().enumerate() {
            if !Self::constraint_applies(&c.requests, rd) {
                continue;
            }
            let name = match &c.kind {
                ConstraintKind::MatchAttribute(n) | ConstraintKind::DistinctAttribute(n) => n,
            };
            let value = device.attributes.get(name).cloned();
            let ok = match (&mut self.constraint_state[ci][k], value) {
                (_, None) => false,
                (ConstraintState::Match(fixed, n), Some(v)) => {
                    if *n == 0 || fixed.as_ref() == Some(&v) {
                        *fixed = Some(v);
                        *n += 1;
                        true
                    } else {
                        false
                    }
                }
                (ConstraintState::Distinct(seen), Some(v)) => {
                    if seen.contains(&v) {
                        false
                    } else {
                        seen.push(v);
                        true
                    }
                }
            };
            if !ok {
                self.remove_constraints(ci, rd, device, k);
                return false;
            }
        }
        true
    }

    /// Undoes the device's additions to the first `upto` constraints.
    pub(super) fn remove_constraints(
        &mut self,
        ci: usize,
        rd: &RequestData,
        device: &Device,
        upto: usize,
    ) {
        let cons = &self.prep.claims[ci].claim.spec.constraints;
        for (k, c) in cons.iter().enumerate().take(upto) {
            if !Self::constraint_applies(&c.requests, rd) {
                continue;
            }
            match &mut self.constraint_state[ci][k] {
                ConstraintState::Match(fixed, n) => {
                    *n = n.saturating_sub(1);
                    if *n == 0 {
                        *fixed = None;
                    }
                }
                ConstraintState::Distinct(seen) => {
                    let name = match &c.kind {
                        ConstraintKind::MatchAttribute(n)
                        | ConstraintKind::DistinctAttribute(n) => n,
                    };
                    if let Some(v) = device.attributes.get(name) {
                        if let Some(p) = seen.iter().rposition(|s| s == v) {
                            seen.remove(p);
                        }
                    }
                }
            }
        }
    }
}
