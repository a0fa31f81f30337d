"""The sidecar's replica of the scheduler's snapshot, kept by the SDK from the
Replicate stream, and the per-cycle plugin state."""

from __future__ import annotations

import copy
import json
from typing import Any, Dict, Iterator, Optional, Tuple

from ._stubs import pb
from .index import Index, Indexes, NodeSets, PodCounts, PodLists


def quote(s: str) -> str:
    return json.dumps(s, ensure_ascii=False)


class ReplicationError(Exception):
    """The replica can no longer be trusted: the Replicate stream is closed and the
    scheduler starts over with a full snapshot."""


class NodeInfo:
    """A node and the pods placed on it (bound or assumed), as kube-scheduler's
    NodeInfo. `node` and the pods are the protobuf messages (see `types.Node`,
    `types.Pod`); treat them as read-only."""

    __slots__ = ("node", "pods")

    def __init__(self, node, pods: Optional[list] = None):
        self.node = node
        self.pods: list = pods if pods is not None else []

    @property
    def name(self) -> str:
        return self.node.name

    def requested(self, resource: str) -> int:
        """The sum of the pods' requests of `resource` (cpu in millicores, memory in
        bytes, as the scheduler counts them)."""
        return sum(p.requests.get(resource, 0) for p in self.pods)

    def allocatable(self, resource: str) -> int:
        return self.node.allocatable.get(resource, 0)

    def remove_pod(self, uid: str):
        for i, p in enumerate(self.pods):
            if p.uid == uid:
                return self.pods.pop(i)
        return None

    def clone(self) -> "NodeInfo":
        return NodeInfo(self.node, list(self.pods))

    def __repr__(self) -> str:
        return f"NodeInfo({self.node.name!r}, {len(self.pods)} pods)"


class Snapshot:
    """The replicated snapshot: nodes by the scheduler's node id, pods by UID."""

    MAX_PENDING_PODS = 1024

    def __init__(self):
        # Generation of the last SnapshotDelta applied (CycleStart/End do not move it).
        self.generation = 0
        self._nodes: Dict[int, NodeInfo] = {}
        self._by_name: Dict[str, int] = {}
        self._pods: Dict[str, Tuple[Any, Optional[int]]] = {}
        # CycleStart pods not yet placed, for PodUpdates naming them (the scheduler's
        # rule: forget them all once MAX_PENDING_PODS are kept and another arrives).
        self._pending: Dict[str, Any] = {}
        # The plugins' declared indexes, kept current by every delta.
        self._indexes = Indexes()

    # -------------------------------------------------------- indexes

    def declare_index(self, index: Index) -> None:
        """Keeps `index` from now on (built at once from what the replica holds); the
        SDK declares every plugin's `indexes`."""
        if not self._indexes.declare(index):
            return
        self._indexes.clear()
        for ni in self._nodes.values():
            self._indexes.node(ni.node, True)
            for p in ni.pods:
                self._indexes.pod(p, ni.node.id, True)

    def with_indexes(self, indexes) -> "Snapshot":
        """This replica with `indexes` declared (for plugin unit tests)."""
        for i in indexes:
            self.declare_index(i)
        return self

    def pods_by_label(self, key: str) -> Optional[PodCounts]:
        """Placed pods per node by the value of pod label `key`, when a plugin declared
        Index.pods_by_label(key)."""
        return self._indexes.pods_by_label.get(key)

    def pods_by_namespace(self) -> Optional[PodCounts]:
        """Placed pods per node by namespace, when a plugin declared
        Index.PODS_BY_NAMESPACE."""
        return self._indexes.pods_by_namespace

    def nodes_by_label(self, key: str) -> Optional[NodeSets]:
        """Nodes by the value of node label `key`, when a plugin declared
        Index.nodes_by_label(key)."""
        return self._indexes.nodes_by_label.get(key)

    def pod_lists_by_label(self, key: str) -> Optional[PodLists]:
        """Placed pods by namespace and the value of pod label `key`, when a plugin
        declared Index.pod_lists_by_label(key)."""
        return self._indexes.pod_lists_by_label.get(key)

    # -------------------------------------------------------- reading

    def node(self, node_id: int) -> Optional[NodeInfo]:
        return self._nodes.get(node_id)

    def node_by_name(self, name: str) -> Optional[NodeInfo]:
        i = self._by_name.get(name)
        return None if i is None else self._nodes.get(i)

    def nodes(self) -> Iterator[NodeInfo]:
        return iter(self._nodes.values())

    def num_nodes(self) -> int:
        return len(self._nodes)

    def pod(self, uid: str):
        e = self._pods.get(uid)
        return e[0] if e else None

    def pods(self) -> Iterator[Any]:
        return (p for p, _ in self._pods.values())

    # -------------------------------------------------------- applying

    def note_cycle_pod(self, pod) -> None:
        if len(self._pending) >= self.MAX_PENDING_PODS:
            self._pending.clear()
        self._pending[pod.uid] = pod

    def apply(self, generation: int, d) -> None:
        """Applies one SnapshotDelta; ReplicationError when it contradicts the replica."""
        if d.full:
            self._nodes.clear()
            self._by_name.clear()
            self._pods.clear()
            self._pending.clear()
            self._indexes.clear()
        # Removals first: a node deleted and re-created arrives with a new id.
        for node_id in d.remove_nodes:
            ni = self._nodes.pop(node_id, None)
            if ni is not None:
                self._by_name.pop(ni.node.name, None)
                self._indexes.node(ni.node, False)
                for p in ni.pods:
                    self._indexes.pod(p, node_id, False)
                    if p.uid in self._pods:
                        self._pods[p.uid] = (self._pods[p.uid][0], None)
        for uid in d.remove_pods:
            self._remove_pod(uid)
        for n in d.upsert_nodes:
            old = self._by_name.get(n.name)
            if old is not None and old != n.id:
                raise ReplicationError(f"node {quote(n.name)} arrived with id {n.id} but the replica has it as {old}")
            self._by_name[n.name] = n.id
            ni = self._nodes.get(n.id)
            if ni is not None:
                if ni.node.name != n.name:
                    self._by_name.pop(ni.node.name, None)
                self._indexes.node(ni.node, False)
                self._indexes.node(n, True)
                ni.node = n
            else:
                self._indexes.node(n, True)
                self._nodes[n.id] = NodeInfo(n)
        for p in d.upsert_pods:
            self._pending.pop(p.uid, None)
            self._place(p)
        for u in d.update_pods:
            known = self.pod(u.uid)
            if known is None:
                known = self._pending.get(u.uid)
            if known is None:
                raise ReplicationError(f"an update for pod {u.uid} the replica does not hold")
            self._pending.pop(u.uid, None)
            p = pb.Pod()
            p.CopyFrom(known)
            p.node_name = u.node_name
            p.nominated_node_name = u.nominated_node_name
            p.phase = u.phase
            p.terminating = u.terminating
            p.start_time_micros = u.start_time_micros
            self._place(p)
        self.generation = generation

    def _place(self, p) -> None:
        self._remove_pod(p.uid)
        node_id = self._by_name.get(p.node_name) if p.node_name else None
        ni = self._nodes.get(node_id) if node_id is not None else None
        if ni is not None:
            ni.pods.append(p)
            self._indexes.pod(p, node_id, True)
        self._pods[p.uid] = (p, node_id)

    def _remove_pod(self, uid: str) -> None:
        e = self._pods.pop(uid, None)
        if e is not None and e[1] is not None:
            ni = self._nodes.get(e[1])
            if ni is not None and ni.remove_pod(uid) is not None:
                self._indexes.pod(e[0], e[1], False)


def placed(pod, node_name: str):
    """A copy of `pod` placed on `node_name` (what-if deltas)."""
    p = pb.Pod()
    p.CopyFrom(pod)
    p.node_name = node_name
    return p


class CycleState:
    """One plugin's state for one scheduling attempt: whatever it stores in `value`
    (at PreFilter, usually), kept by the SDK until the attempt ends. For a what-if
    evaluation (preemption dry runs, nominated pods) the SDK forks it: with the
    value's own `clone()` method when it has one, else `copy.deepcopy`, so AddPod and
    RemovePod change the fork only."""

    __slots__ = ("value",)

    def __init__(self, value: Any = None):
        self.value = value

    def fork(self) -> "CycleState":
        v = self.value
        if v is None or isinstance(v, (int, float, str, bytes, bool, frozenset, tuple)):
            return CycleState(v)
        clone = getattr(v, "clone", None)
        return CycleState(clone() if callable(clone) else copy.deepcopy(v))

    def __repr__(self) -> str:
        return f"CycleState({self.value!r})"
