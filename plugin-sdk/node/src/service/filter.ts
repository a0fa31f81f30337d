// PreFilter and Filter: one call per pod over a batch of nodes, dry-run deltas on
// forks of the plugin's state, failures grouped by status, and FilterBatch (several
// pods' Filter calls in one message).

import { answersAtNamedGeneration, hasPreFilterExtensions, type Cycle, type Plugin } from '../plugin.js';
import type { NodeInfo } from '../snapshot.js';
import { CallError, Status, isSuccessValue, toStatus } from '../status.js';
import type {
  FailureGroup,
  FilterBatchRequest,
  FilterBatchResponse,
  FilterRequest,
  FilterResponse,
  NodeDelta,
  NodeStatus,
  Pod,
  PreFilterRequest,
  PreFilterResponse,
  ScoreAhead,
  Status as StatusT,
} from '../types.js';
import { scoreAhead } from './score.js';
import { isThenable, malformed, pointOutcome, q, type Entry, type ServiceState } from './state.js';

/** Groups a Filter reply's failures by status (FilterRequest.groupFailures): each
 * distinct status (code and reasons) once, with the indices of the items failing with
 * it, in item order; groups in the order of their first item. A status may be the
 * plugin's own object (shared by several items, kept by the plugin), so each group
 * gets a copy and the plugin's object is never touched. */
export function groupFailures(failures: NodeStatus[]): FailureGroup[] {
  const groups: FailureGroup[] = [];
  const byStatus = new Map<string, FailureGroup>();
  for (const f of failures) {
    const { code, reasons } = f.status;
    const key = JSON.stringify([code, reasons]);
    let g = byStatus.get(key);
    if (g === undefined) {
      g = { status: { code, reasons: [...reasons] }, indices: [] };
      byStatus.set(key, g);
      groups.push(g);
    }
    g.indices.push(f.index);
  }
  return groups;
}

export async function preFilter(st: ServiceState, req: PreFilterRequest): Promise<PreFilterResponse> {
  const out: PreFilterResponse = {
    requestId: req.requestId,
    status: Status.SUCCESS,
    generation: req.generation,
    hasNodeNames: false,
    nodeNames: [],
  };
  let entry: [Entry, number] | undefined;
  try {
    malformed(req);
    const [idx, p] = st.plugin(req.plugin);
    const local = answersAtNamedGeneration(p);
    const e = await st.cycle(req.cycle, req.generation, local);
    entry = [e, idx];
    if (typeof p.preFilter !== 'function') throw new CallError(`plugin ${q(req.plugin)} has no PreFilter`);
    st.replicaAt(e, local);
    const version = st.replica.version;
    let r: unknown = p.preFilter(st.cycleOf(e, idx));
    if (isThenable(r)) {
      r = await r;
      st.unmoved(e, local, version);
    }
    const what = `PreFilter of plugin ${q(req.plugin)}`;
    if (r !== null && typeof r === 'object' && !('code' in r)) {
      const res = r as { status?: unknown; nodeNames?: unknown };
      out.status = toStatus(res.status, what);
      if (res.nodeNames !== undefined && res.nodeNames !== null) {
        if (!Array.isArray(res.nodeNames) || !res.nodeNames.every((n) => typeof n === 'string')) {
          throw new CallError(`${what} returned nodeNames that are not an array of strings`);
        }
        out.hasNodeNames = true;
        out.nodeNames = res.nodeNames;
      }
    } else {
      out.status = toStatus(r, what);
    }
  } catch (e) {
    out.status = st.failure('PreFilter', req.plugin, e);
    out.hasNodeNames = false;
    out.nodeNames = [];
  }
  // A Filter sent right behind (afterPreFilter) waits for this outcome.
  if (entry) entry[0].recordPreFilter(entry[1], out.status);
  return out;
}

export async function filter(st: ServiceState, req: FilterRequest): Promise<FilterResponse> {
  const out: FilterResponse = {
    requestId: req.requestId,
    generation: req.generation,
    evaluated: 0,
    failures: [],
    error: null,
    score: null,
    failureGroups: [],
  };
  try {
    malformed(req);
    const [failures, ahead] = await filterNodes(st, req);
    out.evaluated = req.nodes.length;
    if (req.groupFailures) out.failureGroups = groupFailures(failures);
    else out.failures = failures;
    out.score = ahead;
  } catch (e) {
    out.error = st.failure('Filter', req.plugin, e);
  }
  return out;
}

/** The calls of a FilterBatch message, each answered as it would be alone on the
 * Filter stream, in order. `each` wraps each call (its span). */
export async function filterBatch(st: ServiceState, 
  req: FilterBatchRequest,
  each: (call: FilterRequest, run: () => Promise<FilterResponse>) => Promise<FilterResponse> = (_c, run) => run(),
): Promise<FilterBatchResponse> {
  const calls = !req.$malformed && Array.isArray(req.calls) ? req.calls : [];
  const replies: FilterResponse[] = [];
  // One bounded wait for the latest generation the calls name: a replica that
  // never gets there fails them all at once, not one wait after another.
  let missed: StatusT | null = req.$malformed ? Status.error(`malformed request: ${req.$malformed}`) : null;
  let latest = 0;
  for (const c of calls) latest = Math.max(latest, c.generation);
  try {
    const w = st.reached(latest);
    if (w) await w;
  } catch (e) {
    missed = st.failure('FilterBatch', '', e);
  }
  for (const call of calls) {
    if (missed) {
      replies.push({
        requestId: call.requestId,
        generation: call.generation,
        evaluated: 0,
        failures: [],
        error: missed,
        score: null,
        failureGroups: [],
      });
    } else {
      replies.push(await each(call, () => filter(st, call)));
    }
  }
  return { requestId: req.requestId, replies };
}

async function filterNodes(st: ServiceState, req: FilterRequest): Promise<[NodeStatus[], ScoreAhead | null]> {
  const [idx, p] = st.plugin(req.plugin);
  const local = answersAtNamedGeneration(p);
  const e = await st.cycle(req.cycle, req.generation, local);
  if (typeof p.filter !== 'function') throw new CallError(`plugin ${q(req.plugin)} has no Filter`);
  if (req.afterPreFilter) {
    const pf = await pointOutcome(st, e, e.preFilters, idx, 'Filter named a PreFilter');
    if (pf.code === 'ERROR') throw CallError.of(pf);
    if (pf.code !== 'SUCCESS') throw new CallError(`Filter sent behind a PreFilter that returned ${pf.code}`);
  }
  const replica = st.replicaAt(e, local);
  const version = replica.version;
  const ids = req.nodes;
  const n = ids.length;
  for (let i = 0; i < n; i++) {
    if (replica.node(ids[i]) === undefined) throw new CallError(`unknown node id ${ids[i]}`);
  }
  let deltas: (NodeDelta | undefined)[] | undefined;
  if (req.deltas.length > 0) {
    deltas = new Array(n);
    for (const d of req.deltas) {
      if (!(d.index < n)) throw new CallError(`delta for item ${d.index} of a batch of ${n}`);
      deltas[d.index] = d;
    }
  }
  const cycle = st.cycleOf(e, idx);
  const failures: NodeStatus[] = [];
  let awaited = false;
  const what = `Filter of plugin ${q(req.plugin)}`;
  // The hot loop: nothing is allocated per node but the failures of the reply.
  for (let i = 0; i < n; i++) {
    const ni = replica.node(ids[i])!;
    const d = deltas === undefined ? undefined : deltas[i];
    let r: unknown = d === undefined ? p.filter(cycle, ni) : filterWithDelta(st, p, cycle, ni, d);
    if (isThenable(r)) {
      r = await r;
      awaited = true;
    }
    if (!isSuccessValue(r)) failures.push({ index: i, status: toStatus(r, what) });
  }
  if (awaited) st.unmoved(e, local, version);
  let ahead: ScoreAhead | null = null;
  if (req.scoreFirst > 0) ahead = await scoreAhead(st, req, p, cycle, deltas, failures);
  return [failures, ahead];
}

/** Filter on a what-if copy of the node: pods removed and added, the plugin's
 * state forked and updated by its removePod/addPod (in that order, as upstream's
 * dry run). A problem with the delta is that item's Error status. */
async function filterWithDelta(st: ServiceState, p: Plugin, base: Cycle, node: NodeInfo, d: NodeDelta): Promise<unknown> {
  const ni = node.clone();
  const ext = hasPreFilterExtensions(p);
  const fork = base.fork(p.cloneState?.bind(p));
  for (const uid of d.removePods) {
    const pod = ni.removePod(uid);
    if (pod === undefined) return Status.error(`delta removes pod ${uid}, which is not on node ${node.name}`);
    if (ext && typeof p.removePod === 'function') {
      let s: unknown = p.removePod(fork, pod, ni);
      if (isThenable(s)) s = await s;
      if (!isSuccessValue(s)) return Status.error(`RemovePod: ${Status.message(toStatus(s, 'RemovePod'))}`);
    }
  }
  const adds: Pod[] = [];
  for (const uid of d.addPods) {
    const pod = st.replica.pod(uid);
    if (pod === undefined) return Status.error(`delta adds pod ${uid}, which the replica does not hold`);
    adds.push(pod);
  }
  for (const pod of d.addPodObjects) adds.push(pod);
  for (const added of adds) {
    const pod = { ...added, nodeName: ni.name };
    ni.pods.push(pod);
    if (ext && typeof p.addPod === 'function') {
      let s: unknown = p.addPod(fork, pod, ni);
      if (isThenable(s)) s = await s;
      if (!isSuccessValue(s)) return Status.error(`AddPod: ${Status.message(toStatus(s, 'AddPod'))}`);
    }
  }
  return p.filter!(fork, ni);
}
