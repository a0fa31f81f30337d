//! The errors of the remote path, typed so that what went wrong — not the wording of
//! a message — decides the `kind` label of `switchyard_remote_errors_total` and what
//! the failure policy sees.

use std::time::Duration;

/// Why a call to a sidecar got no usable answer, as the connection sees it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    /// No reply within the endpoint's timeout.
    #[error("no reply within {0:?} (timeout)")]
    Timeout(Duration),
    /// Not connected, the stream closed, the connection lost, or the reply lost.
    #[error("{0}")]
    Unavailable(String),
    /// A reply that does not answer the call (wrong kind, misaligned batch).
    #[error("bad reply: {0}")]
    BadReply(String),
}

/// A remote plugin's failure, by what went wrong; `context` says where (the
/// extension point or step), the message the details.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RemoteError {
    /// The sidecar is not connected, the stream closed, or it reconnected during the
    /// attempt.
    #[error("{context}: {message}")]
    Unavailable {
        context: &'static str,
        message: String,
    },
    /// No reply within the endpoint's timeout.
    #[error("{context}: {message}")]
    Timeout {
        context: &'static str,
        message: String,
    },
    /// A reply that breaks the contract (wrong kind, generation, ids, counts, scores).
    #[error("{context}: {message}")]
    BadReply {
        context: &'static str,
        message: String,
    },
    /// The plugin itself answered with an error.
    #[error("{context}: {message}")]
    Plugin {
        context: &'static str,
        message: String,
    },
    /// The snapshot could not be replicated to the sidecar.
    #[error("{context}: {message}")]
    Replication {
        context: &'static str,
        message: String,
    },
}

/// Why the remote plugins could not be set up at start: a configuration that does not
/// match the sidecar, or a sidecar that never answered and has no plugins listed.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("remotePlugins[{index}] ({endpoint}): the configuration lists plugin {name:?}, but the sidecar serves {served:?}")]
    NotServed {
        index: usize,
        endpoint: String,
        name: String,
        served: Vec<String>,
    },
    #[error("remotePlugins[{index}] ({endpoint}): no handshake within {timeout:?} ({why}); start the sidecar first, or list its plugins in remotePlugins[{index}].plugins so the scheduler can start without it")]
    NoHandshake {
        index: usize,
        endpoint: String,
        timeout: Duration,
        why: String,
    },
    #[error("remotePlugins[{index}] ({endpoint}): plugin {name:?} is already registered (a built-in or another sidecar has that name)")]
    AlreadyRegistered {
        index: usize,
        endpoint: String,
        name: String,
    },
    #[error("cannot start the connection thread: {0}")]
    Thread(#[source] std::io::Error),
}

impl RemoteError {
    /// The `kind` label of `switchyard_remote_errors_total`: what went wrong, in the
    /// words an operator alerts on.
    pub fn kind(&self) -> &'static str {
        match self {
            RemoteError::Unavailable { .. } => "unavailable",
            RemoteError::Timeout { .. } => "timeout",
            RemoteError::BadReply { .. } => "bad_reply",
            RemoteError::Plugin { .. } => "plugin_error",
            RemoteError::Replication { .. } => "replication",
        }
    }

    /// A call at `context` that failed as the connection saw it.
    pub fn call(context: &'static str, e: CallError) -> Self {
        let message = e.to_string();
        match e {
            CallError::Timeout(_) => RemoteError::Timeout { context, message },
            CallError::Unavailable(_) => RemoteError::Unavailable { context, message },
            CallError::BadReply(_) => RemoteError::BadReply { context, message },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_follow_what_went_wrong() {
        let t = RemoteError::call("Filter", CallError::Timeout(Duration::from_secs(1)));
        assert_eq!(t.kind(), "timeout");
        assert_eq!(t.to_string(), "Filter: no reply within 1s (timeout)");
        let b = RemoteError::call("Filter", CallError::BadReply("item 3 missing".into()));
        assert_eq!(b.kind(), "bad_reply");
        assert_eq!(b.to_string(), "Filter: bad reply: item 3 missing");
        let u = RemoteError::call(
            "send",
            CallError::Unavailable("the stream is closed".into()),
        );
        assert_eq!(u.kind(), "unavailable");
        let p = RemoteError::Plugin {
            context: "Filter failed",
            message: "boom".into(),
        };
        assert_eq!(p.kind(), "plugin_error");
        assert_eq!(p.to_string(), "Filter failed: boom");
    }
}
