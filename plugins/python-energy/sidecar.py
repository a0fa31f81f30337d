#!/usr/bin/env python3
"""EnergyAware: a Switchyard scheduler plugin served as a gRPC sidecar, in Python.

It speaks `switchyard.plugin.v1` (proto/switchyard/plugin/v1/plugin.proto) exactly as
the Rust SDK (plugin-sdk/src/service.rs) does on the wire, to show the contract works
from another language:

* Filter rejects nodes labelled `energy.switchyard.dev/draining: "true"`.
* Score is the node's `energy.switchyard.dev/efficiency` label (an integer, clamped to
  0..100; 50 when absent or not an integer). No NormalizeScore.

Usage: sidecar.py [--listen unix:///path.sock | --listen 127.0.0.1:PORT]
(or SWITCHYARD_PLUGIN_LISTEN; default unix:///tmp/switchyard/energyaware.sock).

The Python stubs are generated from ../../proto into ./_gen on start (see load_stubs).
"""

import asyncio
import contextlib
import errno
import ipaddress
import json
import os
import re
import shutil
import signal
import stat
import sys
import tempfile
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO_ROOT = os.path.normpath(os.path.join(HERE, "..", "..", "proto"))
PROTO_FILE = "switchyard/plugin/v1/plugin.proto"
HEALTH_PROTO_FILE = "grpc/health/v1/health.proto"
GEN_DIR = os.path.join(HERE, "_gen")

PROTOCOL_VERSION = "v1"
# As the Rust SDK's ServeOptions defaults.
GENERATION_WAIT_SECS = 5.0
MAX_BATCH_NODES = 0
# Optional parts of the contract this sidecar serves when the scheduler offers them
# (see proto/README.md, "Capabilities").
CAPABILITIES = ["filter-batch", "replicate-batch"]
MAX_MESSAGE_BYTES = 64 << 20
# How long shutdown lets replies in flight finish. Streams are long-lived, so they
# never end on their own: this is always waited in full, then they are cancelled.
SHUTDOWN_GRACE_SECS = 1.0

PLUGIN_NAME = "EnergyAware"
LABEL_DRAINING = "energy.switchyard.dev/draining"
LABEL_EFFICIENCY = "energy.switchyard.dev/efficiency"
DEFAULT_SCORE = 50
INTEGER = re.compile(r"[+-]?[0-9]+")
MIN_SCORE, MAX_SCORE = 0, 100


def log(msg):
    print(f"{PLUGIN_NAME}: {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- stubs


def load_stubs():
    """Generates the stubs into _gen/ when missing or older than their .proto, then
    imports them. Returns (plugin_pb2, plugin_pb2_grpc, health_pb2)."""
    for proto in (PROTO_FILE, HEALTH_PROTO_FILE):
        _generate(proto)
    # Generated with -I proto/, the modules live at switchyard/plugin/v1/ and
    # grpc/health/v1/ (namespace packages) and each *_grpc module imports its *_pb2 by
    # that absolute name, so _gen itself has to be on the path.
    if GEN_DIR not in sys.path:
        sys.path.insert(0, GEN_DIR)
    from switchyard.plugin.v1 import plugin_pb2, plugin_pb2_grpc

    return plugin_pb2, plugin_pb2_grpc, _load_health()


def _generate(proto):
    src = os.path.join(PROTO_ROOT, proto)
    out_dir = os.path.join(GEN_DIR, os.path.dirname(proto))
    base = os.path.splitext(os.path.basename(proto))[0]
    names = (f"{base}_pb2.py", f"{base}_pb2_grpc.py")
    outs = [os.path.join(out_dir, n) for n in names]
    try:
        stale = min(os.path.getmtime(o) for o in outs) < os.path.getmtime(src)
    except OSError:
        stale = True
    if not stale:
        return
    from grpc_tools import protoc

    # Generate beside _gen and move the files in one by one (os.replace is atomic):
    # another process starting at the same time (the self-test and the sidecar it
    # launches) never imports a half-written module.
    tmp = tempfile.mkdtemp(prefix="_gen.tmp-", dir=HERE)
    try:
        rc = protoc.main(
            [
                "grpc_tools.protoc",
                f"-I{PROTO_ROOT}",
                f"--python_out={tmp}",
                f"--grpc_python_out={tmp}",
                proto,
            ]
        )
        if rc != 0:
            raise RuntimeError(f"protoc failed ({rc}) on {src}")
        os.makedirs(out_dir, exist_ok=True)
        for n in names:
            os.replace(os.path.join(tmp, os.path.dirname(proto), n), os.path.join(out_dir, n))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _load_health():
    """Imports _gen/grpc/health/v1/health_pb2.py from its file: as `grpc.health...` it
    would be looked up inside grpcio. The service itself is registered by hand (see
    HealthService), so the generated *_grpc module is not needed."""
    import importlib.util

    path = os.path.join(GEN_DIR, os.path.dirname(HEALTH_PROTO_FILE), "health_pb2.py")
    spec = importlib.util.spec_from_file_location("_switchyard_health_pb2", path)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


pb, pb_grpc, health_pb = load_stubs()

import grpc  # noqa: E402  (after the stubs, whose grpc module needs a recent grpcio)


# ---------------------------------------------------------------- statuses


def quote(s):
    """A string as Rust's `{:?}` prints it (close enough for messages)."""
    return json.dumps(s, ensure_ascii=False)


def status(code, *reasons):
    return pb.Status(code=code, reasons=list(reasons))


def success():
    return pb.Status(code=pb.SUCCESS)


def error(reason):
    return status(pb.ERROR, reason)


class CallError(Exception):
    """A call's failure, answered as its (error) status: never closes a stream."""

    def __init__(self, st):
        super().__init__(list(st.reasons))
        self.status = st


class ReplicationError(Exception):
    """The replica cannot be trusted any more: the Replicate stream is closed."""


# ---------------------------------------------------------------- the plugin


class EnergyAware:
    """The plugin itself; everything else in this file is the protocol.

    A plugin here is an object with a `name`, its requeue `events`, and the methods of
    the extension points it implements (`filter`, `score`): the service derives the
    handshake from which of them exist, like the SDK's `as_*` methods.
    """

    name = PLUGIN_NAME
    def __init__(self, node_local=True):
        # Filter and Score read only the node named (its labels): answers stay right at
        # a later replica generation, so the scheduler may send a pod's Filter ahead of
        # its attempt (the handshake's `node_local`; a node-local plugin has no
        # PreFilter). SWITCHYARD_ENERGY_LOOKAHEAD=off withdraws it, to measure.
        self.node_local = node_local
    # Pods this plugin rejected can only become schedulable when a node appears or a
    # node's labels change (undrained).
    events = [("Node", ["Add", "UpdateNodeLabel"])]

    def filter(self, cycle, node):
        if node.node.labels.get(LABEL_DRAINING) == "true":
            return status(pb.UNSCHEDULABLE, "node is draining (EnergyAware)")
        return success()

    def score(self, cycle, node):
        v = node.node.labels.get(LABEL_EFFICIENCY)
        # An integer as Rust parses one: optional sign, ASCII digits only (int() alone
        # would also take " 7", "1_0" and non-ASCII digits).
        if v is None or not INTEGER.fullmatch(v):
            return DEFAULT_SCORE
        return max(MIN_SCORE, min(MAX_SCORE, int(v)))


# ---------------------------------------------------------------- the replica


class NodeInfo:
    """A node with the pods placed on it (bound or assumed), as the SDK's NodeInfo."""

    __slots__ = ("node", "pods")

    def __init__(self, node, pods=None):
        self.node = node
        self.pods = pods if pods is not None else []

    def name(self):
        return self.node.name

    def remove_pod(self, uid):
        for i, p in enumerate(self.pods):
            if p.uid == uid:
                return self.pods.pop(i)
        return None


class Replica:
    """The replicated snapshot: nodes by the scheduler's node id, pods by UID. A port of
    plugin-sdk/src/snapshot.rs."""

    def __init__(self):
        # Generation of the last SnapshotDelta applied (CycleStart/End do not move it).
        self.generation = 0
        self.nodes = {}  # id -> NodeInfo
        self.by_name = {}  # node name -> id
        self.pods = {}  # uid -> (Pod, node id or None when its node is not replicated)
        # CycleStart pods not yet placed, for PodUpdates naming them (same rule as the
        # scheduler: forget all once MAX_PENDING_PODS are kept and another arrives).
        self.pending = {}

    MAX_PENDING_PODS = 1024

    def note_cycle_pod(self, pod):
        if len(self.pending) >= self.MAX_PENDING_PODS:
            self.pending.clear()
        self.pending[pod.uid] = pod

    def node(self, node_id):
        return self.nodes.get(node_id)

    def pod(self, uid):
        e = self.pods.get(uid)
        return e[0] if e else None

    def apply(self, generation, d):
        if d.full:
            self.nodes.clear()
            self.by_name.clear()
            self.pods.clear()
            self.pending.clear()
        # Removals first: a node deleted and re-created arrives with a new id.
        for node_id in d.remove_nodes:
            ni = self.nodes.pop(node_id, None)
            if ni is not None:
                self.by_name.pop(ni.node.name, None)
                for p in ni.pods:
                    if p.uid in self.pods:
                        self.pods[p.uid] = (self.pods[p.uid][0], None)
        for uid in d.remove_pods:
            self._remove_pod(uid)
        for n in d.upsert_nodes:
            old = self.by_name.get(n.name)
            if old is not None and old != n.id:
                raise ReplicationError(f"node {quote(n.name)} arrived with id {n.id} but the replica has it as {old}")
            self.by_name[n.name] = n.id
            ni = self.nodes.get(n.id)
            if ni is not None:
                if ni.node.name != n.name:
                    self.by_name.pop(ni.node.name, None)
                ni.node = n
            else:
                self.nodes[n.id] = NodeInfo(n)
        for p in d.upsert_pods:
            self.pending.pop(p.uid, None)
            self._place(p)
        for u in d.update_pods:
            known = self.pod(u.uid)
            if known is None:
                known = self.pending.get(u.uid)
            if known is None:
                raise ReplicationError(f"an update for pod {u.uid} the replica does not hold")
            self.pending.pop(u.uid, None)
            p = pb.Pod()
            p.CopyFrom(known)
            p.node_name = u.node_name
            p.nominated_node_name = u.nominated_node_name
            p.phase = u.phase
            p.terminating = u.terminating
            p.start_time_micros = u.start_time_micros
            self._place(p)
        self.generation = generation

    def _place(self, p):
        self._remove_pod(p.uid)
        node_id = self.by_name.get(p.node_name)
        ni = self.nodes.get(node_id) if node_id is not None else None
        if ni is not None:
            ni.pods.append(p)
        self.pods[p.uid] = (p, node_id)

    def _remove_pod(self, uid):
        e = self.pods.pop(uid, None)
        if e is not None and e[1] is not None:
            ni = self.nodes.get(e[1])
            if ni is not None:
                ni.remove_pod(uid)


class CycleEntry:
    """One scheduling attempt the sidecar knows about (CycleStart to CycleEnd)."""

    def __init__(self, cycle_id, pod, profile, generation, snapshot_generation):
        self.id = cycle_id
        self.pod = pod
        self.profile = profile
        # Generation of the CycleStart message: the cycle's calls name it.
        self.generation = generation
        # Replica generation the cycle's scheduling calls must be evaluated at.
        self.snapshot_generation = snapshot_generation
        # PreScore outcomes by plugin name, for Score calls sent right behind them.
        self.pre_scores = {}
        self.pre_score_done = asyncio.Condition()


class Cycle:
    """The cycle as plugin calls see it (the SDK's `Cycle`)."""

    __slots__ = ("id", "pod", "profile", "snapshot")

    def __init__(self, entry, snapshot):
        self.id = entry.id
        self.pod = entry.pod
        self.profile = entry.profile
        self.snapshot = snapshot


# ---------------------------------------------------------------- the service


def node_local(plugin):
    """Whether `plugin` declares itself node-local (see EnergyAware.node_local)."""
    return bool(getattr(plugin, "node_local", False))


def _points(plugin):
    """Extension points a plugin implements, in the proto's order."""
    pairs = [
        ("pre_enqueue", pb.PRE_ENQUEUE),
        ("sort_key", pb.QUEUE_SORT),
        ("pre_filter", pb.PRE_FILTER),
        ("filter", pb.FILTER),
        ("post_filter", pb.POST_FILTER),
        ("pre_score", pb.PRE_SCORE),
        ("score", pb.SCORE),
        ("reserve", pb.RESERVE),
        ("permit", pb.PERMIT),
        ("pre_bind", pb.PRE_BIND),
        ("bind", pb.BIND),
        ("post_bind", pb.POST_BIND),
    ]
    return [p for attr, p in pairs if callable(getattr(plugin, attr, None))]


# ---------------------------------------------------------------- tracing

# Set by init_tracing() when the standard OTEL_* variables ask for export.
TRACER = None


def init_tracing():
    """Exports spans over OTLP/gRPC when OTEL_EXPORTER_OTLP_ENDPOINT (or
    OTEL_TRACES_EXPORTER=otlp) is set, as the Rust SDK does; returns the provider to
    flush at exit, or None. The OpenTelemetry SDK reads OTEL_SERVICE_NAME,
    OTEL_RESOURCE_ATTRIBUTES and the sampler variables itself."""
    global TRACER
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
        log(f"tracing requested but OpenTelemetry is not installed ({e}); pip install -r requirements.txt")
        return None
    attrs = {} if env.get("OTEL_SERVICE_NAME") else {"service.name": f"switchyard-sidecar-{PLUGIN_NAME.lower()}"}
    provider = TracerProvider(resource=Resource.create(attrs))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    TRACER = provider.get_tracer("switchyard-sidecar")
    return provider


def call_span(point, req):
    """The sidecar's span for one call, a child of the scheduler's remote-call span
    named by the request's traceparent (a no-op when untraced)."""
    traceparent = getattr(req, "traceparent", "")
    if TRACER is None or not traceparent:
        return contextlib.nullcontext()
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    parent = TraceContextTextMapPropagator().extract({"traceparent": traceparent})
    return TRACER.start_as_current_span(
        f"{point} {req.plugin}",
        context=parent,
        attributes={"extension_point": point, "plugin": req.plugin},
    )


def _stream(method, *args):
    """The handler of one extension-point stream: its requests one at a time, in
    order, one reply each, answered by `method` (as the SDK's `bidi`), each in its
    own span when the scheduler traces the call."""
    point = args[0] if args else "".join(w.capitalize() for w in method.split("_"))

    async def handler(self, request_iterator, context):
        handle = getattr(self, method)
        async for req in request_iterator:
            with call_span(point, req):
                reply = await handle(req, *args)
            yield reply

    handler.__name__ = method
    return handler


class PluginService(pb_grpc.PluginServicer):
    """The `Plugin` service, a port of the Rust SDK's PluginService for plugins that
    implement Filter and Score. Every stream is served (the scheduler opens them all);
    a call for an extension point the plugin lacks is answered with an Error status,
    as the SDK does, and the stream stays open.

    Each stream handles its requests one at a time, in order (as the SDK's `bidi`),
    so a call waiting for its generation holds back the later calls of its stream
    only. Everything runs on one asyncio loop: replica updates are atomic with respect
    to calls without locks.
    """

    def __init__(self, plugins):
        for p in plugins:
            if node_local(p) and callable(getattr(p, "pre_filter", None)):
                raise ValueError(
                    f"plugin {quote(p.name)} declares node_local but has a PreFilter, whose "
                    "state may span nodes; drop one of the two"
                )
        self.plugins = {p.name: p for p in plugins}
        self.replica = Replica()
        # Generation of the last Replicate message applied (any kind).
        self.applied = 0
        self.applied_changed = asyncio.Condition()
        self.cycles = {}  # cycle id -> CycleEntry

    # ------------------------------------------------------------ shared steps

    def plugin(self, name):
        p = self.plugins.get(name)
        if p is None:
            raise CallError(error(f"this sidecar serves no plugin named {quote(name)}"))
        return p

    @staticmethod
    def missing(plugin_name, point):
        return CallError(error(f"plugin {quote(plugin_name)} has no {point}"))

    async def cycle(self, cycle_id, generation, relaxed=False):
        """The cycle a call names, once the replica has reached its generation (waiting
        at most GENERATION_WAIT_SECS). A node-local plugin's call (`relaxed`) may name
        any generation from the cycle's start on; others must name exactly it."""
        await self.reached(generation)
        entry = self.cycles.get(cycle_id)
        if entry is None:
            raise CallError(error(f"cycle {cycle_id} is unknown (never started, or already ended)"))
        if entry.generation != generation and not (relaxed and entry.generation <= generation):
            raise CallError(error(f"cycle {cycle_id} started at generation {entry.generation}, not {generation}"))
        return entry

    async def reached(self, generation):
        """Waits until the replica has applied `generation`, at most
        GENERATION_WAIT_SECS; a CallError after that."""
        if self.applied < generation:
            try:
                async with self.applied_changed:
                    await asyncio.wait_for(
                        self.applied_changed.wait_for(lambda: self.applied >= generation),
                        GENERATION_WAIT_SECS,
                    )
            except asyncio.TimeoutError:
                raise CallError(
                    error(
                        f"generation {generation} not reached within {GENERATION_WAIT_SECS:g}s "
                        f"(replica at {self.applied})"
                    )
                ) from None

    def replica_at(self, entry, relaxed=False):
        """The replica for a scheduling-cycle call: still at the cycle's generation,
        never a later one (a delta after CycleStart invalidates the cycle's calls),
        unless the plugin is node-local (`relaxed`)."""
        r = self.replica
        if not relaxed and r.generation != entry.snapshot_generation:
            raise CallError(
                error(
                    f"the replica moved on to generation {r.generation} since cycle {entry.id} "
                    f"(at {entry.snapshot_generation}) started"
                )
            )
        return r

    @staticmethod
    def nodes_by_id(replica, ids):
        out = []
        for i in ids:
            ni = replica.node(i)
            if ni is None:
                raise CallError(error(f"unknown node id {i}"))
            out.append(ni)
        return out

    async def outcome(self, point, fn, *args):
        """Runs a call: (result, None), or (None, error status) for a CallError. Any
        other exception is a bug here; it is logged and answered as an Error too, so
        that it never breaks the stream (the scheduler drops the whole connection on
        a stream error)."""
        try:
            return await fn(*args), None
        except CallError as e:
            return None, e.status
        except Exception as e:  # noqa: BLE001
            log(f"{point} call failed: {e!r}\n{traceback.format_exc().rstrip()}")
            return None, error(f"{point}: internal error in the sidecar: {e!r}")

    # ------------------------------------------------------------ handshake

    async def Handshake(self, request, context):
        if PROTOCOL_VERSION not in request.protocol_versions:
            await context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"this sidecar speaks protocol {PROTOCOL_VERSION}; the scheduler offered "
                f"{json.dumps(list(request.protocol_versions))}",
            )
        infos = []
        for p in self.plugins.values():
            infos.append(
                pb.PluginInfo(
                    name=p.name,
                    extension_points=_points(p),
                    pre_filter_extensions=bool(getattr(p, "has_pre_filter_extensions", False)),
                    normalize_score=callable(getattr(p, "score", None)) and callable(getattr(p, "normalize", None)),
                    node_local=node_local(p),
                    events=[pb.ClusterEvent(resource=r, actions=a) for r, a in getattr(p, "events", [])],
                )
            )
        # Optional parts of the contract this sidecar serves, of those offered:
        # several pods' Filter calls per message, several Replicate messages per
        # message. SWITCHYARD_PLUGIN_CAPABILITIES=off serves as an older sidecar.
        offered = set(request.capabilities)
        served = [] if os.environ.get("SWITCHYARD_PLUGIN_CAPABILITIES", "").strip() in ("off", "false", "0") else CAPABILITIES
        return pb.HandshakeResponse(
            protocol_version=PROTOCOL_VERSION,
            plugins=infos,
            max_batch_nodes=MAX_BATCH_NODES,
            capabilities=[c for c in served if c in offered],
        )

    # ------------------------------------------------------------ replication

    async def Replicate(self, request_iterator, context):
        expect = None  # the next generation; None until the first (full) snapshot
        async for first in request_iterator:
            # With replicate-batch, `more` holds the messages that follow, each
            # applied as if it came alone.
            more = list(first.more)
            first.ClearField("more")
            for msg in [first] + more:
                try:
                    if len(msg.more):
                        raise ReplicationError(f"generation {msg.generation}: a message inside `more` has `more`")
                    expect = await self.apply(msg, expect)
                except ReplicationError as e:
                    log(f"replication failed; closing the stream: {e}")
                    await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(e))
                if msg.ack:
                    yield pb.ReplicateResponse(applied_generation=msg.generation)

    async def apply(self, msg, expect):
        g = msg.generation
        kind = msg.WhichOneof("kind")
        full = kind == "delta" and msg.delta.full
        if expect is None and not full:
            raise ReplicationError(
                f"the first message of a Replicate stream must be a full snapshot (got generation {g})"
            )
        # A full snapshot may carry any generation (it starts over); anything else must
        # be the next one.
        if expect is not None and not full and g != expect:
            raise ReplicationError(f"generation gap: expected {expect}, got {g}")
        if kind == "delta":
            if full:
                self.cycles.clear()
            self.replica.apply(g, msg.delta)
        elif kind == "cycle_start":
            c = msg.cycle_start
            if c.HasField("pod"):
                self.replica.note_cycle_pod(c.pod)
            self.cycles[c.cycle] = CycleEntry(
                c.cycle,
                c.pod if c.HasField("pod") else pb.Pod(),
                c.profile,
                g,
                self.replica.generation,
            )
        elif kind == "cycle_end":
            self.cycles.pop(msg.cycle_end.cycle, None)
        else:
            raise ReplicationError(f"generation {g}: empty Replicate message")
        # Set before notifying: taking the condition's lock may yield to other tasks,
        # which must never see the replica changed but `applied` not yet moved.
        self.applied = g
        async with self.applied_changed:
            self.applied_changed.notify_all()
        return g + 1

    # ------------------------------------------------------------ streams

    # grpc.aio needs each handler to be an async generator function itself (a plain
    # function returning one would be run as a sync handler on a thread).
    PreEnqueue = _stream("pre_enqueue")
    QueueSort = _stream("queue_sort")
    PreFilter = _stream("pre_filter")
    Filter = _stream("filter")

    async def FilterBatch(self, request_iterator, context):
        """Several pods' Filter calls in one message (filter-batch): each answered as
        it would be alone on the Filter stream, in its own span, in order."""
        async for req in request_iterator:
            # One bounded wait for the latest generation the calls name: a replica
            # that never gets there fails them all at once, not one wait after another.
            latest = max((c.generation for c in req.calls), default=0)
            try:
                await self.reached(latest)
                missed = None
            except CallError as e:
                missed = e.status
            replies = []
            for call in req.calls:
                if missed is not None:
                    r = pb.FilterResponse(request_id=call.request_id, generation=call.generation)
                    r.error.CopyFrom(missed)
                    replies.append(r)
                    continue
                with call_span("Filter", call):
                    replies.append(await self.filter(call))
            yield pb.FilterBatchResponse(request_id=req.request_id, replies=replies)

    PostFilter = _stream("post_filter")
    PreScore = _stream("pre_score")
    Score = _stream("score")
    NormalizeScore = _stream("normalize_score")
    Reserve = _stream("cycle_call", "Reserve")
    Unreserve = _stream("cycle_call", "Unreserve")
    Permit = _stream("permit")
    PreBind = _stream("cycle_call", "PreBind")
    Bind = _stream("cycle_call", "Bind")
    PostBind = _stream("cycle_call", "PostBind")

    # ------------------------------------------------------------ Filter

    async def filter(self, req):
        out = pb.FilterResponse(request_id=req.request_id, generation=req.generation)
        res, err = await self.outcome("Filter", self.filter_batch, req)
        if err is None:
            failures, ahead = res
            # Every item was evaluated (the scheduler checks this against its batch);
            # only those that did not pass are listed.
            out.evaluated = len(req.nodes)
            out.failures.extend(failures)
            if ahead is not None:
                out.score.CopyFrom(ahead)
        else:
            out.error.CopyFrom(err)
        return out

    async def filter_batch(self, req):
        plugin = self.plugin(req.plugin)
        relaxed = node_local(plugin)
        entry = await self.cycle(req.cycle, req.generation, relaxed)
        f = getattr(plugin, "filter", None)
        if not callable(f):
            raise self.missing(req.plugin, "Filter")
        replica = self.replica_at(entry, relaxed)
        cycle = Cycle(entry, replica)
        nodes = self.nodes_by_id(replica, req.nodes)
        deltas = [None] * len(nodes)
        for d in req.deltas:
            if d.index >= len(nodes):
                raise CallError(error(f"delta for item {d.index} of a batch of {len(nodes)}"))
            deltas[d.index] = d
        failures = []
        for i, ni in enumerate(nodes):
            s = f(cycle, ni) if deltas[i] is None else self.filter_with_delta(f, cycle, ni, deltas[i])
            if s.code != pb.SUCCESS:
                failures.append(pb.NodeStatus(index=i, status=s))
        ahead = self.score_ahead(req, plugin, cycle, nodes, deltas, failures) if req.score_first else None
        return failures, ahead

    @staticmethod
    def score_ahead(req, plugin, cycle, nodes, deltas, failures):
        """Score, with this Filter, the first `score_first` items it passed, so the pod
        needs no Score call (`FilterRequest.score_first`). None when it cannot: the
        plugin has no Score, an item carries a delta, or a PreScore must run first
        (this sidecar keeps PreScore state per cycle, not on a fork); the scheduler
        then calls PreScore and Score as usual. A failing Score is this answer's
        status, not the Filter's."""
        sp = getattr(plugin, "score", None)
        if not callable(sp) or (req.pre_score and callable(getattr(plugin, "pre_score", None))):
            return None
        failed = {f.index for f in failures}
        items = [i for i in range(len(nodes)) if i not in failed][: req.score_first]
        if any(deltas[i] is not None for i in items):
            return None
        try:
            scores = [sp(cycle, nodes[i]) for i in items]
            norm = getattr(plugin, "normalize", None)
            if callable(norm):
                s = norm(cycle, scores)
                if s.code != pb.SUCCESS:
                    return pb.ScoreAhead(status=s)
        except CallError as e:
            return pb.ScoreAhead(status=e.status)
        except Exception as e:  # noqa: BLE001
            log(f"Score (ahead) failed: {e!r}\n{traceback.format_exc().rstrip()}")
            return pb.ScoreAhead(status=error(f"Score: internal error in the sidecar: {e!r}"))
        return pb.ScoreAhead(status=success(), scores=scores, normalized=True)

    @staticmethod
    def filter_with_delta(f, cycle, node, d):
        """Filter on a what-if copy of the node: pods removed, then added. With no
        PreFilter extensions (this sidecar's case) there is no state to fork and no
        RemovePod/AddPod to run, but the delta must still make sense: a pod removed
        that is not on the node, or added that the replica does not hold, is an Error
        status for that item, as in the SDK."""
        ni = NodeInfo(node.node, list(node.pods))
        for uid in d.remove_pods:
            if ni.remove_pod(uid) is None:
                return error(f"delta removes pod {uid}, which is not on node {node.name()}")
        for uid in d.add_pods:
            p = cycle.snapshot.pod(uid)
            if p is None:
                return error(f"delta adds pod {uid}, which the replica does not hold")
            ni.pods.append(_placed(p, ni.node.name))
        for p in d.add_pod_objects:
            ni.pods.append(_placed(p, ni.node.name))
        return f(cycle, ni)

    # ------------------------------------------------------------ Score

    async def score(self, req):
        out = pb.ScoreResponse(request_id=req.request_id, generation=req.generation)
        res, err = await self.outcome("Score", self.score_batch, req)
        if err is None:
            scores, normalized = res
            out.status.CopyFrom(success())
            out.scores.extend(scores)
            out.normalized = normalized
        else:
            out.status.CopyFrom(err)
        return out

    async def score_batch(self, req):
        plugin = self.plugin(req.plugin)
        relaxed = node_local(plugin)
        entry = await self.cycle(req.cycle, req.generation, relaxed)
        sp = getattr(plugin, "score", None)
        if not callable(sp):
            raise self.missing(req.plugin, "Score")
        if req.after_pre_score:
            s = await self.pre_score_outcome(entry, plugin.name)
            if s.code != pb.SUCCESS:
                # Skip included: the scheduler reads a Skip reply as "no scores".
                raise CallError(s)
        replica = self.replica_at(entry, relaxed)
        cycle = Cycle(entry, replica)
        nodes = self.nodes_by_id(replica, req.nodes)
        scores = [sp(cycle, ni) for ni in nodes]
        norm = getattr(plugin, "normalize", None)
        if not callable(norm):
            # Without NormalizeScore a plugin's scores are final, whether or not the
            # request asked for normalization: the SDK answers normalized=true.
            return scores, True
        if not req.normalize:
            return scores, False
        s = norm(cycle, scores)
        if s.code != pb.SUCCESS:
            raise CallError(s)
        return scores, True

    async def pre_score_outcome(self, entry, name):
        """Waits for this cycle's PreScore of plugin `name` (sent just before Score)."""
        try:
            async with entry.pre_score_done:
                await asyncio.wait_for(
                    entry.pre_score_done.wait_for(lambda: name in entry.pre_scores),
                    GENERATION_WAIT_SECS,
                )
        except asyncio.TimeoutError:
            raise CallError(
                error(
                    f"Score named a PreScore of cycle {entry.id} that did not arrive within "
                    f"{GENERATION_WAIT_SECS:g}s"
                )
            ) from None
        return entry.pre_scores[name]

    # ------------------------------------------------------------ the rest

    async def pre_score(self, req):
        async def run():
            plugin = self.plugin(req.plugin)
            relaxed = node_local(plugin)
            entry = await self.cycle(req.cycle, req.generation, relaxed)
            # From here on the outcome is recorded for a Score sent with
            # after_pre_score (errors before this point are not, as in the SDK).
            p = getattr(plugin, "pre_score", None)
            if not callable(p):
                s = self.missing(req.plugin, "PreScore").status
            else:
                try:
                    replica = self.replica_at(entry, relaxed)
                    nodes = self.nodes_by_id(replica, req.nodes)
                    s = p(Cycle(entry, replica), nodes)
                except CallError as e:
                    s = e.status
            entry.pre_scores[plugin.name] = s
            async with entry.pre_score_done:
                entry.pre_score_done.notify_all()
            return s

        s, err = await self.outcome("PreScore", run)
        return pb.StatusResponse(request_id=req.request_id, status=s if err is None else err, generation=req.generation)

    async def pre_enqueue(self, req):
        async def run():
            self.plugin(req.plugin)
            raise self.missing(req.plugin, "PreEnqueue")

        _, err = await self.outcome("PreEnqueue", run)
        # Outside any cycle: generation 0, as the SDK.
        return pb.StatusResponse(request_id=req.request_id, status=err, generation=0)

    async def queue_sort(self, req):
        async def run():
            self.plugin(req.plugin)
            raise CallError(error(f"plugin {quote(req.plugin)} has no QueueSort, or the request has no pod"))

        _, err = await self.outcome("QueueSort", run)
        return pb.QueueSortResponse(request_id=req.request_id, status=err)

    async def _unimplemented_in_cycle(self, req, point):
        """Calls inside a cycle for a point no plugin here implements: like the SDK,
        wait for the cycle first, then answer that the plugin lacks the point."""
        plugin = self.plugin(req.plugin)
        await self.cycle(req.cycle, req.generation, node_local(plugin))
        raise self.missing(req.plugin, point)

    async def pre_filter(self, req):
        _, err = await self.outcome("PreFilter", self._unimplemented_in_cycle, req, "PreFilter")
        return pb.PreFilterResponse(request_id=req.request_id, status=err, generation=req.generation)

    async def post_filter(self, req):
        _, err = await self.outcome("PostFilter", self._unimplemented_in_cycle, req, "PostFilter")
        return pb.PostFilterResponse(request_id=req.request_id, status=err, generation=req.generation)

    async def normalize_score(self, req):
        _, err = await self.outcome("NormalizeScore", self._unimplemented_in_cycle, req, "NormalizeScore")
        return pb.ScoreResponse(request_id=req.request_id, status=err, generation=req.generation)

    async def cycle_call(self, req, point):
        _, err = await self.outcome(point, self._unimplemented_in_cycle, req, point)
        return pb.StatusResponse(request_id=req.request_id, status=err, generation=req.generation)

    async def permit(self, req):
        # This plugin never answers WAIT, so it never sends unsolicited decisions.
        _, err = await self.outcome("Permit", self._unimplemented_in_cycle, req, "Permit")
        return pb.PermitResponse(request_id=req.request_id, status=err, generation=req.generation)


def _placed(pod, node_name):
    """A copy of `pod` placed on `node_name` (what-if deltas)."""
    p = pb.Pod()
    p.CopyFrom(pod)
    p.node_name = node_name
    return p


# ---------------------------------------------------------------- serving


class AddressError(ValueError):
    def __init__(self, s):
        super().__init__(
            f"listen address {quote(s)}: expected unix:///path/to.sock, tcp://host:port, "
            "https://host:port or host:port"
        )


def parse_listen_address(s):
    """As the SDK's parse_listen_address: `unix:///path.sock`, `unix:path.sock`,
    `tcp://host:port`, `http://host:port`, `https://host:port` (TLS) or `host:port`,
    where host is an IP literal (`[...]` for IPv6). Returns ("unix", path), or
    ("tcp" or "tls", ip, port)."""
    for prefix in ("unix://", "unix:"):
        if s.startswith(prefix):
            path = s[len(prefix) :]
            if not path:
                raise AddressError(s)
            return ("unix", path)
    hostport, kind = s, "tcp"
    for prefix, k in (("tcp://", "tcp"), ("http://", "tcp"), ("https://", "tls")):
        if s.startswith(prefix):
            hostport, kind = s[len(prefix) :], k
            break
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isascii() or not port.isdigit() or int(port) > 65535:
        raise AddressError(s)
    try:
        if host.startswith("[") and host.endswith("]"):
            ip = ipaddress.IPv6Address(host[1:-1])
        else:
            ip = ipaddress.IPv4Address(host)
    except ValueError:
        raise AddressError(s) from None
    return (kind, str(ip), int(port))


TLS_CERT_ENV = "SWITCHYARD_PLUGIN_TLS_CERT"
TLS_KEY_ENV = "SWITCHYARD_PLUGIN_TLS_KEY"
TLS_CLIENT_CA_ENV = "SWITCHYARD_PLUGIN_TLS_CLIENT_CA"


class ServerTls:
    """The sidecar's certificate and key (PEM) and, for mutual TLS, the CA client
    certificates must chain to: the files named by the same variables as in the SDK."""

    def __init__(self, cert, key, client_ca):
        self.cert, self.key, self.client_ca = cert, key, client_ca

    @classmethod
    def from_env(cls):
        def read(var, required):
            path = os.environ.get(var, "").strip()
            if not path:
                if required:
                    raise UsageError(
                        f"an https:// listen address needs {var} (a PEM file); set {TLS_CERT_ENV} and {TLS_KEY_ENV}"
                    )
                return None
            try:
                with open(path, "rb") as f:
                    return f.read()
            except OSError as e:
                raise UsageError(f"{var}={path}: cannot read: {e.strerror or e}") from None

        return cls(read(TLS_CERT_ENV, True), read(TLS_KEY_ENV, True), read(TLS_CLIENT_CA_ENV, False))

    def server_credentials(self):
        return grpc.ssl_server_credentials(
            [(self.key, self.cert)],
            root_certificates=self.client_ca,
            require_client_auth=self.client_ca is not None,
        )


class UsageError(ValueError):
    """Bad configuration from the command line or the environment (exit code 1)."""


USAGE = f"""usage: sidecar.py [--listen unix:///path.sock | --listen 127.0.0.1:PORT | --listen https://IP:PORT] [--probe]

Serves the Switchyard plugin(s) {PLUGIN_NAME} over gRPC until SIGTERM.
SWITCHYARD_PLUGIN_LISTEN sets the address when --listen is absent. An https://
address serves TLS with the PEM files in {TLS_CERT_ENV} and {TLS_KEY_ENV};
with {TLS_CLIENT_CA_ENV} too, clients must present a certificate signed by that CA
(mutual TLS).

  --probe   check the running sidecar at that address (gRPC health) and exit 0 if
            it is serving, 1 if not (an exec probe)"""


def parse_args(argv):
    """(listen address, probe?) from --listen / --listen= / SWITCHYARD_PLUGIN_LISTEN and
    --probe, or None for --help. Exits 1 on bad usage, as the Rust sidecars do."""
    listen = os.environ.get(LISTEN_ENV)
    probe_only = False
    args = iter(argv)
    for a in args:
        if a == "--probe":
            probe_only = True
        elif a == "--listen":
            listen = next(args, None)
            if listen is None:
                log("--listen needs an address, e.g. unix:///tmp/p.sock")
                raise SystemExit(1)
        elif a.startswith("--listen="):
            listen = a[len("--listen=") :]
        elif a in ("-h", "--help"):
            print(USAGE)
            return None
        else:
            log(f"unknown argument {quote(a)}; try --help")
            raise SystemExit(1)
    if listen is None:
        return ("unix", f"/tmp/switchyard/{PLUGIN_NAME.lower()}.sock"), probe_only
    return parse_listen_address(listen), probe_only


HEALTH_SERVICE = "grpc.health.v1.Health"
PLUGIN_SERVICE = "switchyard.plugin.v1.Plugin"


class HealthService:
    """grpc.health.v1.Health: SERVING while the sidecar serves, NOT_SERVING from the
    moment shutdown starts (so probes fail while replies drain), for "" and the plugin
    service. Registered by hand from the generated messages."""

    def __init__(self):
        self.status = health_pb.HealthCheckResponse.SERVING
        self.changed = asyncio.Event()

    def set(self, status):
        self.status = status
        self.changed.set()
        self.changed = asyncio.Event()

    @staticmethod
    def _known(service):
        return service in ("", PLUGIN_SERVICE)

    async def check(self, request, context):
        if not self._known(request.service):
            await context.abort(grpc.StatusCode.NOT_FOUND, f"unknown service {quote(request.service)}")
        return health_pb.HealthCheckResponse(status=self.status)

    async def watch(self, request, context):
        while True:
            st = self.status if self._known(request.service) else health_pb.HealthCheckResponse.SERVICE_UNKNOWN
            changed = self.changed
            yield health_pb.HealthCheckResponse(status=st)
            await changed.wait()

    def handler(self):
        req = health_pb.HealthCheckRequest.FromString
        resp = health_pb.HealthCheckResponse.SerializeToString
        return grpc.method_handlers_generic_handler(
            HEALTH_SERVICE,
            {
                "Check": grpc.unary_unary_rpc_method_handler(self.check, req, resp),
                "Watch": grpc.unary_stream_rpc_method_handler(self.watch, req, resp),
            },
        )


def grpc_target(listen):
    """The grpcio target for a parsed listen address."""
    if listen[0] == "unix":
        return f"unix:{os.path.abspath(listen[1])}"
    _, ip, port = listen
    host = f"[{ip}]" if ":" in ip else ip
    return f"{host}:{port}"


def probe_channel(listen):
    """A channel to the sidecar at `listen`, as its own --probe dials it. An https://
    address is dialled on the loopback when it is 0.0.0.0 or ::, and its certificate
    verified for "localhost" against SWITCHYARD_PLUGIN_TLS_CLIENT_CA, presenting the
    sidecar's own certificate as the client's (mutual TLS), else against the sidecar's
    own certificate (self-signed), as the SDK's probe does."""
    if listen[0] != "tls":
        return grpc.aio.insecure_channel(grpc_target(listen))
    tls = ServerTls.from_env()
    _, ip, port = listen
    if ipaddress.ip_address(ip).is_unspecified:
        ip = "127.0.0.1"
    if tls.client_ca is not None:
        creds = grpc.ssl_channel_credentials(tls.client_ca, tls.key, tls.cert)
    else:
        creds = grpc.ssl_channel_credentials(tls.cert)
    return grpc.aio.secure_channel(
        grpc_target(("tls", ip, port)), creds, options=[("grpc.ssl_target_name_override", "localhost")]
    )


async def probe(listen, timeout=5.0):
    """Checks a running sidecar's health at `listen`: None when it is SERVING, else
    why not. For exec probes (kubelet's gRPC probes cannot reach a Unix socket)."""
    async with probe_channel(listen) as ch:
        check = ch.unary_unary(
            f"/{HEALTH_SERVICE}/Check",
            request_serializer=health_pb.HealthCheckRequest.SerializeToString,
            response_deserializer=health_pb.HealthCheckResponse.FromString,
        )
        try:
            r = await check(health_pb.HealthCheckRequest(), timeout=timeout, wait_for_ready=False)
        except grpc.aio.AioRpcError as e:
            return f"{e.code().name}: {e.details()}"
    if r.status != health_pb.HealthCheckResponse.SERVING:
        return health_pb.HealthCheckResponse.ServingStatus.Name(r.status)
    return None


LISTEN_ENV = "SWITCHYARD_PLUGIN_LISTEN"


def _listen_hint(addr, unix, err):
    """As switchyard_proto::listen_hint: what is missing and the change that fixes it."""
    how = f"{LISTEN_ENV} (or --listen)"
    code = err.errno
    if not unix:
        port = str(addr).rsplit(":", 1)[-1]
        if code == errno.EADDRINUSE:
            return (f"port {port} is already in use by another process "
                    f"(`ss -ltnp 'sport = :{port}'` shows which): stop it, or choose a free port with {how}")
        if code == errno.EADDRNOTAVAIL:
            return (f"{addr} is not an address of this machine: use 127.0.0.1 (this machine only) "
                    f"or 0.0.0.0 (every interface) with {how}")
        if code in (errno.EACCES, errno.EPERM):
            return f"ports below 1024 need privileges (CAP_NET_BIND_SERVICE): choose a port of 1024 or above with {how}"
    else:
        folder = os.path.dirname(addr) or "."
        if code == errno.EADDRINUSE:
            return f"{addr} is in use by a running process: stop it, or give this one another path with {how}"
        if code in (errno.EACCES, errno.EPERM, errno.EROFS):
            return (f"cannot create a socket in {folder}: it is not writable here; choose a writable folder "
                    f"with {how}, e.g. unix:///tmp/switchyard/plugin.sock")
        if code == errno.ENOENT:
            return (f"the folder {folder} does not exist and cannot be created: create it "
                    f"(mkdir -p {folder}) or choose another path with {how}")
    return f"choose another address with {how}"


def _probe_listen(listen):
    """Binds the address once with a plain socket, so a failure is explained here
    (gRPC's own says only "Failed to bind")."""
    import socket

    if listen[0] == "unix":
        path = os.path.abspath(listen[1])
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.bind(path)
            finally:
                s.close()
                try:
                    os.unlink(path)
                except OSError:
                    pass
        except OSError as e:
            raise OSError(f"cannot listen on unix://{path}: {e.strerror}; {_listen_hint(path, True, e)}") from None
        return
    _, ip, port = listen
    family = socket.AF_INET6 if ":" in ip else socket.AF_INET
    s = socket.socket(family, socket.SOCK_STREAM)
    try:
        s.bind((ip, int(port)))
    except OSError as e:
        raise OSError(f"cannot listen on {ip}:{port}: {e.strerror}; {_listen_hint(f'{ip}:{port}', False, e)}") from None
    finally:
        s.close()


async def serve(listen, plugins, ready=None, tls=None):
    """Serves until SIGTERM or SIGINT, then lets replies in flight finish and removes
    the socket. `tls` (a ServerTls) is required for an https:// address."""
    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            # grpcio sets SO_REUSEPORT by default: a second sidecar on the same TCP
            # port would silently share it instead of failing.
            ("grpc.so_reuseport", 0),
        ]
    )
    pb_grpc.add_PluginServicer_to_server(PluginService(plugins), server)
    health = HealthService()
    server.add_generic_rpc_handlers((health.handler(),))
    sock = None
    if listen[0] == "unix":
        sock = os.path.abspath(listen[1])
        # A socket left by a previous run would make bind fail.
        try:
            if stat.S_ISSOCK(os.lstat(sock).st_mode):
                os.unlink(sock)
        except FileNotFoundError:
            pass
    _probe_listen(listen)
    if listen[0] == "unix":
        # A socket left by a previous run would make bind fail.
        try:
            if stat.S_ISSOCK(os.lstat(sock).st_mode):
                os.unlink(sock)
        except FileNotFoundError:
            pass
        os.makedirs(os.path.dirname(sock), exist_ok=True)
        target, shown = f"unix:{sock}", f"unix://{sock}"
    else:
        _, ip, port = listen
        host = f"[{ip}]" if ":" in ip else ip
        target, shown = f"{host}:{port}", None
    try:
        if listen[0] == "tls":
            if tls is None:
                raise UsageError(f"https://{target}: TLS needs {TLS_CERT_ENV} and {TLS_KEY_ENV}")
            port = server.add_secure_port(target, tls.server_credentials())
        else:
            port = server.add_insecure_port(target)
    except RuntimeError as e:
        raise OSError(f"cannot listen on {target}: {e}") from None
    if shown is None:
        shown = f"{'https' if listen[0] == 'tls' else 'tcp'}://{host}:{port}"
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await server.start()
    try:
        print(f"{PLUGIN_NAME} listening on {shown}", file=sys.stderr, flush=True)
        if ready is not None:
            ready(shown)
        await stop.wait()
    finally:
        health.set(health_pb.HealthCheckResponse.NOT_SERVING)
        await server.stop(SHUTDOWN_GRACE_SECS)
        if sock is not None:
            try:
                os.unlink(sock)
            except FileNotFoundError:
                pass


def main(argv=None):
    try:
        parsed = parse_args(sys.argv[1:] if argv is None else argv)
        if parsed is None:
            return 0
        listen, probe_only = parsed
        tls = ServerTls.from_env() if listen[0] == "tls" else None
    except (AddressError, UsageError) as e:
        log(str(e))
        return 1
    if probe_only:
        why = asyncio.run(probe(listen))
        if why is not None:
            scheme = {"unix": "unix://", "tls": "https://"}.get(listen[0], "http://")
            log(f"health check of {scheme}{grpc_target(listen).removeprefix('unix:')}: {why}")
            return 1
        return 0
    provider = init_tracing()
    try:
        lookahead = os.environ.get("SWITCHYARD_ENERGY_LOOKAHEAD", "on") != "off"
        asyncio.run(serve(listen, [EnergyAware(node_local=lookahead)], tls=tls))
    except (OSError, UsageError) as e:
        log(str(e))
        return 1
    finally:
        if provider is not None:
            provider.shutdown()  # exports the spans still queued
    return 0


if __name__ == "__main__":
    sys.exit(main())
