//! Event series, as client-go's `events.EventBroadcaster` (the recorder kube-scheduler
//! uses) makes them: isomorphic events (same regarding object, reason and action from
//! this controller) within six minutes become one Event with a `series`. The first is
//! created, the second patches `series.count: 2` onto it, later ones only count,
//! written every 30 minutes and when the series ends (six minutes without another).
//! A pod retried a hundred times writes a handful of events instead of a hundred.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a series stays open after its last event (upstream `finishTime`).
pub(super) const SERIES_FINISH: Duration = Duration::from_secs(6 * 60);
/// How often an open series' count is written (upstream `refreshTime`).
pub(super) const SERIES_REFRESH: Duration = Duration::from_secs(30 * 60);

/// What makes two events isomorphic (upstream `getKey`: regarding, related, action,
/// reason, reporting controller; the note and type are not part of it).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct Key {
    pub uid: Arc<str>,
    pub reason: &'static str,
    pub action: &'static str,
}

struct Entry {
    /// The Event object the series is written onto.
    name: String,
    namespace: Arc<str>,
    count: u32,
    /// The count last written to the API server.
    written: u32,
    last_observed: Instant,
    last_observed_time: k8s_openapi::jiff::Timestamp,
    last_written: Instant,
}

/// What to write for one recorded event.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Write {
    /// A new Event named so.
    Create(String),
    /// `series` patched onto an existing Event.
    Series(SeriesPatch),
    /// Counted, written later.
    Nothing,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct SeriesPatch {
    pub name: String,
    pub namespace: Arc<str>,
    pub count: u32,
    pub last_observed_time: k8s_openapi::jiff::Timestamp,
}

impl SeriesPatch {
    /// The merge patch client-go sends (`createPatchBytesForSeries`).
    pub fn body(&self) -> serde_json::Value {
        serde_json::json!({"series": {
            "count": self.count,
            "lastObservedTime": self.last_observed_time.to_string(),
        }})
    }
}

#[derive(Default)]
pub(super) struct EventSeries(Mutex<HashMap<Key, Entry>>);

impl EventSeries {
    /// Records one event at `now`; `name` is the name a new Event would get.
    pub fn record(
        &self,
        key: Key,
        namespace: &Arc<str>,
        name: impl FnOnce() -> String,
        now: Instant,
        wall: k8s_openapi::jiff::Timestamp,
    ) -> Write {
        let Ok(mut map) = self.0.lock() else {
            return Write::Create(name());
        };
        if let Some(e) = map.get_mut(&key) {
            if now.duration_since(e.last_observed) < SERIES_FINISH {
                e.count += 1;
                e.last_observed = now;
                e.last_observed_time = wall;
                if e.count == 2 || now.duration_since(e.last_written) >= SERIES_REFRESH {
                    e.written = e.count;
                    e.last_written = now;
                    return Write::Series(SeriesPatch {
                        name: e.name.clone(),
                        namespace: e.namespace.clone(),
                        count: e.count,
                        last_observed_time: wall,
                    });
                }
                return Write::Nothing;
            }
        }
        let n = name();
        map.insert(
            key,
            Entry {
                name: n.clone(),
                namespace: namespace.clone(),
                count: 1,
                written: 1,
                last_observed: now,
                last_observed_time: wall,
                last_written: now,
            },
        );
        Write::Create(n)
    }

    /// Series that ended (nothing for [`SERIES_FINISH`]) or are due a refresh: the
    /// patches to write (ended ones only when their last count is unwritten); ended
    /// entries are forgotten.
    pub fn sweep(&self, now: Instant) -> Vec<SeriesPatch> {
        let Ok(mut map) = self.0.lock() else {
            return Vec::new();
        };
        let mut out = Vec::new();
        map.retain(|_, e| {
            let finished = now.duration_since(e.last_observed) >= SERIES_FINISH;
            let refresh = now.duration_since(e.last_written) >= SERIES_REFRESH;
            if e.count > e.written && (finished || refresh) {
                e.written = e.count;
                e.last_written = now;
                out.push(SeriesPatch {
                    name: e.name.clone(),
                    namespace: e.namespace.clone(),
                    count: e.count,
                    last_observed_time: e.last_observed_time,
                });
            }
            !finished
        });
        out
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.0.lock().map(|m| m.len()).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn isomorphic_events_become_one_series() {
        let s = EventSeries::default();
        let ns: Arc<str> = "default".into();
        let key = Key {
            uid: "u1".into(),
            reason: "FailedScheduling",
            action: "Scheduling",
        };
        let t0 = Instant::now();
        let wall = k8s_openapi::jiff::Timestamp::UNIX_EPOCH;
        let at = |secs| t0 + Duration::from_secs(secs);
        assert_eq!(
            s.record(key.clone(), &ns, || "p.1".into(), at(0), wall),
            Write::Create("p.1".into())
        );
        match s.record(key.clone(), &ns, || "p.2".into(), at(10), wall) {
            Write::Series(p) => assert_eq!((p.name.as_str(), p.count), ("p.1", 2)),
            w => panic!("{w:?}"),
        }
        for i in 0..50 {
            assert_eq!(
                s.record(key.clone(), &ns, || "p.x".into(), at(20 + i), wall),
                Write::Nothing
            );
        }
        // Another reason for the same pod is another series.
        let bound = Key {
            reason: "Scheduled",
            action: "Binding",
            ..key.clone()
        };
        assert!(matches!(
            s.record(bound, &ns, || "p.3".into(), at(80), wall),
            Write::Create(_)
        ));
        // Still open: nothing to sweep yet. Ended: the last count is written once.
        assert!(s.sweep(at(100)).is_empty());
        let done = s.sweep(at(69 + SERIES_FINISH.as_secs()));
        assert_eq!(done.len(), 1);
        assert_eq!(done[0].count, 52);
        assert_eq!(s.len(), 1, "the ended series is forgotten");
        // After the series ended, the next such event starts anew.
        assert!(matches!(
            s.record(key, &ns, || "p.4".into(), at(2000), wall),
            Write::Create(_)
        ));
    }
}
