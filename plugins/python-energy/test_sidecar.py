#!/usr/bin/env python3
"""Self-test of the EnergyAware sidecar: starts sidecar.py as a subprocess on a
temporary Unix socket and plays the scheduler against it over gRPC, checking every
reply the way server/src/remote/ would (request id, generation, batch alignment).

    python3 plugins/python-energy/test_sidecar.py

Plain Python, no test runner. Exits 0 when every check passed, 1 otherwise; every wait
is bounded and the whole run is cut off after TOTAL_SECS, the sidecar killed.
"""

import asyncio
import os
import signal
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import sidecar  # noqa: E402
import switchyard_plugin as sdk  # noqa: E402  (generates the stubs on first use)
from switchyard_plugin import pb, pb_grpc  # noqa: E402

import grpc  # noqa: E402

TOTAL_SECS = 60
REPLY_SECS = 3.0  # a reply that needs no generation wait comes within this
START_SECS = 15.0
PLUGIN = "EnergyAware"
DRAIN_REASON = "node is draining (EnergyAware)"

passed = 0
failed = 0
procs = []  # sidecars started, killed on the way out whatever happens


def check(cond, what, detail=""):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print(f"FAIL: {what}{': ' + str(detail) if detail != '' else ''}", file=sys.stderr)
    return cond


def node(i, name, **labels):
    return pb.Node(id=i, name=name, uid=f"uid-{name}", labels=labels, allocatable={"cpu": 4000, "pods": 110})


def pod(uid, node_name=""):
    return pb.Pod(uid=uid, namespace="default", name=uid, node_name=node_name, requests={"cpu": 100})


class Stream:
    """One bidirectional stream as the scheduler holds it."""

    def __init__(self, call):
        self.call = call

    async def send(self, msg):
        await asyncio.wait_for(self.call.write(msg), REPLY_SECS)

    async def recv(self, timeout=REPLY_SECS):
        r = await asyncio.wait_for(self.call.read(), timeout)
        if r is grpc.aio.EOF:
            raise AssertionError(f"stream ended: {await self.call.code()} {await self.call.details()}")
        return r

    async def ask(self, msg, timeout=REPLY_SECS):
        await self.send(msg)
        return await self.recv(timeout)

    async def ended_with(self, timeout=REPLY_SECS):
        """The status code the stream ended with (after its remaining replies)."""
        try:
            while await asyncio.wait_for(self.call.read(), timeout) is not grpc.aio.EOF:
                pass
        except grpc.aio.AioRpcError as e:
            return e.code()
        return await self.call.code()


def cycle_ids(req_cls, rid, cycle, gen, **kw):
    return req_cls(request_id=rid, plugin=PLUGIN, cycle=cycle, generation=gen, **kw)


def reasons(st):
    return " ".join(st.reasons)


async def spawn_sidecar(args, env=None, stderr=asyncio.subprocess.PIPE):
    """`sidecar.py ARGS` as a subprocess, killed on the way out if still running."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        os.path.join(HERE, "sidecar.py"),
        *args,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=stderr,
        env=env,
    )
    procs.append(proc)
    return proc


async def start_sidecar(args, env=None):
    """Starts the sidecar and waits for its "listening on" line; returns (process,
    address shown, stderr lines, drain task)."""
    proc = await spawn_sidecar(args, env)
    lines = []
    started = asyncio.get_running_loop().create_future()

    async def drain():
        while True:
            line = await proc.stderr.readline()
            if not line:
                break
            text = line.decode(errors="replace").rstrip("\n")
            lines.append(text)
            if f"{PLUGIN} listening on " in text and not started.done():
                started.set_result(text.split(" listening on ", 1)[1])
        if not started.done():
            started.set_exception(AssertionError("the sidecar exited before listening"))

    task = asyncio.ensure_future(drain())
    shown = await asyncio.wait_for(started, START_SECS)
    return proc, shown, lines, task


async def stop_sidecar(proc):
    if proc.returncode is None:
        proc.kill()
        try:
            await asyncio.wait_for(proc.wait(), 5)
        except asyncio.TimeoutError:
            pass


async def scenario(addr, node_local=True):
    channel = grpc.aio.insecure_channel(addr)
    try:
        await asyncio.wait_for(channel.channel_ready(), START_SECS)
        await run_checks(pb_grpc.PluginStub(channel), node_local)
    finally:
        await channel.close(grace=None)


def check_declarations(info, node_local, signed):
    """What the handshake declares for the scheduler's lookahead and alike pods."""
    check(info.node_local == node_local, "node_local in the handshake", info.node_local)
    # Filter and Score read no field of the pod: "none", every pod alike.
    want = [pb.POD_FIELD_NONE] if signed else []
    check(list(info.signature) == want, "signature in the handshake", list(info.signature))
    # Its scores are final: no normalisation for the scheduler to apply to reused ones.
    check(info.score_normalization == pb.SCORE_NORMALIZATION_CUSTOM, "no standard normalisation", info)


async def run_checks(stub, node_local):
    """The scheduler's side of a session. `node_local`: whether the sidecar declares
    EnergyAware node-local (the default), which relaxes the generation checks; it
    signs pods exactly then (no signature without node_local)."""
    # ---- handshake
    hs = await stub.Handshake(pb.HandshakeRequest(protocol_versions=["v2", "v1"], scheduler="test"), timeout=REPLY_SECS)
    check(hs.protocol_version == "v1", "handshake version", hs.protocol_version)
    check(len(hs.plugins) == 1 and hs.plugins[0].name == PLUGIN, "handshake plugin", hs.plugins)
    info = hs.plugins[0]
    check(list(info.extension_points) == [pb.FILTER, pb.SCORE], "extension points", info.extension_points)
    check(not info.pre_filter_extensions and not info.normalize_score, "no PreFilter extensions, no NormalizeScore")
    check(
        [(e.resource, list(e.actions)) for e in info.events] == [("Node", ["Add", "UpdateNodeLabel"])],
        "events",
        info.events,
    )
    check(hs.max_batch_nodes == 0, "no batch limit")
    check_declarations(info, node_local, signed=node_local)
    try:
        await stub.Handshake(pb.HandshakeRequest(protocol_versions=["v9"]), timeout=REPLY_SECS)
        check(False, "handshake offering only v9 must fail")
    except grpc.aio.AioRpcError as e:
        check(e.code() == grpc.StatusCode.FAILED_PRECONDITION, "handshake v9 code", e.code())

    # ---- every stream, opened at once and kept, as the scheduler does
    rep = Stream(stub.Replicate())
    s = {
        name: Stream(getattr(stub, name)())
        for name in (
            "PreEnqueue QueueSort PreFilter Filter PostFilter PreScore Score NormalizeScore "
            "Reserve Unreserve Permit PreBind Bind PostBind"
        ).split()
    }

    # ---- the snapshot and a cycle
    snap = pb.SnapshotDelta(
        full=True,
        upsert_nodes=[
            node(1, "node-drain", **{"energy.switchyard.dev/draining": "true"}),
            node(2, "node-green", **{"energy.switchyard.dev/efficiency": "80"}),
            node(3, "node-super", **{"energy.switchyard.dev/efficiency": "250"}),
        ],
        upsert_pods=[pod("pod-a", "node-green"), pod("pod-b", "node-super")],
    )
    r = await rep.ask(pb.ReplicateRequest(generation=1, delta=snap, ack=True))
    check(r.applied_generation == 1, "ack of the snapshot", r)
    start7 = pb.CycleStart(cycle=7, pod=pod("pending-1"), profile="default-scheduler")
    r = await rep.ask(pb.ReplicateRequest(generation=2, cycle_start=start7, ack=True))
    check(r.applied_generation == 2, "ack of CycleStart", r)

    # ---- Filter: only the draining node fails; evaluated covers the whole batch
    f = await s["Filter"].ask(cycle_ids(pb.FilterRequest, 11, 7, 2, nodes=[1, 2, 3]))
    check(f.request_id == 11 and f.generation == 2, "filter ids", f)
    check(not f.HasField("error"), "filter has no error", f.error)
    check(f.evaluated == 3, "filter evaluated", f.evaluated)
    check(
        [(x.index, x.status.code, list(x.status.reasons)) for x in f.failures]
        == [(0, pb.UNSCHEDULABLE, [DRAIN_REASON])],
        "filter failures",
        f.failures,
    )

    # ---- Filter scoring ahead: the first 2 items that pass, in batch order
    f = await s["Filter"].ask(cycle_ids(pb.FilterRequest, 18, 7, 2, nodes=[3, 1, 2, 2], score_first=2))
    check(f.evaluated == 4 and [x.index for x in f.failures] == [1], "score-ahead filter", f)
    check(f.HasField("score") and f.score.status.code == pb.SUCCESS, "score ahead answered", f.score)
    check(list(f.score.scores) == [100, 80] and f.score.normalized, "scores ahead", f.score)
    # Raw scores asked for (as for a plugin with a standard normalisation): without a
    # NormalizeScore, EnergyAware's scores are final either way.
    f = await s["Filter"].ask(cycle_ids(pb.FilterRequest, 21, 7, 2, nodes=[3, 1, 2], score_first=2, raw_scores=True))
    check(list(f.score.scores) == [100, 80] and f.score.normalized, "raw scores ahead are final", f.score)
    f = await s["Filter"].ask(
        cycle_ids(pb.FilterRequest, 19, 7, 2, nodes=[2, 3], score_first=2, deltas=[pb.NodeDelta(index=1)])
    )
    check(not f.HasField("score"), "no score ahead over an item with a delta", f)
    f = await s["Filter"].ask(cycle_ids(pb.FilterRequest, 20, 7, 2, nodes=[2, 3]))
    check(not f.HasField("score"), "no score ahead unless asked", f)

    # ---- Score: the efficiency label, clamped; 50 without one
    sc = await s["Score"].ask(cycle_ids(pb.ScoreRequest, 12, 7, 2, nodes=[2, 3, 1]))
    check(sc.request_id == 12 and sc.generation == 2, "score ids", sc)
    check(sc.status.code == pb.SUCCESS, "score status", sc.status)
    check(list(sc.scores) == [80, 100, 50], "scores", sc.scores)
    check(sc.normalized, "scores of a plugin without NormalizeScore are final")
    sc = await s["Score"].ask(cycle_ids(pb.ScoreRequest, 13, 7, 2, nodes=[1, 3], normalize=True))
    check(list(sc.scores) == [50, 100] and sc.normalized, "score with normalize", sc)

    # ---- Filter with what-if deltas (the same node twice, with different deltas)
    deltas = [
        pb.NodeDelta(index=1, remove_pods=["pod-a"]),
        pb.NodeDelta(index=2, remove_pods=["pod-zz"]),
        pb.NodeDelta(index=3, add_pods=["pod-a"], add_pod_objects=[pod("nominated-1")]),
    ]
    f = await s["Filter"].ask(cycle_ids(pb.FilterRequest, 14, 7, 2, nodes=[1, 2, 2, 3], deltas=deltas))
    check(f.evaluated == 4 and not f.HasField("error"), "delta filter evaluated", f)
    got = [(x.index, x.status.code) for x in f.failures]
    check(got == [(0, pb.UNSCHEDULABLE), (2, pb.ERROR)], "delta filter failures", f.failures)
    if len(f.failures) == 2:
        check("pod-zz" in reasons(f.failures[1].status), "delta error names the pod", f.failures[1].status)

    # ---- misaligned calls fail as a whole: error set, nothing evaluated
    for rid, req, want in [
        (15, cycle_ids(pb.FilterRequest, 15, 7, 2, nodes=[1], deltas=[pb.NodeDelta(index=9)]), "delta for item 9 of a batch of 1"),
        (16, cycle_ids(pb.FilterRequest, 16, 7, 2, nodes=[1, 42]), "unknown node id 42"),
        (17, pb.FilterRequest(request_id=17, plugin="Nope", cycle=7, generation=2, nodes=[1]), "no plugin named"),
    ]:
        f = await s["Filter"].ask(req)
        check(
            f.request_id == rid and f.generation == 2 and f.evaluated == 0 and not f.failures,
            f"filter {rid} fails whole",
            f,
        )
        check(f.error.code == pb.ERROR and want in reasons(f.error), f"filter {rid} error", f.error)
    sc = await s["Score"].ask(cycle_ids(pb.ScoreRequest, 18, 7, 2, nodes=[2, 42]))
    check(sc.status.code == pb.ERROR and not sc.scores and sc.generation == 2, "score of an unknown node", sc)

    # ---- PreScore and Score pipelined: Score waits for PreScore's outcome (an error:
    # the plugin has no PreScore) and answers it
    await s["PreScore"].send(cycle_ids(pb.PreScoreRequest, 19, 7, 2, nodes=[2, 3]))
    await s["Score"].send(cycle_ids(pb.ScoreRequest, 20, 7, 2, nodes=[2, 3], after_pre_score=True))
    ps = await s["PreScore"].recv()
    sc = await s["Score"].recv()
    check(ps.request_id == 19 and ps.generation == 2 and ps.status.code == pb.ERROR, "PreScore reply", ps)
    check("has no PreScore" in reasons(ps.status), "PreScore reason", ps.status)
    check(sc.request_id == 20 and sc.status.code == pb.ERROR and not sc.scores, "Score after PreScore", sc)

    # ---- every other stream answers an Error status and stays open (twice each)
    cyc = dict(plugin=PLUGIN, cycle=7, generation=2)
    others = {
        "PreEnqueue": (lambda rid: pb.PreEnqueueRequest(request_id=rid, plugin=PLUGIN, pod=pod("p")), "PreEnqueue", 0),
        "QueueSort": (lambda rid: pb.QueueSortRequest(request_id=rid, plugin=PLUGIN, pod=pod("p")), "QueueSort", None),
        "PreFilter": (lambda rid: pb.PreFilterRequest(request_id=rid, **cyc), "PreFilter", 2),
        "PostFilter": (lambda rid: pb.PostFilterRequest(request_id=rid, **cyc), "PostFilter", 2),
        "NormalizeScore": (lambda rid: pb.NormalizeScoreRequest(request_id=rid, nodes=[2], scores=[5], **cyc), "NormalizeScore", 2),
        "Reserve": (lambda rid: pb.CycleRequest(request_id=rid, node_name="node-green", **cyc), "Reserve", 2),
        "Unreserve": (lambda rid: pb.CycleRequest(request_id=rid, node_name="node-green", **cyc), "Unreserve", 2),
        "Permit": (lambda rid: pb.CycleRequest(request_id=rid, node_name="node-green", **cyc), "Permit", 2),
        "PreBind": (lambda rid: pb.CycleRequest(request_id=rid, node_name="node-green", **cyc), "PreBind", 2),
        "Bind": (lambda rid: pb.CycleRequest(request_id=rid, node_name="node-green", **cyc), "Bind", 2),
        "PostBind": (lambda rid: pb.CycleRequest(request_id=rid, node_name="node-green", **cyc), "PostBind", 2),
    }
    rid = 100
    for name, (make, point, gen) in others.items():
        for _ in range(2):
            rid += 1
            r = await s[name].ask(make(rid))
            ok = r.request_id == rid and r.status.code == pb.ERROR and f"has no {point}" in reasons(r.status)
            check(ok, f"{name} answers an error", r)
            if gen is not None:
                check(r.generation == gen, f"{name} generation", r.generation)

    # ---- a call naming a generation not yet replicated waits for it...
    pending = asyncio.ensure_future(s["Filter"].ask(cycle_ids(pb.FilterRequest, 30, 8, 3, nodes=[1, 2])))
    done, _ = await asyncio.wait([pending], timeout=0.5)
    check(not done, "a call for generation 3 waits while the replica is at 2")
    start8 = pb.CycleStart(cycle=8, pod=pod("pending-2"), profile="default-scheduler")
    await rep.send(pb.ReplicateRequest(generation=3, cycle_start=start8))  # no ack asked
    f = await asyncio.wait_for(pending, REPLY_SECS)
    check(f.request_id == 30 and f.generation == 3 and f.evaluated == 2, "answered once generation 3 arrived", f)
    check([x.index for x in f.failures] == [0], "generation 3 failures", f.failures)

    # ---- ...at most 5 s, then errors; meanwhile other streams are answered
    t0 = time.monotonic()
    late = asyncio.ensure_future(s["Score"].ask(cycle_ids(pb.ScoreRequest, 31, 8, 99, nodes=[2]), timeout=9))
    f = await s["Filter"].ask(cycle_ids(pb.FilterRequest, 32, 8, 3, nodes=[2]))
    check(f.evaluated == 1 and not f.failures, "Filter answered while a Score waits")
    sc = await late
    waited = time.monotonic() - t0
    check(4.5 <= waited <= 7.5, "the generation wait is bounded at 5 s", f"{waited:.2f}s")
    check(sc.request_id == 31 and sc.generation == 99 and sc.status.code == pb.ERROR, "late Score errors", sc)
    check("generation 99 not reached" in reasons(sc.status), "late Score reason", sc.status)

    # ---- a delta after CycleStart: the cycle's calls no longer match the replica
    # (It also places cycle 7's pod by a PodUpdate: the sidecar kept it from CycleStart.)
    upd = pb.SnapshotDelta(
        upsert_nodes=[node(3, "node-super", **{"energy.switchyard.dev/efficiency": "abc"})],
        update_pods=[pb.PodUpdate(uid="pending-1", node_name="node-green", phase="Pending")],
    )
    r = await rep.ask(pb.ReplicateRequest(generation=4, delta=upd, ack=True))
    check(r.applied_generation == 4, "ack of delta 4", r)
    sc = await s["Score"].ask(cycle_ids(pb.ScoreRequest, 33, 8, 3, nodes=[3]))
    if node_local:
        # A node-local plugin answers from the newer replica (node-super is new in 4)...
        check(list(sc.scores) == [50] and sc.generation == 3, "node-local: a later replica answers", sc)
        # ...and takes calls naming a generation after its cycle's start.
        f = await s["Filter"].ask(cycle_ids(pb.FilterRequest, 38, 8, 4, nodes=[3, 1]))
        check(f.evaluated == 2 and [x.index for x in f.failures] == [1], "node-local: a later generation", f)
    else:
        check(sc.status.code == pb.ERROR and "moved on to generation 4" in reasons(sc.status), "stale cycle", sc.status)
        f = await s["Filter"].ask(cycle_ids(pb.FilterRequest, 38, 8, 4, nodes=[3]))
        check(f.HasField("error") and "started at generation 3, not 4" in reasons(f.error), "pinned generation", f)
    start9 = pb.CycleStart(cycle=9, pod=pod("pending-3"), profile="default-scheduler")
    await rep.send(pb.ReplicateRequest(generation=5, cycle_start=start9))
    sc = await s["Score"].ask(cycle_ids(pb.ScoreRequest, 34, 9, 5, nodes=[3, 2]))
    check(list(sc.scores) == [50, 80] and sc.generation == 5, "an invalid label scores 50", sc)
    moved = [pb.NodeDelta(index=0, remove_pods=["pending-1"])]
    f = await s["Filter"].ask(cycle_ids(pb.FilterRequest, 37, 9, 5, nodes=[2], deltas=moved))
    check(f.evaluated == 1 and not f.failures, "a PodUpdate placed the CycleStart pod on its node", f)
    f = await s["Filter"].ask(cycle_ids(pb.FilterRequest, 35, 9, 4, nodes=[2]))
    check(f.HasField("error") and "started at generation 5, not 4" in reasons(f.error), "wrong cycle generation", f.error)

    # ---- CycleEnd drops the cycle
    await rep.send(pb.ReplicateRequest(generation=6, cycle_end=pb.CycleEnd(cycle=9)))
    f = await s["Filter"].ask(cycle_ids(pb.FilterRequest, 36, 9, 5, nodes=[2]))
    check(f.HasField("error") and "cycle 9 is unknown" in reasons(f.error), "ended cycle", f.error)

    # ---- a generation gap closes the Replicate stream (the other streams stay)
    await rep.send(pb.ReplicateRequest(generation=8, delta=pb.SnapshotDelta(), ack=True))
    code = await rep.ended_with()
    check(code == grpc.StatusCode.FAILED_PRECONDITION, "a gap closes Replicate", code)
    # A new stream must start with a full snapshot...
    rep = Stream(stub.Replicate())
    await rep.send(pb.ReplicateRequest(generation=9, delta=pb.SnapshotDelta(), ack=True))
    code = await rep.ended_with()
    check(code == grpc.StatusCode.FAILED_PRECONDITION, "a stream not starting with a full snapshot", code)
    # ...which replaces everything, cycles included.
    rep = Stream(stub.Replicate())
    full = pb.SnapshotDelta(full=True, upsert_nodes=[node(2, "node-green", **{"energy.switchyard.dev/efficiency": "-5"})])
    r = await rep.ask(pb.ReplicateRequest(generation=20, delta=full, ack=True))
    check(r.applied_generation == 20, "ack of the new snapshot", r)
    f = await s["Filter"].ask(cycle_ids(pb.FilterRequest, 40, 8, 3, nodes=[2]))
    check(f.HasField("error") and "cycle 8 is unknown" in reasons(f.error), "a full snapshot drops cycles", f.error)
    await rep.send(pb.ReplicateRequest(generation=21, cycle_start=pb.CycleStart(cycle=10, pod=pod("pending-4"))))
    f = await s["Filter"].ask(cycle_ids(pb.FilterRequest, 41, 10, 21, nodes=[1]))
    check(f.HasField("error") and "unknown node id 1" in reasons(f.error), "removed node", f.error)
    sc = await s["Score"].ask(cycle_ids(pb.ScoreRequest, 42, 10, 21, nodes=[2]))
    check(list(sc.scores) == [0] and sc.generation == 21, "negative efficiency clamps to 0", sc)
    # A node arriving under a name the replica has with another id breaks replication.
    bad = pb.SnapshotDelta(upsert_nodes=[node(5, "node-green")])
    await rep.send(pb.ReplicateRequest(generation=22, delta=bad, ack=True))
    code = await rep.ended_with()
    check(code == grpc.StatusCode.FAILED_PRECONDITION, "conflicting node id closes Replicate", code)
    # So does an update for a pod the replica does not hold.
    rep = Stream(stub.Replicate())
    r = await rep.ask(pb.ReplicateRequest(generation=30, delta=full, ack=True))
    check(r.applied_generation == 30, "ack of another snapshot", r)
    lost = pb.SnapshotDelta(update_pods=[pb.PodUpdate(uid="nobody", node_name="node-green")])
    await rep.send(pb.ReplicateRequest(generation=31, delta=lost, ack=True))
    code = await rep.ended_with()
    check(code == grpc.StatusCode.FAILED_PRECONDITION, "an update for an unknown pod closes Replicate", code)

    for st in s.values():
        st.call.cancel()


def check_node_local_without_pre_filter():
    class WithPreFilter(sidecar.EnergyAware):
        def pre_filter(self, cycle, state):
            return None

    try:
        sdk.PluginService([WithPreFilter()])
        check(False, "a node-local plugin with a PreFilter must be refused")
    except ValueError as e:
        check("declares node_local but has a pre_filter" in str(e), "node_local + PreFilter refused", e)
    sdk.PluginService([WithPreFilter(node_local=False)])


def check_signature_needs_node_local():
    """The signature follows node_local (--no-lookahead withdraws both), and the SDK
    refuses one without the other."""
    check(sidecar.EnergyAware().signature == ("none",), "signs pods with none")
    check(sidecar.EnergyAware(signature=False).signature == (), "signature withdrawn")
    plain = sidecar.EnergyAware(node_local=False)
    check(plain.signature == (), "no signature without node_local", plain.signature)
    plain.signature = ("none",)
    try:
        sdk.PluginService([plain])
        check(False, "a signature without node_local must be refused")
    except ValueError as e:
        check("declares a signature but not node_local" in str(e), "signature without node_local refused", e)


def check_addresses():
    p = sdk.parse_listen_address
    check(p("unix:///tmp/a.sock") == ("unix", "/tmp/a.sock"), "unix:///")
    check(p("unix:rel.sock") == ("unix", "rel.sock"), "unix:")
    check(p("127.0.0.1:9000") == ("tcp", "127.0.0.1", 9000), "host:port")
    check(p("tcp://127.0.0.1:9000") == ("tcp", "127.0.0.1", 9000), "tcp://")
    check(p("http://[::1]:9000") == ("tcp", "::1", 9000), "http:// v6")
    check(p("https://0.0.0.0:9443") == ("tls", "0.0.0.0", 9443), "https://")
    for bad in ("unix://", "nonsense", "localhost:9000", "127.0.0.1:70000", "127.0.0.1", "https://localhost:1"):
        try:
            p(bad)
            check(False, f"{bad!r} must be rejected")
        except ValueError:
            check(True, "")


async def check_help():
    """--help lists the SDK's flags and the sidecar's own, and exits 0."""
    p = await asyncio.create_subprocess_exec(
        sys.executable,
        os.path.join(HERE, "sidecar.py"),
        "--help",
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, _ = await asyncio.wait_for(p.communicate(), 15)
    text = out.decode(errors="replace")
    flags = ("--listen", "--probe", "--no-optional-capabilities", "--no-lookahead", "--no-signature")
    check(p.returncode == 0 and all(f in text for f in flags), "--help lists every flag", text)


async def probe_exit_code(env):
    """`sidecar.py --probe` as an exec probe runs it: its exit code."""
    p = await spawn_sidecar(["--probe"], env, stderr=asyncio.subprocess.DEVNULL)
    return await asyncio.wait_for(p.wait(), 15)


async def check_health(addr, env):
    """grpc.health.v1: SERVING for "" and the plugin service, NOT_FOUND for others,
    and `--probe` passes against the running sidecar."""
    async with grpc.aio.insecure_channel(addr) as ch:
        call = ch.unary_unary(
            "/grpc.health.v1.Health/Check",
            request_serializer=sdk.health_pb.HealthCheckRequest.SerializeToString,
            response_deserializer=sdk.health_pb.HealthCheckResponse.FromString,
        )
        serving = sdk.health_pb.HealthCheckResponse.SERVING
        for svc in ("", "switchyard.plugin.v1.Plugin"):
            r = await call(sdk.health_pb.HealthCheckRequest(service=svc), timeout=REPLY_SECS)
            check(r.status == serving, f"health of {svc!r}", r)
        try:
            await call(sdk.health_pb.HealthCheckRequest(service="other"), timeout=REPLY_SECS)
            check(False, "health of an unknown service must fail")
        except grpc.aio.AioRpcError as e:
            check(e.code() == grpc.StatusCode.NOT_FOUND, "unknown service", e.code())
    check(await probe_exit_code(env) == 0, "--probe passes while serving")


TLS_DIR = os.path.join(HERE, "..", "..", "tests", "fixtures", "tls")


def tls_file(name):
    with open(os.path.join(TLS_DIR, name), "rb") as f:
        return f.read()


async def check_tls():
    """https:// with mutual TLS: a client with a certificate from the CA is served, one
    without is refused, and --probe passes only with the CA that signed the sidecar."""
    env = dict(
        os.environ,
        SWITCHYARD_PLUGIN_LISTEN="https://127.0.0.1:0",
        SWITCHYARD_PLUGIN_TLS_CERT=os.path.join(TLS_DIR, "server.crt"),
        SWITCHYARD_PLUGIN_TLS_KEY=os.path.join(TLS_DIR, "server.key"),
        SWITCHYARD_PLUGIN_TLS_CLIENT_CA=os.path.join(TLS_DIR, "ca.crt"),
    )
    proc, shown, _, _ = await start_sidecar([], env=env)
    try:
        check(shown.startswith("https://127.0.0.1:"), "TLS listening line", shown)
        target = shown[len("https://") :]
        opts = [("grpc.ssl_target_name_override", "localhost")]
        ca = tls_file("ca.crt")
        mutual = grpc.ssl_channel_credentials(ca, tls_file("client.key"), tls_file("client.crt"))
        async with grpc.aio.secure_channel(target, mutual, options=opts) as ch:
            hs = await pb_grpc.PluginStub(ch).Handshake(pb.HandshakeRequest(protocol_versions=["v1"]), timeout=START_SECS)
            check(hs.plugins[0].name == PLUGIN, "handshake over mutual TLS")
        async with grpc.aio.secure_channel(target, grpc.ssl_channel_credentials(ca), options=opts) as ch:
            try:
                await pb_grpc.PluginStub(ch).Handshake(pb.HandshakeRequest(protocol_versions=["v1"]), timeout=START_SECS)
                check(False, "a client without a certificate must be refused")
            except grpc.aio.AioRpcError as e:
                check(e.code() == grpc.StatusCode.UNAVAILABLE, "no client certificate: refused", e.code())
        probe_env = dict(env, SWITCHYARD_PLUGIN_LISTEN=shown)
        check(await probe_exit_code(probe_env) == 0, "--probe over TLS")
        other = dict(probe_env, SWITCHYARD_PLUGIN_TLS_CLIENT_CA=os.path.join(TLS_DIR, "other-ca.crt"))
        check(await probe_exit_code(other) == 1, "--probe with a CA that did not sign the sidecar fails")
    finally:
        await stop_sidecar(proc)
    # Without the key an https:// address is a usage error, named.
    p = await spawn_sidecar([], {k: v for k, v in env.items() if k != "SWITCHYARD_PLUGIN_TLS_KEY"})
    _, err = await asyncio.wait_for(p.communicate(), 15)
    check(p.returncode == 1 and b"needs SWITCHYARD_PLUGIN_TLS_KEY" in err, "https:// without a key", err)


async def check_capabilities(stub, served):
    """The optional capabilities: offered and served (or withheld under
    --no-optional-capabilities); Replicate messages inside `more`; a
    FilterBatch answering each call as the Filter stream does, in order."""
    offer = ["filter-batch", "replicate-batch", "not-a-capability"]
    hs = await stub.Handshake(pb.HandshakeRequest(protocol_versions=["v1"], capabilities=offer), timeout=REPLY_SECS)
    want = ["filter-batch", "replicate-batch"] if served else []
    check(list(hs.capabilities) == want, "capabilities served", hs.capabilities)
    hs = await stub.Handshake(pb.HandshakeRequest(protocol_versions=["v1"]), timeout=REPLY_SECS)
    check(list(hs.capabilities) == [], "no capability unless offered", hs.capabilities)
    if not served:
        return
    rep = Stream(stub.Replicate())
    snap = pb.SnapshotDelta(
        full=True,
        upsert_nodes=[
            node(1, "node-drain", **{"energy.switchyard.dev/draining": "true"}),
            node(2, "node-green", **{"energy.switchyard.dev/efficiency": "80"}),
        ],
    )
    # Generations 1..4 in one message; only the last asks for an acknowledgement.
    first = pb.ReplicateRequest(generation=1, delta=snap)
    first.more.extend(
        [
            pb.ReplicateRequest(generation=2, cycle_start=pb.CycleStart(cycle=31, pod=pod("p31"))),
            pb.ReplicateRequest(generation=3, cycle_start=pb.CycleStart(cycle=32, pod=pod("p32"))),
            pb.ReplicateRequest(generation=4, cycle_end=pb.CycleEnd(cycle=31), ack=True),
        ]
    )
    r = await rep.ask(first)
    check(r.applied_generation == 4, "a message with `more` applies them all", r)
    batch = Stream(stub.FilterBatch())
    calls = [
        cycle_ids(pb.FilterRequest, 41, 32, 3, nodes=[1, 2], score_first=1),
        cycle_ids(pb.FilterRequest, 42, 31, 2, nodes=[2]),
        cycle_ids(pb.FilterRequest, 43, 32, 3, nodes=[2, 1]),
    ]
    b = await batch.ask(pb.FilterBatchRequest(request_id=40, calls=calls))
    check(b.request_id == 40 and [x.request_id for x in b.replies] == [41, 42, 43], "batch reply ids", b)
    if len(b.replies) == 3:
        one, ended, three = b.replies
        check([x.index for x in one.failures] == [0] and list(one.score.scores) == [80], "batch call 1", one)
        check(one.generation == 3 and one.evaluated == 2, "batch call 1 generation", one)
        check(ended.HasField("error") and "31" in reasons(ended.error), "an ended cycle fails alone", ended)
        check([x.index for x in three.failures] == [1] and not three.HasField("error"), "batch call 3", three)
    # A generation the replica never reaches fails every call of the batch after one
    # bounded wait, not one wait per call.
    t0 = time.monotonic()
    far = [cycle_ids(pb.FilterRequest, 50 + i, 32, 99, nodes=[1]) for i in range(3)]
    b = await batch.ask(pb.FilterBatchRequest(request_id=49, calls=far), timeout=REPLY_SECS + 15)
    waited = time.monotonic() - t0
    check(
        [x.request_id for x in b.replies] == [50, 51, 52]
        and all("generation 99 not reached" in reasons(x.error) for x in b.replies),
        "an unreached generation fails the whole batch",
        b,
    )
    check(waited < 9, "one wait for the whole batch", waited)
    # Nested `more` is refused: the stream ends.
    bad = pb.ReplicateRequest(generation=5, cycle_end=pb.CycleEnd(cycle=32))
    inner = pb.ReplicateRequest(generation=6, cycle_end=pb.CycleEnd(cycle=32))
    inner.more.append(pb.ReplicateRequest(generation=7, cycle_end=pb.CycleEnd(cycle=32)))
    bad.more.append(inner)
    await rep.send(bad)
    check(await rep.ended_with() == grpc.StatusCode.FAILED_PRECONDITION, "nested `more` ends the stream")


def check_harness():
    """The SDK's harness on testdata/cluster.yaml (converted by `switchyard snapshot`:
    SWITCHYARD_BIN, else the workspace's target/debug/switchyard): the plugin's
    Filter and Score for the pending pod, with no sidecar and no scheduler."""
    from switchyard_plugin.harness import Harness

    repo = os.path.abspath(os.path.join(HERE, "..", ".."))
    b = os.environ.get("SWITCHYARD_BIN") or os.path.join(repo, "target", "debug", "switchyard")
    h = Harness.from_manifests([os.path.join(HERE, "testdata", "cluster.yaml")], bin=b)
    out = h.run(sidecar.EnergyAware(), "web")
    check(out.feasible() == ["green", "grey", "unknown"], "harness: the draining node fails Filter", out.feasible())
    check(out.status("draining").reasons == (DRAIN_REASON,), "harness: the draining reason", out.status("draining"))
    check(out.scores == [("green", 90), ("grey", 20), ("unknown", 50)], "harness: scores from the label", out.scores)
    check(out.best() == "green", "harness: the best node", out.best())


async def main():
    check_harness()
    check_addresses()
    check_node_local_without_pre_filter()
    check_signature_needs_node_local()
    await check_help()
    tmp = tempfile.mkdtemp(prefix="sy-energy-")
    sock = os.path.join(tmp, "sub", "energy.sock")  # the sidecar creates sub/
    env = dict(os.environ, SWITCHYARD_PLUGIN_LISTEN=f"unix://{sock}")
    proc, shown, lines, drain = await start_sidecar([], env=env)
    try:
        check(shown == f"unix://{sock}", "listening line", shown)
        await scenario(f"unix:{sock}")
        await check_health(f"unix:{sock}", env)
        # Clean shutdown: SIGTERM ends it with 0 and removes the socket.
        proc.send_signal(signal.SIGTERM)
        rc = await asyncio.wait_for(proc.wait(), 8)
        check(rc == 0, "exit code after SIGTERM", rc)
        check(not os.path.exists(sock), "socket removed on exit")
        check(await probe_exit_code(env) == 1, "--probe fails once the sidecar is gone")
        await asyncio.wait_for(drain, 2)
        # The four replication errors provoked above, and nothing else but the first line.
        broken = [x for x in lines if "replication failed; closing the stream" in x]
        noise = [x for x in lines[1:] if x not in broken]
        check(len(broken) == 4 and not noise, "quiet but for errors", lines)
    finally:
        await stop_sidecar(proc)
        if failed:
            print("sidecar stderr:\n  " + "\n  ".join(lines), file=sys.stderr)

    # Without the node-local declaration every call is pinned to its cycle's generation.
    sock2 = os.path.join(tmp, "strict.sock")
    env2 = dict(os.environ, SWITCHYARD_PLUGIN_LISTEN=f"unix://{sock2}")
    proc, _, lines, _ = await start_sidecar(["--no-lookahead", "--no-optional-capabilities"], env=env2)
    try:
        await scenario(f"unix:{sock2}", node_local=False)
        async with grpc.aio.insecure_channel(f"unix:{sock2}") as ch:
            await check_capabilities(pb_grpc.PluginStub(ch), served=False)
    finally:
        await stop_sidecar(proc)
        if failed:
            print("sidecar stderr:\n  " + "\n  ".join(lines), file=sys.stderr)

    await check_tls()

    # TCP, port chosen by the system, via --listen; node-local but not signing pods.
    proc, shown, lines, drain = await start_sidecar(["--listen", "tcp://127.0.0.1:0", "--no-signature"])
    try:
        check(shown.startswith("tcp://127.0.0.1:"), "tcp listening line", shown)
        async with grpc.aio.insecure_channel(shown[len("tcp://") :]) as ch:
            hs = await pb_grpc.PluginStub(ch).Handshake(pb.HandshakeRequest(protocol_versions=["v1"]), timeout=START_SECS)
            check(hs.plugins[0].name == PLUGIN, "handshake over TCP")
            check_declarations(hs.plugins[0], node_local=True, signed=False)
            await check_capabilities(pb_grpc.PluginStub(ch), served=True)
    finally:
        await stop_sidecar(proc)


def run():
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(asyncio.wait_for(main(), TOTAL_SECS))
    except Exception as e:  # noqa: BLE001
        global failed
        failed += 1
        print(f"FAIL: {type(e).__name__}: {e}", file=sys.stderr)
        traceback.print_exc()
    finally:
        loop.close()
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    # Last resort if something blocks outside the event loop.
    def give_up(*_):
        for p in procs:
            if p.returncode is None:
                p.kill()
        print("FAIL: the self-test hung; killed", file=sys.stderr)
        os._exit(3)

    signal.signal(signal.SIGALRM, give_up)
    signal.alarm(TOTAL_SECS + 10)
    sys.exit(run())
