// PreScore, Score and NormalizeScore, and the score-ahead a Filter call may ask for
// (its first passing nodes scored in the same exchange).

import { labelScoresReply } from '../labelscore.js';
import { answersAtNamedGeneration, hasNormalize, normalizeScores, scoreNormalizationOf, type Cycle, type Plugin } from '../plugin.js';
import type { NodeInfo } from '../snapshot.js';
import { CallError, Status, describe, toStatus } from '../status.js';
import type {
  FilterRequest,
  NodeDelta,
  NodeStatus,
  NormalizeScoreRequest,
  LabelScores,
  PreScoreRequest,
  PreScoreResponse,
  ScoreAhead,
  ScoreRequest,
  ScoreResponse,
  Status as StatusT,
  StatusResponse,
} from '../types.js';
import { isThenable, malformed, pointOutcome, q, type Entry, type ServiceState } from './state.js';

/** PreScore (on a fork), Score and NormalizeScore over the first `scoreFirst`
 * passing items of a Filter batch; null when the plugin does not score or an item
 * has a delta. */
export async function scoreAhead(st: ServiceState, 
  req: FilterRequest,
  p: Plugin,
  cycle: Cycle,
  deltas: (NodeDelta | undefined)[] | undefined,
  failures: NodeStatus[],
): Promise<ScoreAhead | null> {
  if (typeof p.score !== 'function') return null;
  const nodes: NodeInfo[] = [];
  let f = 0;
  for (let i = 0; i < req.nodes.length && nodes.length < req.scoreFirst; i++) {
    if (f < failures.length && failures[f].index === i) {
      f++;
      continue;
    }
    if (deltas !== undefined && deltas[i] !== undefined) return null;
    nodes.push(st.replica.node(req.nodes[i])!);
  }
  try {
    let c = cycle;
    if (req.preScore && typeof p.preScore === 'function') {
      c = cycle.fork(p.cloneState?.bind(p));
      let s: unknown = p.preScore(c, nodes);
      if (isThenable(s)) s = await s;
      const st = toStatus(s, `PreScore of plugin ${q(req.plugin)}`);
      if (st.code !== 'SUCCESS') return { status: st, scores: [], normalized: false };
    }
    // rawScores: the scheduler keeps raw scores to reuse for alike pods and
    // normalises them itself.
    const [scores, normalized] = await scoreNodes(st, p, c, nodes, !req.rawScores, req.plugin);
    return { status: Status.SUCCESS, scores, normalized };
  } catch (e) {
    return { status: st.failure('Score', req.plugin, e), scores: [], normalized: false };
  }
}

/** Score over `nodes`, then NormalizeScore when asked; the flag says whether the
 * scores are final: true without a NormalizeScore (raw scores are final), false
 * for raw scores the scheduler must still normalise. */
async function scoreNodes(st: ServiceState, 
  p: Plugin,
  cycle: Cycle,
  nodes: NodeInfo[],
  normalize: boolean,
  name: string,
): Promise<[number[], boolean]> {
  const scores = new Array<number>(nodes.length);
  for (let i = 0; i < nodes.length; i++) {
    let v: unknown = p.score!(cycle, nodes[i]);
    if (isThenable(v)) v = await v;
    if (typeof v !== 'number' || !Number.isSafeInteger(v)) {
      if (v !== null && typeof v === 'object' && 'code' in v) {
        throw CallError.of(toStatus(v, `Score of plugin ${q(name)}`));
      }
      throw new CallError(
        `Score of plugin ${q(name)} returned ${describe(v)} for node ${nodes[i].name}: a score is an integer`,
      );
    }
    scores[i] = v;
  }
  if (!hasNormalize(p)) return [scores, true];
  if (!normalize) return [scores, false];
  return [await normalizeWith(p, cycle, scores, nodes, name), true];
}

/** The declared standard normalisation, else the plugin's own normalizeScore. */
export async function normalizeWith(p: Plugin, cycle: Cycle, scores: number[], nodes: NodeInfo[], name: string): Promise<number[]> {
  if (normalizeScores(scoreNormalizationOf(p), scores)) return scores;
  let r: unknown = p.normalizeScore!(cycle, scores, nodes);
  if (isThenable(r)) r = await r;
  let out = scores;
  if (Array.isArray(r)) {
    if (r.length !== scores.length) {
      throw new CallError(`NormalizeScore of plugin ${q(name)} returned ${r.length} scores for ${scores.length}`);
    }
    out = r;
  } else {
    const s = toStatus(r, `NormalizeScore of plugin ${q(name)}`);
    if (s.code !== 'SUCCESS') throw CallError.of(s);
  }
  for (const v of out) {
    if (typeof v !== 'number' || !Number.isSafeInteger(v)) {
      throw new CallError(`NormalizeScore of plugin ${q(name)} left ${describe(v)}: a score is an integer`);
    }
  }
  return out;
}

export async function score(st: ServiceState, req: ScoreRequest): Promise<ScoreResponse> {
  const out: ScoreResponse = {
    requestId: req.requestId,
    status: Status.SUCCESS,
    generation: req.generation,
    scores: [],
    normalized: false,
  };
  try {
    malformed(req);
    const [idx, p] = st.plugin(req.plugin);
    const local = answersAtNamedGeneration(p);
    const e = await st.cycle(req.cycle, req.generation, local);
    if (typeof p.score !== 'function') throw new CallError(`plugin ${q(req.plugin)} has no Score`);
    if (req.afterPreScore) {
      const s = await preScoreOutcome(st, e, idx);
      if (s.code !== 'SUCCESS') throw CallError.of(s);
    }
    st.replicaAt(e, local);
    const version = st.replica.version;
    const nodes = st.nodes(req.nodes);
    const [scores, normalized] = await scoreNodes(st, p, st.cycleOf(e, idx), nodes, req.normalize, req.plugin);
    st.unmoved(e, local, version);
    out.scores = scores;
    out.normalized = normalized;
  } catch (e) {
    out.status = st.failure('Score', req.plugin, e);
  }
  return out;
}

/** Waits (bounded) for this cycle's PreScore of plugin `idx`, sent just before. */
function preScoreOutcome(st: ServiceState, e: Entry, idx: number): Promise<StatusT> {
  return pointOutcome(st, e, e.preScores, idx, 'Score named a PreScore');
}

export async function preScore(st: ServiceState, req: PreScoreRequest): Promise<PreScoreResponse> {
  let status: StatusT;
  let labelScores: LabelScores | undefined;
  try {
    malformed(req);
    const [idx, p] = st.plugin(req.plugin);
    const local = answersAtNamedGeneration(p);
    const e = await st.cycle(req.cycle, req.generation, local);
    try {
      if (typeof p.preScore !== 'function') throw new CallError(`plugin ${q(req.plugin)} has no PreScore`);
      st.replicaAt(e, local);
      const version = st.replica.version;
      const nodes = st.nodes(req.nodes);
      const cycle = st.cycleOf(e, idx);
      let r: unknown = p.preScore(cycle, nodes);
      if (isThenable(r)) {
        r = await r;
        st.unmoved(e, local, version);
      }
      status = e.recordPreScore(idx, toStatus(r, `PreScore of plugin ${q(req.plugin)}`));
      if (Status.isSuccess(status)) labelScores = labelScoresReply(cycle);
    } catch (err) {
      status = e.recordPreScore(idx, st.failure('PreScore', req.plugin, err));
    }
  } catch (e) {
    status = st.failure('PreScore', req.plugin, e);
  }
  return { requestId: req.requestId, status, generation: req.generation, labelScores };
}

export async function normalizeScore(st: ServiceState, req: NormalizeScoreRequest): Promise<ScoreResponse> {
  const out: ScoreResponse = {
    requestId: req.requestId,
    status: Status.SUCCESS,
    generation: req.generation,
    scores: [],
    normalized: false,
  };
  try {
    malformed(req);
    const [idx, p] = st.plugin(req.plugin);
    const local = answersAtNamedGeneration(p);
    const e = await st.cycle(req.cycle, req.generation, local);
    if (!hasNormalize(p)) {
      throw new CallError(`plugin ${q(req.plugin)} has no NormalizeScore`);
    }
    st.replicaAt(e, local);
    if (req.scores.length !== req.nodes.length) {
      throw new CallError(`NormalizeScore with ${req.scores.length} scores for ${req.nodes.length} nodes`);
    }
    const nodes = st.nodes(req.nodes);
    out.scores = await normalizeWith(p, st.cycleOf(e, idx), req.scores.slice(), nodes, req.plugin);
    out.normalized = true;
  } catch (e) {
    out.status = st.failure('NormalizeScore', req.plugin, e);
    out.scores = [];
  }
  return out;
}
