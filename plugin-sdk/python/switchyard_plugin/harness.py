"""A test harness for plugins: load the manifests `switchyard simulate` reads and run
a plugin's extension points for a pending pod the way the sidecar does (PreFilter,
Filter on every node, PreScore, Score, NormalizeScore, one CycleState), so a plugin's
unit tests need no scheduler, no sidecar and no hand-built state.

    from switchyard_plugin.harness import Harness

    h = Harness.from_manifests(["testdata/cluster.yaml"])
    out = h.run(MyPlugin(), "default/trainer-0")     # or just "trainer-0"
    assert out.status("node-1").code == Code.UNSCHEDULABLE
    assert out.feasible() == ["node-2", "node-3"]
    assert out.best() == "node-3"

The manifests are converted by the scheduler itself (`switchyard snapshot`), so a test
sees what a run would replicate: the binary SWITCHYARD_BIN names, else `switchyard`
on PATH (or `bin=`).
"""

import os
import subprocess
from typing import Any, List, Optional, Sequence, Tuple

from ._stubs import pb
from .label_score import label_scored
from .plugin import Cycle, PreFilterResult
from .protocol import _score_normalization, has, normalize_scores
from .snapshot import CycleState, Snapshot
from .status import Code, Status, as_status


class HarnessError(Exception):
    """The harness could not load the cluster or find the pod."""


class Outcome:
    """What one plugin answered for one pod, point by point. A point the plugin does
    not implement is None; points after a rejection are not run (as in an attempt).

    pre_filter: the PreFilterResult; filter: (node name, Status) for each evaluated
    node in the replica's order (every node passes when the plugin has no filter or
    its pre_filter skipped); pre_score: its Status; raw_scores and scores: (node name,
    score) for the feasible nodes, before and after normalization; error: the Status
    that ended the attempt in Score or NormalizeScore; state: the plugin's CycleState
    at the end."""

    def __init__(self):
        self.pre_filter: Optional[PreFilterResult] = None
        self.filter: List[Tuple[str, Status]] = []
        self.pre_score: Optional[Status] = None
        self.raw_scores: List[Tuple[str, int]] = []
        self.scores: List[Tuple[str, int]] = []
        self.error: Optional[Status] = None
        self.state = CycleState()

    def status(self, node: str) -> Optional[Status]:
        return next((s for n, s in self.filter if n == node), None)

    def feasible(self) -> List[str]:
        return [n for n, s in self.filter if s.is_success]

    def score(self, node: str) -> Optional[int]:
        return next((s for n, s in self.scores if n == node), None)

    def best(self) -> Optional[str]:
        """The feasible node scored highest (the first on a tie); the feasible node
        itself when only one passed and nothing scores."""
        best = None
        for n, s in self.scores:
            if best is None or s > best[1]:
                best = (n, s)
        if best is not None:
            return best[0]
        f = self.feasible()
        return f[0] if len(f) == 1 else None


def _key(pod) -> str:
    return f"{pod.namespace or 'default'}/{pod.name}"


class Harness:
    """A cluster loaded for tests: the replica the sidecar would hold and the pending
    pods it would be asked about."""

    def __init__(self, request):
        if request.WhichOneof("kind") != "delta" or not request.delta.full:
            raise HarnessError("the message does not start with a full snapshot")
        self.snapshot = Snapshot()
        self.snapshot.apply(max(request.generation, 1), request.delta)
        self._pending = []
        for m in request.more:
            if m.WhichOneof("kind") == "cycle_start":
                c = m.cycle_start
                self._pending.append((c.cycle, c.pod, c.profile))

    @classmethod
    def from_manifests(cls, paths: Sequence[str], bin: Optional[str] = None) -> "Harness":
        """Loads manifests (files or directories) through `switchyard snapshot`."""
        exe = bin or os.environ.get("SWITCHYARD_BIN") or "switchyard"
        try:
            r = subprocess.run(
                [exe, "snapshot", "--output", "-", "--cluster", *map(str, paths)],
                capture_output=True,
            )
        except OSError as e:
            raise HarnessError(
                f"cannot run {exe} (set SWITCHYARD_BIN to the switchyard binary, or put it on PATH): {e}"
            ) from e
        if r.returncode != 0:
            raise HarnessError(f"switchyard snapshot failed: {r.stderr.decode(errors='replace').strip()}")
        return cls.from_bytes(r.stdout)

    @classmethod
    def from_file(cls, path: str) -> "Harness":
        """Loads a message written by `switchyard snapshot --output FILE`."""
        with open(path, "rb") as f:
            return cls.from_bytes(f.read())

    @classmethod
    def from_bytes(cls, data: bytes) -> "Harness":
        req = pb.ReplicateRequest()
        try:
            req.ParseFromString(data)
        except Exception as e:  # protobuf's DecodeError, by runtime
            raise HarnessError(f"not a snapshot message: {e}") from e
        return cls(req)

    def pending(self) -> List[str]:
        """The pending pods, as namespace/name."""
        return [_key(p) for _, p, _ in self._pending]

    def pod(self, name: str):
        return self._find(name)[1]

    def _find(self, name: str):
        want = name if "/" in name else f"default/{name}"
        for e in self._pending:
            if _key(e[1]) == want:
                return e
        raise HarnessError(f"no pending pod {name!r} (pending: {', '.join(self.pending())})")

    def run(self, plugin: Any, name: str) -> Outcome:
        """Runs `plugin`'s extension points for pending pod `name` as the sidecar
        does in one attempt over every node; its indexes are declared first."""
        for i in getattr(plugin, "indexes", ()) or ():
            self.snapshot.declare_index(i)
        cycle_id, pod, profile = self._find(name)
        return _run_cycle(label_scored(plugin), Cycle(cycle_id, pod, profile, self.snapshot))


def _run_cycle(p: Any, cycle: Cycle) -> Outcome:
    out = Outcome()
    state = out.state
    only = None
    run_filter = True
    if has(p, "pre_filter"):
        r = p.pre_filter(cycle, state)
        if not isinstance(r, PreFilterResult):
            r = PreFilterResult(as_status(r, "pre_filter"))
        else:
            r.status = as_status(r.status, "pre_filter")
        out.pre_filter = r
        if r.status.code == Code.SKIP:
            run_filter = False
        elif not r.status.is_success:
            return out
        only = None if r.node_names is None else set(r.node_names)
    nodes = [n for n in cycle.snapshot.nodes() if only is None or n.name in only]
    f = p.filter if run_filter and has(p, "filter") else None
    for n in nodes:
        out.filter.append((n.name, Status.success() if f is None else as_status(f(cycle, state, n), "filter")))
    feasible = [n for n, (_, s) in zip(nodes, out.filter) if s.is_success]
    if not feasible:
        return out
    if has(p, "pre_score"):
        s = as_status(p.pre_score(cycle, state, feasible), "pre_score")
        out.pre_score = s
        if not s.is_success:
            return out
    if has(p, "score"):
        raw = []
        for n in feasible:
            v = p.score(cycle, state, n)
            if isinstance(v, Status):
                out.error = v
                return out
            raw.append(int(v))
        scores = list(raw)
        kind = _score_normalization(p, getattr(p, "name", ""))
        if (has(p, "normalize_score") or kind != pb.SCORE_NORMALIZATION_CUSTOM) and not normalize_scores(kind, scores):
            s = as_status(p.normalize_score(cycle, state, scores), "normalize_score")
            if not s.is_success:
                out.error = s
        out.raw_scores = [(n.name, v) for n, v in zip(feasible, raw)]
        out.scores = [(n.name, v) for n, v in zip(feasible, scores)]
    return out
