#!/usr/bin/env python3
"""Accelerator: a Switchyard plugin in one file. A pod annotated
`accelerator.switchyard.dev/type: T` fits only nodes labelled with the same type;
among those, it prefers nodes already running pods of its type (packing them, so
whole nodes stay free for other types).

    pip install <repo>/plugin-sdk/python
    python3 accelerator.py --listen unix:///tmp/switchyard/accelerator.sock
"""

import sys

from switchyard_plugin import ClusterEvent, Plugin, Status, main

KEY = "accelerator.switchyard.dev/type"


class Accelerator(Plugin):
    name = "Accelerator"
    # Filter and Score read only the pod and the node asked about.
    node_local = True
    # Pods it rejected can fit once a node is added or relabelled.
    events = [ClusterEvent("Node", "Add", "UpdateNodeLabel")]

    def filter(self, cycle, state, node):
        want = cycle.pod.annotations.get(KEY)
        if want is not None and node.node.labels.get(KEY) != want:
            return Status.unschedulable(f"node has no {want} accelerator")

    def score(self, cycle, state, node):
        want = cycle.pod.annotations.get(KEY)
        if want is None:
            return 0
        return sum(1 for p in node.pods if p.annotations.get(KEY) == want)

    def normalize_score(self, cycle, state, scores):
        top = max(scores, default=0)
        for i, s in enumerate(scores):
            scores[i] = s * 100 // top if top > 0 else 0


if __name__ == "__main__":
    sys.exit(main([Accelerator()]))
