//! What a call in flight needs to judge its reply ([`Meta`]), and what a failure
//! becomes: a typed [`RemoteError`] counted by kind in
//! `switchyard_remote_errors_total`, a plugin error naming plugin and endpoint, and
//! the endpoint's failure policy applied.

use super::*;

/// What a call in flight needs to judge its reply.
pub(super) struct Meta {
    pub(super) name: Arc<str>,
    pub(super) ep: Endpoint,
    /// The last score-ahead answer (from a Filter reply), for the Score that follows.
    pub(super) ahead: Mutex<Option<Ahead>>,
    /// Answers reused for alike pods (plugins that declare pod signatures).
    pub(super) alike: Mutex<AlikeAnswers>,
    /// The last pods' signatures (the current attempt's and the lookaheads'), by
    /// spec (held, so its address is not reused) and name; newest last.
    pub(super) signatures: Mutex<Vec<SignedPod>>,
    /// Nodes' values of the label a label-scored plugin scores by.
    pub(super) label_domains: Mutex<super::label_score::LabelDomains>,
}

impl Meta {
    pub(super) fn policy(&self) -> FailurePolicy {
        self.ep.config().failure_policy
    }

    /// The plugin error `e` becomes: counted by kind, logged, and named after the
    /// plugin and endpoint.
    pub(super) fn fail(&self, e: RemoteError) -> Status {
        crate::telemetry::metrics::REMOTE_ERRORS.add(&[&self.ep.config().endpoint, e.kind()], 1);
        let s = Status::error(format!(
            "remote plugin {:?} ({}): {e}",
            self.name,
            self.ep.config().endpoint
        ));
        self.ep.count_error(e.kind(), &s.message());
        s
    }

    /// A call at `context` that got no usable answer.
    pub(super) fn call_failed(&self, context: &'static str, e: CallError) -> Status {
        self.fail(RemoteError::call(context, e))
    }

    /// A reply that breaks the contract.
    pub(super) fn bad_reply(&self, message: impl Into<String>) -> Status {
        self.fail(RemoteError::BadReply {
            context: "bad reply",
            message: message.into(),
        })
    }

    /// The plugin answered with an error at `context`.
    pub(super) fn plugin_failed(
        &self,
        context: &'static str,
        message: impl Into<String>,
    ) -> Status {
        self.fail(RemoteError::Plugin {
            context,
            message: message.into(),
        })
    }

    pub(super) fn unavailable(&self, message: impl Into<String>) -> Status {
        self.fail(RemoteError::Unavailable {
            context: "unavailable",
            message: message.into(),
        })
    }

    pub(super) fn replication_failed(&self, message: impl Into<String>) -> Status {
        self.fail(RemoteError::Replication {
            context: "replication",
            message: message.into(),
        })
    }

    /// Notes a call skipped under `failurePolicy: Ignore` for the attempt's report.
    pub(super) fn ignored(&self, log: &IgnoredCalls, point: &str, s: &Status) {
        log.record(format!(
            "{point} skipped under failurePolicy Ignore: {}",
            s.message()
        ));
    }

    /// A reply of the wrong kind for the stream it came on.
    pub(super) fn unexpected(&self, r: Reply) -> Status {
        self.bad_reply(format!("unexpected {r:?}"))
    }

    pub(super) fn check_generation(&self, got: u64, want: u64) -> Result<(), Status> {
        if got != want {
            return Err(self.bad_reply(format!(
                "answered for generation {got}, the call named {want}"
            )));
        }
        Ok(())
    }
}

impl Meta {
    /// Applies the failure policy: `Ignore` turns an error into `neutral`, recorded in
    /// the attempt's `ignored` calls (when there is an attempt) to be reported with it.
    pub(super) fn apply_policy<T>(
        &self,
        ignored: Option<&IgnoredCalls>,
        point: &str,
        r: Result<T, Status>,
        neutral: impl FnOnce() -> T,
    ) -> Result<T, Status> {
        match r {
            Err(s) if s.code() == Code::Error && self.policy() == FailurePolicy::Ignore => {
                if let Some(log) = ignored {
                    self.ignored(log, point, &s);
                }
                Ok(neutral())
            }
            r => r,
        }
    }

    /// The status a Reserve, Unreserve, PreBind, Bind or PostBind reply carries; an
    /// error answer is the plugin's failure.
    pub(super) fn status_reply(&self, reply: Reply, g: u64) -> Result<Status, Status> {
        match reply {
            Reply::Status(pb::StatusResponse {
                generation, status, ..
            })
            | Reply::PreScore(pb::PreScoreResponse {
                generation, status, ..
            }) => {
                self.check_generation(generation, g)?;
                let s = convert::status_from_pb(status.as_ref());
                if s.code() == Code::Error {
                    return Err(self.plugin_failed("plugin error", s.message()));
                }
                Ok(s)
            }
            other => Err(self.unexpected(other)),
        }
    }

    /// A Permit reply's status and, for a Wait, how long to wait.
    pub(super) fn permit_reply(&self, reply: Reply, g: u64) -> Result<(Status, Duration), Status> {
        match reply {
            Reply::Permit(r) => {
                self.check_generation(r.generation, g)?;
                let s = convert::status_from_pb(r.status.as_ref());
                if s.code() == Code::Error {
                    return Err(self.plugin_failed("Permit failed", s.message()));
                }
                Ok((s, Duration::from_millis(u64::from(r.timeout_millis))))
            }
            other => Err(self.unexpected(other)),
        }
    }
}

impl RemotePlugin {
    /// [`Meta::apply_policy`] for an attempt's call.
    pub(super) fn policy<T>(
        &self,
        state: Option<&CycleState>,
        point: &str,
        r: Result<T, Status>,
        neutral: impl FnOnce() -> T,
    ) -> Result<T, Status> {
        self.meta
            .apply_policy(state.map(|s| &s.ignored), point, r, neutral)
    }
}
