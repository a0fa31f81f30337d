"""What the service is built from besides the servicer: the protocol's constants,
what a plugin declares (points, signatures, score normalisations, events), failure
grouping, per-cycle entries, and tracing of calls.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import traceback
from typing import Any, Dict, List, Optional

import grpc

from ._stubs import pb, pb_grpc
from .plugin import Cycle, PermitHandle, PreFilterResult
from .snapshot import CycleState, NodeInfo, ReplicationError, Snapshot, placed, quote
from .status import SUCCESS, Code, PluginError, Status, as_status

PROTOCOL_VERSION = "v1"
#: Optional parts of the contract this SDK serves, of those the scheduler offers:
#: several pods' Filter calls per message, several Replicate messages per message,
#: a Filter sent right behind its cycle's PreFilter (evaluated after its outcome), a
#: Permit sent right behind its cycle's Reserve (run only if the Reserve succeeded).
CAPABILITIES = ("filter-batch", "replicate-batch", "filter-after-pre-filter", "permit-after-reserve")
GENERATION_WAIT_SECS = 5.0

# Extension points by method name, in the proto's order.
POINTS = (
    ("pre_enqueue", "PRE_ENQUEUE"),
    ("sort_key", "QUEUE_SORT"),
    ("pre_filter", "PRE_FILTER"),
    ("filter", "FILTER"),
    ("post_filter", "POST_FILTER"),
    ("pre_score", "PRE_SCORE"),
    ("score", "SCORE"),
    ("reserve", "RESERVE"),
    ("permit", "PERMIT"),
    ("pre_bind", "PRE_BIND"),
    ("bind", "BIND"),
    ("post_bind", "POST_BIND"),
)


def log(msg: str) -> None:
    print(f"switchyard-plugin: {msg}", file=sys.stderr, flush=True)


def has(plugin: Any, method: str) -> bool:
    return callable(getattr(plugin, method, None))


def node_local(plugin: Any) -> bool:
    return bool(getattr(plugin, "node_local", False))


def pre_filter_pod_only(plugin: Any) -> bool:
    """Declared in the handshake only with signature_node_pods (see Plugin)."""
    return bool(getattr(plugin, "pre_filter_pod_only", False)) and signature_node_pods(plugin)


def answers_at_named_generation(plugin: Any) -> bool:
    """Whether the plugin's calls may be answered at the generation they name rather
    than the one their cycle started at: node-local, or a pre_filter that reads only
    the pod (pre_filter_pod_only)."""
    return node_local(plugin) or pre_filter_pod_only(plugin)


def pre_filter_extensions(plugin: Any) -> bool:
    return has(plugin, "pre_filter") and (has(plugin, "add_pod") or has(plugin, "remove_pod"))


#: The names a plugin's `signature` may list: the proto's PodField values, lowercase
#: and without their prefix ("tolerations" is POD_FIELD_TOLERATIONS, "none" declares
#: that no field of the pod is read).
POD_FIELDS = {
    n[len("POD_FIELD_") :].lower(): v for n, v in pb.PodField.items() if v != pb.POD_FIELD_UNSPECIFIED
}
#: A plugin's `score_normalization`, by name; None is "custom".
SCORE_NORMALIZATIONS = {
    "custom": pb.SCORE_NORMALIZATION_CUSTOM,
    "default": pb.SCORE_NORMALIZATION_DEFAULT,
    "default_reverse": pb.SCORE_NORMALIZATION_DEFAULT_REVERSE,
}


def _signature(plugin: Any, name: str) -> List[int]:
    """The plugin's `signature` as PodField values; a ValueError naming the plugin
    and the bad value when it is not a list of known names or lacks node_local."""
    declared = getattr(plugin, "signature", ()) or ()
    if isinstance(declared, (str, bytes)):
        raise ValueError(
            f"plugin {quote(name)} declares signature = {declared!r}: list the pod fields, "
            f"e.g. signature = ({declared!r},)"
        )
    fields = []
    for f in declared:
        v = POD_FIELDS.get(f) if isinstance(f, str) else None
        if v is None:
            raise ValueError(
                f"plugin {quote(name)} lists {f!r} in its signature, which is no pod field the "
                f"SDK knows: use some of {', '.join(POD_FIELDS)} (\"none\": filter and score read "
                "no field of the pod)"
            )
        fields.append(v)
    node_pods = signature_node_pods(plugin)
    if fields and not node_local(plugin) and not node_pods:
        raise ValueError(
            f"plugin {quote(name)} declares a signature but not node_local: answers reused across "
            "pods must depend on the node alone (or, with signature_node_pods = True, on the node "
            "and its pods) as well; set node_local = True or drop the signature"
        )
    if node_pods and not fields:
        raise ValueError(
            f"plugin {quote(name)} declares signature_node_pods without a signature: list the pod "
            'fields its answers read (("none",) with signature_label_keys)'
        )
    return fields


def signature_node_pods(plugin: Any) -> bool:
    return bool(getattr(plugin, "signature_node_pods", False))


def _signature_label_keys(plugin: Any, name: str) -> List[str]:
    """The plugin's `signature_label_keys`; a ValueError naming the plugin when they
    are not a list of strings, or come without signature_node_pods or with node_local."""
    keys = getattr(plugin, "signature_label_keys", ()) or ()
    if isinstance(keys, (str, bytes)) or not all(isinstance(k, str) and k for k in keys):
        raise ValueError(
            f"plugin {quote(name)} declares signature_label_keys = {keys!r}: list label keys, "
            f"e.g. signature_label_keys = ({keys!r},)"
        )
    if keys and (not signature_node_pods(plugin) or node_local(plugin)):
        raise ValueError(
            f"plugin {quote(name)} declares signature_label_keys without signature_node_pods, or "
            "with node_local: set signature_node_pods = True and drop node_local"
        )
    return list(keys)


def _score_normalization(plugin: Any, name: str) -> int:
    """The plugin's `score_normalization` as a ScoreNormalization value; a ValueError
    when unknown, or when a standard one has no score to apply to or competes with the
    plugin's own normalize_score."""
    declared = getattr(plugin, "score_normalization", None)
    if declared is None:
        kind = pb.SCORE_NORMALIZATION_CUSTOM
    else:
        kind = SCORE_NORMALIZATIONS.get(declared) if isinstance(declared, str) else None
    if kind is None:
        raise ValueError(
            f"plugin {quote(name)} declares score_normalization = {declared!r}: use None (or "
            "\"custom\": its own normalize_score, if any), \"default\" or \"default_reverse\""
        )
    if kind != pb.SCORE_NORMALIZATION_CUSTOM:
        if not has(plugin, "score"):
            raise ValueError(f"plugin {quote(name)} declares score_normalization = {declared!r} but has no score")
        if has(plugin, "normalize_score"):
            raise ValueError(
                f"plugin {quote(name)} declares score_normalization = {declared!r} and defines "
                "normalize_score: the SDK applies the standard one itself; drop normalize_score, "
                "or the declaration to keep your own"
            )
    return kind


MAX_NODE_SCORE = 100
_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1


def normalize_scores(kind: int, scores: List[int]) -> bool:
    """Applies a standard ScoreNormalization to raw scores in place, as upstream's
    DefaultNormalizeScore(100, reverse) does and as the scheduler does to raw scores
    it reuses (switchyard_proto::normalize_scores, whose arithmetic this mirrors, so
    both ends compute the same numbers): each score times 100 over the highest
    (integer division toward zero), then 100 minus that when reversed; when the
    highest is 0 or less, every score stays as it is, or becomes 100 when reversed.
    False, scores untouched, for "custom", which only the plugin can apply."""
    if kind == pb.SCORE_NORMALIZATION_DEFAULT:
        reverse = False
    elif kind == pb.SCORE_NORMALIZATION_DEFAULT_REVERSE:
        reverse = True
    else:
        return False
    top = max(0, max(scores, default=0))
    for i, s in enumerate(scores):
        if top == 0:
            scores[i] = MAX_NODE_SCORE if reverse else s
            continue
        q = abs(MAX_NODE_SCORE * s) // top  # Rust's division truncates toward zero
        q = q if s >= 0 else -q
        q = (q - _I64_MIN) % 2**64 + _I64_MIN  # and its `as i64` wraps
        scores[i] = min(_I64_MAX, MAX_NODE_SCORE - q) if reverse else q  # saturating_sub
    return True


def _events(plugin: Any) -> list:
    out = []
    for e in getattr(plugin, "events", ()) or ():
        if isinstance(e, tuple):
            resource, actions = e[0], list(e[1]) if len(e) > 1 else []
        else:
            resource, actions = e.resource, list(e.actions)
        out.append(pb.ClusterEvent(resource=resource, actions=actions))
    return out


def group_failures(failures: list) -> list:
    """A Filter reply's failures grouped by status (FilterRequest.group_failures):
    one FailureGroup per distinct code and reasons, with the indices it rejects, in
    the order of each group's first item, so a reason rejecting a thousand nodes
    travels once."""
    groups: list = []
    index: dict = {}
    for f in failures:
        key = (f.status.code, tuple(f.status.reasons))
        g = index.get(key)
        if g is None:
            g = index[key] = pb.FailureGroup(status=f.status)
            groups.append(g)
        g.indices.append(f.index)
    return groups


class CallError(Exception):
    """A call's failure, answered as its (error) status: never closes a stream."""

    def __init__(self, st: Status):
        super().__init__(st.message)
        self.status = st


def _error(reason: str) -> CallError:
    return CallError(Status.error(reason))


class CycleEntry:
    """One scheduling attempt the sidecar knows about (CycleStart to CycleEnd)."""

    __slots__ = (
        "id", "pod", "profile", "generation", "snapshot_generation", "states", "pre_scores", "pre_filters",
        "reserves", "pre_score_done",
    )

    def __init__(self, cycle_id, pod, profile, generation, snapshot_generation):
        self.id = cycle_id
        self.pod = pod
        self.profile = profile
        # Generation of the CycleStart message: the cycle's calls name it.
        self.generation = generation
        # Replica generation the cycle's scheduling calls are evaluated at.
        self.snapshot_generation = snapshot_generation
        self.states: Dict[str, CycleState] = {}
        # PreScore and PreFilter outcomes by plugin name, for Score and Filter calls
        # sent right behind them; the event is set (and replaced) at every outcome.
        self.pre_scores: Dict[str, Status] = {}
        self.pre_filters: Dict[str, Status] = {}
        # Reserve outcomes, for Permit calls sent right behind them.
        self.reserves: Dict[str, Status] = {}
        self.pre_score_done = asyncio.Event()

    def record(self, outcomes: Dict[str, Status], name: str, s: Status) -> None:
        outcomes[name] = s
        ev, self.pre_score_done = self.pre_score_done, asyncio.Event()
        ev.set()

    def state(self, name: str) -> CycleState:
        s = self.states.get(name)
        if s is None:
            s = self.states[name] = CycleState()
        return s

    def view(self, snapshot: Snapshot) -> Cycle:
        return Cycle(self.id, self.pod, self.profile, snapshot)


# ---------------------------------------------------------------- tracing

_tracer = None


def init_tracing(service_name: str):
    """Exports spans over OTLP/gRPC when OTEL_EXPORTER_OTLP_ENDPOINT (or
    OTEL_TRACES_EXPORTER=otlp) is set, as the Rust SDK does; returns the provider to
    shut down at exit, or None. Needs the `tracing` extra (OpenTelemetry)."""
    global _tracer
    env = os.environ
    if not (
        env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
        or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
        or env.get("OTEL_TRACES_EXPORTER", "").strip() == "otlp"
    ):
        return None
    try:
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as e:
        log(f"tracing requested but OpenTelemetry is not installed ({e}); pip install 'switchyard-plugin[tracing]'")
        return None
    attrs = {} if env.get("OTEL_SERVICE_NAME") else {"service.name": service_name}
    provider = TracerProvider(resource=Resource.create(attrs))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    _tracer = provider.get_tracer("switchyard-plugin")
    return provider


def call_span(point: str, req):
    """The sidecar's span for one call, a child of the scheduler's remote-call span
    named by the request's traceparent (a no-op when untraced)."""
    traceparent = getattr(req, "traceparent", "")
    if _tracer is None or not traceparent:
        return contextlib.nullcontext()
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    parent = TraceContextTextMapPropagator().extract({"traceparent": traceparent})
    return _tracer.start_as_current_span(
        f"{point} {req.plugin}", context=parent, attributes={"extension_point": point, "plugin": req.plugin}
    )


def _stream(point: str, method: str, *args):
    """The handler of one extension-point stream: its requests one at a time, in
    order, one reply each, each in its own span when the scheduler traces the call.
    (grpc.aio needs the handler to be an async generator function itself.)"""

    async def handler(self, request_iterator, context):
        handle = getattr(self, method)
        async for req in request_iterator:
            with call_span(point, req):
                reply = await handle(req, *args)
            yield reply

    handler.__name__ = point
    return handler
