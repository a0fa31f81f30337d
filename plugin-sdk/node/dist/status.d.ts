import type { Status as StatusT } from './types.js';
export type { Code } from './types.js';
export type Status = StatusT;
/** Builders for statuses. A plugin method may also return nothing (`undefined`) for
 * Success. */
export declare const Status: {
    /** The shared Success status (frozen). */
    SUCCESS: StatusT;
    success: () => StatusT;
    /** Something went wrong: the attempt fails and the pod is retried. */
    error: (reason: string) => StatusT;
    /** The pod does not fit, but preemption might help. */
    unschedulable: (reason: string) => StatusT;
    /** The pod does not fit and preemption cannot help. */
    unresolvable: (reason: string) => StatusT;
    /** Skip this plugin's later calls for this pod (PreFilter, PreScore). */
    skip: () => StatusT;
    /** Permit: hold the pod (return `{ status: Status.wait(), timeoutMillis }`). */
    wait: (reason?: string) => StatusT;
    /** The pod waits for something outside the scheduler. */
    pending: (reason: string) => StatusT;
    isSuccess: (s: StatusT | undefined | null) => boolean;
    /** The reasons joined, as kube-scheduler prints a status. */
    message: (s: StatusT) => string;
};
/** A plugin's answer that is not a valid status (or anything else a call cannot
 * use): the call answers an Error status with this reason. */
export declare class CallError extends Error {
    readonly status: StatusT;
    constructor(reason: string, status?: StatusT);
    /** A call answered with `status` (a plugin's own non-success verdict). */
    static of(status: StatusT): CallError;
}
/** True for a value that counts as Success: nothing, `true`, or a SUCCESS status. */
export declare function isSuccessValue(v: unknown): boolean;
/** A plugin's return value as a wire status; throws CallError when it is none. The
 * plugin's own object is passed through when valid (no copy). */
export declare function toStatus(v: unknown, what: string): StatusT;
/** A status from the wire (PostFilter's node statuses), with an unknown code as ERROR. */
export declare function fromWire(s: {
    code?: unknown;
    reasons?: unknown;
} | null | undefined): StatusT;
export declare function describe(v: unknown): string;
