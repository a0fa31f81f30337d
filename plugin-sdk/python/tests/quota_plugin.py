#!/usr/bin/env python3
"""A plugin that uses every extension point the Python SDK offers, for the
conformance kit (tests/conformance.rs runs it against
examples/conformance/tenant-quota.yaml): the TenantQuota policy of plugins/quota
(PreFilter state, AddPod/RemovePod, Filter) plus a QueueSort key, a PreEnqueue gate,
Score and NormalizeScore, Reserve/Unreserve, Permit (waits, then allowed from
another thread 50 ms later), PreBind,
PostBind and PostFilter. Not an example of good policy: of every method's shape."""

import sys
import threading

from switchyard_plugin import ClusterEvent, Plugin, PreFilterResult, Status, main

TENANT = "quota.switchyard.dev/tenant"
LIMIT = "quota.switchyard.dev/pods-per-tenant"


class Counts:
    """The pod's tenant and its pods per node, computed once at PreFilter."""

    def __init__(self, tenant, per_node):
        self.tenant, self.per_node = tenant, per_node

    def clone(self):
        return Counts(self.tenant, dict(self.per_node))


def limit(node):
    v = node.labels.get(LIMIT)
    return int(v) if v is not None and v.isdigit() else None


class PyQuota(Plugin):
    name = "PyQuota"
    events = [ClusterEvent("Pod", "Delete"), ClusterEvent("Node", "Add", "UpdateNodeLabel")]

    def __init__(self):
        self.reserved = {}

    def pre_enqueue(self, pod):
        if pod.annotations.get("example.switchyard.dev/gated") == "true":
            return Status.unresolvable("gated by annotation")

    def sort_key(self, pod):
        # Higher priority first, then by name.
        return (2**31 - pod.priority).to_bytes(5, "big") + pod.name.encode()

    def pre_filter(self, cycle, state):
        tenant = cycle.pod.labels.get(TENANT)
        if tenant is None:
            return Status.skip()
        per_node = {}
        for ni in cycle.snapshot.nodes():
            per_node[ni.name] = sum(1 for p in ni.pods if p.labels.get(TENANT) == tenant)
        state.value = Counts(tenant, per_node)
        limited = [ni.name for ni in cycle.snapshot.nodes() if limit(ni.node) != 0]
        return PreFilterResult(node_names=limited)

    def add_pod(self, cycle, state, pod, node):
        if state.value and pod.labels.get(TENANT) == state.value.tenant:
            state.value.per_node[node.name] = state.value.per_node.get(node.name, 0) + 1

    def remove_pod(self, cycle, state, pod, node):
        if state.value and pod.labels.get(TENANT) == state.value.tenant:
            state.value.per_node[node.name] = state.value.per_node.get(node.name, 0) - 1

    def filter(self, cycle, state, node):
        c, lim = state.value, limit(node.node)
        if c is None or lim is None:
            return None
        if c.per_node.get(node.name, 0) >= lim:
            return Status.unschedulable(f"tenant {c.tenant} has {lim} pods on this node")

    def post_filter(self, cycle, state, statuses):
        return Status.unschedulable(f"{len(statuses)} nodes refused"), None

    def score(self, cycle, state, node):
        return len(node.pods) * 7

    def normalize_score(self, cycle, state, scores):
        top = max(scores, default=0)
        for i, s in enumerate(scores):
            scores[i] = 100 - s * 100 // top if top else 100

    def reserve(self, cycle, state, node_name):
        self.reserved[cycle.pod.uid] = node_name

    def unreserve(self, cycle, state, node_name):
        self.reserved.pop(cycle.pod.uid, None)

    def permit(self, cycle, state, node_name, handle):
        # Wait, and let another thread allow the pod shortly after (X2).
        uid = cycle.pod.uid
        threading.Timer(0.05, lambda: handle.allow(self.name, uid)).start()
        return Status.wait(), 5.0

    def pre_bind(self, cycle, state, node_name):
        if self.reserved.get(cycle.pod.uid) not in (None, node_name):
            return Status.error("PreBind on another node than Reserve")

    def post_bind(self, cycle, state, node_name):
        self.reserved.pop(cycle.pod.uid, None)


if __name__ == "__main__":
    sys.exit(main([PyQuota()]))
