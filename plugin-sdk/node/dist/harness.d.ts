import { type Plugin } from './plugin.js';
import { Snapshot } from './snapshot.js';
import { Status } from './status.js';
import type { Pod } from './types.js';
/** The harness could not load the cluster or find the pod. */
export declare class HarnessError extends Error {
}
/** What one plugin answered for one pod, point by point. A point the plugin does not
 * implement is undefined; points after a rejection are not run (as in an attempt). */
export declare class Outcome {
    preFilter?: {
        status: Status;
        nodeNames?: string[];
    };
    /** Each evaluated node's Filter status, in the replica's node order (every node
     * passes when the plugin has no filter or its preFilter skipped). */
    filter: Array<[string, Status]>;
    preScore?: Status;
    /** Score's answers for the feasible nodes, before and after normalization. */
    rawScores: Array<[string, number]>;
    scores: Array<[string, number]>;
    /** The status that ended the attempt in score or normalizeScore. */
    error?: Status;
    /** The plugin's state at the end of the attempt (`cycle.state`). */
    state: unknown;
    status(node: string): Status | undefined;
    feasible(): string[];
    score(node: string): number | undefined;
    /** The feasible node scored highest (the first on a tie); the feasible node itself
     * when only one passed and nothing scores. */
    best(): string | undefined;
}
/** A cluster loaded for tests: the replica the sidecar would hold and the pending
 * pods it would be asked about. */
export declare class Harness {
    readonly snapshot: Snapshot;
    private readonly pendingPods;
    /** From the decoded message: its full snapshot, then a pending pod per CycleStart. */
    constructor(req: any);
    /** Loads manifests (files or directories) through `switchyard snapshot`. */
    static fromManifests(paths: string[], opts?: {
        bin?: string;
    }): Harness;
    /** Loads a message written by `switchyard snapshot --output FILE`. */
    static fromFile(path: string): Harness;
    static fromBytes(buf: Buffer): Harness;
    /** The pending pods, as namespace/name. */
    pending(): string[];
    pod(name: string): Pod | undefined;
    private find;
    /** Runs `plugin`'s extension points for pending pod `name` as the sidecar does in
     * one attempt over every node; its indexes are declared first. */
    run(plugin: Plugin, name: string): Promise<Outcome>;
}
