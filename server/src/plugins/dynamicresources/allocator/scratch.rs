//! The search's buffers, kept per thread between nodes and reset for each search.

use super::constraints::ConstraintState;
use super::{Prepared, Search, Taken};
use crate::model::dra::ConstraintKind;
use crate::plugins::dynamicresources::allocation::Consumed;

/// The search's buffers, kept per thread between nodes: one pod's Filter searches
/// every node, and building them afresh for each was a sixth of the cycle
/// (ExtendedResourceScoring's profile: malloc and free).
#[derive(Default)]
pub(super) struct Scratch {
    pub(super) selectable: Vec<i8>,
    pub(super) alt_base: Vec<Vec<usize>>,
    pub(super) allocating: Vec<(u32, usize)>,
    pub(super) constraint_state: Vec<Vec<ConstraintState>>,
    pub(super) results: Vec<Vec<Taken>>,
    pub(super) chosen: Vec<Vec<usize>>,
    pub(super) allocating_shares: Vec<(u32, Consumed)>,
    pub(super) counter_stack: Vec<bool>,
}

thread_local! {
    static SCRATCH: std::cell::RefCell<Scratch> = std::cell::RefCell::default();
}

/// Empties `v` to `n` cleared inner vectors, keeping their capacity.
fn reset_nested<T>(v: &mut Vec<Vec<T>>, n: usize) {
    v.truncate(n);
    for inner in v.iter_mut() {
        inner.clear();
    }
    v.resize_with(n, Vec::new);
}

impl Scratch {
    /// This thread's buffers, emptied and shaped for `prep`'s claims over
    /// `candidates` devices, and the number of request alternatives.
    pub(super) fn for_search(prep: &Prepared, candidates: usize) -> (Scratch, usize) {
        let mut s = Scratch::take();
        let claims = prep.claims.len();
        reset_nested(&mut s.alt_base, claims);
        let mut alts = 0;
        for (cd, v) in prep.claims.iter().zip(s.alt_base.iter_mut()) {
            for r in &cd.requests {
                v.push(alts);
                alts += r.len();
            }
        }
        s.selectable.clear();
        s.selectable.resize(candidates * alts, -1);
        s.allocating.clear();
        s.allocating_shares.clear();
        s.counter_stack.clear();
        reset_nested(&mut s.results, claims);
        reset_nested(&mut s.chosen, claims);
        for (cd, v) in prep.claims.iter().zip(s.chosen.iter_mut()) {
            v.resize(cd.requests.len(), 0);
        }
        reset_nested(&mut s.constraint_state, claims);
        for (cd, v) in prep.claims.iter().zip(s.constraint_state.iter_mut()) {
            v.extend(cd.claim.spec.constraints.iter().map(|k| match k.kind {
                ConstraintKind::MatchAttribute(_) => ConstraintState::Match(None, 0),
                ConstraintKind::DistinctAttribute(_) => ConstraintState::Distinct(Vec::new()),
            }));
        }
        (s, alts)
    }

    /// This thread's buffers (fresh ones if they are in use).
    fn take() -> Scratch {
        SCRATCH
            .try_with(|c| c.try_borrow_mut().map(|mut s| std::mem::take(&mut *s)))
            .ok()
            .and_then(Result::ok)
            .unwrap_or_default()
    }

    fn give_back(self) {
        let _ = SCRATCH.try_with(|c| {
            if let Ok(mut s) = c.try_borrow_mut() {
                *s = self;
            }
        });
    }
}

impl Drop for Search<'_> {
    fn drop(&mut self) {
        Scratch {
            selectable: std::mem::take(&mut self.selectable),
            alt_base: std::mem::take(&mut self.alt_base),
            allocating: std::mem::take(&mut self.allocating),
            constraint_state: std::mem::take(&mut self.constraint_state),
            results: std::mem::take(&mut self.results),
            chosen: std::mem::take(&mut self.chosen),
            allocating_shares: std::mem::take(&mut self.allocating_shares),
            counter_stack: std::mem::take(&mut self.counter_stack),
        }
        .give_back();
    }
}
