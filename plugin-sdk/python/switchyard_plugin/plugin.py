"""What a plugin is: a class with a `name` and the methods of the extension points it
implements. The SDK tells the scheduler, at handshake, which of these methods exist;
every one is optional.

    class Accelerator(Plugin):
        name = "Accelerator"
        node_local = True

        def filter(self, cycle, state, node):
            ...

Methods (`cycle` is a `Cycle`, `state` the plugin's `CycleState` for the attempt,
`node` a `NodeInfo`; a Status may be returned as None for success):

==================  ============================================================  ======================
method              called                                                        returns
==================  ============================================================  ======================
pre_enqueue         (pod) before the pod enters the active queue                  Status
sort_key            (pod) once per pod at enqueue; smaller keys first             bytes
pre_filter          (cycle, state) once per attempt                               Status or PreFilterResult
add_pod             (cycle, state, pod, node) what-if: pod added to node          Status
remove_pod          (cycle, state, pod, node) what-if: pod removed from node      Status
filter              (cycle, state, node) per node                                 Status
post_filter         (cycle, state, {node name: Status}) when no node fits         (Status, node name or None)
pre_score           (cycle, state, [NodeInfo]) once over the feasible nodes       Status
score               (cycle, state, node) per feasible node                        int
normalize_score     (cycle, state, scores) rescale the list in place to 0..100    Status
label_scores        (cycle) once per attempt, with score_node_label (below)      {label value: score} or Status
reserve             (cycle, state, node_name)                                     Status
unreserve           (cycle, state, node_name) must be idempotent                  None
permit              (cycle, state, node_name, handle)                             Status, or (Status, timeout seconds)
pre_bind            (cycle, state, node_name)                                     Status
bind                (cycle, state, node_name); Skip passes to the next binder     Status
post_bind           (cycle, state, node_name)                                     None
==================  ============================================================  ======================

Raise `PluginError` from any of them to answer with an Error (or any) status; any
other exception is logged and answered as an Error too, never closing a stream.
Methods are plain functions called on the SDK's event loop: keep them short and
never block (no network calls inside filter or score).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Callable, List, Optional, Sequence

if TYPE_CHECKING:
    from .index import Index
    from .snapshot import Snapshot

from .status import Status


class ClusterEvent:
    """A kind of cluster change that may make a pod this plugin rejected schedulable
    (requeue hints): `resource` is one of the names in proto/README.md ("Node", "Pod",
    ...), `actions` some of Add, Delete, Update, UpdateNodeLabel, UpdateNodeTaint, ...
    (empty: every action)."""

    __slots__ = ("resource", "actions")

    def __init__(self, resource: str, *actions: str):
        self.resource = resource
        self.actions = tuple(actions)


class Plugin:
    """Base class of a plugin (optional: any object with the same attributes works).

    Attributes:
        name: unique within the sidecar; the scheduler's configuration names it.
        events: ClusterEvents after which pods this plugin rejected are retried;
            empty means every event.
        node_local: True when filter, pre_score, score and normalize_score depend
            only on the pod and the nodes they are asked about (each node and its
            pods), never on other nodes, and the plugin has no pre_filter. The
            scheduler may then send several pods' Filter calls in one message and
            ahead of their attempts, which hides the round trip. A wrong True gives
            wrong answers; the SDK refuses it together with a pre_filter.
        signature: the pod fields filter and score read, when their answers for a
            pod and a node depend only on those and on the Node object itself: not
            on the pods on any node, nor on other nodes (upstream's pod signatures,
            KEP-5598). The scheduler then answers a later pod whose listed fields
            are equal, on a node whose Node object is unchanged, from an earlier
            answer without calling. Names: namespace, labels, annotations,
            scheduler_name, priority (and priority class), requests, tolerations,
            node_selector, owner_references, volume_claims; ("none",) when the
            plugin reads no field of the pod (every pod alike). Empty (the
            default): no reuse. A wrong list gives wrong placements, as a wrong
            node_local does; the SDK refuses one without node_local (or
            signature_node_pods), or with a name it does not know.
        signature_node_pods: True, with a signature, when filter and score also
            read the pods on the node they are asked about (never other nodes'),
            and pre_filter, if any, leaves the same state for pods whose signed
            fields are equal (a quota keyed by a label: pre_filter notes the
            tenant, filter reads the node's count from an index). node_local is
            then not needed; the scheduler keeps an answer only while the node and
            its pods are unchanged, and asks a round only for its changed nodes.
        signature_label_keys: pod label keys filter and score read, signed by
            value: narrower than "labels", which signs every label (workloads
            often give each pod a label of its own). Only with signature_node_pods
            and without node_local; signature ("none",) when no other field is
            read.
        pre_filter_pod_only: True, with signature_node_pods, when pre_filter's
            verdict and state depend only on the pod's signed fields, never on
            nodes or other pods (a quota's pre_filter noting the tenant). The
            plugin is then node-local with a pre_filter: the SDK answers its calls
            at the generation they name, and the scheduler sends the queued pods'
            pre_filter and first filter round ahead of their attempts, which hides
            the round trip. A wrong True gives wrong placements.
        indexes: indexes of the replica the plugin reads (`Index.pods_by_label(key)`,
            `Index.PODS_BY_NAMESPACE`, `Index.nodes_by_label(key)`): the SDK keeps
            them current as deltas arrive, so a cluster-wide count is a look-up
            (`cycle.snapshot.pods_by_label(key)`) instead of a scan of every pod.
        score_normalization: None or "custom" (the default: the plugin's own
            normalize_score, or none), "default" or "default_reverse": upstream's
            DefaultNormalizeScore(100, reverse), which the SDK then applies itself
            (define no normalize_score) and the scheduler can apply to raw scores
            it reuses for alike pods.
        score_node_label: a node label key, for a plugin whose score of a node is
            a function of that label's value alone (a rack, a zone): it defines
            label_scores(cycle) -> {value: raw score} (or a Status; Skip skips
            Score) instead of pre_score, score and normalize_score, and the SDK
            serves that as its PreScore and Score. The scheduler asks for the
            table as the cycle starts, while its own Filter runs, and scores the
            nodes itself (see switchyard_plugin.label_score).
    """

    name: str = ""
    events: Sequence[ClusterEvent] = ()
    node_local: bool = False
    signature: Sequence[str] = ()
    signature_node_pods: bool = False
    signature_label_keys: Sequence[str] = ()
    pre_filter_pod_only: bool = False
    score_normalization: Optional[str] = None
    indexes: Sequence["Index"] = ()


class Cycle:
    """One scheduling attempt, as a call sees it: `id`, the `pod` being scheduled,
    the scheduler `profile` (schedulerName) and the replicated `snapshot` at the
    attempt's generation."""

    __slots__ = ("id", "pod", "profile", "snapshot")

    def __init__(self, cycle_id: int, pod: Any, profile: str, snapshot: "Snapshot"):
        self.id = cycle_id
        self.pod = pod
        self.profile = profile
        self.snapshot = snapshot


class PreFilterResult:
    """PreFilter's answer when it also narrows the nodes: only `node_names` are worth
    evaluating (upstream's PreFilterResult.NodeNames)."""

    __slots__ = ("status", "node_names")

    def __init__(self, status: Optional[Status] = None, node_names: Optional[Sequence[str]] = None):
        self.status = status if status is not None else Status.success()
        self.node_names = None if node_names is None else list(node_names)


class PermitHandle:
    """Decides about pods waiting at Permit, later: `allow` releases a pod for one
    plugin (it binds once every plugin it waits on allowed it), `reject` sends it back
    to the queue. Safe to call from other threads."""

    def __init__(self, service):
        self._service = service

    def allow(self, plugin: str, uid: str) -> bool:
        """False when the pod is not waiting on `plugin` (decided, timed out, or never
        waited)."""
        return self._decide(plugin, uid, True, "")

    def reject(self, plugin: str, uid: str, message: str = "") -> bool:
        return self._decide(plugin, uid, False, message)

    def waiting_pods(self, plugin: str) -> List[Any]:
        return [w[0] for w in list(self._service.waiting.values()) if plugin in w[1]]

    def _decide(self, plugin: str, uid: str, allow: bool, message: str) -> bool:
        svc = self._service
        loop = svc.loop
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if loop is not None and running is not loop:
            fut = asyncio.run_coroutine_threadsafe(_call(svc.decide, plugin, uid, allow, message), loop)
            return fut.result(timeout=5)
        return svc.decide(plugin, uid, allow, message)


async def _call(f: Callable[..., bool], *args) -> bool:
    return f(*args)

