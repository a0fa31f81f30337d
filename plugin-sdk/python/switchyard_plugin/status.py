"""Status: what a plugin answers, with kube-scheduler's codes."""

from __future__ import annotations

import enum
from typing import Optional, Tuple

from ._stubs import pb


class Code(enum.IntEnum):
    """The status codes of `switchyard.plugin.v1.Code` (kube-scheduler's)."""

    SUCCESS = 0
    ERROR = 1
    UNSCHEDULABLE = 2
    UNSCHEDULABLE_AND_UNRESOLVABLE = 3
    WAIT = 4
    SKIP = 5
    PENDING = 6


class Status:
    """A plugin's verdict: a code and the reasons shown to users (FailedScheduling
    events and PodScheduled conditions carry them). A plugin may return `None` where a
    Status is expected: it means success and costs nothing."""

    __slots__ = ("code", "reasons", "_pb")

    def __init__(self, code: Code = Code.SUCCESS, *reasons: str):
        self.code = Code(code)
        self.reasons: Tuple[str, ...] = tuple(str(r) for r in reasons)
        self._pb = None

    @classmethod
    def success(cls) -> "Status":
        return cls(Code.SUCCESS)

    @classmethod
    def error(cls, *reasons: str) -> "Status":
        """Something went wrong in the plugin: the scheduler applies the plugin's
        failure policy, it is not a decision about the node."""
        return cls(Code.ERROR, *reasons)

    @classmethod
    def unschedulable(cls, *reasons: str) -> "Status":
        """The pod does not fit (preemption may help)."""
        return cls(Code.UNSCHEDULABLE, *reasons)

    @classmethod
    def unresolvable(cls, *reasons: str) -> "Status":
        """The pod does not fit and preemption cannot help
        (UnschedulableAndUnresolvable)."""
        return cls(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, *reasons)

    @classmethod
    def skip(cls) -> "Status":
        """PreFilter/PreScore: this plugin has nothing to do for the pod; Bind: let the
        next bind plugin bind it."""
        return cls(Code.SKIP)

    @classmethod
    def wait(cls) -> "Status":
        """Permit: hold the pod until a decision (see `PermitHandle`) or the timeout."""
        return cls(Code.WAIT)

    @property
    def is_success(self) -> bool:
        return self.code == Code.SUCCESS

    @property
    def message(self) -> str:
        return ", ".join(self.reasons)

    def to_pb(self):
        """The wire form, built once per Status object (a plugin returning the same
        object for many nodes pays once)."""
        if self._pb is None:
            self._pb = pb.Status(code=int(self.code), reasons=list(self.reasons))
        return self._pb

    @classmethod
    def from_pb(cls, s) -> "Status":
        return cls(Code(s.code) if s.code in Code._value2member_map_ else Code.ERROR, *s.reasons)

    def __eq__(self, other) -> bool:
        return isinstance(other, Status) and (self.code, self.reasons) == (other.code, other.reasons)

    def __hash__(self) -> int:
        return hash((self.code, self.reasons))

    def __repr__(self) -> str:
        r = ", ".join(repr(x) for x in self.reasons)
        return f"Status({self.code.name}{', ' + r if r else ''})"


SUCCESS = Status.success()


def as_status(v: Optional[object], what: str) -> Status:
    """A plugin's return value as a Status: None and True mean success; anything else
    that is not a Status is the plugin's bug, answered as an Error naming it."""
    if v is None or v is True:
        return SUCCESS
    if isinstance(v, Status):
        return v
    return Status.error(f"{what} returned {type(v).__name__} {v!r}, not a Status or None")


class PluginError(Exception):
    """Raise it from any plugin method to answer that call with `status` (an Error by
    default): `raise PluginError("quota service unreachable")`."""

    def __init__(self, status_or_reason="plugin error"):
        st = status_or_reason if isinstance(status_or_reason, Status) else Status.error(str(status_or_reason))
        super().__init__(st.message)
        self.status = st
