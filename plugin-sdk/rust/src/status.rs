//! A plugin's verdict, with kube-scheduler's codes.

use switchyard_proto::v1 as pb;

/// Status codes as kube-scheduler defines them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Code {
    #[default]
    Success,
    /// Something went wrong; the attempt fails and the pod is retried.
    Error,
    /// The pod does not fit, but preemption might help.
    Unschedulable,
    /// The pod does not fit and preemption cannot help.
    UnschedulableAndUnresolvable,
    /// Permit: hold the pod until allowed, rejected or timed out.
    Wait,
    /// Skip this plugin's later calls for this pod (PreFilter, PreScore).
    Skip,
    /// The pod waits for something outside the scheduler.
    Pending,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Status {
    pub code: Code,
    pub reasons: Vec<String>,
}

impl Status {
    pub fn success() -> Self {
        Status::default()
    }
    pub fn new(code: Code, reason: impl Into<String>) -> Self {
        Status {
            code,
            reasons: vec![reason.into()],
        }
    }
    pub fn error(reason: impl Into<String>) -> Self {
        Status::new(Code::Error, reason)
    }
    pub fn unschedulable(reason: impl Into<String>) -> Self {
        Status::new(Code::Unschedulable, reason)
    }
    pub fn unresolvable(reason: impl Into<String>) -> Self {
        Status::new(Code::UnschedulableAndUnresolvable, reason)
    }
    pub fn skip() -> Self {
        Status {
            code: Code::Skip,
            reasons: Vec::new(),
        }
    }
    pub fn wait() -> Self {
        Status {
            code: Code::Wait,
            reasons: Vec::new(),
        }
    }
    pub fn is_success(&self) -> bool {
        self.code == Code::Success
    }
    /// The reasons joined, as kube-scheduler prints a status.
    pub fn message(&self) -> String {
        self.reasons.join(", ")
    }

    pub(crate) fn to_pb(&self) -> pb::Status {
        let code = match self.code {
            Code::Success => pb::Code::Success,
            Code::Error => pb::Code::Error,
            Code::Unschedulable => pb::Code::Unschedulable,
            Code::UnschedulableAndUnresolvable => pb::Code::UnschedulableAndUnresolvable,
            Code::Wait => pb::Code::Wait,
            Code::Skip => pb::Code::Skip,
            Code::Pending => pb::Code::Pending,
        };
        pb::Status {
            code: code as i32,
            reasons: self.reasons.clone(),
        }
    }

    pub(crate) fn from_pb(s: &pb::Status) -> Status {
        let code = match pb::Code::try_from(s.code) {
            Ok(pb::Code::Success) => Code::Success,
            Ok(pb::Code::Unschedulable) => Code::Unschedulable,
            Ok(pb::Code::UnschedulableAndUnresolvable) => Code::UnschedulableAndUnresolvable,
            Ok(pb::Code::Wait) => Code::Wait,
            Ok(pb::Code::Skip) => Code::Skip,
            Ok(pb::Code::Pending) => Code::Pending,
            Ok(pb::Code::Error) | Err(_) => Code::Error,
        };
        Status {
            code,
            reasons: s.reasons.clone(),
        }
    }
}
