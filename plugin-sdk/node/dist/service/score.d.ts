import { type Cycle, type Plugin } from '../plugin.js';
import type { NodeInfo } from '../snapshot.js';
import type { FilterRequest, NodeDelta, NodeStatus, NormalizeScoreRequest, PreScoreRequest, PreScoreResponse, ScoreAhead, ScoreRequest, ScoreResponse } from '../types.js';
import { type ServiceState } from './state.js';
/** PreScore (on a fork), Score and NormalizeScore over the first `scoreFirst`
 * passing items of a Filter batch; null when the plugin does not score or an item
 * has a delta. */
export declare function scoreAhead(st: ServiceState, req: FilterRequest, p: Plugin, cycle: Cycle, deltas: (NodeDelta | undefined)[] | undefined, failures: NodeStatus[]): Promise<ScoreAhead | null>;
/** The declared standard normalisation, else the plugin's own normalizeScore. */
export declare function normalizeWith(p: Plugin, cycle: Cycle, scores: number[], nodes: NodeInfo[], name: string): Promise<number[]>;
export declare function score(st: ServiceState, req: ScoreRequest): Promise<ScoreResponse>;
export declare function preScore(st: ServiceState, req: PreScoreRequest): Promise<PreScoreResponse>;
export declare function normalizeScore(st: ServiceState, req: NormalizeScoreRequest): Promise<ScoreResponse>;
