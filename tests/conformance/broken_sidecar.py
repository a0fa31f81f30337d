"""The Python EnergyAware sidecar, broken on purpose for the conformance kit's tests.

BROKEN names one contract clause to break (the kit must then fail that clause):

  ignores-gaps        applies a message whose generation skips one (R2)
  keeps-ended-cycles  ignores CycleEnd, so calls of ended cycles are answered (F4)
  no-generation-wait  answers at once, without waiting for the call's generation (F3)
  scores-out-of-range scores 150, outside 0..100, with no NormalizeScore (SC1)
  flaky-filter        rejects nodes at random: the same call, another answer (F2)
  status-per-node     groups failures one node per group: a status sent per node (F8)
  stray-replies       answers every Filter call twice: the second reply answers no call (S2)
  pre-filter-reads-nodes
                      serves a plugin declaring pre_filter_pod_only whose PreFilter
                      skips a pod when some node's name ends in "-copy" (P2)

Everything else is the real sidecar (plugins/python-energy/sidecar.py) on the Python
plugin SDK, whose PluginService is patched here.
"""

import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "plugins", "python-energy"))

import sidecar  # noqa: E402
import switchyard_plugin.service as sdk_service  # noqa: E402
from switchyard_plugin import Plugin, PluginService, Status  # noqa: E402

BROKEN = os.environ.get("BROKEN", "")
service = PluginService
original_apply = service.apply


def apply_ignoring_gaps(self, msg, expect):
    full = msg.WhichOneof("kind") == "delta" and msg.delta.full
    if expect is not None and not full and msg.generation != expect:
        expect = msg.generation
    return original_apply(self, msg, expect)


def apply_keeping_cycles(self, msg, expect):
    if msg.WhichOneof("kind") == "cycle_end":
        msg.cycle_end.cycle = 2**63  # ends a cycle that does not exist
    return original_apply(self, msg, expect)


async def reached_at_once(self, generation):
    return None


def twice(point, method):
    """A stream handler that sends each reply twice."""

    async def handler(self, request_iterator, context):
        handle = getattr(self, method)
        async for req in request_iterator:
            reply = await handle(req)
            yield reply
            yield reply

    handler.__name__ = point
    return handler


class ReadsNodes(Plugin):
    """Declares that its PreFilter reads only the pod, and reads the nodes."""

    name = "ReadsNodes"
    signature = ("none",)
    signature_node_pods = True
    pre_filter_pod_only = True

    def pre_filter(self, cycle, state):
        if any(ni.name.endswith("-copy") for ni in cycle.snapshot.nodes()):
            return Status.skip()
        return None

    def filter(self, cycle, state, node):
        return None


def group_per_node(failures):
    return [sdk_service.pb.FailureGroup(status=f.status, indices=[f.index]) for f in failures]


if BROKEN == "ignores-gaps":
    service.apply = apply_ignoring_gaps
elif BROKEN == "keeps-ended-cycles":
    service.apply = apply_keeping_cycles
elif BROKEN == "no-generation-wait":
    service.reached = reached_at_once
elif BROKEN == "scores-out-of-range":
    sidecar.EnergyAware.score = lambda self, cycle, state, node: 150
elif BROKEN == "flaky-filter":
    sidecar.EnergyAware.filter = lambda self, cycle, state, node: (
        Status.unschedulable("coin says no") if random.random() < 0.5 else None
    )
elif BROKEN == "status-per-node":
    sdk_service.group_failures = group_per_node
elif BROKEN == "stray-replies":
    service.Filter = twice("Filter", "filter_call")
elif BROKEN == "pre-filter-reads-nodes":
    pass
else:
    sys.exit(f"broken_sidecar.py: BROKEN={BROKEN!r}: see the docstring for the modes")

if __name__ == "__main__":
    plugin = ReadsNodes() if BROKEN == "pre-filter-reads-nodes" else sidecar.EnergyAware()
    sys.exit(sidecar.main([plugin]))
