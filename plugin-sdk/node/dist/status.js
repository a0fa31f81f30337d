"use strict";
// A plugin's verdict, with kube-scheduler's codes.
Object.defineProperty(exports, "__esModule", { value: true });
exports.CallError = exports.Status = void 0;
exports.isSuccessValue = isSuccessValue;
exports.toStatus = toStatus;
exports.fromWire = fromWire;
exports.describe = describe;
const CODES = new Set([
    'SUCCESS',
    'ERROR',
    'UNSCHEDULABLE',
    'UNSCHEDULABLE_AND_UNRESOLVABLE',
    'WAIT',
    'SKIP',
    'PENDING',
]);
const BY_NUMBER = [
    'SUCCESS',
    'ERROR',
    'UNSCHEDULABLE',
    'UNSCHEDULABLE_AND_UNRESOLVABLE',
    'WAIT',
    'SKIP',
    'PENDING',
];
const SUCCESS = Object.freeze({ code: 'SUCCESS', reasons: Object.freeze([]) });
function make(code, reason) {
    return { code, reasons: reason === undefined ? [] : [String(reason)] };
}
/** Builders for statuses. A plugin method may also return nothing (`undefined`) for
 * Success. */
exports.Status = {
    /** The shared Success status (frozen). */
    SUCCESS,
    success: () => SUCCESS,
    /** Something went wrong: the attempt fails and the pod is retried. */
    error: (reason) => make('ERROR', reason),
    /** The pod does not fit, but preemption might help. */
    unschedulable: (reason) => make('UNSCHEDULABLE', reason),
    /** The pod does not fit and preemption cannot help. */
    unresolvable: (reason) => make('UNSCHEDULABLE_AND_UNRESOLVABLE', reason),
    /** Skip this plugin's later calls for this pod (PreFilter, PreScore). */
    skip: () => make('SKIP'),
    /** Permit: hold the pod (return `{ status: Status.wait(), timeoutMillis }`). */
    wait: (reason) => make('WAIT', reason),
    /** The pod waits for something outside the scheduler. */
    pending: (reason) => make('PENDING', reason),
    isSuccess: (s) => s == null || s.code === 'SUCCESS',
    /** The reasons joined, as kube-scheduler prints a status. */
    message: (s) => s.reasons.join(', '),
};
/** A plugin's answer that is not a valid status (or anything else a call cannot
 * use): the call answers an Error status with this reason. */
class CallError extends Error {
    status;
    constructor(reason, status) {
        super(reason);
        this.status = status ?? make('ERROR', reason);
    }
    /** A call answered with `status` (a plugin's own non-success verdict). */
    static of(status) {
        return new CallError(status.reasons.join(', ') || status.code, status);
    }
}
exports.CallError = CallError;
/** True for a value that counts as Success: nothing, `true`, or a SUCCESS status. */
function isSuccessValue(v) {
    return v === undefined || v === null || v === true || v === SUCCESS || v.code === 'SUCCESS';
}
/** A plugin's return value as a wire status; throws CallError when it is none. The
 * plugin's own object is passed through when valid (no copy). */
function toStatus(v, what) {
    if (v === undefined || v === null || v === true)
        return SUCCESS;
    if (typeof v === 'object') {
        const s = v;
        let code = s.code;
        if (typeof code === 'number')
            code = BY_NUMBER[code];
        if (typeof code === 'string' && CODES.has(code)) {
            const reasons = s.reasons;
            if (reasons === undefined || reasons === null)
                return { code: code, reasons: [] };
            if (Array.isArray(reasons)) {
                if (code === s.code && reasons.every((r) => typeof r === 'string'))
                    return v;
                return { code: code, reasons: reasons.map(String) };
            }
            if (typeof reasons === 'string')
                return { code: code, reasons: [reasons] };
        }
    }
    throw new CallError(`${what} returned ${describe(v)}, which is not a Status (use Status.success(), Status.unschedulable(reason), ...)`);
}
/** A status from the wire (PostFilter's node statuses), with an unknown code as ERROR. */
function fromWire(s) {
    if (!s)
        return SUCCESS;
    const code = typeof s.code === 'string' && CODES.has(s.code) ? s.code : 'ERROR';
    return { code, reasons: Array.isArray(s.reasons) ? s.reasons.map(String) : [] };
}
function describe(v) {
    if (typeof v === 'string')
        return JSON.stringify(v.length > 60 ? v.slice(0, 60) + '...' : v);
    if (typeof v === 'object' && v !== null) {
        try {
            const j = JSON.stringify(v);
            return j.length > 80 ? j.slice(0, 80) + '...' : j;
        }
        catch {
            return Object.prototype.toString.call(v);
        }
    }
    return String(v);
}
