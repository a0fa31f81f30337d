"""The test harness (switchyard_plugin.harness): a plugin's points run for a pending
pod as the sidecar runs them, from a message built here. The path through
`switchyard snapshot` is checked with a real binary by the quota test below when
SWITCHYARD_BIN (or target/debug/switchyard) is there, and by
plugins/python-energy/test_sidecar.py."""

import os
import unittest

from switchyard_plugin import Code, Plugin, PreFilterResult, Status, pb
from switchyard_plugin.harness import Harness, HarnessError

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))


class Probe(Plugin):
    """Rejects nodes labelled `bad`, scores by the node's `score` label normalized
    to 100 over the highest; PreFilter keeps zone=a nodes for pods labelled `zonal`,
    skips pods labelled `skip`, rejects pods labelled `reject`."""

    name = "Probe"
    score_normalization = "default"

    def pre_filter(self, cycle, state):
        state.value = [cycle.pod.name]
        labels = cycle.pod.labels
        if "reject" in labels:
            return Status.unresolvable("rejected at PreFilter")
        if "skip" in labels:
            return Status.skip()
        if "zonal" in labels:
            return PreFilterResult(node_names=[n.name for n in cycle.snapshot.nodes() if n.node.labels.get("zone") == "a"])
        return None

    def filter(self, cycle, state, node):
        assert state.value is not None, "Filter sees PreFilter's state"
        if "bad" in node.node.labels:
            return Status.unschedulable("bad node")
        return None

    def pre_score(self, cycle, state, nodes):
        state.value.append(f"{len(nodes)} feasible")

    def score(self, cycle, state, node):
        return int(node.node.labels.get("score", "0"))


def message():
    nodes = [
        pb.Node(id=1, name="a1", labels={"zone": "a", "score": "10"}),
        pb.Node(id=2, name="a2", labels={"zone": "a", "score": "40"}),
        pb.Node(id=3, name="b1", labels={"zone": "b", "score": "80"}),
        pb.Node(id=4, name="bad", labels={"zone": "a", "bad": "", "score": "99"}),
    ]
    more = [
        pb.ReplicateRequest(
            cycle_start=pb.CycleStart(
                cycle=i + 1,
                profile="default-scheduler",
                pod=pb.Pod(uid=name, name=name, namespace="ns", labels={label: ""}),
            )
        )
        for i, (name, label) in enumerate([("any", "x"), ("zonal", "zonal"), ("skip", "skip"), ("reject", "reject")])
    ]
    return pb.ReplicateRequest(generation=1, delta=pb.SnapshotDelta(full=True, upsert_nodes=nodes), more=more)


class HarnessTest(unittest.TestCase):
    def test_runs_the_points_in_order_with_one_state(self):
        h = Harness(message())
        self.assertEqual(h.pending(), ["ns/any", "ns/zonal", "ns/skip", "ns/reject"])
        out = h.run(Probe(), "ns/any")
        self.assertEqual(out.feasible(), ["a1", "a2", "b1"])
        self.assertEqual(out.status("bad").code, Code.UNSCHEDULABLE)
        self.assertEqual([s for _, s in out.raw_scores], [10, 40, 80])
        self.assertEqual((out.score("b1"), out.score("a2")), (100, 50))
        self.assertEqual(out.best(), "b1")
        self.assertEqual(out.state.value, ["any", "3 feasible"])

    def test_pre_filter_narrows_skips_and_rejects(self):
        h = Harness.from_bytes(message().SerializeToString())
        zonal = h.run(Probe(), "ns/zonal")
        self.assertEqual([n for n, _ in zonal.filter], ["a1", "a2", "bad"])
        self.assertEqual(zonal.best(), "a2")
        self.assertEqual(len(h.run(Probe(), "ns/skip").feasible()), 4)
        reject = h.run(Probe(), "ns/reject")
        self.assertEqual(reject.pre_filter.status.code, Code.UNSCHEDULABLE_AND_UNRESOLVABLE)
        self.assertEqual((reject.filter, reject.scores), ([], []))
        with self.assertRaisesRegex(HarnessError, "no pending pod 'ns/nobody' .*ns/any"):
            h.run(Probe(), "ns/nobody")

    def test_a_missing_binary_is_named(self):
        with self.assertRaisesRegex(HarnessError, "SWITCHYARD_BIN"):
            Harness.from_manifests(["x.yaml"], bin="/nonexistent/switchyard")


def switchyard_bin():
    b = os.environ.get("SWITCHYARD_BIN") or os.path.join(REPO, "target", "debug", "switchyard")
    return b if os.path.exists(b) else None


class QuotaThroughTheBinaryTest(unittest.TestCase):
    """plugins/quota/testdata/cluster.yaml through `switchyard snapshot`, with the
    Python TenantQuota of tests/quota_plugin.py."""

    def test_quota_cluster(self):
        b = switchyard_bin()
        if b is None:
            self.fail("no switchyard binary: build it (cargo build -p switchyard) or set SWITCHYARD_BIN")
        import sys

        sys.path.insert(0, os.path.dirname(__file__))
        from quota_plugin import PyQuota

        h = Harness.from_manifests([os.path.join(REPO, "plugins", "quota", "testdata", "cluster.yaml")], bin=b)
        self.assertEqual(h.pending(), ["default/acme-new", "default/globex-new", "default/plain"])
        out = h.run(PyQuota(), "acme-new")
        self.assertEqual(out.feasible(), ["two-a", "free"])
        self.assertEqual(h.run(PyQuota(), "globex-new").feasible(), ["two-a", "two-b", "free"])


class RackLocalityThroughTheBinaryTest(unittest.TestCase):
    """examples/racklocality.py on the Go example's cluster (the same plugin):
    PreScore, Score and the default normalisation."""

    def test_rack_locality(self):
        b = switchyard_bin()
        if b is None:
            self.fail("no switchyard binary: build it (cargo build -p switchyard) or set SWITCHYARD_BIN")
        import sys

        sys.path.insert(0, os.path.join(REPO, "plugin-sdk", "python", "examples"))
        from racklocality import RackLocality

        cluster = os.path.join(REPO, "plugin-sdk", "go", "examples", "racklocality", "cluster.yaml")
        h = Harness.from_manifests([cluster], bin=b)
        out = h.run(RackLocality(), "ml/train-3")
        # r1 holds two of ml/train's pods, r2 one (other/train is another job).
        self.assertEqual({n: out.score(n) for n in ("r1-a", "r1-b", "r2-a", "r2-b", "loose")},
                         {"r1-a": 100, "r1-b": 100, "r2-a": 50, "r2-b": 50, "loose": 0})
        solo = h.run(RackLocality(), "ml/solo")
        self.assertEqual(solo.pre_score.code, Code.SKIP)
        self.assertEqual(solo.scores, [])


if __name__ == "__main__":
    unittest.main()
