import type { Index } from './indexes.js';
import type { NodeInfo, Snapshot } from './snapshot.js';
import type { ClusterEvent, Pod, Status } from './types.js';
export type MaybePromise<T> = T | Promise<T>;
/** What most methods return: a Status, or nothing (undefined, null, true) for Success. */
export type StatusResult = Status | void | undefined | null | true;
/** One scheduling attempt as a plugin call sees it, with the plugin's own state for
 * the attempt. The SDK keeps one Cycle per plugin per attempt, from the attempt's
 * CycleStart to its CycleEnd; what a method stores in `state` (usually PreFilter) the
 * later calls of the attempt see. For what-if evaluations (nominated pods,
 * preemption dry runs) the SDK runs `addPod`/`removePod` and `filter` on a fork: a
 * Cycle whose `state` is a copy (`plugin.cloneState(state)`, else `structuredClone`),
 * so the attempt's own state is never changed by them. */
export declare class Cycle<S = any> {
    /** The scheduler's attempt number (unique per scheduler process). */
    readonly id: number;
    /** The pod being scheduled. */
    readonly pod: Pod;
    /** The scheduler profile (schedulerName) scheduling it. */
    readonly profile: string;
    /** The replicated snapshot: at the attempt's generation for scheduling calls (for
     * node-local plugins, at that generation or later). */
    readonly snapshot: Snapshot;
    /** The plugin's state for this attempt: undefined until a method sets it. */
    state: S | undefined;
    constructor(id: number, pod: Pod, profile: string, snapshot: Snapshot, state?: S);
    /** A Cycle with a copy of this one's state (`clone`, else `structuredClone`). */
    fork(clone?: (state: S) => S): Cycle<S>;
}
/** PreFilter's answer: a status and, optionally, the only nodes worth evaluating. */
export interface PreFilterResult {
    status?: Status;
    nodeNames?: string[];
}
/** PostFilter's answer: a status and optionally a node to nominate the pod to. */
export interface PostFilterResult {
    status?: Status;
    nominatedNodeName?: string;
}
/** Permit's answer; a WAIT status needs `timeoutMillis` > 0. */
export interface PermitResult {
    status?: Status;
    timeoutMillis?: number;
}
/** Decides about pods a plugin answered WAIT for at Permit, at any later time. */
export interface PermitHandle {
    /** The plugin deciding. */
    readonly plugin: string;
    /** Lets the waiting pod `podUid` go on (once every plugin that waited allowed it).
     * False when it is not waiting on this plugin (decided, timed out, never waited)
     * or no scheduler is connected. */
    allow(podUid: string): boolean;
    /** Rejects the waiting pod: the scheduler unreserves it and retries it later. */
    reject(podUid: string, message?: string): boolean;
    /** Pods waiting on this plugin now. */
    waitingPods(): Pod[];
}
/** A plugin. Implement any subset of the extension-point methods; the SDK declares
 * the points whose methods exist. `S` is the type of the plugin's cycle state. */
export interface Plugin<S = any> {
    /** The name profiles enable the plugin by. */
    readonly name: string;
    /** Cluster events that may make a pod this plugin rejected schedulable; none (the
     * default) means every event. `[{ resource: 'Node', actions: ['Add'] }]` or
     * `{ Node: ['Add'] }`. */
    readonly events?: ClusterEvent[] | Record<string, string[]>;
    /** A promise: filter, preScore, score and normalizeScore depend only on the pod
     * and the nodes they are asked about (each node and its pods), and there is no
     * preFilter. Lets the scheduler send the next pods' Filter ahead (lookahead). */
    readonly nodeLocal?: boolean;
    /** The pod fields filter and score read, when their answers for a pod and a node
     * depend only on those fields and on the Node object itself: not on the pods on
     * that node or any other, nor on other nodes (upstream's pod signatures,
     * KEP-5598). The scheduler then answers a later pod whose listed fields are equal,
     * on a node whose Node object is unchanged, from an earlier answer without calling;
     * with a standard `scoreNormalization` it reuses scores too. `['none']` for a
     * plugin that reads no field of the pod (every pod alike). Empty or absent (the
     * default): no reuse. Needs `nodeLocal` (or `signatureNodePods`). A wrong list
     * gives wrong placements. */
    readonly signature?: readonly PodFieldName[];
    /** With a `signature`: filter and score also read the pods on the node asked about
     * (never other nodes'), and preFilter, if any, leaves the same state for pods whose
     * signed fields are equal (a quota keyed by a label: preFilter notes the tenant,
     * filter reads the node's count from an index). `nodeLocal` is then not needed;
     * the scheduler keeps an answer only while the node and its pods are unchanged,
     * and asks a round only for its changed nodes. */
    readonly signatureNodePods?: boolean;
    /** Pod label keys filter and score read, signed by value: narrower than 'labels',
     * which signs every label (workloads often give each pod a label of its own). Only
     * with `signatureNodePods` and without `nodeLocal`; `signature: ['none']` when no
     * other field is read. */
    readonly signatureLabelKeys?: readonly string[];
    /** With `signatureNodePods`: preFilter's verdict and state depend only on the pod's
     * signed fields, never on nodes or other pods (a quota's preFilter noting the
     * tenant). The plugin is then node-local with a preFilter: the SDK answers its
     * calls at the generation they name, and the scheduler sends the queued pods'
     * preFilter and first Filter round ahead of their attempts, which hides the round
     * trip. A wrong `true` gives wrong placements. */
    readonly preFilterPodOnly?: boolean;
    /** One of upstream's standard NormalizeScores, applied by the SDK (and by a
     * scheduler reusing raw scores for alike pods) instead of `normalizeScore`, which
     * is then never called: 'default' is DefaultNormalizeScore(100, reverse=false),
     * each score times 100 over the highest (left as they are when the highest is 0);
     * 'defaultReverse' is 100 minus that (all 100 when the highest is 0). 'custom'
     * (the default): `normalizeScore` if the plugin has one, else none. Needs
     * `score`. */
    readonly scoreNormalization?: ScoreNormalizationName;
    /** Indexes of the replica the plugin reads (`{kind: 'podsByLabel', key}`,
     * `{kind: 'podsByNamespace'}`, `{kind: 'nodesByLabel', key}`): the SDK keeps them
     * current as deltas arrive, so a cluster-wide count is a look-up
     * (`cycle.snapshot.podsByLabel(key)`) instead of a scan of every pod. */
    readonly indexes?: readonly Index[];
    /** A node label key, for a plugin whose score of a node is a function of that
     * label's value alone (a rack, a zone): it defines `labelScores` instead of
     * preScore, score and normalizeScore, and the SDK serves that as its PreScore and
     * Score. The scheduler asks for the table as the cycle starts, while its own
     * Filter runs, and scores the nodes itself (see labelscore.ts). */
    readonly scoreNodeLabel?: string;
    /** Gates a pod before it enters the active queue: anything but Success holds it
     * back (UNSCHEDULABLE_AND_UNRESOLVABLE: it waits in the unschedulable pool). */
    preEnqueue?(pod: Pod): MaybePromise<StatusResult>;
    /** QueueSort: a key per pod, smaller (bytewise) first; a string is UTF-8. */
    sortKey?(pod: Pod): MaybePromise<Uint8Array | string>;
    /** Computes the attempt's state once (`cycle.state = ...`). SKIP skips this
     * plugin's Filter for the attempt; UNSCHEDULABLE ends its filtering. */
    preFilter?(cycle: Cycle<S>): MaybePromise<StatusResult | PreFilterResult>;
    /** PreFilter extension: update a fork of the state as if `pod` were added to `node`
     * (already in `node.pods`). Declared with removePod as AddPod/RemovePod. */
    addPod?(cycle: Cycle<S>, pod: Pod, node: NodeInfo): MaybePromise<StatusResult>;
    /** PreFilter extension: as if `pod` were removed from `node` (already gone from
     * `node.pods`). */
    removePod?(cycle: Cycle<S>, pod: Pod, node: NodeInfo): MaybePromise<StatusResult>;
    /** Whether the pod fits one node. Called for every node of a batch in turn: keep it
     * synchronous and cheap when you can (a Promise costs a tick per node). */
    filter?(cycle: Cycle<S>, node: NodeInfo): MaybePromise<StatusResult>;
    /** Runs when no node fits, with each failed node's status by name. */
    postFilter?(cycle: Cycle<S>, nodeStatuses: Map<string, Status>): MaybePromise<StatusResult | PostFilterResult>;
    /** With `scoreNodeLabel`: the raw score of each label value for the cycle's pod,
     * as an object or a Map (values not listed score 0), or a Status (SKIP skips
     * Score). It reads no node list: the nodes that pass Filter are not known yet. */
    labelScores?(cycle: Cycle<S>): MaybePromise<Record<string, number> | Map<string, number> | StatusResult>;
    /** Once over the feasible nodes before Score. SKIP skips Score for the pod. */
    preScore?(cycle: Cycle<S>, nodes: NodeInfo[]): MaybePromise<StatusResult>;
    /** A score for one feasible node: an integer, in 0..100 unless the plugin has
     * normalizeScore. Return (or throw) a non-success Status to fail the call. */
    score?(cycle: Cycle<S>, node: NodeInfo): MaybePromise<number | Status>;
    /** Rescales the scores of all feasible nodes to 0..100: change `scores` in place
     * (or return a new array of the same length). */
    normalizeScore?(cycle: Cycle<S>, scores: number[], nodes: NodeInfo[]): MaybePromise<StatusResult | number[]>;
    /** Claims what the pod will use on the chosen node. */
    reserve?(cycle: Cycle<S>, nodeName: string): MaybePromise<StatusResult>;
    /** Gives back what reserve claimed; called whether or not reserve ran (must be
     * idempotent). Its return value is ignored. */
    unreserve?(cycle: Cycle<S>, nodeName: string): MaybePromise<unknown>;
    /** Approves, rejects or holds the pod before binding: `{ status: Status.wait(),
     * timeoutMillis }` parks it until `handle.allow`/`handle.reject` or the timeout. */
    permit?(cycle: Cycle<S>, nodeName: string, handle: PermitHandle): MaybePromise<StatusResult | PermitResult>;
    preBind?(cycle: Cycle<S>, nodeName: string): MaybePromise<StatusResult>;
    /** Binds the pod. SKIP passes it to the next bind plugin. */
    bind?(cycle: Cycle<S>, nodeName: string): MaybePromise<StatusResult>;
    /** After a successful bind; its return value is ignored. */
    postBind?(cycle: Cycle<S>, nodeName: string): MaybePromise<unknown>;
    /** Copies the cycle state for a fork (default: structuredClone, which drops class
     * prototypes and refuses functions). */
    cloneState?(state: S): S;
}
/** Fields of the pod a signature may list (the proto's `PodField`, camelCase):
 * 'priority' covers priority and priorityClassName; 'none' is no field at all. */
export type PodFieldName = 'namespace' | 'labels' | 'annotations' | 'schedulerName' | 'priority' | 'requests' | 'tolerations' | 'nodeSelector' | 'ownerReferences' | 'volumeClaims' | 'none';
/** The proto's `ScoreNormalization`, camelCase. */
export type ScoreNormalizationName = 'custom' | 'default' | 'defaultReverse';
/** Signature names to the proto's enum names (what the wire carries). */
export declare const POD_FIELDS: ReadonlyMap<PodFieldName, string>;
export declare const SCORE_NORMALIZATIONS: ReadonlyMap<ScoreNormalizationName, string>;
/** A plugin's signature as the wire's enum names; throws on what the scheduler could
 * not use: an unknown name, 'none' with fields, a list without `nodeLocal`. */
export declare function pluginSignature(p: Plugin): string[];
/** A plugin's signatureLabelKeys; throws when they are not an array of non-empty
 * strings, or come without signatureNodePods or with nodeLocal. */
export declare function pluginSignatureLabelKeys(p: Plugin): string[];
/** A plugin's declared normalisation by name ('custom' when absent); throws on an
 * unknown one, or a standard one without `score`. */
/** Whether the handshake declares `preFilterPodOnly` (only with signatureNodePods). */
export declare function preFilterPodOnly(p: Plugin): boolean;
/** Whether the plugin's calls may be answered at the generation they name rather than
 * the one their cycle started at: node-local, or a preFilter that reads only the pod. */
export declare function answersAtNamedGeneration(p: Plugin): boolean;
export declare function scoreNormalizationOf(p: Plugin): ScoreNormalizationName;
/** Whether Score has a NormalizeScore: the plugin's own, or a standard one it
 * declared (which wins over its own, as in the Rust SDK). */
export declare function hasNormalize(p: Plugin): boolean;
/** Applies a standard normalisation to raw scores in place, as upstream's
 * DefaultNormalizeScore(100, reverse) and `switchyard_proto::normalize_scores` do
 * (the scheduler applies the latter to raw scores it reuses, so both ends must get
 * the same numbers); false, scores untouched, for 'custom'. */
export declare function normalizeScores(kind: ScoreNormalizationName, scores: number[]): boolean;
/** The extension points a plugin implements, by proto enum name, in proto order. */
export declare function extensionPoints(p: Plugin): string[];
export declare function hasPreFilterExtensions(p: Plugin): boolean;
export declare const EVENT_RESOURCES: ReadonlySet<string>;
export declare const EVENT_ACTIONS: ReadonlySet<string>;
/** A plugin's events in the wire's form; throws on an unknown resource or action. */
export declare function pluginEvents(p: Plugin): ClusterEvent[];
/** Refuses what the scheduler could not use (clause H3): unnamed or duplicate
 * plugins, unknown events, node-local with a PreFilter, NormalizeScore without Score,
 * AddPod/RemovePod without PreFilter, an unknown signature field or one without
 * node-local, an unknown scoreNormalization or a standard one without Score. */
export declare function checkPlugins(plugins: readonly Plugin[]): void;
