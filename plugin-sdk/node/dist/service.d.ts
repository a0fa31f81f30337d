import { Cycle, type PermitHandle, type Plugin } from './plugin.js';
import { Snapshot } from './snapshot.js';
import type { CycleRequest, FilterBatchRequest, FilterBatchResponse, FilterRequest, FilterResponse, NormalizeScoreRequest, PermitResponse, Pod, PodRequest, PostFilterRequest, PostFilterResponse, PreFilterRequest, PreFilterResponse, PreScoreRequest, QueueSortResponse, ReplicateRequest, ScoreRequest, ScoreResponse, Status as StatusT, StatusResponse } from './types.js';
export declare const PROTOCOL_VERSION = "v1";
export declare const CAPABILITY_FILTER_BATCH = "filter-batch";
export declare const CAPABILITY_REPLICATE_BATCH = "replicate-batch";
/** Cycles held at most (the oldest is dropped past it): a scheduler that never sends
 * CycleEnd cannot grow the sidecar without bound. */
export declare const MAX_CYCLES = 16384;
export interface Logger {
    info(msg: string): void;
    warn(msg: string): void;
    error(msg: string): void;
    debug(msg: string): void;
}
export interface ServiceOptions {
    /** Longest a call waits for the replica to reach its generation (ms, default 5000). */
    generationWaitMs?: number;
    /** Advertised batch limit (0 = none). */
    maxBatchNodes?: number;
    /** Offer the optional capabilities (filter-batch, replicate-batch); default true. */
    capabilities?: boolean;
    logger?: Logger;
}
/** One scheduling attempt the sidecar knows about (CycleStart to CycleEnd). */
declare class Entry {
    readonly id: number;
    readonly pod: Pod;
    readonly profile: string;
    /** Generation of the CycleStart: the cycle's calls name it. */
    readonly generation: number;
    /** Replica generation the cycle's scheduling calls are evaluated at. */
    readonly snapshotGeneration: number;
    /** The plugins' Cycles (their state), by plugin index, made at first use. */
    readonly cycles: (Cycle | undefined)[];
    /** PreScore outcomes by plugin index, for Score calls sent right behind them. */
    readonly preScores: Map<number, StatusT>;
    readonly preScoreWaiters: Set<() => void>;
    ended: boolean;
    constructor(id: number, pod: Pod, profile: string, 
    /** Generation of the CycleStart: the cycle's calls name it. */
    generation: number, 
    /** Replica generation the cycle's scheduling calls are evaluated at. */
    snapshotGeneration: number, plugins: number);
    recordPreScore(idx: number, s: StatusT): StatusT;
}
export declare class PluginService {
    #private;
    readonly plugins: readonly Plugin[];
    readonly replica: Snapshot;
    /** Generation of the last Replicate message applied (any kind). */
    applied: number;
    readonly cycles: Map<number, Entry>;
    /** Pods some plugin answered WAIT for at Permit, by uid. */
    readonly waiting: Map<string, {
        pod: Pod;
        plugins: string[];
    }>;
    /** Writes to the open Permit stream, for decisions about waiting pods. */
    permitSink: ((r: PermitResponse) => void) | null;
    readonly generationWaitMs: number;
    readonly maxBatchNodes: number;
    readonly capabilities: boolean;
    readonly log: Logger;
    constructor(plugins: readonly Plugin[], options?: ServiceOptions);
    /** The handle a plugin decides about its waiting pods with. */
    permitHandle(plugin: string): PermitHandle;
    /** The handshake reply; throws a FAILED_PRECONDITION-worthy error when the
     * scheduler offers no version this SDK speaks. */
    handshake(req: {
        protocolVersions?: string[];
        capabilities?: string[];
        scheduler?: string;
    }): object;
    /** Applies one Replicate message (without its `more`); returns the generation the
     * next must have. `expect` is undefined before the stream's first message. Throws
     * ReplicationError when the stream must end (gap, no full snapshot first, a
     * delta the replica cannot apply). */
    apply(msg: ReplicateRequest, expect: number | undefined): number;
    /** Resolves once the replica has applied `generation`, or rejects with a CallError
     * after the bounded wait. Undefined when it has already (no promise, no tick). */
    reached(generation: number): Promise<void> | undefined;
    /** Fails every pending generation wait (shutdown). */
    close(): void;
    preEnqueue(req: PodRequest): Promise<StatusResponse>;
    queueSort(req: PodRequest): Promise<QueueSortResponse>;
    preFilter(req: PreFilterRequest): Promise<PreFilterResponse>;
    filter(req: FilterRequest): Promise<FilterResponse>;
    /** The calls of a FilterBatch message, each answered as it would be alone on the
     * Filter stream, in order. `each` wraps each call (its span). */
    filterBatch(req: FilterBatchRequest, each?: (call: FilterRequest, run: () => Promise<FilterResponse>) => Promise<FilterResponse>): Promise<FilterBatchResponse>;
    score(req: ScoreRequest): Promise<ScoreResponse>;
    preScore(req: PreScoreRequest): Promise<StatusResponse>;
    normalizeScore(req: NormalizeScoreRequest): Promise<ScoreResponse>;
    postFilter(req: PostFilterRequest): Promise<PostFilterResponse>;
    /** Reserve, Unreserve, PreBind, Bind, PostBind: a cycle, a node, a status. */
    cycleCall(req: CycleRequest, point: 'Reserve' | 'Unreserve' | 'PreBind' | 'Bind' | 'PostBind'): Promise<StatusResponse>;
    permit(req: CycleRequest): Promise<PermitResponse>;
}
export declare class HandshakeError extends Error {
}
export declare function consoleLogger(prefix?: string): Logger;
export {};
