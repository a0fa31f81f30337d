"""Switchyard plugin SDK for Python: write a scheduling plugin as a class, serve it
as a gRPC sidecar. The SDK speaks the whole contract of `switchyard.plugin.v1`
(proto/README.md): handshake and capabilities, the replicated snapshot, generations,
cycles and their state, batches, what-if deltas, Permit decisions, health, tracing.

    import sys
    from switchyard_plugin import Plugin, Status, main

    class NoDraining(Plugin):
        name = "NoDraining"
        node_local = True

        def filter(self, cycle, state, node):
            if node.node.labels.get("example.com/draining") == "true":
                return Status.unschedulable("node is draining")

    if __name__ == "__main__":
        sys.exit(main([NoDraining()]))

A sidecar's command line (`main`) is the same in every Switchyard SDK: `--listen
ADDRESS`, `--probe` (an exec health probe) and `--no-optional-capabilities`, which
offers none of the protocol's optional capabilities (`capabilities=False` of `main`,
`serve` and `PluginService`) to serve as an older sidecar would;
SWITCHYARD_PLUGIN_CAPABILITIES=off is its environment fallback.

See `switchyard_plugin.plugin` for every extension point's method.
"""

from ._stubs import health_pb, pb, pb_grpc
from .index import Index, NodeSets, PodCounts, PodLists
from .plugin import ClusterEvent, Cycle, PermitHandle, Plugin, PreFilterResult
from .serve import CAPABILITIES_ENV, AddressError, ServerTls, UsageError, main, parse_listen_address, probe, serve
from .service import CAPABILITIES, PROTOCOL_VERSION, PluginService
from .snapshot import CycleState, NodeInfo, ReplicationError, Snapshot
from .status import Code, PluginError, Status

__version__ = "0.1.0"

__all__ = [
    "AddressError",
    "CAPABILITIES",
    "CAPABILITIES_ENV",
    "ClusterEvent",
    "Code",
    "Cycle",
    "CycleState",
    "Index",
    "NodeInfo",
    "NodeSets",
    "PROTOCOL_VERSION",
    "PermitHandle",
    "Plugin",
    "PluginError",
    "PluginService",
    "PodCounts",
    "PodLists",
    "PreFilterResult",
    "ReplicationError",
    "ServerTls",
    "Snapshot",
    "Status",
    "UsageError",
    "health_pb",
    "main",
    "parse_listen_address",
    "pb",
    "pb_grpc",
    "probe",
    "serve",
]
