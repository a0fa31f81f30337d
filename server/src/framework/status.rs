//! `Status`: what every plugin call returns, with kube-scheduler's codes and meanings.

use smallvec::SmallVec;
use std::borrow::Cow;
use std::fmt;

use super::interned::PluginName;

/// Most statuses carry one reason; keeping it inline spares Filter an allocation per
/// rejected node.
type Reasons = SmallVec<[Cow<'static, str>; 1]>;

/// Status codes, as upstream `framework.Code`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Code {
    /// The plugin ran and the pod may proceed.
    Success,
    /// An internal error: the attempt fails and the pod is retried with backoff.
    Error,
    /// The pod does not fit now; preemption may help on the nodes that said this.
    Unschedulable,
    /// The pod does not fit and preemption cannot change that on this node.
    UnschedulableAndUnresolvable,
    /// Permit only: the pod waits in the binding cycle.
    Wait,
    /// PreFilter / PreScore: skip this plugin's Filter / Score for this pod. Bind: not
    /// handled, try the next binder.
    Skip,
    /// The pod waits for something outside the scheduler (upstream `Pending`).
    Pending,
}

impl Code {
    pub fn as_str(self) -> &'static str {
        match self {
            Code::Success => "Success",
            Code::Error => "Error",
            Code::Unschedulable => "Unschedulable",
            Code::UnschedulableAndUnresolvable => "UnschedulableAndUnresolvable",
            Code::Wait => "Wait",
            Code::Skip => "Skip",
            Code::Pending => "Pending",
        }
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A plugin's verdict: a code, human-readable reasons, and the plugin that produced it.
/// Success carries nothing and never allocates.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Status {
    code: Option<Code>,
    reasons: Reasons,
    plugin: Option<PluginName>,
}

impl Status {
    pub const fn success() -> Self {
        Status {
            code: None,
            reasons: SmallVec::new_const(),
            plugin: None,
        }
    }

    pub fn new(code: Code, reason: impl Into<Cow<'static, str>>) -> Self {
        let reason = reason.into();
        Status {
            code: (code != Code::Success).then_some(code),
            reasons: if reason.is_empty() {
                Reasons::new()
            } else {
                smallvec::smallvec![reason]
            },
            plugin: None,
        }
    }

    pub fn with_reasons(code: Code, reasons: Vec<Cow<'static, str>>) -> Self {
        Status::from_reasons(code, reasons)
    }

    /// Like [`Status::with_reasons`] without an intermediate `Vec`.
    pub fn from_reasons(code: Code, reasons: impl IntoIterator<Item = Cow<'static, str>>) -> Self {
        Status {
            code: (code != Code::Success).then_some(code),
            reasons: reasons.into_iter().collect(),
            plugin: None,
        }
    }

    pub fn code_only(code: Code) -> Self {
        Status {
            code: (code != Code::Success).then_some(code),
            reasons: SmallVec::new_const(),
            plugin: None,
        }
    }

    pub fn error(msg: impl Into<Cow<'static, str>>) -> Self {
        Status::new(Code::Error, msg)
    }

    pub fn unschedulable(msg: impl Into<Cow<'static, str>>) -> Self {
        Status::new(Code::Unschedulable, msg)
    }

    pub fn unresolvable(msg: impl Into<Cow<'static, str>>) -> Self {
        Status::new(Code::UnschedulableAndUnresolvable, msg)
    }

    pub fn skip() -> Self {
        Status::code_only(Code::Skip)
    }

    pub fn code(&self) -> Code {
        self.code.unwrap_or(Code::Success)
    }

    pub fn is_success(&self) -> bool {
        self.code.is_none()
    }

    pub fn is_skip(&self) -> bool {
        self.code == Some(Code::Skip)
    }

    pub fn is_wait(&self) -> bool {
        self.code == Some(Code::Wait)
    }

    /// Unschedulable, UnschedulableAndUnresolvable or Pending: the pod was turned down,
    /// as opposed to an error (upstream `IsRejected`).
    pub fn is_rejected(&self) -> bool {
        matches!(
            self.code,
            Some(Code::Unschedulable | Code::UnschedulableAndUnresolvable | Code::Pending)
        )
    }

    pub fn reasons(&self) -> &[Cow<'static, str>] {
        &self.reasons
    }

    /// Reasons joined by ", ", as upstream `Status.Message()`.
    pub fn message(&self) -> String {
        self.reasons.join(", ")
    }

    pub fn plugin(&self) -> Option<PluginName> {
        self.plugin
    }

    /// Records which plugin produced this status (the framework does this).
    pub fn with_plugin(mut self, plugin: &PluginName) -> Self {
        if self.plugin.is_none() {
            self.plugin = Some(*plugin);
        }
        self
    }

    pub fn set_plugin(&mut self, plugin: Option<PluginName>) {
        self.plugin = plugin;
    }

    /// Replaces the reasons with one message (used when wrapping errors).
    pub fn with_message(mut self, msg: impl Into<Cow<'static, str>>) -> Self {
        self.reasons = smallvec::smallvec![msg.into()];
        self
    }

    pub fn with_code(mut self, code: Code) -> Self {
        self.code = (code != Code::Success).then_some(code);
        self
    }
}

impl fmt::Debug for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.code())?;
        if !self.reasons.is_empty() {
            write!(f, "({})", self.message())?;
        }
        if let Some(p) = &self.plugin {
            write!(f, "@{p}")?;
        }
        Ok(())
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.reasons.is_empty() {
            f.write_str(self.code().as_str())
        } else {
            f.write_str(&self.message())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn success_is_the_default_and_allocates_nothing() {
        let s = Status::success();
        assert!(s.is_success());
        assert_eq!(s.reasons().len(), 0);
        assert!(!s.reasons.spilled());
        assert!(Status::new(Code::Success, "ignored?").is_success());
    }

    #[test]
    fn rejected_codes() {
        assert!(Status::unschedulable("x").is_rejected());
        assert!(Status::unresolvable("x").is_rejected());
        assert!(Status::code_only(Code::Pending).is_rejected());
        assert!(!Status::error("x").is_rejected());
        let s = Status::with_reasons(
            Code::Unschedulable,
            vec!["Insufficient cpu".into(), "Insufficient memory".into()],
        );
        assert_eq!(s.message(), "Insufficient cpu, Insufficient memory");
    }
}
