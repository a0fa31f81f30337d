"""Indexes the replica keeps current as deltas arrive, so a plugin that looks at the
whole cluster (a quota, a gang, rack locality) reads a count in its pre_filter or
pre_score instead of scanning every pod of the cluster in every cycle. A plugin
declares the indexes it reads in its `indexes` attribute; the SDK builds them when
the full snapshot arrives and updates them with each pod and node a delta adds,
moves or removes. The same indexes as the Rust SDK's `Index`."""

from __future__ import annotations

from typing import Dict, Iterator, List, NamedTuple, Optional, Tuple


class Index(NamedTuple):
    """What an index counts: `Index.pods_by_label(key)`, `Index.PODS_BY_NAMESPACE`,
    `Index.nodes_by_label(key)`, `Index.pod_lists_by_label(key)`."""

    kind: str
    key: str = ""

    @staticmethod
    def pods_by_label(key: str) -> "Index":
        """Placed pods by the value of pod label `key`, per node
        (`Snapshot.pods_by_label`). Pods without the label are not counted."""
        return Index("pods_by_label", key)

    @staticmethod
    def nodes_by_label(key: str) -> "Index":
        """Nodes by the value of node label `key` (`Snapshot.nodes_by_label`)."""
        return Index("nodes_by_label", key)

    @staticmethod
    def pod_lists_by_label(key: str) -> "Index":
        """The placed pods themselves by namespace and the value of pod label `key`
        (`Snapshot.pod_lists_by_label`): the members of a gang or a job, to tell which
        are placed and where. Pods without the label are not listed."""
        return Index("pod_lists_by_label", key)


Index.PODS_BY_NAMESPACE = Index("pods_by_namespace")  # type: ignore[attr-defined]
KINDS = ("pods_by_label", "pods_by_namespace", "nodes_by_label", "pod_lists_by_label")


class PodCounts:
    """Placed pods per node for each value of one key (a label's value, a namespace)."""

    __slots__ = ("_by_value",)

    def __init__(self):
        # value -> [total, {node id: count}]
        self._by_value: Dict[str, list] = {}

    def total(self, value: str) -> int:
        """Pods with `value` in the whole replica."""
        v = self._by_value.get(value)
        return v[0] if v else 0

    def on_node(self, value: str, node_id: int) -> int:
        """Pods with `value` on node `node_id`."""
        v = self._by_value.get(value)
        return v[1].get(node_id, 0) if v else 0

    def nodes(self, value: str) -> Iterator[Tuple[int, int]]:
        """(node id, count) of the nodes holding pods with `value`, in no order."""
        v = self._by_value.get(value)
        return iter(v[1].items()) if v else iter(())

    def values(self) -> Iterator[Tuple[str, int]]:
        """The values counted, each with its total."""
        return ((k, v[0]) for k, v in self._by_value.items())

    def add(self, value: str, node_id: int) -> None:
        v = self._by_value.get(value)
        if v is None:
            v = self._by_value[value] = [0, {}]
        v[0] += 1
        v[1][node_id] = v[1].get(node_id, 0) + 1

    def remove(self, value: str, node_id: int) -> None:
        v = self._by_value.get(value)
        if v is None:
            return
        v[0] = max(0, v[0] - 1)
        c = v[1].get(node_id)
        if c is not None:
            if c <= 1:
                del v[1][node_id]
            else:
                v[1][node_id] = c - 1
        if v[0] == 0:
            del self._by_value[value]


class NodeSets:
    """Nodes by the value of one node label."""

    __slots__ = ("_by_value", "_count")

    def __init__(self):
        self._by_value: Dict[str, List[int]] = {}
        self._count = 0

    def count(self) -> int:
        """How many nodes carry the label (any value)."""
        return self._count

    def nodes(self, value: str) -> List[int]:
        """The ids of the nodes whose label has `value`."""
        return self._by_value.get(value, [])

    def values(self) -> Iterator[Tuple[str, List[int]]]:
        return iter(self._by_value.items())

    def add(self, value: str, node_id: int) -> None:
        self._by_value.setdefault(value, []).append(node_id)
        self._count += 1

    def remove(self, value: str, node_id: int) -> None:
        v = self._by_value.get(value)
        if v is not None and node_id in v:
            v.remove(node_id)
            self._count -= 1
            if not v:
                del self._by_value[value]


class PodLists:
    """Placed pods by namespace and the value of one pod label. A pod without a
    namespace is in "default", as the API server defaults it."""

    __slots__ = ("_by_namespace",)

    def __init__(self):
        # namespace -> value -> {uid: pod}
        self._by_namespace: Dict[str, Dict[str, dict]] = {}

    def pods(self, namespace: str, value: str) -> Iterator:
        """The placed pods in `namespace` whose label has `value` (in no order)."""
        m = self._by_namespace.get(namespace or "default", {}).get(value)
        return iter(m.values()) if m else iter(())

    def count(self, namespace: str, value: str) -> int:
        """How many placed pods in `namespace` have `value`."""
        return len(self._by_namespace.get(namespace or "default", {}).get(value, ()))

    def values(self) -> Iterator[Tuple[str, str, int]]:
        """(namespace, value, count) of everything listed."""
        for ns, values in self._by_namespace.items():
            for v, m in values.items():
                yield ns, v, len(m)

    def add(self, value: str, pod) -> None:
        self._by_namespace.setdefault(pod.namespace or "default", {}).setdefault(value, {})[pod.uid] = pod

    def remove(self, value: str, pod) -> None:
        ns = pod.namespace or "default"
        values = self._by_namespace.get(ns)
        if values is None:
            return
        m = values.get(value)
        if m is not None:
            m.pop(pod.uid, None)
            if not m:
                del values[value]
        if not values:
            del self._by_namespace[ns]


class Indexes:
    """The indexes of one replica (the Snapshot keeps it)."""

    def __init__(self):
        self.pods_by_label: Dict[str, PodCounts] = {}
        self.pods_by_namespace: Optional[PodCounts] = None
        self.nodes_by_label: Dict[str, NodeSets] = {}
        self.pod_lists_by_label: Dict[str, PodLists] = {}

    def declare(self, index: Index) -> bool:
        """Adds `index` (empty; the caller fills it); False when already declared."""
        kind, key = index.kind, index.key
        if kind not in KINDS:
            raise ValueError(f"unknown index {index!r}: use Index.pods_by_label(key), Index.PODS_BY_NAMESPACE, Index.nodes_by_label(key) or Index.pod_lists_by_label(key)")
        if kind == "pods_by_label" and key not in self.pods_by_label:
            self.pods_by_label[key] = PodCounts()
        elif kind == "pods_by_namespace" and self.pods_by_namespace is None:
            self.pods_by_namespace = PodCounts()
        elif kind == "nodes_by_label" and key not in self.nodes_by_label:
            self.nodes_by_label[key] = NodeSets()
        elif kind == "pod_lists_by_label" and key not in self.pod_lists_by_label:
            self.pod_lists_by_label[key] = PodLists()
        else:
            return False
        return True

    def clear(self) -> None:
        for k in self.pods_by_label:
            self.pods_by_label[k] = PodCounts()
        if self.pods_by_namespace is not None:
            self.pods_by_namespace = PodCounts()
        for k in self.nodes_by_label:
            self.nodes_by_label[k] = NodeSets()
        for k in self.pod_lists_by_label:
            self.pod_lists_by_label[k] = PodLists()

    def pod(self, pod, node_id: int, add: bool) -> None:
        """A pod placed on node `node_id` (`add`) or taken off it."""
        for key, counts in self.pods_by_label.items():
            if key in pod.labels:
                (counts.add if add else counts.remove)(pod.labels[key], node_id)
        if self.pods_by_namespace is not None:
            (self.pods_by_namespace.add if add else self.pods_by_namespace.remove)(pod.namespace, node_id)
        for key, lists in self.pod_lists_by_label.items():
            if key in pod.labels:
                (lists.add if add else lists.remove)(pod.labels[key], pod)

    def node(self, node, add: bool) -> None:
        """A node added (`add`) or removed, with the labels it has then."""
        for key, sets in self.nodes_by_label.items():
            if key in node.labels:
                (sets.add if add else sets.remove)(node.labels[key], node.id)
