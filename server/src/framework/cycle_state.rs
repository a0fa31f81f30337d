//! `CycleState`: data plugins share within one scheduling cycle.
//!
//! Entries are keyed by their Rust type, so a plugin reads back exactly what it wrote
//! without string keys or downcast mistakes; lookups are a short linear scan over a
//! handful of `TypeId`s, cheaper than hashing in the per-node filter loop.

use std::any::{Any, TypeId};

/// Data a plugin keeps in the cycle state. Cloning must be cheap (share immutable parts
/// behind `Arc`): preemption clones the state per candidate node.
pub trait StateData: Any + Send + Sync {
    fn clone_box(&self) -> Box<dyn StateData>;
    fn as_any(&self) -> &dyn Any;
    fn as_any_mut(&mut self) -> &mut dyn Any;
}

impl<T: Any + Clone + Send + Sync> StateData for T {
    fn clone_box(&self) -> Box<dyn StateData> {
        Box::new(self.clone())
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

/// A set of plugin positions (bit i = the i-th plugin of an extension point).
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct PluginSet(u128);

impl PluginSet {
    pub fn insert(&mut self, i: usize) {
        if i < 128 {
            self.0 |= 1 << i;
        }
    }
    pub fn contains(&self, i: usize) -> bool {
        i < 128 && self.0 & (1 << i) != 0
    }
    pub fn is_empty(&self) -> bool {
        self.0 == 0
    }

    /// Positions `0..n` not in the set, in order: the plugins a per-node loop runs,
    /// found a word at a time instead of testing each position on every node.
    pub fn absent_below(&self, n: usize) -> impl Iterator<Item = usize> {
        let all = if n >= 128 {
            u128::MAX
        } else {
            (1u128 << n) - 1
        };
        let mut rest = all & !self.0;
        let low = std::iter::from_fn(move || {
            if rest == 0 {
                return None;
            }
            let i = rest.trailing_zeros() as usize;
            rest &= rest - 1;
            Some(i)
        });
        // Positions past 128 are never in the set (see `insert`).
        low.chain(128..n.max(128))
    }

    /// The positions in either set.
    pub fn union(&self, other: &PluginSet) -> PluginSet {
        PluginSet(self.0 | other.0)
    }
}

#[derive(Default)]
pub struct CycleState {
    entries: Vec<(TypeId, Box<dyn StateData>)>,
    /// Filter plugins whose PreFilter returned Skip.
    pub skip_filter_plugins: PluginSet,
    /// PreFilter plugins (by their index in the profile's PreFilter list) started
    /// without waiting for their outcome, until the framework confirms it.
    pub started_pre_filter: PluginSet,
    /// Score plugins whose PreScore returned Skip.
    pub skip_score_plugins: PluginSet,
    /// PreBind plugins whose PreBindPreFlight returned Skip.
    pub skip_pre_bind_plugins: PluginSet,
    /// Whether per-plugin durations are recorded in this cycle (sampled, as upstream).
    pub record_plugin_metrics: bool,
    /// The attempt's number, unique in this process (sidecars key their state by it).
    pub cycle_id: u64,
    /// Score plugins whose PreScore was deferred into their batched Score call.
    pub deferred_pre_score: PluginSet,
    /// The attempt's trace (spans only when sampled).
    pub trace: crate::telemetry::trace::AttemptTrace,
    /// Plugin calls skipped under `failurePolicy: Ignore` in this attempt.
    pub ignored: IgnoredCalls,
    /// Set while the framework runs a Reserve plugin that is the last Reserve plugin
    /// and the first Permit plugin of the profile: nothing runs between its Reserve
    /// and its Permit, so a remote plugin may send both at once (Switchyard's
    /// `permit-after-reserve`; upstream has no such thing).
    pub permit_follows_reserve: bool,
    /// Set with `permit_follows_reserve` when that plugin is also the profile's only
    /// Permit plugin: its verdict may be left to the binding cycle
    /// ([`super::unsettled_permit`]), since no other Permit plugin's answer depends
    /// on it.
    pub permit_may_settle_later: bool,
}

/// Plugin calls that failed and were skipped under `failurePolicy: Ignore` during one
/// attempt, reported with its outcome so that a placement made without a plugin's say
/// is never mistaken for its decision. Shared by the state's clones (skips in a
/// preemption dry run count too); at most a few distinct texts are kept.
#[derive(Clone, Default, Debug)]
pub struct IgnoredCalls(std::sync::Arc<std::sync::Mutex<Vec<String>>>);

impl IgnoredCalls {
    const MAX: usize = 8;

    pub fn record(&self, what: String) {
        if let Ok(mut v) = self.0.lock() {
            if v.len() < Self::MAX && !v.contains(&what) {
                v.push(what);
            }
        }
    }

    /// Everything recorded so far, leaving none.
    pub fn take(&self) -> Vec<String> {
        self.0
            .lock()
            .map(|mut v| std::mem::take(&mut *v))
            .unwrap_or_default()
    }
}

impl CycleState {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn read<T: StateData>(&self) -> Option<&T> {
        let id = TypeId::of::<T>();
        self.entries
            .iter()
            .find(|(k, _)| *k == id)
            .and_then(|(_, v)| (**v).as_any().downcast_ref::<T>())
    }

    pub fn read_mut<T: StateData>(&mut self) -> Option<&mut T> {
        let id = TypeId::of::<T>();
        self.entries
            .iter_mut()
            .find(|(k, _)| *k == id)
            .and_then(|(_, v)| (**v).as_any_mut().downcast_mut::<T>())
    }

    pub fn write<T: StateData>(&mut self, value: T) {
        let id = TypeId::of::<T>();
        match self.entries.iter_mut().find(|(k, _)| *k == id) {
            Some(e) => e.1 = Box::new(value),
            None => self.entries.push((id, Box::new(value))),
        }
    }

    pub fn delete<T: StateData>(&mut self) {
        let id = TypeId::of::<T>();
        self.entries.retain(|(k, _)| *k != id);
    }
}

impl Clone for CycleState {
    fn clone(&self) -> Self {
        CycleState {
            entries: self
                .entries
                .iter()
                .map(|(k, v)| (*k, (**v).clone_box()))
                .collect(),
            skip_filter_plugins: self.skip_filter_plugins,
            started_pre_filter: self.started_pre_filter,
            skip_score_plugins: self.skip_score_plugins,
            skip_pre_bind_plugins: self.skip_pre_bind_plugins,
            record_plugin_metrics: self.record_plugin_metrics,
            cycle_id: self.cycle_id,
            deferred_pre_score: self.deferred_pre_score,
            trace: self.trace.clone(),
            ignored: self.ignored.clone(),
            permit_follows_reserve: self.permit_follows_reserve,
            permit_may_settle_later: self.permit_may_settle_later,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Debug, PartialEq)]
    struct A(u32);
    #[derive(Clone, Debug, PartialEq)]
    struct B(&'static str);

    #[test]
    fn typed_entries_and_deep_clone() {
        let mut s = CycleState::new();
        s.write(A(1));
        s.write(B("x"));
        s.skip_filter_plugins.insert(3);
        let mut c = s.clone();
        c.read_mut::<A>().unwrap().0 = 2;
        assert_eq!(s.read::<A>(), Some(&A(1)));
        assert_eq!(c.read::<A>(), Some(&A(2)));
        assert!(c.skip_filter_plugins.contains(3));
        c.delete::<B>();
        assert!(c.read::<B>().is_none());
        assert_eq!(s.read::<B>(), Some(&B("x")));
    }
}
