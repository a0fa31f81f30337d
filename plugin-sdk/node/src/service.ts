// The protocol, transport aside (a port of plugin-sdk/rust/src/service/): the replica
// and the cycles, applied from Replicate messages, and one method per extension-point
// call that evaluates it against the replica at the generation it names and returns
// its reply. The methods never throw: a malformed call, an unknown plugin, cycle or
// node, a point the plugin lacks, or an exception in plugin code is an Error status
// in that call's reply. server.ts puts them on gRPC streams.
//
// The shared state is service/state.ts; each group of calls is its own file
// (replicate, queue, filter, score, cycle, waiting), and this class has one line per
// call.

import type { PermitHandle, Plugin } from './plugin.js';
import type {
  CycleRequest,
  FilterBatchRequest,
  FilterBatchResponse,
  FilterRequest,
  FilterResponse,
  NormalizeScoreRequest,
  PermitResponse,
  PodRequest,
  PostFilterRequest,
  PostFilterResponse,
  PreFilterRequest,
  PreFilterResponse,
  PreScoreRequest,
  PreScoreResponse,
  QueueSortResponse,
  ReplicateRequest,
  ScoreRequest,
  ScoreResponse,
  StatusResponse,
} from './types.js';
import { cycleCall, permit, postFilter } from './service/cycle.js';
import { filter, filterBatch, preFilter } from './service/filter.js';
import { preEnqueue, queueSort } from './service/queue.js';
import { apply, handshake } from './service/replicate.js';
import { normalizeScore, preScore, score } from './service/score.js';
import { q, ServiceState, type ServiceOptions } from './service/state.js';
import { makeHandle } from './service/waiting.js';

export {
  CAPABILITY_FILTER_AFTER_PRE_FILTER,
  CAPABILITY_FILTER_BATCH,
  CAPABILITY_PERMIT_AFTER_RESERVE,
  CAPABILITY_REPLICATE_BATCH,
  HandshakeError,
  PROTOCOL_VERSION,
} from './service/replicate.js';
export { MAX_CYCLES, consoleLogger, type Logger, type ServiceOptions } from './service/state.js';

/** A Reserve-like call: a cycle, a node, a status. */
export type CyclePoint = 'Reserve' | 'Unreserve' | 'PreBind' | 'Bind' | 'PostBind';

export class PluginService extends ServiceState {
  constructor(plugins: readonly Plugin[], options: ServiceOptions = {}) {
    super(plugins, options);
    this.handles = plugins.map((p) => makeHandle(this, p.name));
  }

  /** The handle a plugin decides about its waiting pods with. */
  permitHandle(plugin: string): PermitHandle {
    const i = this.byName.get(plugin);
    if (i === undefined) throw new Error(`no plugin named ${q(plugin)}`);
    return this.handles[i];
  }

  /** The handshake reply; throws a HandshakeError (FAILED_PRECONDITION) when the
   * scheduler offers no version this SDK speaks. */
  handshake(req: { protocolVersions?: string[]; capabilities?: string[]; scheduler?: string }): object {
    return handshake(this, req);
  }
  /** Applies one Replicate message; returns the generation the next must have. */
  apply(msg: ReplicateRequest, expect: number | undefined): number {
    return apply(this, msg, expect);
  }
  preEnqueue(req: PodRequest): Promise<StatusResponse> {
    return preEnqueue(this, req);
  }
  queueSort(req: PodRequest): Promise<QueueSortResponse> {
    return queueSort(this, req);
  }
  preFilter(req: PreFilterRequest): Promise<PreFilterResponse> {
    return preFilter(this, req);
  }
  filter(req: FilterRequest): Promise<FilterResponse> {
    return filter(this, req);
  }
  /** The calls of a FilterBatch message, in order; `each` wraps each call (its span). */
  filterBatch(
    req: FilterBatchRequest,
    each?: (call: FilterRequest, run: () => Promise<FilterResponse>) => Promise<FilterResponse>,
  ): Promise<FilterBatchResponse> {
    return filterBatch(this, req, each);
  }
  postFilter(req: PostFilterRequest): Promise<PostFilterResponse> {
    return postFilter(this, req);
  }
  preScore(req: PreScoreRequest): Promise<PreScoreResponse> {
    return preScore(this, req);
  }
  score(req: ScoreRequest): Promise<ScoreResponse> {
    return score(this, req);
  }
  normalizeScore(req: NormalizeScoreRequest): Promise<ScoreResponse> {
    return normalizeScore(this, req);
  }
  cycleCall(req: CycleRequest, point: CyclePoint): Promise<StatusResponse> {
    return cycleCall(this, req, point);
  }
  permit(req: CycleRequest): Promise<PermitResponse> {
    return permit(this, req);
  }
}
