"""Unit tests of the Python plugin SDK (stdlib unittest, no server):

    python3 -m unittest discover -s plugin-sdk/python/tests

The wire protocol end to end is checked by the conformance kit (tests/conformance.rs)
and by plugins/python-energy/test_sidecar.py."""

import asyncio
import os
import unittest
from unittest import mock

from switchyard_plugin import Code, CycleState, Index, Plugin, PluginService, PodLists, ReplicationError, Snapshot, Status, pb
from switchyard_plugin.service import normalize_scores
from switchyard_plugin.status import as_status


def node(i, name, **labels):
    return pb.Node(id=i, name=name, labels=labels)


def pod(uid, node_name="", **labels):
    return pb.Pod(uid=uid, name=uid, namespace="default", node_name=node_name, labels=labels)


def delta(full=False, **kw):
    return pb.SnapshotDelta(full=full, **kw)


class SnapshotTest(unittest.TestCase):
    def test_full_then_incremental(self):
        s = Snapshot()
        s.apply(1, delta(True, upsert_nodes=[node(1, "a"), node(2, "b")], upsert_pods=[pod("p", "a"), pod("q")]))
        self.assertEqual([p.uid for p in s.node(1).pods], ["p"])
        self.assertEqual(s.num_nodes(), 2)
        self.assertEqual(s.pod("q").node_name, "")
        # A pod moves by PodUpdate; a node goes away and its pods stay known, unplaced.
        s.apply(2, delta(update_pods=[pb.PodUpdate(uid="q", node_name="b", phase="Running")]))
        self.assertEqual([p.uid for p in s.node_by_name("b").pods], ["q"])
        self.assertEqual(s.pod("q").phase, "Running")
        s.apply(3, delta(remove_nodes=[1]))
        self.assertIsNone(s.node(1))
        self.assertIsNotNone(s.pod("p"))
        s.apply(4, delta(remove_pods=["q"]))
        self.assertEqual(s.node(2).pods, [])
        self.assertEqual(s.generation, 4)
        # A full snapshot starts over.
        s.apply(9, delta(True, upsert_nodes=[node(5, "c")]))
        self.assertIsNone(s.pod("p"))
        self.assertEqual([n.name for n in s.nodes()], ["c"])

    def test_update_of_a_cycle_pod_places_it(self):
        s = Snapshot()
        s.apply(1, delta(True, upsert_nodes=[node(1, "a")]))
        s.note_cycle_pod(pod("new"))
        s.apply(2, delta(update_pods=[pb.PodUpdate(uid="new", node_name="a")]))
        self.assertEqual([p.uid for p in s.node(1).pods], ["new"])

    def test_contradictions_are_replication_errors(self):
        s = Snapshot()
        s.apply(1, delta(True, upsert_nodes=[node(1, "a")]))
        with self.assertRaises(ReplicationError):
            s.apply(2, delta(upsert_nodes=[node(2, "a")]))
        with self.assertRaises(ReplicationError):
            s.apply(2, delta(update_pods=[pb.PodUpdate(uid="ghost", node_name="a")]))


def index_contents(s):
    """Every index as sorted lists, to compare a replica moved by deltas with a fresh one."""
    out = []
    for name, counts in (("team", s.pods_by_label("team")), ("ns", s.pods_by_namespace())):
        for v, total in counts.values():
            out.append(f"{name} {v}={total} {sorted(counts.nodes(v))}")
    racks = s.nodes_by_label("rack")
    for v, nodes in racks.values():
        out.append(f"rack {v} {sorted(nodes)} of {racks.count()}")
    lists = s.pod_lists_by_label("team")
    for ns, v, n in lists.values():
        uids = sorted(f"{p.uid}@{p.node_name}" for p in lists.pods(ns, v))
        assert len(uids) == n == lists.count(ns, v), (ns, v, uids, n)
        out.append(f"list {ns}/{v} {uids}")
    return sorted(out)


class IndexTest(unittest.TestCase):
    INDEXES = (Index.pods_by_label("team"), Index.PODS_BY_NAMESPACE, Index.nodes_by_label("rack"),
               Index.pod_lists_by_label("team"))

    def test_indexes_follow_deltas_as_a_fresh_build_would(self):
        def teamed(uid, node_name, team, ns):
            p = pod(uid, node_name, team=team)
            p.namespace = ns
            return p

        s = Snapshot().with_indexes(self.INDEXES)
        s.apply(1, delta(True, upsert_nodes=[node(1, "a", rack="r1"), node(2, "b", rack="r1"), node(3, "c")],
                         upsert_pods=[teamed("p1", "a", "red", "x"), teamed("p2", "a", "blue", "x"),
                                      teamed("p3", "b", "red", "y"), pod("p4", "c")]))
        self.assertEqual(s.pods_by_label("team").on_node("red", 1), 1)
        self.assertEqual(s.nodes_by_label("rack").count(), 2)
        s.apply(2, delta(upsert_nodes=[node(2, "b", rack="r2"), node(4, "d", rack="r1")],
                         upsert_pods=[teamed("p1", "c", "red", "x"), teamed("p5", "d", "blue", "y"),
                                      teamed("p6", "nowhere", "red", "y")],
                         remove_pods=["p2"], remove_nodes=[1]))
        fresh = Snapshot().with_indexes(self.INDEXES)
        fresh.apply(1, delta(True, upsert_nodes=[node(2, "b", rack="r2"), node(3, "c"), node(4, "d", rack="r1")],
                             upsert_pods=[teamed("p1", "c", "red", "x"), teamed("p3", "b", "red", "y"),
                                          pod("p4", "c"), teamed("p5", "d", "blue", "y")]))
        self.assertEqual(index_contents(s), index_contents(fresh))
        self.assertEqual(s.pods_by_label("team").total("red"), 2)
        self.assertIsNone(s.pods_by_label("other"))
        # p3 is placed in y/red; p6's node is not in the replica.
        self.assertEqual(s.pod_lists_by_label("team").count("y", "red"), 1)

    def test_pod_lists_keep_namespaces_apart_and_default_the_empty_one(self):
        lists = PodLists()
        a, b, c = pod("a", "n"), pod("b", "n"), pod("c", "n")
        a.namespace, b.namespace, c.namespace = "", "default", "other"
        for p in (a, b, c, a):
            lists.add("g", p)
        self.assertEqual((lists.count("default", "g"), lists.count("", "g"), lists.count("other", "g")), (2, 2, 1))
        lists.remove("g", a)
        self.assertEqual([p.uid for p in lists.pods("default", "g")], ["b"])
        lists.remove("g", b)
        lists.remove("g", b)
        self.assertEqual(len(list(lists.values())), 1)

    def test_declared_late_is_built_from_the_replica_and_unknown_kinds_refused(self):
        s = Snapshot()
        s.apply(1, delta(True, upsert_nodes=[node(1, "a")], upsert_pods=[pod("p", "a", team="red")]))
        s.declare_index(Index.pods_by_label("team"))
        self.assertEqual(list(s.pods_by_label("team").nodes("red")), [(1, 1)])
        with self.assertRaises(ValueError):
            s.declare_index(Index("pods_by_colour"))

    def test_the_service_declares_the_plugins_indexes(self):
        class Counting:
            name = "Counting"
            indexes = (Index.pods_by_label("team"),)

            def filter(self, cycle, state, node):
                return None

        svc = PluginService([Counting()])
        self.assertIsNotNone(svc.replica.pods_by_label("team"))


class StateTest(unittest.TestCase):
    def test_fork_is_independent(self):
        a = CycleState({"n": [1, 2]})
        b = a.fork()
        b.value["n"].append(3)
        self.assertEqual(a.value, {"n": [1, 2]})

    def test_fork_uses_clone(self):
        class V:
            cloned = 0

            def clone(self):
                V.cloned += 1
                return V()

        CycleState(V()).fork()
        self.assertEqual(V.cloned, 1)


class StatusTest(unittest.TestCase):
    def test_none_is_success_and_junk_is_an_error(self):
        self.assertTrue(as_status(None, "filter").is_success)
        s = as_status(42, "filter")
        self.assertEqual(s.code, Code.ERROR)
        self.assertIn("filter returned int 42", s.message)

    def test_wire_form(self):
        s = Status.unschedulable("a", "b")
        w = s.to_pb()
        self.assertEqual((w.code, list(w.reasons)), (pb.UNSCHEDULABLE, ["a", "b"]))
        self.assertIs(s.to_pb(), w)  # built once
        self.assertEqual(Status.from_pb(w), s)


class Counting:
    """PreFilter state: pods of tenant t per node, with AddPod/RemovePod."""

    name = "Counting"

    def pre_filter(self, cycle, state):
        state.value = {ni.name: len(ni.pods) for ni in cycle.snapshot.nodes()}

    def add_pod(self, cycle, state, p, ni):
        state.value[ni.name] += 1

    def remove_pod(self, cycle, state, p, ni):
        state.value[ni.name] -= 1

    def filter(self, cycle, state, ni):
        # The state and the node agree, or the SDK forked wrongly.
        if state.value[ni.name] != len(ni.pods):
            return Status.error(f"state {state.value[ni.name]} != {len(ni.pods)} pods")
        if len(ni.pods) >= 2:
            return Status.unschedulable("full")


def run(coro):
    return asyncio.run(coro)


class ServiceTest(unittest.TestCase):
    def service(self, plugin):
        svc = PluginService([plugin])
        msgs = [
            pb.ReplicateRequest(
                generation=1,
                delta=delta(True, upsert_nodes=[node(1, "a"), node(2, "b")], upsert_pods=[pod("x", "a"), pod("y", "a")]),
            ),
            pb.ReplicateRequest(generation=2, cycle_start=pb.CycleStart(cycle=7, pod=pod("me"), profile="p")),
        ]
        expect = None
        for m in msgs:
            expect = svc.apply(m, expect)
        return svc

    def test_what_if_deltas_fork_the_state(self):
        async def go():
            svc = self.service(Counting())
            pf = await svc.pre_filter_call(pb.PreFilterRequest(request_id=1, plugin="Counting", cycle=7, generation=2))
            self.assertEqual(pf.status.code, pb.SUCCESS)
            req = pb.FilterRequest(
                request_id=2,
                plugin="Counting",
                cycle=7,
                generation=2,
                nodes=[1, 2, 1],
                deltas=[pb.NodeDelta(index=0, remove_pods=["x"]), pb.NodeDelta(index=1, add_pods=["x", "y"])],
            )
            r = await svc.filter_call(req)
            self.assertFalse(r.HasField("error"), r)
            self.assertEqual(r.evaluated, 3)
            # Item 0: a minus x has 1 pod (fits); item 1: b plus two (full); item 2: a as is (full).
            self.assertEqual([(f.index, f.status.code) for f in r.failures], [(1, pb.UNSCHEDULABLE), (2, pb.UNSCHEDULABLE)])
            # The base state was not touched by the forks.
            self.assertEqual(svc.cycles[7].state("Counting").value, {"a": 2, "b": 0})
            bad = pb.FilterRequest(
                request_id=3, plugin="Counting", cycle=7, generation=2, nodes=[2], deltas=[pb.NodeDelta(index=0, remove_pods=["x"])]
            )
            r = await svc.filter_call(bad)
            self.assertEqual(r.failures[0].status.code, pb.ERROR)
            self.assertIn("not on node b", r.failures[0].status.reasons[0])

        run(go())

    def test_filter_after_pre_filter_waits_for_its_outcome(self):
        """filter-after-pre-filter: a Filter sent right behind its cycle's PreFilter
        is evaluated once that outcome is in, even when it arrives first, and fails
        when the PreFilter did not succeed."""

        async def go():
            svc = self.service(Counting())
            svc.generation_wait = 0.3
            behind = pb.FilterRequest(request_id=2, plugin="Counting", cycle=7, generation=2, nodes=[1, 2], after_pre_filter=True)
            f = asyncio.ensure_future(svc.filter_call(behind))
            await asyncio.sleep(0.05)
            self.assertFalse(f.done(), "the Filter waits for its PreFilter")
            pf = await svc.pre_filter_call(pb.PreFilterRequest(request_id=1, plugin="Counting", cycle=7, generation=2))
            self.assertEqual(pf.status.code, pb.SUCCESS)
            r = await f
            self.assertFalse(r.HasField("error"), r)
            self.assertEqual([(x.index, x.status.code) for x in r.failures], [(0, pb.UNSCHEDULABLE)])
            # Without its PreFilter: an error after the wait, not a Filter on no state.
            svc.apply(pb.ReplicateRequest(generation=3, cycle_start=pb.CycleStart(cycle=8, pod=pod("me2"), profile="p")), 3)
            r = await svc.filter_call(pb.FilterRequest(request_id=3, plugin="Counting", cycle=8, generation=3, nodes=[1], after_pre_filter=True))
            self.assertIn("did not arrive", r.error.reasons[0])
            hs = await svc.Handshake(pb.HandshakeRequest(protocol_versions=["v1"], capabilities=["filter-after-pre-filter"]), None)
            self.assertEqual(list(hs.capabilities), ["filter-after-pre-filter"])

        run(go())

    def test_permit_after_reserve_waits_for_its_outcome(self):
        """permit-after-reserve: a Permit sent right behind its cycle's Reserve runs
        once that outcome is in, even when it arrives first, and not at all when the
        Reserve refused."""

        class Gate(Plugin):
            name = "Gate"
            permits = []

            def reserve(self, cycle, state, node):
                return Status.unschedulable("denied") if "deny" in cycle.pod.labels else None

            def unreserve(self, cycle, state, node):
                pass

            def permit(self, cycle, state, node, handle):
                self.permits.append(cycle.pod.uid)
                return None

        async def go():
            gate = Gate()
            svc = self.service(gate)
            svc.generation_wait = 0.3
            behind = pb.CycleRequest(request_id=2, plugin="Gate", cycle=7, generation=2, node_name="a", after_reserve=True)
            f = asyncio.ensure_future(svc.permit_call(behind))
            await asyncio.sleep(0.05)
            self.assertFalse(f.done(), "the Permit waits for its Reserve")
            r = await svc.cycle_call(pb.CycleRequest(request_id=1, plugin="Gate", cycle=7, generation=2, node_name="a"), "Reserve")
            self.assertEqual(r.status.code, pb.SUCCESS)
            self.assertEqual((await f).status.code, pb.SUCCESS)
            denied = pod("denied")
            denied.labels["deny"] = "yes"
            svc.apply(pb.ReplicateRequest(generation=3, cycle_start=pb.CycleStart(cycle=8, pod=denied, profile="p")), 3)
            r = await svc.cycle_call(pb.CycleRequest(request_id=3, plugin="Gate", cycle=8, generation=3, node_name="a"), "Reserve")
            self.assertEqual(r.status.code, pb.UNSCHEDULABLE)
            r = await svc.permit_call(pb.CycleRequest(request_id=4, plugin="Gate", cycle=8, generation=3, node_name="a", after_reserve=True))
            self.assertEqual(r.status.code, pb.ERROR)
            self.assertIn("behind a Reserve", r.status.reasons[0])
            self.assertEqual(gate.permits, ["me"])
            hs = await svc.Handshake(pb.HandshakeRequest(protocol_versions=["v1"], capabilities=["permit-after-reserve"]), None)
            self.assertEqual(list(hs.capabilities), ["permit-after-reserve"])

        run(go())

    def test_stale_and_unknown_calls_are_errors(self):
        async def go():
            svc = self.service(Counting())
            svc.generation_wait = 0.05
            r = await svc.filter_call(pb.FilterRequest(request_id=1, plugin="Counting", cycle=8, generation=2, nodes=[1]))
            self.assertIn("cycle 8 is unknown", r.error.reasons[0])
            r = await svc.filter_call(pb.FilterRequest(request_id=1, plugin="Counting", cycle=7, generation=3, nodes=[1]))
            self.assertIn("generation 3 not reached", r.error.reasons[0])
            r = await svc.filter_call(pb.FilterRequest(request_id=1, plugin="Nope", cycle=7, generation=2, nodes=[1]))
            self.assertIn("no plugin named", r.error.reasons[0])
            r = await svc.score_call(pb.ScoreRequest(request_id=1, plugin="Counting", cycle=7, generation=2, nodes=[1]))
            self.assertIn("has no Score", r.status.reasons[0])

        run(go())

    def test_a_bad_score_is_an_error_not_a_crash(self):
        class Bad:
            name = "Bad"
            node_local = True

            def score(self, cycle, state, ni):
                return "high"

        async def go():
            svc = self.service(Bad())
            r = await svc.score_call(pb.ScoreRequest(request_id=1, plugin="Bad", cycle=7, generation=2, nodes=[1]))
            self.assertEqual(r.status.code, pb.ERROR)
            self.assertIn("not an int", r.status.reasons[0])

        run(go())

    def test_failures_grouped_by_status(self):
        class Picky:
            name = "Picky"
            node_local = True

            def filter(self, cycle, state, ni):
                if ni.name == "a":
                    return Status.unschedulable("busy", "no gpu")
                return Status.unresolvable("no gpu")

        async def go():
            svc = self.service(Picky())
            req = pb.FilterRequest(request_id=1, plugin="Picky", cycle=7, generation=2, nodes=[1, 2, 1])
            # Without the flag (an older scheduler): node by node, no groups.
            r = await svc.filter_call(req)
            self.assertEqual(len(r.failure_groups), 0)
            self.assertEqual(
                [(f.index, f.status.code, list(f.status.reasons)) for f in r.failures],
                [
                    (0, pb.UNSCHEDULABLE, ["busy", "no gpu"]),
                    (1, pb.UNSCHEDULABLE_AND_UNRESOLVABLE, ["no gpu"]),
                    (2, pb.UNSCHEDULABLE, ["busy", "no gpu"]),
                ],
            )
            # With it: each distinct status once, with the items it rejects.
            req.group_failures = True
            r = await svc.filter_call(req)
            self.assertFalse(r.HasField("error"), r)
            self.assertEqual(len(r.failures), 0)
            self.assertEqual(
                [(g.status.code, list(g.status.reasons), list(g.indices)) for g in r.failure_groups],
                [
                    (pb.UNSCHEDULABLE, ["busy", "no gpu"], [0, 2]),
                    (pb.UNSCHEDULABLE_AND_UNRESOLVABLE, ["no gpu"], [1]),
                ],
            )

        run(go())

    def test_permit_wait_then_allow(self):
        class Gate:
            name = "Gate"

            def permit(self, cycle, state, node_name, handle):
                return Status.wait(), 2.5

        async def go():
            svc = self.service(Gate())
            svc._permit_out = asyncio.Queue()
            r = await svc.permit_call(pb.CycleRequest(request_id=4, plugin="Gate", cycle=7, generation=2, node_name="a"))
            self.assertEqual((r.status.code, r.timeout_millis), (pb.WAIT, 2500))
            self.assertEqual([p.uid for p in svc.handle.waiting_pods("Gate")], ["me"])
            self.assertTrue(svc.handle.allow("Gate", "me"))
            self.assertFalse(svc.handle.allow("Gate", "me"))  # decided already
            d = svc._permit_out.get_nowait()
            self.assertEqual((d.request_id, d.decision.pod_uid, d.decision.allow), (0, "me", True))

        run(go())

    def test_bad_plugin_declarations_are_refused(self):
        class NodeLocalWithPreFilter:
            name = "X"
            node_local = True

            def pre_filter(self, cycle, state):
                pass

        for plugins, why in (
            ([NodeLocalWithPreFilter()], "declares node_local"),
            ([Counting(), Counting()], "two plugins are named"),
            ([object()], "has no name"),
        ):
            with self.assertRaises(ValueError) as e:
                PluginService(plugins)
            self.assertIn(why, str(e.exception))

    def test_bad_alike_declarations_are_refused(self):
        def plugin(node_local=True, signature=(), normalization=None, normalize=False, score=True):
            p = type("P", (), {"name": "P", "node_local": node_local})()
            p.signature, p.score_normalization = signature, normalization
            if score:
                p.score = lambda cycle, state, ni: 0
            if normalize:
                p.normalize_score = lambda cycle, state, scores: None
            return p

        for p, why in (
            (plugin(signature=("tolerations", "taints")), "lists 'taints' in its signature"),
            (plugin(signature=("Tolerations",)), "use some of namespace, labels,"),
            (plugin(signature=(pb.POD_FIELD_TOLERATIONS,)), "lists 7 in its signature"),
            (plugin(signature="tolerations"), "e.g. signature = ('tolerations',)"),
            (plugin(node_local=False, signature=("none",)), "declares a signature but not node_local"),
            (plugin(normalization="reverse"), "score_normalization = 'reverse': use None"),
            (plugin(normalization="default", normalize=True), "drop normalize_score"),
            (plugin(normalization="default_reverse", score=False), "but has no score"),
        ):
            with self.assertRaises(ValueError) as e:
                PluginService([p])
            self.assertIn('plugin "P"', str(e.exception))
            self.assertIn(why, str(e.exception))
        # The accepted forms.
        PluginService([plugin(node_local=False, signature=None)])
        PluginService([plugin(signature=["volume_claims", "owner_references"], normalization="custom", normalize=True)])

    def test_signatures_reading_node_pods(self):
        """signature_node_pods allows a signature without node_local (a quota), and
        signature_label_keys signs one label; both reach the handshake."""

        def quota(**attrs):
            p = type("Q", (), {"name": "Q", "signature": ("none",), "signature_node_pods": True})()
            p.pre_filter = lambda cycle, state: None
            p.filter = lambda cycle, state, ni: None
            for k, v in attrs.items():
                setattr(p, k, v)
            return p

        svc = PluginService([quota(signature_label_keys=("team",))])
        info = run(svc.Handshake(pb.HandshakeRequest(protocol_versions=["v1"]), None)).plugins[0]
        self.assertTrue(info.signature_node_pods)
        self.assertEqual(list(info.signature_label_keys), ["team"])
        self.assertEqual(list(info.signature), [pb.POD_FIELD_NONE])
        self.assertFalse(info.pre_filter_pod_only)
        # pre_filter_pod_only: declared with signature_node_pods, refused without.
        svc = PluginService([quota(pre_filter_pod_only=True)])
        info = run(svc.Handshake(pb.HandshakeRequest(protocol_versions=["v1"]), None)).plugins[0]
        self.assertTrue(info.pre_filter_pod_only)
        for attrs, why in (
            ({"signature_label_keys": "team"}, "list label keys"),
            ({"signature_label_keys": ("team",), "signature_node_pods": False}, "but not node_local"),
            ({"signature": ()}, "signature_node_pods without a signature"),
            ({"pre_filter_pod_only": True, "signature_node_pods": False, "signature": ()}, "pre_filter_pod_only without"),
        ):
            with self.assertRaises(ValueError) as e:
                PluginService([quota(**attrs)])
            self.assertIn(why, str(e.exception))


class NormalizeScoresTest(unittest.TestCase):
    """Upstream's DefaultNormalizeScore(100, reverse), as switchyard_proto computes it."""

    def normalized(self, kind, scores):
        scores = list(scores)
        self.assertTrue(normalize_scores(kind, scores))
        return scores

    def test_default(self):
        D = pb.SCORE_NORMALIZATION_DEFAULT
        self.assertEqual(self.normalized(D, [0, 5, 10]), [0, 50, 100])
        self.assertEqual(self.normalized(D, [3, 7]), [42, 100])  # 300 // 7
        # The highest is 0: scores stay as they are (negative ones too).
        self.assertEqual(self.normalized(D, [0, 0]), [0, 0])
        self.assertEqual(self.normalized(D, [-5, 0, -1]), [-5, 0, -1])
        self.assertEqual(self.normalized(D, [-5, -1]), [-5, -1])  # the highest counts from 0
        # Rust's division truncates toward zero: -700 / 3 is -233, not -234.
        self.assertEqual(self.normalized(D, [-7, 3]), [-233, 100])
        self.assertEqual(self.normalized(D, []), [])
        # int64 arithmetic as Rust's: -100 * 2**62 wraps to 0 (`as i64`).
        self.assertEqual(self.normalized(D, [-(2**62), 1]), [0, 100])

    def test_reverse(self):
        R = pb.SCORE_NORMALIZATION_DEFAULT_REVERSE
        self.assertEqual(self.normalized(R, [0, 5, 10]), [100, 50, 0])
        self.assertEqual(self.normalized(R, [3, 7]), [58, 0])
        # The highest is 0: every score becomes 100 (MaxNodeScore).
        self.assertEqual(self.normalized(R, [0, 0]), [100, 100])
        self.assertEqual(self.normalized(R, [-5, 0]), [100, 100])
        self.assertEqual(self.normalized(R, [-4, -2]), [100, 100])
        self.assertEqual(self.normalized(R, [-7, 3]), [333, 0])
        self.assertEqual(self.normalized(R, [-(2**63), 100]), [2**63 - 1, 0])  # saturating_sub

    def test_custom_is_the_plugins_own(self):
        scores = [3, 7]
        self.assertFalse(normalize_scores(pb.SCORE_NORMALIZATION_CUSTOM, scores))
        self.assertEqual(scores, [3, 7])


class Weighted:
    """Node-local, signs namespace, scores a:3 b:7 raw; normalised by the SDK."""

    name = "Weighted"
    node_local = True
    signature = ("namespace", "none")

    def __init__(self, normalization):
        self.score_normalization = normalization

    def filter(self, cycle, state, ni):
        return None

    def score(self, cycle, state, ni):
        return {"a": 3, "b": 7}[ni.name]


class OwnNormalize(Weighted):
    """The same raw scores, with the plugin's own NormalizeScore (doubling them)."""

    score_normalization = None

    def __init__(self):
        pass

    def normalize_score(self, cycle, state, scores):
        scores[:] = [2 * s for s in scores]


class AlikeTest(unittest.TestCase):
    """Signatures and standard normalisations: declared at handshake, applied by the
    SDK, skipped when the scheduler asks for raw scores."""

    service = ServiceTest.service

    def handshake(self, plugin):
        svc = PluginService([plugin])
        hs = run(svc.Handshake(pb.HandshakeRequest(protocol_versions=["v1"]), None))
        return hs.plugins[0]

    def test_handshake_declares_signature_and_normalization(self):
        info = self.handshake(Weighted("default_reverse"))
        self.assertEqual(list(info.signature), [pb.POD_FIELD_NAMESPACE, pb.POD_FIELD_NONE])
        self.assertEqual(info.score_normalization, pb.SCORE_NORMALIZATION_DEFAULT_REVERSE)
        # A standard normalisation is a NormalizeScore: the scheduler asks for it.
        self.assertTrue(info.normalize_score)
        info = self.handshake(Weighted(None))
        self.assertEqual(info.score_normalization, pb.SCORE_NORMALIZATION_CUSTOM)
        self.assertFalse(info.normalize_score)
        info = self.handshake(Counting())
        self.assertEqual((list(info.signature), info.score_normalization), ([], pb.SCORE_NORMALIZATION_CUSTOM))

    def scores(self, svc, name, normalize=False, raw_scores=False):
        """(Score reply, score-ahead reply) for nodes b, a."""

        async def go():
            sc = await svc.score_call(
                pb.ScoreRequest(request_id=1, plugin=name, cycle=7, generation=2, nodes=[2, 1], normalize=normalize)
            )
            f = await svc.filter_call(
                pb.FilterRequest(
                    request_id=2, plugin=name, cycle=7, generation=2, nodes=[2, 1], score_first=2, raw_scores=raw_scores
                )
            )
            self.assertFalse(f.HasField("error"), f)
            return sc, f.score

        return run(go())

    def test_standard_normalization_and_raw_scores(self):
        for kind, want in (("default", [100, 42]), ("default_reverse", [0, 58])):
            svc = self.service(Weighted(kind))
            # Every node at once: normalised by the SDK, upstream's way.
            sc, ahead = self.scores(svc, "Weighted", normalize=True, raw_scores=False)
            self.assertEqual((list(sc.scores), sc.normalized), (want, True), kind)
            self.assertEqual((list(ahead.scores), ahead.normalized), (want, True), kind)
            # Raw, as asked: the scheduler keeps them and normalises itself.
            sc, ahead = self.scores(svc, "Weighted", normalize=False, raw_scores=True)
            self.assertEqual((sc.status.code, list(sc.scores), sc.normalized), (pb.SUCCESS, [7, 3], False), kind)
            self.assertEqual((ahead.status.code, list(ahead.scores), ahead.normalized), (pb.SUCCESS, [7, 3], False), kind)
            # NormalizeScore over raw scores applies the same.
            r = run(
                svc.normalize_score_call(
                    pb.NormalizeScoreRequest(request_id=3, plugin="Weighted", cycle=7, generation=2, nodes=[2, 1], scores=[7, 3])
                )
            )
            self.assertEqual((r.status.code, list(r.scores), r.normalized), (pb.SUCCESS, want, True), kind)

    def test_raw_scores_of_other_plugins(self):
        # The plugin's own NormalizeScore: raw when asked, as the Rust SDK does.
        svc = self.service(OwnNormalize())
        sc, ahead = self.scores(svc, "Weighted", normalize=True, raw_scores=False)
        self.assertEqual((list(sc.scores), sc.normalized, list(ahead.scores), ahead.normalized), ([14, 6], True, [14, 6], True))
        sc, ahead = self.scores(svc, "Weighted", normalize=False, raw_scores=True)
        self.assertEqual((list(sc.scores), sc.normalized, list(ahead.scores), ahead.normalized), ([7, 3], False, [7, 3], False))
        # No NormalizeScore: scores are final whatever was asked.
        svc = self.service(Weighted(None))
        sc, ahead = self.scores(svc, "Weighted", normalize=False, raw_scores=True)
        self.assertEqual((list(sc.scores), sc.normalized, list(ahead.scores), ahead.normalized), ([7, 3], True, [7, 3], True))
        r = run(
            svc.normalize_score_call(
                pb.NormalizeScoreRequest(request_id=3, plugin="Weighted", cycle=7, generation=2, nodes=[2], scores=[7])
            )
        )
        self.assertIn("has no NormalizeScore", r.status.reasons[0])


class ByZone(Plugin):
    """Scores a node by its zone: z1 3, z2 1; pods labelled solo skip."""

    name = "ByZone"
    score_node_label = "zone"
    score_normalization = "default"

    def label_scores(self, cycle):
        if "solo" in cycle.pod.labels:
            return Status.skip()
        return {"z2": 1, "z1": 3}


class LabelScoreTest(unittest.TestCase):
    """A plugin that scores by a node label: declared at handshake with PreScore and
    Score, its table in the PreScore reply (sorted), and Score answered from it for a
    scheduler that calls Score anyway."""

    def test_table_in_the_reply_and_score_from_it(self):
        svc = PluginService([ByZone()])
        info = run(svc.Handshake(pb.HandshakeRequest(protocol_versions=["v1"]), None)).plugins[0]
        self.assertEqual(info.score_node_label, "zone")
        self.assertEqual(list(info.extension_points), [pb.PRE_SCORE, pb.SCORE])
        self.assertTrue(info.normalize_score)
        expect = None
        for m in [
            pb.ReplicateRequest(
                generation=1,
                delta=delta(True, upsert_nodes=[node(1, "a", zone="z1"), node(2, "b", zone="z2"), node(3, "c")]),
            ),
            pb.ReplicateRequest(generation=2, cycle_start=pb.CycleStart(cycle=7, pod=pod("me"), profile="p")),
            pb.ReplicateRequest(generation=3, cycle_start=pb.CycleStart(cycle=8, pod=pod("solo", solo="y"), profile="p")),
        ]:
            expect = svc.apply(m, expect)

        async def go():
            r = await svc.pre_score_call(pb.PreScoreRequest(request_id=1, plugin="ByZone", cycle=7, generation=2))
            self.assertEqual(r.status.code, pb.SUCCESS, r)
            self.assertEqual((list(r.label_scores.values), list(r.label_scores.scores)), (["z1", "z2"], [3, 1]))
            sc = await svc.score_call(
                pb.ScoreRequest(request_id=2, plugin="ByZone", cycle=7, generation=2, nodes=[1, 2, 3], normalize=True)
            )
            self.assertEqual((list(sc.scores), sc.normalized), ([100, 33, 0], True))
            r = await svc.pre_score_call(pb.PreScoreRequest(request_id=3, plugin="ByZone", cycle=8, generation=3))
            self.assertEqual(r.status.code, pb.SKIP, r)
            self.assertFalse(r.HasField("label_scores"))

        run(go())

    def test_bad_declarations_are_refused(self):
        class WithScore(ByZone):
            def score(self, cycle, state, node):
                return 0

        class WithPreFilter(ByZone):
            def pre_filter(self, cycle, state):
                return None

        class NoTable(Plugin):
            name = "NoTable"
            score_node_label = "zone"

        class NoLabel(ByZone):
            score_node_label = ""

        for p, words in (
            (WithScore(), "drop the others"),
            (WithPreFilter(), "has a pre_filter"),
            (NoTable(), "no label_scores"),
            (NoLabel(), "name a node label"),
        ):
            with self.assertRaises(ValueError) as e:
                PluginService([p])
            self.assertIn(words, str(e.exception))

    def test_the_harness_scores_by_label(self):
        from switchyard_plugin.harness import _run_cycle
        from switchyard_plugin.label_score import label_scored
        from switchyard_plugin.plugin import Cycle

        snap = Snapshot()
        snap.apply(1, delta(True, upsert_nodes=[node(1, "a", zone="z1"), node(2, "b", zone="z2")]))
        out = _run_cycle(label_scored(ByZone()), Cycle(1, pod("me"), "p", snap))
        self.assertEqual(out.scores, [("a", 100), ("b", 33)])
        self.assertEqual(out.raw_scores, [("a", 3), ("b", 1)])


class CapabilitiesTest(unittest.TestCase):
    """The optional capabilities: an option of PluginService, serve and main, set from
    --no-optional-capabilities or its environment fallback by parse_args alone."""

    def test_handshake_offers_them_unless_turned_off(self):
        req = pb.HandshakeRequest(protocol_versions=["v1"], capabilities=["filter-batch", "replicate-batch", "new"])
        with mock.patch.dict(os.environ, {"SWITCHYARD_PLUGIN_CAPABILITIES": "off"}):
            # The service itself reads no environment.
            hs = run(PluginService([Counting()]).Handshake(req, None))
        self.assertEqual(list(hs.capabilities), ["filter-batch", "replicate-batch"])
        hs = run(PluginService([Counting()], capabilities=False).Handshake(req, None))
        self.assertEqual(list(hs.capabilities), [])

    def test_the_flag_and_its_environment_fallback(self):
        from switchyard_plugin.serve import CAPABILITIES_ENV, parse_args

        with mock.patch.dict(os.environ, {CAPABILITIES_ENV: ""}):
            args = parse_args(["--listen", "unix:///tmp/x.sock"])
            self.assertEqual(args, (("unix", "/tmp/x.sock"), False, True))
            args = parse_args(["--no-optional-capabilities", "--probe", "--listen=unix:///tmp/x.sock"])
            self.assertEqual((args.probe, args.capabilities), (True, False))
        for off in ("off", "false", "0"):
            with mock.patch.dict(os.environ, {CAPABILITIES_ENV: off}):
                self.assertFalse(parse_args(["--listen", "unix:///tmp/x.sock"]).capabilities)


if __name__ == "__main__":
    unittest.main()
