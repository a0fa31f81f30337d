import type { PermitHandle, Plugin } from './plugin.js';
import type { CycleRequest, FilterBatchRequest, FilterBatchResponse, FilterRequest, FilterResponse, NormalizeScoreRequest, PermitResponse, PodRequest, PostFilterRequest, PostFilterResponse, PreFilterRequest, PreFilterResponse, PreScoreRequest, PreScoreResponse, QueueSortResponse, ReplicateRequest, ScoreRequest, ScoreResponse, StatusResponse } from './types.js';
import { ServiceState, type ServiceOptions } from './service/state.js';
export { CAPABILITY_FILTER_AFTER_PRE_FILTER, CAPABILITY_FILTER_BATCH, CAPABILITY_PERMIT_AFTER_RESERVE, CAPABILITY_REPLICATE_BATCH, HandshakeError, PROTOCOL_VERSION, } from './service/replicate.js';
export { MAX_CYCLES, consoleLogger, type Logger, type ServiceOptions } from './service/state.js';
/** A Reserve-like call: a cycle, a node, a status. */
export type CyclePoint = 'Reserve' | 'Unreserve' | 'PreBind' | 'Bind' | 'PostBind';
export declare class PluginService extends ServiceState {
    constructor(plugins: readonly Plugin[], options?: ServiceOptions);
    /** The handle a plugin decides about its waiting pods with. */
    permitHandle(plugin: string): PermitHandle;
    /** The handshake reply; throws a HandshakeError (FAILED_PRECONDITION) when the
     * scheduler offers no version this SDK speaks. */
    handshake(req: {
        protocolVersions?: string[];
        capabilities?: string[];
        scheduler?: string;
    }): object;
    /** Applies one Replicate message; returns the generation the next must have. */
    apply(msg: ReplicateRequest, expect: number | undefined): number;
    preEnqueue(req: PodRequest): Promise<StatusResponse>;
    queueSort(req: PodRequest): Promise<QueueSortResponse>;
    preFilter(req: PreFilterRequest): Promise<PreFilterResponse>;
    filter(req: FilterRequest): Promise<FilterResponse>;
    /** The calls of a FilterBatch message, in order; `each` wraps each call (its span). */
    filterBatch(req: FilterBatchRequest, each?: (call: FilterRequest, run: () => Promise<FilterResponse>) => Promise<FilterResponse>): Promise<FilterBatchResponse>;
    postFilter(req: PostFilterRequest): Promise<PostFilterResponse>;
    preScore(req: PreScoreRequest): Promise<PreScoreResponse>;
    score(req: ScoreRequest): Promise<ScoreResponse>;
    normalizeScore(req: NormalizeScoreRequest): Promise<ScoreResponse>;
    cycleCall(req: CycleRequest, point: CyclePoint): Promise<StatusResponse>;
    permit(req: CycleRequest): Promise<PermitResponse>;
}
