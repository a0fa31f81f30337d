import { type Index, type NodeSets, type PodCounts, type PodLists } from './indexes.js';
import type { Node, Pod, SnapshotDelta } from './types.js';
/** CycleStart pods held for PodUpdates: both sides forget them all at this many. */
export declare const MAX_PENDING_PODS = 1024;
/** A node with the pods placed on it (bound or assumed by the scheduler). */
export declare class NodeInfo {
    node: Node;
    pods: Pod[];
    constructor(node: Node, pods?: Pod[]);
    get name(): string;
    /** The node's label `key`, or undefined (own keys only). */
    label(key: string): string | undefined;
    /** Sum of one resource requested by the pods on the node (cpu in millicores). */
    requested(resource: string): number;
    /** Allocatable amount of one resource (0 when the node does not report it). */
    allocatable(resource: string): number;
    /** A copy with its own pod list (the node and pods are shared). */
    clone(): NodeInfo;
    /** Removes the pod `uid` from this NodeInfo's list; the pod, or undefined. */
    removePod(uid: string): Pod | undefined;
}
/** Thrown when a Replicate message cannot be applied: the replica can no longer be
 * trusted, so the stream ends (the scheduler reconnects with a full snapshot). */
export declare class ReplicationError extends Error {
}
/** The replicated snapshot: nodes by the scheduler's node id, pods by UID. */
export declare class Snapshot {
    #private;
    /** Keeps `index` from now on (built at once from what the replica holds); the SDK
     * declares every plugin's `indexes`. */
    declareIndex(index: Index): void;
    /** This replica with `indexes` declared (for plugin unit tests). */
    withIndexes(indexes: Iterable<Index>): this;
    /** Placed pods per node by the value of pod label `key`, when a plugin declared
     * `{kind: 'podsByLabel', key}`. */
    podsByLabel(key: string): PodCounts | undefined;
    /** Placed pods per node by namespace, when a plugin declared `{kind: 'podsByNamespace'}`. */
    podsByNamespace(): PodCounts | undefined;
    /** Nodes by the value of node label `key`, when a plugin declared
     * `{kind: 'nodesByLabel', key}`. */
    nodesByLabel(key: string): NodeSets | undefined;
    /** Placed pods by namespace and the value of pod label `key`, when a plugin
     * declared `{kind: 'podListsByLabel', key}`. */
    podListsByLabel(key: string): PodLists | undefined;
    /** A replica holding these nodes and pods, as a full snapshot from the scheduler
     * would build it: for plugin unit tests. Nodes without an id (0) are numbered after
     * the largest id given; a pod goes on the node its `nodeName` names. Partial
     * objects get the wire's defaults. */
    static fromObjects(nodes: Partial<Node>[], pods?: Partial<Pod>[]): Snapshot;
    /** Generation of the last snapshot change applied. */
    get generation(): number;
    /** @internal */
    get version(): number;
    /** The node with the scheduler's id `id`. */
    node(id: number): NodeInfo | undefined;
    nodeByName(name: string): NodeInfo | undefined;
    /** Every node, in the order they arrived. */
    nodes(): IterableIterator<NodeInfo>;
    get numNodes(): number;
    /** A bound or assumed pod by UID. */
    pod(uid: string): Pod | undefined;
    /** Every bound or assumed pod. */
    pods(): IterableIterator<Pod>;
    get numPods(): number;
    /** @internal CycleStart pods held (for tests). */
    get numPending(): number;
    /** @internal The pod of a CycleStart: kept until a delta places it. */
    noteCyclePod(pod: Pod): void;
    /** @internal Applies one delta. A ReplicationError means the replica cannot be
     * trusted any more (the scheduler resends a full snapshot on the next stream). */
    apply(generation: number, d: SnapshotDelta): void;
}
