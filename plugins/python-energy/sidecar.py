#!/usr/bin/env python3
"""EnergyAware: a Switchyard scheduler plugin in Python, served as a gRPC sidecar by
the Python plugin SDK (plugin-sdk/python), which speaks the whole contract:

* Filter rejects nodes labelled `energy.switchyard.dev/draining: "true"`.
* Score is the node's `energy.switchyard.dev/efficiency` label (an integer, clamped to
  0..100; 50 when absent or not an integer). No NormalizeScore.

Usage: sidecar.py [--listen unix:///path.sock | --listen 127.0.0.1:PORT] [--probe]
                  [--no-optional-capabilities] [--no-lookahead] [--no-signature]
(or SWITCHYARD_PLUGIN_LISTEN; default unix:///tmp/switchyard/energyaware.sock).

Both answers read the node's labels and no field of the pod, so it declares itself
node-local (the scheduler sends Filter ahead) and signs pods with "none" (every pod is
alike: the scheduler reuses its answers for a node whose Node object is unchanged,
without calling). --no-lookahead withdraws both declarations, --no-signature the
signature alone, to measure what each is worth. The SDK's flags (--listen, --probe,
--no-optional-capabilities) work as in every sidecar; --help lists them all.
"""

import re
import sys

from switchyard_plugin import ClusterEvent, Plugin, Status, main
from switchyard_plugin.serve import usage

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


OWN_OPTIONS = """  --no-lookahead
            do not declare the plugin node-local: the scheduler sends no Filter
            ahead of a pod's cycle and reuses no answer (implies --no-signature)
  --no-signature
            declare no pod signature: node-local, but no answer is reused for
            alike pods"""


def sidecar_main(argv):
    """The sidecar's own flags (--no-lookahead, --no-signature), then the SDK's
    command line (`switchyard_plugin.main`) with the other arguments. Returns the exit
    code."""
    own = {"--no-lookahead": False, "--no-signature": False}
    rest = []
    for a in argv:
        if a in own:
            own[a] = True
        else:
            rest.append(a)
    plugin = EnergyAware(node_local=not own["--no-lookahead"], signature=not own["--no-signature"])
    if any(a in ("-h", "--help") for a in rest):
        print(usage([plugin]))
        print(OWN_OPTIONS)
        return 0
    return main([plugin], argv=rest)


if __name__ == "__main__":
    sys.exit(sidecar_main(sys.argv[1:]))
