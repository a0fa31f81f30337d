import type { Node, Pod } from './types.js';
/** What an index counts: placed pods by the value of a pod label per node, placed
 * pods by namespace per node, nodes by the value of a node label, or the placed pods
 * themselves by namespace and the value of a pod label (the members of a gang or a
 * job, to tell which are placed and where). */
export type Index = {
    kind: 'podsByLabel';
    key: string;
} | {
    kind: 'podsByNamespace';
} | {
    kind: 'nodesByLabel';
    key: string;
} | {
    kind: 'podListsByLabel';
    key: string;
};
/** Placed pods per node for each value of one key (a label's value, a namespace). */
export declare class PodCounts {
    #private;
    /** Pods with `value` in the whole replica. */
    total(value: string): number;
    /** Pods with `value` on node `nodeId`. */
    onNode(value: string, nodeId: number): number;
    /** [node id, count] of the nodes holding pods with `value`, in no order. */
    nodes(value: string): IterableIterator<[number, number]>;
    /** [value, total] of every value counted. */
    values(): IterableIterator<[string, number]>;
    /** @internal */
    add(value: string, node: number): void;
    /** @internal */
    remove(value: string, node: number): void;
}
/** Nodes by the value of one node label. */
export declare class NodeSets {
    #private;
    /** How many nodes carry the label (any value). */
    count(): number;
    /** The ids of the nodes whose label has `value` (read-only). */
    nodes(value: string): readonly number[];
    /** [value, node ids] of every value. */
    values(): IterableIterator<[string, readonly number[]]>;
    /** @internal */
    add(value: string, node: number): void;
    /** @internal */
    remove(value: string, node: number): void;
}
/** Placed pods by namespace and the value of one pod label. A pod without a
 * namespace is in `default`, as the API server defaults it. */
export declare class PodLists {
    #private;
    /** The placed pods in `namespace` whose label has `value` (in no order). */
    pods(namespace: string, value: string): IterableIterator<Pod>;
    /** How many placed pods in `namespace` have `value`. */
    count(namespace: string, value: string): number;
    /** [namespace, value, count] of everything listed. */
    values(): IterableIterator<[string, string, number]>;
    /** @internal */
    add(value: string, p: Pod): void;
    /** @internal */
    remove(value: string, p: Pod): void;
}
/** @internal One replica's indexes. */
export declare class Indexes {
    readonly podsByLabel: Map<string, PodCounts>;
    podsByNamespace: PodCounts | undefined;
    readonly nodesByLabel: Map<string, NodeSets>;
    readonly podListsByLabel: Map<string, PodLists>;
    /** Adds `index` (empty; the caller fills it); false when already declared. */
    declare(index: Index): boolean;
    /** Empties every index, keeping the declarations. */
    clear(): void;
    /** A pod placed on node `node` (`add`) or taken off it. */
    pod(p: Pod, node: number, add: boolean): void;
    /** A node added (`add`) or removed, with the labels it has then. */
    node(n: Node, add: boolean): void;
}
