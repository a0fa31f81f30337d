//! The Switchyard plugin contract, version 1: the messages and the `Plugin` service
//! (client for the scheduler, server for sidecars). The design is in `proto/README.md`.

#![allow(clippy::all, missing_docs)]

pub mod v1 {
    tonic::include_proto!("switchyard.plugin.v1");
}

/// The protocol version this crate speaks.
pub const PROTOCOL_VERSION: &str = "v1";

/// The environment variable a sidecar reads its listen address from when it has no
/// `--listen` flag; the scheduler sets it for sidecars it starts itself.
pub const LISTEN_ENV: &str = "SWITCHYARD_PLUGIN_LISTEN";

/// How many CycleStart pods a sidecar keeps for `PodUpdate`s before it forgets them
/// all; the scheduler applies the same rule (see `PodUpdate` in the proto).
pub const MAX_PENDING_PODS: usize = 1024;

/// The items a score-ahead answer covers (`FilterRequest.score_first`): the first
/// `first` items of a batch of `len` that are not in `failed` (ascending), in batch
/// order. Both ends compute it, so the answer carries scores only.
pub fn score_ahead_items(
    len: usize,
    failed: impl IntoIterator<Item = usize>,
    first: usize,
) -> Vec<usize> {
    let mut failed = failed.into_iter().peekable();
    let mut items = Vec::with_capacity(first.min(len));
    for i in 0..len {
        if items.len() == first {
            break;
        }
        if failed.peek() == Some(&i) {
            failed.next();
        } else {
            items.push(i);
        }
    }
    items
}

#[cfg(test)]
mod tests {
    #[test]
    fn score_ahead_items_skip_failures_and_stop_at_first() {
        assert_eq!(super::score_ahead_items(6, [1, 2], 3), vec![0, 3, 4]);
        assert_eq!(super::score_ahead_items(3, [0], 5), vec![1, 2]);
        assert_eq!(super::score_ahead_items(3, [], 0), Vec::<usize>::new());
    }
}
