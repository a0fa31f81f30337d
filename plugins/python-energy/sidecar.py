#!/usr/bin/env python3
"""EnergyAware: a Switchyard scheduler plugin in Python, served as a gRPC sidecar by
the Python plugin SDK (plugin-sdk/python), which speaks the whole contract:

* Filter rejects nodes labelled `energy.switchyard.dev/draining: "true"`.
* Score is the node's `energy.switchyard.dev/efficiency` label (an integer, clamped to
  0..100; 50 when absent or not an integer). No NormalizeScore.

Usage: sidecar.py [--listen unix:///path.sock | --listen 127.0.0.1:PORT] [--probe]
(or SWITCHYARD_PLUGIN_LISTEN; default unix:///tmp/switchyard/energyaware.sock).

Both answers read the node's labels and no field of the pod, so it declares itself
node-local (the scheduler sends Filter ahead) and signs pods with "none" (every pod is
alike: the scheduler reuses its answers for a node whose Node object is unchanged,
without calling). SWITCHYARD_ENERGY_LOOKAHEAD=off withdraws both declarations,
SWITCHYARD_ENERGY_SIGNATURE=off the signature alone, to measure what each is worth.
"""

import os
import re
import sys

from switchyard_plugin import ClusterEvent, Plugin, Status, main

LABEL_DRAINING = "energy.switchyard.dev/draining"
LABEL_EFFICIENCY = "energy.switchyard.dev/efficiency"
DEFAULT_SCORE = 50
# An integer as Rust parses one: optional sign, ASCII digits only (int() alone would
# also take " 7", "1_0" and non-ASCII digits).
INTEGER = re.compile(r"[+-]?[0-9]+")
DRAINING = Status.unschedulable("node is draining (EnergyAware)")


class EnergyAware(Plugin):
    name = "EnergyAware"
    # Pods it rejected can only fit once a node appears or is relabelled (undrained).
    events = [ClusterEvent("Node", "Add", "UpdateNodeLabel")]

    def __init__(self, node_local=True, signature=True):
        # Filter and Score read only the node asked about (its labels).
        self.node_local = node_local
        # ...and no field of the pod: every pod is alike. Its scores are final (no
        # NormalizeScore), so reused ones need none either. A signature needs node_local.
        self.signature = ("none",) if node_local and signature else ()

    def filter(self, cycle, state, node):
        if node.node.labels.get(LABEL_DRAINING) == "true":
            return DRAINING

    def score(self, cycle, state, node):
        v = node.node.labels.get(LABEL_EFFICIENCY)
        if v is None or not INTEGER.fullmatch(v):
            return DEFAULT_SCORE
        return max(0, min(100, int(v)))


if __name__ == "__main__":
    plugin = EnergyAware(
        node_local=os.environ.get("SWITCHYARD_ENERGY_LOOKAHEAD", "on") != "off",
        signature=os.environ.get("SWITCHYARD_ENERGY_SIGNATURE", "on") != "off",
    )
    sys.exit(main([plugin]))
