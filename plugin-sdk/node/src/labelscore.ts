// Plugins that score a node by the value of one of its labels alone (a topology
// domain: rack, zone, GPU island). Such a plugin sets `scoreNodeLabel` and defines
// `labelScores(cycle)`, returning the raw score of each label value (values not
// listed, and nodes without the label, score 0) or a Status (SKIP skips Score for
// the pod); it defines no preScore, score or normalizeScore, and normalises with its
// `scoreNormalization` ('default', 'defaultReverse', or none: raw scores in 0..100).
//
// The SDK serves it as PreScore and Score: a scheduler that knows
// `score_node_label` asks for the table as the cycle starts, while its own Filter
// runs, and scores the feasible nodes itself, with no Score call: one round trip
// that overlaps the scheduler's work, and no per-node work here. `labelScores` reads
// no node list: the nodes that pass Filter are not known yet when the scheduler asks.

import type { Cycle, Plugin } from './plugin.js';
import type { NodeInfo } from './snapshot.js';
import { CallError, Status, toStatus } from './status.js';
import type { LabelScores } from './types.js';

/** A label-scoring plugin's cycle state: this attempt's raw scores by value. */
class LabelTable {
  constructor(readonly scores: ReadonlyMap<string, number>) {}
}

function toTable(r: unknown, name: string): LabelTable {
  const m = new Map<string, number>();
  const entries = r instanceof Map ? [...r.entries()] : Object.entries(r as Record<string, unknown>);
  for (const [k, v] of entries) {
    if (typeof v !== 'number' || !Number.isInteger(v)) {
      throw new CallError(`labelScores of plugin ${JSON.stringify(name)}: the score of ${JSON.stringify(k)} is not an integer`);
    }
    m.set(String(k), v);
  }
  return new LabelTable(m);
}

/** `p` served as preScore and score when it scores by a node label (checked first),
 * else `p` itself. The wrapper inherits every other property from `p`. */
export function labelScored(p: Plugin): Plugin {
  const label: unknown = p?.scoreNodeLabel;
  if (label === undefined) return p;
  const q = JSON.stringify(p.name);
  if (typeof label !== 'string' || label === '') {
    throw new Error(`plugin ${q} declares scoreNodeLabel ${JSON.stringify(label)}: name a node label key`);
  }
  if (typeof p.labelScores !== 'function') {
    throw new Error(`plugin ${q} declares scoreNodeLabel but has no labelScores(cycle)`);
  }
  if (typeof p.preFilter === 'function') {
    throw new Error(
      `plugin ${q} scores by a node label and has preFilter: its label scores are asked for as the cycle starts, before PreFilter, and keep the cycle state; serve preFilter from a plugin of its own`,
    );
  }
  for (const m of ['preScore', 'score', 'normalizeScore'] as const) {
    if (typeof p[m] === 'function') {
      throw new Error(
        `plugin ${q} scores by a node label and also has ${m}: the label scores are its PreScore and Score, drop the others`,
      );
    }
  }
  const w: Plugin = Object.create(p);
  w.preScore = async (cycle: Cycle) => {
    let r: unknown = p.labelScores!(cycle);
    if (r && typeof (r as any).then === 'function') r = await r;
    // A Status (a `code` string; a table's values are integers), or nothing.
    if (r === undefined || r === null || (!(r instanceof Map) && typeof (r as any).code === 'string')) {
      const s = toStatus(r, `labelScores of plugin ${q}`);
      if (!Status.isSuccess(s)) return s;
      r = {};
    }
    cycle.state = toTable(r, p.name);
    return Status.SUCCESS;
  };
  w.score = (cycle: Cycle, node: NodeInfo) => {
    const t = cycle.state;
    if (!(t instanceof LabelTable)) return Status.error(`plugin ${q}: Score before its PreScore in this cycle`);
    const v = node.node.labels[label];
    return v === undefined ? 0 : (t.scores.get(v) ?? 0);
  };
  return w;
}

/** The table a label-scoring plugin's PreScore kept, for its reply (values sorted:
 * the same table is the same message). */
export function labelScoresReply(cycle: Cycle): LabelScores | undefined {
  const t = cycle.state;
  if (!(t instanceof LabelTable)) return undefined;
  const values = [...t.scores.keys()].sort();
  return { values, scores: values.map((v) => t.scores.get(v)!) };
}
