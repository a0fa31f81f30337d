// A test harness for plugins: load the manifests `switchyard simulate` reads and run
// a plugin's extension points for a pending pod the way the sidecar does (preFilter,
// filter on every node, preScore, score, normalizeScore, one cycle state), so a
// plugin's unit tests need no scheduler, no sidecar and no hand-built state.
//
//   const h = Harness.fromManifests(['testdata/cluster.yaml']);
//   const out = await h.run(myPlugin, 'default/trainer-0'); // or 'trainer-0'
//   out.status('node-1').code === 'UNSCHEDULABLE'; out.feasible(); out.best();
//
// The manifests are converted by the scheduler itself (`switchyard snapshot`): the
// binary SWITCHYARD_BIN names, else `switchyard` on PATH (or `{ bin }`).

import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import { labelScored } from './labelscore.js';
import { Cycle, hasNormalize, type Plugin, type PreFilterResult } from './plugin.js';
import { load } from './proto.js';
import { normalizeWith } from './service/score.js';
import { isThenable } from './service/state.js';
import { NodeInfo, Snapshot } from './snapshot.js';
import { CallError, Status, toStatus } from './status.js';
import type { Pod } from './types.js';

/** The harness could not load the cluster or find the pod. */
export class HarnessError extends Error {}

/** What one plugin answered for one pod, point by point. A point the plugin does not
 * implement is undefined; points after a rejection are not run (as in an attempt). */
export class Outcome {
  preFilter?: { status: Status; nodeNames?: string[] };
  /** Each evaluated node's Filter status, in the replica's node order (every node
   * passes when the plugin has no filter or its preFilter skipped). */
  filter: Array<[string, Status]> = [];
  preScore?: Status;
  /** Score's answers for the feasible nodes, before and after normalization. */
  rawScores: Array<[string, number]> = [];
  scores: Array<[string, number]> = [];
  /** The status that ended the attempt in score or normalizeScore. */
  error?: Status;
  /** The plugin's state at the end of the attempt (`cycle.state`). */
  state: unknown;

  status(node: string): Status | undefined {
    return this.filter.find(([n]) => n === node)?.[1];
  }
  feasible(): string[] {
    return this.filter.filter(([, s]) => Status.isSuccess(s)).map(([n]) => n);
  }
  score(node: string): number | undefined {
    return this.scores.find(([n]) => n === node)?.[1];
  }
  /** The feasible node scored highest (the first on a tie); the feasible node itself
   * when only one passed and nothing scores. */
  best(): string | undefined {
    let best: [string, number] | undefined;
    for (const s of this.scores) if (!best || s[1] > best[1]) best = s;
    if (best) return best[0];
    const f = this.feasible();
    return f.length === 1 ? f[0] : undefined;
  }
}

const key = (p: Pod): string => `${p.namespace || 'default'}/${p.name}`;

/** A cluster loaded for tests: the replica the sidecar would hold and the pending
 * pods it would be asked about. */
export class Harness {
  readonly snapshot = new Snapshot();
  private readonly pendingPods: Array<{ cycle: number; pod: Pod; profile: string }> = [];

  /** From the decoded message: its full snapshot, then a pending pod per CycleStart. */
  constructor(req: any) {
    if (req?.$malformed) throw new HarnessError(`not a snapshot message: ${req.$malformed}`);
    if (req?.kind !== 'delta' || !req.delta?.full) {
      throw new HarnessError('not a snapshot message: it does not start with a full snapshot');
    }
    this.snapshot.apply(Math.max(Number(req.generation) || 0, 1), req.delta);
    for (const m of req.more ?? []) {
      if (m.kind === 'cycleStart' && m.cycleStart?.pod) {
        this.pendingPods.push({ cycle: Number(m.cycleStart.cycle), pod: m.cycleStart.pod, profile: m.cycleStart.profile });
      }
    }
  }

  /** Loads manifests (files or directories) through `switchyard snapshot`. */
  static fromManifests(paths: string[], opts: { bin?: string } = {}): Harness {
    const bin = opts.bin || process.env.SWITCHYARD_BIN || 'switchyard';
    const r = spawnSync(bin, ['snapshot', '--output', '-', '--cluster', ...paths], { maxBuffer: 1 << 30 });
    if (r.error) {
      throw new HarnessError(`cannot run ${bin} (set SWITCHYARD_BIN to the switchyard binary, or put it on PATH): ${r.error.message}`);
    }
    if (r.status !== 0) throw new HarnessError(`switchyard snapshot failed: ${r.stderr.toString().trim()}`);
    return Harness.fromBytes(r.stdout);
  }

  /** Loads a message written by `switchyard snapshot --output FILE`. */
  static fromFile(path: string): Harness {
    return Harness.fromBytes(fs.readFileSync(path));
  }

  static fromBytes(buf: Buffer): Harness {
    return new Harness(load().plugin.Replicate.requestDeserialize(buf));
  }

  /** The pending pods, as namespace/name. */
  pending(): string[] {
    return this.pendingPods.map((p) => key(p.pod));
  }

  pod(name: string): Pod | undefined {
    return this.find(name)?.pod;
  }

  private find(name: string) {
    const want = name.includes('/') ? name : `default/${name}`;
    return this.pendingPods.find((p) => key(p.pod) === want);
  }

  /** Runs `plugin`'s extension points for pending pod `name` as the sidecar does in
   * one attempt over every node; its indexes are declared first. */
  async run(plugin: Plugin, name: string): Promise<Outcome> {
    const e = this.find(name);
    if (!e) throw new HarnessError(`no pending pod ${JSON.stringify(name)} (pending: ${this.pending().join(', ')})`);
    for (const i of plugin.indexes ?? []) this.snapshot.declareIndex(i);
    return runCycle(labelScored(plugin), new Cycle(e.cycle, e.pod, e.profile, this.snapshot));
  }
}

async function settle<T>(v: T | Promise<T>): Promise<T> {
  return isThenable(v) ? await v : (v as T);
}

async function runCycle(p: Plugin, cycle: Cycle): Promise<Outcome> {
  const out = new Outcome();
  let only: Set<string> | undefined;
  let filter = typeof p.filter === 'function';
  if (typeof p.preFilter === 'function') {
    const r: any = await settle(p.preFilter(cycle));
    const isResult = r != null && typeof r === 'object' && !('code' in r) && ('status' in r || 'nodeNames' in r);
    const res: PreFilterResult = isResult ? r : { status: toStatus(r, 'PreFilter') };
    const status = toStatus(res.status ?? Status.success(), 'PreFilter');
    out.preFilter = { status, nodeNames: res.nodeNames };
    if (status.code === 'SKIP') filter = false;
    else if (status.code !== 'SUCCESS') return done(out, cycle);
    if (res.nodeNames) only = new Set(res.nodeNames);
  }
  const nodes = Array.from(cycle.snapshot.nodes()).filter((n: NodeInfo) => !only || only.has(n.name));
  for (const n of nodes) {
    out.filter.push([n.name, filter ? toStatus(await settle(p.filter!(cycle, n)), 'Filter') : Status.success()]);
  }
  const feasible = nodes.filter((_, i) => Status.isSuccess(out.filter[i][1]));
  if (feasible.length === 0) return done(out, cycle);
  if (typeof p.preScore === 'function') {
    out.preScore = toStatus(await settle(p.preScore(cycle, feasible)), 'PreScore');
    if (out.preScore.code !== 'SUCCESS') return done(out, cycle);
  }
  if (typeof p.score === 'function') {
    const raw: number[] = [];
    for (const n of feasible) {
      const v: unknown = await settle(p.score(cycle, n));
      if (typeof v !== 'number') {
        out.error = toStatus(v, 'Score');
        return done(out, cycle);
      }
      raw.push(v);
    }
    let scores = [...raw];
    if (hasNormalize(p)) {
      try {
        scores = await normalizeWith(p, cycle, scores, feasible, p.name);
      } catch (err) {
        if (!(err instanceof CallError)) throw err;
        out.error = err.status;
      }
    }
    out.rawScores = feasible.map((n, i) => [n.name, raw[i]]);
    out.scores = feasible.map((n, i) => [n.name, scores[i]]);
  }
  return done(out, cycle);
}

function done(out: Outcome, cycle: Cycle): Outcome {
  out.state = cycle.state;
  return out;
}
