/** A pod as plugins read it. Quantities are integers: cpu in millicores, memory,
 * ephemeral-storage and hugepages-* in bytes, everything else in units. */
export interface Pod {
    uid: string;
    namespace: string;
    name: string;
    labels: Record<string, string>;
    annotations: Record<string, string>;
    schedulerName: string;
    priority: number;
    priorityClassName: string;
    /** Empty for a pending pod; the node for bound and assumed pods. */
    nodeName: string;
    nominatedNodeName: string;
    /** Effective requests (containers summed, init containers max'd, overhead added). */
    requests: Record<string, number>;
    tolerations: Toleration[];
    nodeSelector: Record<string, string>;
    /** Pending, Running, Succeeded, Failed, Unknown. */
    phase: string;
    terminating: boolean;
    /** Unix microseconds; 0 when unknown. */
    creationTimestampMicros: number;
    startTimeMicros: number;
    ownerReferences: OwnerReference[];
    /** The PersistentVolumeClaims the pod mounts, in volume order. */
    volumeClaims: VolumeClaim[];
}
export interface VolumeClaim {
    claimName: string;
    readOnly: boolean;
    /** A generic ephemeral volume: the claim is created for (and owned by) the pod. */
    ephemeral: boolean;
}
export interface OwnerReference {
    kind: string;
    name: string;
    uid: string;
    controller: boolean;
}
export interface Toleration {
    key: string;
    /** "Exists" or "Equal". */
    operator: string;
    value: string;
    /** Empty matches every effect. */
    effect: string;
    /** Present for NoExecute tolerations with a time limit. */
    tolerationSeconds?: number;
}
export interface Taint {
    key: string;
    value: string;
    /** NoSchedule, PreferNoSchedule or NoExecute. */
    effect: string;
}
export interface Node {
    /** The scheduler's number for this node, stable while the node exists. */
    id: number;
    name: string;
    uid: string;
    labels: Record<string, string>;
    allocatable: Record<string, number>;
    taints: Taint[];
    unschedulable: boolean;
}
/** Status codes, kube-scheduler's, by their proto names. */
export type Code = 'SUCCESS' | 'ERROR' | 'UNSCHEDULABLE' | 'UNSCHEDULABLE_AND_UNRESOLVABLE' | 'WAIT' | 'SKIP' | 'PENDING';
/** A plugin's verdict: a code and the reasons shown to users (keep them short). */
export interface Status {
    code: Code;
    reasons: string[];
}
/** A cluster event that may make a pod the plugin rejected schedulable (see
 * proto/README.md, "Cluster events", for the resource and action names). */
export interface ClusterEvent {
    resource: string;
    actions: string[];
}
export interface NodeDelta {
    index: number;
    removePods: string[];
    addPods: string[];
    addPodObjects: Pod[];
}
export interface SnapshotDelta {
    full: boolean;
    upsertNodes: Node[];
    removeNodes: number[];
    upsertPods: Pod[];
    removePods: string[];
    updatePods: PodUpdate[];
}
export interface PodUpdate {
    uid: string;
    nodeName: string;
    nominatedNodeName: string;
    phase: string;
    terminating: boolean;
    startTimeMicros: number;
}
export interface ReplicateRequest {
    generation: number;
    kind?: 'delta' | 'cycleStart' | 'cycleEnd';
    delta?: SnapshotDelta | null;
    cycleStart?: {
        cycle: number;
        pod: Pod | null;
        profile: string;
    } | null;
    cycleEnd?: {
        cycle: number;
    } | null;
    ack: boolean;
    more: ReplicateRequest[];
}
interface Call {
    requestId: number;
    plugin: string;
    /** Set by the SDK's decoder when the message could not be decoded. */
    $malformed?: string;
}
export interface CycleCall extends Call {
    cycle: number;
    generation: number;
    traceparent: string;
}
export interface CycleRequest extends CycleCall {
    nodeName: string;
    /** Permit only: sent right behind the cycle's Reserve (permit-after-reserve):
     * evaluate it after that Reserve, and only if the Reserve succeeded. */
    afterReserve: boolean;
}
export interface PodRequest extends Call {
    pod: Pod | null;
}
export type PreFilterRequest = CycleCall;
export interface FilterRequest extends CycleCall {
    nodes: number[];
    deltas: NodeDelta[];
    scoreFirst: number;
    preScore: boolean;
    /** Answer the failures grouped by status (FilterResponse.failureGroups). */
    groupFailures: boolean;
    /** Score ahead without NormalizeScore (ScoreAhead.normalized false): sent only to
     * plugins declaring a signature and a standard scoreNormalization. */
    rawScores: boolean;
    /** Sent right behind the cycle's PreFilter (filter-after-pre-filter): evaluate
     * once that PreFilter's outcome is in. */
    afterPreFilter: boolean;
}
export interface FilterBatchRequest {
    requestId: number;
    calls: FilterRequest[];
    $malformed?: string;
}
export interface PostFilterRequest extends CycleCall {
    nodeStatuses: Record<string, Status>;
}
export interface PreScoreRequest extends CycleCall {
    nodes: number[];
}
export interface ScoreRequest extends CycleCall {
    nodes: number[];
    /** The batch holds every feasible node: normalise in this call too. False: raw
     * scores (normalized false) when the plugin has a NormalizeScore. */
    normalize: boolean;
    afterPreScore: boolean;
}
export interface NormalizeScoreRequest extends CycleCall {
    nodes: number[];
    scores: number[];
}
export interface StatusResponse {
    requestId: number;
    status: Status;
    generation: number;
}
/** Raw scores by node label value (PreScoreResponse.label_scores). */
export interface LabelScores {
    values: string[];
    scores: number[];
}
export interface PreScoreResponse extends StatusResponse {
    labelScores?: LabelScores;
}
export interface ScoreAhead {
    status: Status;
    scores: number[];
    normalized: boolean;
}
export interface NodeStatus {
    index: number;
    status: Status;
}
/** Items of a Filter call failing with the same status (code and reasons). */
export interface FailureGroup {
    status: Status;
    /** Indices of the items (into the request's `nodes`), in item order. */
    indices: number[];
}
export interface FilterResponse {
    requestId: number;
    generation: number;
    evaluated: number;
    failures: NodeStatus[];
    error: Status | null;
    score: ScoreAhead | null;
    /** With FilterRequest.groupFailures: the failing items, grouped by status, in
     * the order of their first item (then `failures` is empty). */
    failureGroups: FailureGroup[];
}
export interface FilterBatchResponse {
    requestId: number;
    replies: FilterResponse[];
}
export interface PreFilterResponse {
    requestId: number;
    status: Status;
    generation: number;
    hasNodeNames: boolean;
    nodeNames: string[];
}
export interface PostFilterResponse {
    requestId: number;
    status: Status;
    generation: number;
    nominatedNodeName: string;
}
export interface ScoreResponse {
    requestId: number;
    status: Status;
    generation: number;
    scores: number[];
    normalized: boolean;
}
export interface QueueSortResponse {
    requestId: number;
    sortKey: Uint8Array;
    status: Status;
}
export interface WaitingPodDecision {
    podUid: string;
    plugin: string;
    allow: boolean;
    message: string;
}
export interface PermitResponse {
    requestId: number;
    status: Status | null;
    generation: number;
    timeoutMillis: number;
    decision: WaitingPodDecision | null;
}
/** An empty pod, as the wire's defaults make one. */
export declare function emptyPod(): Pod;
/** A pod with the wire's defaults for every field `fields` leaves out (for tests). */
export declare function makePod(fields?: Partial<Pod>): Pod;
/** A node with the wire's defaults for every field `fields` leaves out (for tests). */
export declare function makeNode(fields?: Partial<Node>): Node;
export {};
