#!/usr/bin/env python3
"""Runs kube-scheduler's scheduler_perf suite (benchmarks/upstream/, unchanged) through
`switchyard simulate` and prints one row per workload: measured pods/s, upstream's CI
threshold, their ratio, p99 attempt latency and peak memory; then the workloads that
were refused and why. Called by scripts/bench.sh, which builds the binary; see there
for the options. Standard library only.
"""

import argparse
import json
import math
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SUITE = ROOT / "benchmarks" / "upstream" / "scheduler_perf"


def configs(areas):
    """performance-config*.yaml files under the chosen areas (all when none)."""
    found = sorted(SUITE.rglob("performance-config*.yaml"))
    if not areas:
        return found
    chosen = []
    for area in areas:
        hits = [f for f in found if f.relative_to(SUITE).as_posix().startswith(area.rstrip("/") + "/")]
        if not hits:
            known = sorted({f.relative_to(SUITE).parts[0] for f in found})
            sys.exit(f"bench: no area {area!r} under {SUITE}; areas: {', '.join(known)}")
        chosen += [f for f in hits if f not in chosen]
    return chosen


def commits():
    """Config path (relative to scheduler_perf/) -> the upstream commit it was read at."""
    text = (SUITE.parent / "README.md").read_text()
    return dict(re.findall(r"`([\w/]+/performance-config\.yaml)` ([0-9a-f]{40})", text))


def list_workloads(binary, config):
    out = subprocess.run(
        [binary, "simulate", "--workload", str(config), "--list-workloads", "--output-format", "json"],
        capture_output=True, text=True,
    )
    if out.returncode != 0:
        sys.exit(f"bench: cannot list {config}: {out.stderr.strip()}")
    return json.loads(out.stdout)


def refusal_kind(reason):
    """A short, stable name for why a workload was refused (for the summary)."""
    for key, kind in [
        ("Dynamic Resource Allocation", "Dynamic Resource Allocation"),
        ("Workload API", "the Workload API (pod groups)"),
        ("InPlacePodVerticalScalingSchedulerPreemption", "preemption for deferred resizes"),
        ("cannot read", "a template the copy lacks"),
    ]:
        if key in reason:
            return kind
    return reason


def run(binary, config, name, timeout):
    cmd = [binary, "simulate", "--workload", str(config), "--workload-name", name,
           "--no-progress", "--output-format", "json", "--timeout", str(timeout)]
    start = time.monotonic()
    out = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.monotonic() - start
    row = {"workload": name, "config": config.relative_to(SUITE).as_posix(), "wall_seconds": round(wall, 1),
           "exit": out.returncode}
    try:
        report = json.loads(out.stdout)
    except json.JSONDecodeError:
        row["error"] = (out.stderr.strip().splitlines() or ["no report"])[-1]
        return row
    measured = report.get("measured") or {}
    summary = report.get("summary") or {}
    row.update({
        "pods_per_second": measured.get("pods_per_second"),
        "measured_pods": measured.get("pods"),
        "threshold": measured.get("upstream_threshold"),
        "p99_attempt_ms": (summary.get("attempt_latency_ms") or {}).get("p99"),
        "peak_rss_mib": summary.get("peak_rss_mib"),
        "invariants_ok": (report.get("invariants") or {}).get("ok"),
        "unschedulable": summary.get("unschedulable"),
    })
    if out.returncode != 0:
        row["error"] = (out.stderr.strip().splitlines() or [f"exit {out.returncode}"])[-1]
    return row


def fmt(v, spec):
    return "-" if v is None else format(v, spec)


def main():
    ap = argparse.ArgumentParser(prog="scripts/bench.sh", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("areas", nargs="*", help="areas (folders of scheduler_perf/, e.g. misc affinity); default: all")
    ap.add_argument("--all", action="store_true",
                    help="every workload that loads, not only those with an upstream threshold")
    ap.add_argument("--match", metavar="REGEX", help="only workloads whose Case/Workload name matches")
    ap.add_argument("--timeout", type=int, default=1800, metavar="SECONDS", help="per workload (default 1800)")
    ap.add_argument("--json", metavar="FILE", help="also write every row as JSON to FILE")
    ap.add_argument("--bin", required=True, help="the switchyard binary")
    args = ap.parse_args()

    pattern = re.compile(args.match) if args.match else None
    sha = commits()
    rows, refused = [], []
    plan = []
    for config in configs(args.areas):
        for w in list_workloads(args.bin, config):
            if pattern and not pattern.search(w["name"]):
                continue
            if w.get("refused"):
                refused.append((w["name"], refusal_kind(w["refused"]), w.get("threshold")))
            elif args.all or w.get("threshold") is not None:
                plan.append((config, w["name"]))

    head = f"| {'area/Case/Workload':<80} | {'pods/s':>9} | {'threshold':>9} | {'ratio':>7} | {'p99 attempt':>11} | {'peak MiB':>8} | invariants"
    print(f"upstream scheduler_perf suite: {len(plan)} workloads to run, {len(refused)} refused "
          f"({SUITE.relative_to(ROOT)}; commits in {(SUITE.parent / 'README.md').relative_to(ROOT)})", flush=True)
    print(head)
    print("|" + "|".join("-" * n for n in [82, 11, 11, 9, 13, 10, 12]))
    for i, (config, name) in enumerate(plan, 1):
        print(f"  [{i}/{len(plan)}] {name} ...", file=sys.stderr, flush=True)
        row = run(args.bin, config, name, args.timeout)
        row["commit"] = sha.get(row["config"])
        rows.append(row)
        rate, thr = row.get("pods_per_second"), row.get("threshold")
        ratio = rate / thr if rate and thr else None
        row["ratio"] = round(ratio, 2) if ratio else None
        inv = "error: " + row["error"] if row.get("error") else ("ok" if row.get("invariants_ok") else "FAILED")
        p99 = row.get("p99_attempt_ms")
        label = row["config"].rsplit("/", 1)[0] + "/" + name
        print(f"| {label:<80} | {fmt(rate, '9.0f')} | {fmt(thr, '9.0f')} | {fmt(ratio, '6.1f') + ('×' if ratio else ''):>7} "
              f"| {(fmt(p99, '.2f') + ' ms') if p99 is not None else '-':>11} | {fmt(row.get('peak_rss_mib'), '8.0f')} | {inv}",
              flush=True)

    ratios = [r["ratio"] for r in rows if r.get("ratio")]
    if ratios:
        geo = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
        worst = min(rows, key=lambda r: r.get("ratio") or math.inf)
        below = [r["workload"] for r in rows if r.get("ratio") and r["ratio"] < 10]
        print(f"\n{len(ratios)} workloads with a threshold: geometric mean {geo:.1f}× upstream's threshold; "
              f"lowest {worst['ratio']:.1f}× ({worst['workload']}); below 10×: {len(below)}"
              + (f" ({', '.join(below)})" if below else ""))
    failed = [r for r in rows if r.get("error") or not r.get("invariants_ok")]
    if refused:
        kinds = {}
        for name, kind, _ in refused:
            kinds.setdefault(kind, []).append(name)
        print(f"\nRefused ({len(refused)}; `switchyard simulate --workload FILE --list-workloads` says why for each):")
        for kind, names in sorted(kinds.items(), key=lambda kv: -len(kv[1])):
            with_thr = sum(1 for n, k, t in refused if k == kind and t is not None)
            print(f"  {len(names):4} {kind} ({with_thr} with a threshold)")
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "refused": [
            {"workload": n, "why": k, "threshold": t} for n, k, t in refused]}, indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
