"""The `switchyard.plugin.v1.Plugin` service: the whole sidecar side of the contract
(proto/README.md), so that a plugin is only its policy.

Everything runs on one asyncio loop: replica updates are atomic with respect to calls
without locks. Each stream handles its requests one at a time, in order, so a call
waiting for its generation holds back the later calls of its own stream only.
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
from .label_score import LabelScored, label_scored, reply_table
from .plugin import Cycle, PermitHandle, PreFilterResult
from .snapshot import CycleState, NodeInfo, ReplicationError, Snapshot, placed, quote
from .status import SUCCESS, Code, PluginError, Status, as_status
from .protocol import (  # noqa: F401  (re-exported: this module's names before the split)
    PROTOCOL_VERSION,
    CAPABILITIES,
    GENERATION_WAIT_SECS,
    POINTS,
    log,
    has,
    node_local,
    pre_filter_pod_only,
    answers_at_named_generation,
    pre_filter_extensions,
    POD_FIELDS,
    SCORE_NORMALIZATIONS,
    _signature,
    _signature_label_keys,
    signature_node_pods,
    _score_normalization,
    MAX_NODE_SCORE,
    normalize_scores,
    _events,
    group_failures,
    CallError,
    _error,
    CycleEntry,
    init_tracing,
    call_span,
    _stream,
)


class PluginService(pb_grpc.PluginServicer):
    """Serves `plugins` (objects as described in `switchyard_plugin.plugin`). Every
    stream is served, since the scheduler opens them all; a call for an extension
    point a plugin lacks is answered with an Error status and the stream stays open.

    `capabilities` offers the protocol's optional CAPABILITIES (filter-batch,
    replicate-batch) when the scheduler does; False serves as a sidecar built before
    them would (`main` sets it from --no-optional-capabilities)."""

    def __init__(
        self,
        plugins,
        max_batch_nodes: int = 0,
        generation_wait: float = GENERATION_WAIT_SECS,
        capabilities: bool = True,
    ):
        names = set()
        plugins = [label_scored(p) for p in plugins]
        for p in plugins:
            name = getattr(p, "name", "")
            if not isinstance(name, str) or not name:
                raise ValueError(f"plugin {p!r} has no name: set the class attribute `name`")
            if name in names:
                raise ValueError(f"two plugins are named {quote(name)}: names must be unique in a sidecar")
            names.add(name)
            if node_local(p) and has(p, "pre_filter"):
                raise ValueError(
                    f"plugin {quote(name)} declares node_local but has a pre_filter, whose "
                    "state may span nodes; drop one of the two"
                )
            if getattr(p, "pre_filter_pod_only", False) and (not signature_node_pods(p) or node_local(p)):
                raise ValueError(
                    f"plugin {quote(name)} declares pre_filter_pod_only without signature_node_pods, "
                    "or with node_local: set signature_node_pods = True (with a signature) and drop "
                    "node_local"
                )
            if has(p, "normalize_score") and not has(p, "score"):
                raise ValueError(f"plugin {quote(name)} has normalize_score but no score")
            if has(p, "reserve") != has(p, "unreserve"):
                raise ValueError(f"plugin {quote(name)} must implement reserve and unreserve together")
        self.plugins = {p.name: p for p in plugins}
        # Read and checked once: what the handshake declares is what the calls apply.
        self.signatures = {p.name: _signature(p, p.name) for p in plugins}
        self.label_keys = {p.name: _signature_label_keys(p, p.name) for p in plugins}
        self.normalizations = {p.name: _score_normalization(p, p.name) for p in plugins}
        self.max_batch_nodes = max_batch_nodes
        self.generation_wait = generation_wait
        self.capabilities = bool(capabilities)
        self.replica = Snapshot().with_indexes(i for p in plugins for i in getattr(p, "indexes", ()))
        # Generation of the last Replicate message applied (any kind).
        self.applied = 0
        self._applied_changed: Optional[asyncio.Event] = None
        self.cycles: Dict[int, CycleEntry] = {}
        # Pods waiting at Permit: uid -> (pod, [plugin names]).
        self.waiting: Dict[str, tuple] = {}
        self._permit_out: Optional[asyncio.Queue] = None
        self.loop: Optional[asyncio.AbstractEventLoop] = None
        self.handle = PermitHandle(self)

    # ------------------------------------------------------------ shared steps

    def plugin(self, name: str):
        p = self.plugins.get(name)
        if p is None:
            raise _error(f"this sidecar serves no plugin named {quote(name)}")
        return p

    def normalizes(self, p) -> bool:
        """Whether the plugin has a NormalizeScore: its own, or a standard one it
        declared (which the SDK applies)."""
        return has(p, "score") and (
            has(p, "normalize_score") or self.normalizations[p.name] != pb.SCORE_NORMALIZATION_CUSTOM
        )

    @staticmethod
    def missing(name: str, point: str) -> CallError:
        return _error(f"plugin {quote(name)} has no {point}")

    def _changed(self) -> asyncio.Event:
        if self._applied_changed is None:
            self._applied_changed = asyncio.Event()
        return self._applied_changed

    async def reached(self, generation: int) -> None:
        """Waits until the replica has applied `generation`, at most
        `generation_wait` seconds; a CallError after that."""
        if self.applied >= generation:
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.generation_wait
        while self.applied < generation:
            left = deadline - loop.time()
            if left <= 0:
                raise _error(
                    f"generation {generation} not reached within {self.generation_wait:g}s (replica at {self.applied})"
                )
            try:
                await asyncio.wait_for(self._changed().wait(), left)
            except asyncio.TimeoutError:
                pass

    async def cycle(self, cycle_id: int, generation: int, relaxed: bool) -> CycleEntry:
        """The cycle a call names, once the replica has reached its generation. A
        node-local plugin's call (`relaxed`) may name any generation from the cycle's
        start on; others must name exactly it."""
        await self.reached(generation)
        entry = self.cycles.get(cycle_id)
        if entry is None:
            raise _error(f"cycle {cycle_id} is unknown (never started, or already ended)")
        if entry.generation != generation and not (relaxed and entry.generation <= generation):
            raise _error(f"cycle {cycle_id} started at generation {entry.generation}, not {generation}")
        return entry

    def replica_at(self, entry: CycleEntry, relaxed: bool) -> Snapshot:
        """The replica for a scheduling-cycle call: still at the cycle's generation,
        never a later one, unless the plugin is node-local."""
        r = self.replica
        if not relaxed and r.generation != entry.snapshot_generation:
            raise _error(
                f"the replica moved on to generation {r.generation} since cycle {entry.id} "
                f"(at {entry.snapshot_generation}) started"
            )
        return r

    @staticmethod
    def nodes_by_id(replica: Snapshot, ids) -> List[NodeInfo]:
        out = []
        for i in ids:
            ni = replica.node(i)
            if ni is None:
                raise _error(f"unknown node id {i}")
            out.append(ni)
        return out

    async def outcome(self, point: str, fn, *args):
        """Runs a call: (result, None), or (None, error Status). An exception in
        plugin code is logged and answered as an Error: it never breaks the stream
        (the scheduler drops the whole connection on a stream error)."""
        try:
            return await fn(*args), None
        except CallError as e:
            return None, e.status
        except PluginError as e:
            return None, e.status
        except Exception as e:  # noqa: BLE001
            log(f"{point} call failed: {e!r}\n{traceback.format_exc().rstrip()}")
            return None, Status.error(f"{point}: internal error in the sidecar: {e!r}")

    # ------------------------------------------------------------ handshake

    async def Handshake(self, request, context):
        if self.loop is None:
            self.loop = asyncio.get_running_loop()
        if PROTOCOL_VERSION not in request.protocol_versions:
            await context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"this sidecar speaks protocol {PROTOCOL_VERSION}; the scheduler offered "
                f"{json.dumps(list(request.protocol_versions))}",
            )
        infos = [
            pb.PluginInfo(
                name=p.name,
                extension_points=[getattr(pb, e) for m, e in POINTS if has(p, m)],
                pre_filter_extensions=pre_filter_extensions(p),
                normalize_score=self.normalizes(p),
                node_local=node_local(p),
                events=_events(p),
                signature=self.signatures[p.name],
                signature_node_pods=signature_node_pods(p),
                signature_label_keys=self.label_keys[p.name],
                pre_filter_pod_only=pre_filter_pod_only(p),
                score_normalization=self.normalizations[p.name],
                score_node_label=p.score_node_label if isinstance(p, LabelScored) else "",
            )
            for p in self.plugins.values()
        ]
        offered = set(request.capabilities)
        return pb.HandshakeResponse(
            protocol_version=PROTOCOL_VERSION,
            plugins=infos,
            max_batch_nodes=self.max_batch_nodes,
            capabilities=[c for c in CAPABILITIES if c in offered] if self.capabilities else [],
        )

    # ------------------------------------------------------------ replication

    async def Replicate(self, request_iterator, context):
        if self.loop is None:
            self.loop = asyncio.get_running_loop()
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
                    expect = self.apply(msg, expect)
                except ReplicationError as e:
                    log(f"replication failed; closing the stream: {e}")
                    await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(e))
                if msg.ack:
                    yield pb.ReplicateResponse(applied_generation=msg.generation)

    def apply(self, msg, expect: Optional[int]) -> int:
        """Applies one Replicate message; returns the generation expected next."""
        g = msg.generation
        kind = msg.WhichOneof("kind")
        full = kind == "delta" and msg.delta.full
        if expect is None and not full:
            raise ReplicationError(f"the first message of a Replicate stream must be a full snapshot (got generation {g})")
        # A full snapshot may carry any generation (it starts over); anything else
        # must be the next one.
        if expect is not None and not full and g != expect:
            raise ReplicationError(f"generation gap: expected {expect}, got {g}")
        if kind == "delta":
            if full:
                self.cycles.clear()
                self.waiting.clear()
            self.replica.apply(g, msg.delta)
        elif kind == "cycle_start":
            c = msg.cycle_start
            pod = c.pod if c.HasField("pod") else pb.Pod()
            if c.HasField("pod"):
                self.replica.note_cycle_pod(pod)
            self.cycles[c.cycle] = CycleEntry(c.cycle, pod, c.profile, g, self.replica.generation)
        elif kind == "cycle_end":
            e = self.cycles.pop(msg.cycle_end.cycle, None)
            if e is not None:
                self.waiting.pop(e.pod.uid, None)
        else:
            raise ReplicationError(f"generation {g}: empty Replicate message")
        self.applied = g
        ev = self._applied_changed
        if ev is not None:
            # Wake every waiter; each re-checks its own generation.
            self._applied_changed = None
            ev.set()
        return g + 1

    # ------------------------------------------------------------ streams

    PreEnqueue = _stream("PreEnqueue", "pre_enqueue_call")
    QueueSort = _stream("QueueSort", "queue_sort_call")
    PreFilter = _stream("PreFilter", "pre_filter_call")
    Filter = _stream("Filter", "filter_call")
    PostFilter = _stream("PostFilter", "post_filter_call")
    PreScore = _stream("PreScore", "pre_score_call")
    Score = _stream("Score", "score_call")
    NormalizeScore = _stream("NormalizeScore", "normalize_score_call")
    Reserve = _stream("Reserve", "cycle_call", "Reserve")
    Unreserve = _stream("Unreserve", "cycle_call", "Unreserve")
    PreBind = _stream("PreBind", "cycle_call", "PreBind")
    Bind = _stream("Bind", "cycle_call", "Bind")
    PostBind = _stream("PostBind", "cycle_call", "PostBind")

    async def FilterBatch(self, request_iterator, context):
        """Several pods' Filter calls in one message (filter-batch): each answered as
        it would be alone on the Filter stream, in its own span, in order."""
        async for req in request_iterator:
            # One bounded wait for the latest generation the calls name: a replica
            # that never gets there fails them all at once.
            latest = max((c.generation for c in req.calls), default=0)
            try:
                await self.reached(latest)
                missed = None
            except CallError as e:
                missed = e.status.to_pb()
            replies = []
            for call in req.calls:
                if missed is not None:
                    r = pb.FilterResponse(request_id=call.request_id, generation=call.generation)
                    r.error.CopyFrom(missed)
                    replies.append(r)
                    continue
                with call_span("Filter", call):
                    replies.append(await self.filter_call(call))
            yield pb.FilterBatchResponse(request_id=req.request_id, replies=replies)

    async def Permit(self, request_iterator, context):
        """Replies in order, and unsolicited decisions about waiting pods
        (request_id 0) whenever a plugin makes one, on the same stream."""
        if self.loop is None:
            self.loop = asyncio.get_running_loop()
        out: asyncio.Queue = asyncio.Queue()
        self._permit_out = out

        async def read():
            try:
                async for req in request_iterator:
                    with call_span("Permit", req):
                        out.put_nowait(await self.permit_call(req))
            except Exception as e:  # noqa: BLE001  (the stream closed under us)
                log(f"Permit stream closed: {e!r}")
            finally:
                out.put_nowait(None)

        reader = asyncio.ensure_future(read())
        try:
            while True:
                item = await out.get()
                if item is None:
                    break
                yield item
        finally:
            reader.cancel()
            if self._permit_out is out:
                self._permit_out = None

    def decide(self, plugin: str, uid: str, allow: bool, message: str) -> bool:
        """A decision about a pod waiting on `plugin` (on the loop)."""
        w = self.waiting.get(uid)
        if w is None or plugin not in w[1]:
            return False
        w[1].remove(plugin)
        if not allow or not w[1]:
            del self.waiting[uid]
        out = self._permit_out
        if out is None:
            return False
        out.put_nowait(
            pb.PermitResponse(
                request_id=0,
                decision=pb.WaitingPodDecision(pod_uid=uid, plugin=plugin, allow=allow, message=message),
            )
        )
        return True

    # ------------------------------------------------------------ queue

    async def pre_enqueue_call(self, req):
        async def run():
            p = self.plugin(req.plugin)
            if not has(p, "pre_enqueue"):
                raise self.missing(req.plugin, "PreEnqueue")
            if not req.HasField("pod"):
                raise _error("PreEnqueue request without a pod")
            return as_status(p.pre_enqueue(req.pod), "pre_enqueue")

        s, err = await self.outcome("PreEnqueue", run)
        # Outside any cycle: generation 0.
        return pb.StatusResponse(request_id=req.request_id, status=(s or err).to_pb(), generation=0)

    async def queue_sort_call(self, req):
        async def run():
            p = self.plugin(req.plugin)
            if not has(p, "sort_key") or not req.HasField("pod"):
                raise _error(f"plugin {quote(req.plugin)} has no QueueSort, or the request has no pod")
            key = p.sort_key(req.pod)
            if isinstance(key, str):
                key = key.encode()
            if not isinstance(key, (bytes, bytearray)):
                raise _error(f"sort_key returned {type(key).__name__}, not bytes")
            return bytes(key)

        key, err = await self.outcome("QueueSort", run)
        if err is not None:
            return pb.QueueSortResponse(request_id=req.request_id, status=err.to_pb())
        return pb.QueueSortResponse(request_id=req.request_id, status=SUCCESS.to_pb(), sort_key=key)

    # ------------------------------------------------------------ PreFilter

    async def pre_filter_call(self, req):
        out = pb.PreFilterResponse(request_id=req.request_id, generation=req.generation)

        entry = None

        async def run():
            nonlocal entry
            p = self.plugin(req.plugin)
            entry = await self.cycle(req.cycle, req.generation, answers_at_named_generation(p))
            if not has(p, "pre_filter"):
                raise self.missing(req.plugin, "PreFilter")
            replica = self.replica_at(entry, answers_at_named_generation(p))
            r = p.pre_filter(entry.view(replica), entry.state(p.name))
            if isinstance(r, PreFilterResult):
                return as_status(r.status, "pre_filter"), r.node_names
            return as_status(r, "pre_filter"), None

        r, err = await self.outcome("PreFilter", run)
        s, names = (err, None) if err is not None else r
        out.status.CopyFrom(s.to_pb())
        if names is not None and s.is_success:
            out.has_node_names = True
            out.node_names.extend(names)
        if entry is not None:
            # A Filter sent right behind (after_pre_filter) waits for this outcome.
            entry.record(entry.pre_filters, req.plugin, s)
        return out

    # ------------------------------------------------------------ Filter

    async def filter_call(self, req):
        out = pb.FilterResponse(request_id=req.request_id, generation=req.generation)
        res, err = await self.outcome("Filter", self.filter_batch, req)
        if err is None:
            failures, ahead = res
            # Every item was evaluated; only those that did not pass are listed.
            out.evaluated = len(req.nodes)
            if req.group_failures:
                out.failure_groups.extend(group_failures(failures))
            else:
                out.failures.extend(failures)
            if ahead is not None:
                out.score.CopyFrom(ahead)
        else:
            out.error.CopyFrom(err.to_pb())
        return out

    async def filter_batch(self, req):
        p = self.plugin(req.plugin)
        relaxed = answers_at_named_generation(p)
        entry = await self.cycle(req.cycle, req.generation, relaxed)
        if not has(p, "filter"):
            raise self.missing(req.plugin, "Filter")
        if req.after_pre_filter:
            pf = await self.point_outcome(entry, entry.pre_filters, p.name, "Filter named a PreFilter")
            if pf.code == Code.ERROR:
                raise CallError(pf)
            if not pf.is_success:
                raise _error(f"Filter sent behind a PreFilter that returned {pf.code.name}")
        f = p.filter
        replica = self.replica_at(entry, relaxed)
        cycle = entry.view(replica)
        state = entry.state(p.name)
        nodes = self.nodes_by_id(replica, req.nodes)
        deltas = None
        if len(req.deltas):
            deltas = [None] * len(nodes)
            for d in req.deltas:
                if d.index >= len(nodes):
                    raise _error(f"delta for item {d.index} of a batch of {len(nodes)}")
                deltas[d.index] = d
        failures = []
        NodeStatus = pb.NodeStatus
        for i, ni in enumerate(nodes):
            if deltas is None or deltas[i] is None:
                s = f(cycle, state, ni)
            else:
                s = self.filter_with_delta(p, cycle, state, ni, deltas[i])
            if s is None or s is True:
                continue
            if not isinstance(s, Status):
                s = as_status(s, "filter")
            if s.code != Code.SUCCESS:
                failures.append(NodeStatus(index=i, status=s.to_pb()))
        ahead = None
        if req.score_first:
            ahead = self.score_ahead(req, p, cycle, state, nodes, deltas, failures)
        return failures, ahead

    def filter_with_delta(self, p, cycle: Cycle, base: CycleState, node: NodeInfo, d) -> Status:
        """Filter on a what-if copy of the node: pods removed, then added, the
        plugin's state forked and updated by its remove_pod/add_pod (in that order,
        as upstream's dry run). A delta that does not fit the replica is an Error
        for that item."""
        ext = pre_filter_extensions(p)
        ni = node.clone()
        state = base.fork() if ext else base
        for uid in d.remove_pods:
            pod = ni.remove_pod(uid)
            if pod is None:
                return Status.error(f"delta removes pod {uid}, which is not on node {node.name}")
            if ext and has(p, "remove_pod"):
                s = as_status(p.remove_pod(cycle, state, pod, ni), "remove_pod")
                if not s.is_success:
                    return Status.error(f"RemovePod: {s.message}")
        adds = []
        for uid in d.add_pods:
            pod = cycle.snapshot.pod(uid)
            if pod is None:
                return Status.error(f"delta adds pod {uid}, which the replica does not hold")
            adds.append(pod)
        adds.extend(d.add_pod_objects)
        for pod in adds:
            pod = placed(pod, ni.node.name)
            ni.pods.append(pod)
            if ext and has(p, "add_pod"):
                s = as_status(p.add_pod(cycle, state, pod, ni), "add_pod")
                if not s.is_success:
                    return Status.error(f"AddPod: {s.message}")
        return as_status(p.filter(cycle, state, ni), "filter")

    def score_ahead(self, req, p, cycle, state, nodes, deltas, failures):
        """PreScore (on a fork, so a later PreScore call is unaffected), Score and
        NormalizeScore over the first `score_first` items the Filter passed, so the
        pod needs no Score call; with `raw_scores`, no NormalizeScore (the scheduler
        keeps raw scores to reuse for alike pods and normalises them itself). None
        when it cannot be done (no Score, or an item carries a delta): the scheduler
        then calls Score as usual."""
        if not has(p, "score"):
            return None
        failed = {f.index for f in failures}
        items = []
        for i in range(len(nodes)):
            if len(items) == req.score_first:
                break
            if i not in failed:
                items.append(i)
        if deltas is not None and any(deltas[i] is not None for i in items):
            return None
        scored = [nodes[i] for i in items]
        try:
            if req.pre_score and has(p, "pre_score"):
                state = state.fork()
                s = as_status(p.pre_score(cycle, state, scored), "pre_score")
                if not s.is_success:
                    return pb.ScoreAhead(status=s.to_pb())
            scores, normalized = self.score_nodes(p, cycle, state, scored, not req.raw_scores)
        except (CallError, PluginError) as e:
            return pb.ScoreAhead(status=e.status.to_pb())
        except Exception as e:  # noqa: BLE001
            log(f"Score (ahead) failed: {e!r}\n{traceback.format_exc().rstrip()}")
            return pb.ScoreAhead(status=Status.error(f"Score: internal error in the sidecar: {e!r}").to_pb())
        return pb.ScoreAhead(status=SUCCESS.to_pb(), scores=scores, normalized=normalized)

    # ------------------------------------------------------------ Score

    def score_nodes(self, p, cycle, state, nodes, normalize: bool):
        """Score over `nodes`, then NormalizeScore (the plugin's, or the standard one
        it declared) when asked; the flag says whether the scores are final. Without
        a NormalizeScore a plugin's scores are final whatever the request asked."""
        sp = p.score
        scores = []
        for ni in nodes:
            v = sp(cycle, state, ni)
            if type(v) is not int:
                if isinstance(v, bool) or not isinstance(v, int):
                    raise _error(f"score returned {type(v).__name__} {v!r} for node {ni.name}, not an int")
                v = int(v)
            scores.append(v)
        if not self.normalizes(p):
            return scores, True
        if not normalize:
            return scores, False
        if normalize_scores(self.normalizations[p.name], scores):
            return scores, True
        s = as_status(p.normalize_score(cycle, state, scores), "normalize_score")
        if not s.is_success:
            raise CallError(s)
        return scores, True

    async def score_call(self, req):
        out = pb.ScoreResponse(request_id=req.request_id, generation=req.generation)
        res, err = await self.outcome("Score", self.score_batch, req)
        if err is None:
            scores, normalized = res
            out.status.CopyFrom(SUCCESS.to_pb())
            out.scores.extend(scores)
            out.normalized = normalized
        else:
            out.status.CopyFrom(err.to_pb())
        return out

    async def score_batch(self, req):
        p = self.plugin(req.plugin)
        relaxed = answers_at_named_generation(p)
        entry = await self.cycle(req.cycle, req.generation, relaxed)
        if not has(p, "score"):
            raise self.missing(req.plugin, "Score")
        if req.after_pre_score:
            s = await self.pre_score_outcome(entry, p.name)
            if not s.is_success:
                # Skip included: the scheduler reads a Skip reply as "no scores".
                raise CallError(s)
        replica = self.replica_at(entry, relaxed)
        nodes = self.nodes_by_id(replica, req.nodes)
        return self.score_nodes(p, entry.view(replica), entry.state(p.name), nodes, req.normalize)

    async def pre_score_outcome(self, entry: CycleEntry, name: str) -> Status:
        """Waits for this cycle's PreScore of plugin `name` (sent just before Score)."""
        return await self.point_outcome(entry, entry.pre_scores, name, "Score named a PreScore")

    async def point_outcome(self, entry: CycleEntry, outcomes, name: str, what: str) -> Status:
        """Waits (up to the generation wait) until `outcomes` holds plugin `name`'s."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.generation_wait
        while name not in outcomes:
            left = deadline - loop.time()
            if left <= 0:
                raise _error(f"{what} of cycle {entry.id} that did not arrive within {self.generation_wait:g}s")
            ev = entry.pre_score_done
            try:
                await asyncio.wait_for(ev.wait(), left)
            except asyncio.TimeoutError:
                pass
        return outcomes[name]

    async def pre_score_call(self, req):
        table = None

        async def run():
            nonlocal table
            p = self.plugin(req.plugin)
            relaxed = answers_at_named_generation(p)
            entry = await self.cycle(req.cycle, req.generation, relaxed)
            # From here on the outcome is recorded for a Score sent with
            # after_pre_score.
            if not has(p, "pre_score"):
                s = self.missing(req.plugin, "PreScore").status
            else:
                try:
                    replica = self.replica_at(entry, relaxed)
                    nodes = self.nodes_by_id(replica, req.nodes)
                    state = entry.state(p.name)
                    s = as_status(p.pre_score(entry.view(replica), state, nodes), "pre_score")
                    if s.is_success:
                        table = reply_table(p, state)
                except (CallError, PluginError) as e:
                    s = e.status
                except Exception as e:  # noqa: BLE001
                    log(f"PreScore call failed: {e!r}\n{traceback.format_exc().rstrip()}")
                    s = Status.error(f"PreScore: internal error in the sidecar: {e!r}")
            entry.record(entry.pre_scores, p.name, s)
            return s

        s, err = await self.outcome("PreScore", run)
        out = pb.PreScoreResponse(request_id=req.request_id, status=(s or err).to_pb(), generation=req.generation)
        if table is not None and s is not None and s.is_success:
            values = sorted(table)
            out.label_scores.values.extend(values)
            out.label_scores.scores.extend(table[v] for v in values)
        return out

    async def normalize_score_call(self, req):
        out = pb.ScoreResponse(request_id=req.request_id, generation=req.generation)

        async def run():
            p = self.plugin(req.plugin)
            relaxed = answers_at_named_generation(p)
            entry = await self.cycle(req.cycle, req.generation, relaxed)
            if not self.normalizes(p):
                raise self.missing(req.plugin, "NormalizeScore")
            replica = self.replica_at(entry, relaxed)
            scores = list(req.scores)
            if normalize_scores(self.normalizations[p.name], scores):
                return scores
            s = as_status(p.normalize_score(entry.view(replica), entry.state(p.name), scores), "normalize_score")
            if not s.is_success:
                raise CallError(s)
            for v in scores:
                if isinstance(v, bool) or not isinstance(v, int):
                    raise _error(f"normalize_score left {type(v).__name__} {v!r} in the list, not an int")
            return scores

        scores, err = await self.outcome("NormalizeScore", run)
        if err is None:
            out.status.CopyFrom(SUCCESS.to_pb())
            out.scores.extend(scores)
            out.normalized = True
        else:
            out.status.CopyFrom(err.to_pb())
        return out

    # ------------------------------------------------------------ PostFilter

    async def post_filter_call(self, req):
        out = pb.PostFilterResponse(request_id=req.request_id, generation=req.generation)

        async def run():
            p = self.plugin(req.plugin)
            entry = await self.cycle(req.cycle, req.generation, answers_at_named_generation(p))
            if not has(p, "post_filter"):
                raise self.missing(req.plugin, "PostFilter")
            statuses = {k: Status.from_pb(v) for k, v in req.node_statuses.items()}
            replica = self.replica_at(entry, answers_at_named_generation(p))
            r = p.post_filter(entry.view(replica), entry.state(p.name), statuses)
            if isinstance(r, tuple):
                s, nominate = (r + (None,))[:2]
            else:
                s, nominate = r, None
            return as_status(s, "post_filter"), nominate or ""

        r, err = await self.outcome("PostFilter", run)
        if err is not None:
            out.status.CopyFrom(err.to_pb())
        else:
            out.status.CopyFrom(r[0].to_pb())
            out.nominated_node_name = str(r[1])
        return out

    # ------------------------------------------------------------ binding cycle

    async def cycle_call(self, req, point: str):
        """Reserve, Unreserve, PreBind, Bind, PostBind: a cycle, a node, a status."""
        method = {"Reserve": "reserve", "Unreserve": "unreserve", "PreBind": "pre_bind", "Bind": "bind", "PostBind": "post_bind"}[point]
        entries = []

        async def run():
            p = self.plugin(req.plugin)
            entry = await self.cycle(req.cycle, req.generation, answers_at_named_generation(p))
            entries.append(entry)
            if not has(p, method):
                raise self.missing(req.plugin, point)
            r = getattr(p, method)(entry.view(self.replica), entry.state(p.name), req.node_name)
            if point in ("Unreserve", "PostBind"):
                return SUCCESS
            return as_status(r, method)

        s, err = await self.outcome(point, run)
        if point == "Reserve" and entries:
            # A Permit sent right behind (after_reserve) waits for this outcome.
            entries[0].record(entries[0].reserves, req.plugin, s or err)
        return pb.StatusResponse(request_id=req.request_id, status=(s or err).to_pb(), generation=req.generation)

    async def permit_call(self, req):
        out = pb.PermitResponse(request_id=req.request_id, generation=req.generation)

        async def run():
            p = self.plugin(req.plugin)
            entry = await self.cycle(req.cycle, req.generation, answers_at_named_generation(p))
            if not has(p, "permit"):
                raise self.missing(req.plugin, "Permit")
            if req.after_reserve:
                rs = await self.point_outcome(entry, entry.reserves, p.name, "Permit named a Reserve")
                if not rs.is_success:
                    raise _error(f"Permit sent behind a Reserve that returned {rs.code.name}")
            r = p.permit(entry.view(self.replica), entry.state(p.name), req.node_name, self.handle)
            s, timeout = r if isinstance(r, tuple) else (r, 0.0)
            s = as_status(s, "permit")
            if s.code == Code.WAIT:
                if not isinstance(timeout, (int, float)) or timeout <= 0:
                    raise _error("permit answered Wait without a timeout: return (Status.wait(), seconds)")
                # Registered only after the plugin answered: waiting_pods() inside
                # permit lists the pod's siblings, not the pod itself.
                w = self.waiting.setdefault(entry.pod.uid, (entry.pod, []))
                if req.plugin not in w[1]:
                    w[1].append(req.plugin)
            return s, timeout

        r, err = await self.outcome("Permit", run)
        if err is not None:
            out.status.CopyFrom(err.to_pb())
        else:
            s, timeout = r
            out.status.CopyFrom(s.to_pb())
            if s.code == Code.WAIT:
                out.timeout_millis = max(1, min(int(timeout * 1000), 2**32 - 1))
        return out
