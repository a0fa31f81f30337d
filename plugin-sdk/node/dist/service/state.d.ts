import { Cycle, type PermitHandle, type Plugin } from '../plugin.js';
import { NodeInfo, Snapshot } from '../snapshot.js';
import type { PermitResponse, Pod, Status as StatusT } from '../types.js';
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
export declare class Entry {
    readonly id: number;
    readonly pod: Pod;
    readonly profile: string;
    /** Generation of the CycleStart: the cycle's calls name it. */
    readonly generation: number;
    /** Replica generation the cycle's scheduling calls are evaluated at. */
    readonly snapshotGeneration: number;
    /** The plugins' Cycles (their state), by plugin index, made at first use. */
    readonly cycles: (Cycle | undefined)[];
    /** PreScore and PreFilter outcomes by plugin index, for Score and Filter calls
     * sent right behind them; the waiters are called at every outcome. */
    readonly preScores: Map<number, StatusT>;
    readonly preFilters: Map<number, StatusT>;
    /** Reserve outcomes, for Permit calls sent right behind them. */
    readonly reserves: Map<number, StatusT>;
    readonly preScoreWaiters: Set<() => void>;
    ended: boolean;
    constructor(id: number, pod: Pod, profile: string, 
    /** Generation of the CycleStart: the cycle's calls name it. */
    generation: number, 
    /** Replica generation the cycle's scheduling calls are evaluated at. */
    snapshotGeneration: number, plugins: number);
    recordPreScore(idx: number, s: StatusT): StatusT;
    recordPreFilter(idx: number, s: StatusT): StatusT;
    recordReserve(idx: number, s: StatusT): StatusT;
    private record;
}
/** Waits (up to the generation wait) until `outcomes` holds plugin `idx`'s: the
 * PreScore or PreFilter a call was sent right behind (`what` names it). */
export declare function pointOutcome(st: ServiceState, e: Entry, outcomes: Map<number, StatusT>, idx: number, what: string): Promise<StatusT>;
export declare function isThenable(v: unknown): v is PromiseLike<unknown>;
export declare const q: (s: string) => string;
/** Throws the CallError of a request the transport could not decode. */
export declare function malformed(req: {
    $malformed?: string;
}): void;
/** What the calls share; [`PluginService`](../service.ts) puts one method per call on it. */
export declare class ServiceState {
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
    protected readonly byName: Map<string, number>;
    /** The Permit handles, by plugin index (made by the service). */
    handles: PermitHandle[];
    constructor(plugins: readonly Plugin[], options?: ServiceOptions);
    /** Ends a cycle: its state is dropped, and a Score waiting for its PreScore fails. */
    endCycle(e: Entry): void;
    endCycles(): void;
    /** Resolves the generation waits the last applied message satisfies. */
    wake(): void;
    /** Resolves once the replica has applied `generation`, or rejects with a CallError
     * after the bounded wait. Undefined when it has already (no promise, no tick). */
    reached(generation: number): Promise<void> | undefined;
    /** Fails every pending generation wait (shutdown). */
    close(): void;
    /** The plugin a call names, with its index. */
    plugin(name: string): [number, Plugin];
    /** The cycle a call names, once the replica has reached its generation. A
     * node-local plugin's call (`relaxed`) may name a generation after the cycle's
     * start. */
    cycle(cycle: number, generation: number, relaxed: boolean): Promise<Entry>;
    /** For a scheduling-cycle call: the replica must still be at the cycle's
     * generation, never a later one, unless the plugin is node-local. */
    replicaAt(e: Entry, relaxed: boolean): Snapshot;
    /** After a plugin method returned a Promise the replica may have changed under the
     * call: a call that must be evaluated at its cycle's generation fails then. */
    unmoved(e: Entry, relaxed: boolean, version: number): void;
    cycleOf(e: Entry, idx: number): Cycle;
    nodes(ids: readonly number[]): NodeInfo[];
    /** The status a failed call answers: a CallError's own, or an Error status for an
     * exception in plugin code (logged, rate-limited). */
    failure(point: string, plugin: string, e: unknown): StatusT;
    logThrow(point: string, plugin: string, e: unknown): void;
}
export declare function consoleLogger(prefix?: string): Logger;
