#!/usr/bin/env python3
"""RackLocality: the topology example. The pods of a job (label switchyard.dev/job)
are packed by rack (node label switchyard.dev/rack). It scores by a node label:
label_scores counts the job's placed pods per rack from the replica's
pod_lists_by_label index (the job's members in the pod's namespace, however large
the cluster), a node scores its rack's count, and upstream's default normalisation
scales the counts to 0..100. A pod in no job is skipped. The same plugin as the Go SDK's examples/racklocality;
tests/remote_racklocality.rs checks both place pods as the plugin does in process.

    pip install <repo>/plugin-sdk/python
    python3 racklocality.py --listen unix:///tmp/switchyard/racklocality.sock
"""

import sys

from switchyard_plugin import Index, Plugin, Status, main

JOB = "switchyard.dev/job"
RACK = "switchyard.dev/rack"


class RackLocality(Plugin):
    name = "RackLocality"
    indexes = (Index.pod_lists_by_label(JOB),)
    score_normalization = "default"
    # A node's score is its rack's: the SDK serves label_scores as PreScore and
    # Score, and the scheduler scores the nodes itself from the table.
    score_node_label = RACK

    def label_scores(self, cycle):
        job = cycle.pod.labels.get(JOB, "")
        lists = cycle.snapshot.pod_lists_by_label(JOB)
        if not job or lists is None:
            return Status.skip()
        per_rack = {}
        for p in lists.pods(cycle.pod.namespace, job):
            if p.uid == cycle.pod.uid:
                continue
            ni = cycle.snapshot.node_by_name(p.node_name)
            rack = ni.node.labels.get(RACK, "") if ni is not None else ""
            if rack:
                per_rack[rack] = per_rack.get(rack, 0) + 1
        return per_rack


if __name__ == "__main__":
    sys.exit(main([RackLocality()]))
