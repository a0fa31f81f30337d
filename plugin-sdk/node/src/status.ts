// A plugin's verdict, with kube-scheduler's codes.

import type { Code, Status as StatusT } from './types.js';

export type { Code } from './types.js';
export type Status = StatusT;

const CODES: ReadonlySet<string> = new Set<Code>([
  'SUCCESS',
  'ERROR',
  'UNSCHEDULABLE',
  'UNSCHEDULABLE_AND_UNRESOLVABLE',
  'WAIT',
  'SKIP',
  'PENDING',
]);
const BY_NUMBER: readonly Code[] = [
  'SUCCESS',
  'ERROR',
  'UNSCHEDULABLE',
  'UNSCHEDULABLE_AND_UNRESOLVABLE',
  'WAIT',
  'SKIP',
  'PENDING',
];

const SUCCESS: StatusT = Object.freeze({ code: 'SUCCESS', reasons: Object.freeze([]) as unknown as string[] });

function make(code: Code, reason?: string): StatusT {
  return { code, reasons: reason === undefined ? [] : [String(reason)] };
}

/** Builders for statuses. A plugin method may also return nothing (`undefined`) for
 * Success. */
export const Status = {
  /** The shared Success status (frozen). */
  SUCCESS,
  success: (): StatusT => SUCCESS,
  /** Something went wrong: the attempt fails and the pod is retried. */
  error: (reason: string): StatusT => make('ERROR', reason),
  /** The pod does not fit, but preemption might help. */
  unschedulable: (reason: string): StatusT => make('UNSCHEDULABLE', reason),
  /** The pod does not fit and preemption cannot help. */
  unresolvable: (reason: string): StatusT => make('UNSCHEDULABLE_AND_UNRESOLVABLE', reason),
  /** Skip this plugin's later calls for this pod (PreFilter, PreScore). */
  skip: (): StatusT => make('SKIP'),
  /** Permit: hold the pod (return `{ status: Status.wait(), timeoutMillis }`). */
  wait: (reason?: string): StatusT => make('WAIT', reason),
  /** The pod waits for something outside the scheduler. */
  pending: (reason: string): StatusT => make('PENDING', reason),
  isSuccess: (s: StatusT | undefined | null): boolean => s == null || s.code === 'SUCCESS',
  /** The reasons joined, as kube-scheduler prints a status. */
  message: (s: StatusT): string => s.reasons.join(', '),
};

/** A plugin's answer that is not a valid status (or anything else a call cannot
 * use): the call answers an Error status with this reason. */
export class CallError extends Error {
  readonly status: StatusT;
  constructor(reason: string, status?: StatusT) {
    super(reason);
    this.status = status ?? make('ERROR', reason);
  }
  /** A call answered with `status` (a plugin's own non-success verdict). */
  static of(status: StatusT): CallError {
    return new CallError(status.reasons.join(', ') || status.code, status);
  }
}

/** True for a value that counts as Success: nothing, `true`, or a SUCCESS status. */
export function isSuccessValue(v: unknown): boolean {
  return v === undefined || v === null || v === true || v === SUCCESS || (v as StatusT).code === 'SUCCESS';
}

/** A plugin's return value as a wire status; throws CallError when it is none. The
 * plugin's own object is passed through when valid (no copy). */
export function toStatus(v: unknown, what: string): StatusT {
  if (v === undefined || v === null || v === true) return SUCCESS;
  if (typeof v === 'object') {
    const s = v as { code?: unknown; reasons?: unknown };
    let code = s.code;
    if (typeof code === 'number') code = BY_NUMBER[code];
    if (typeof code === 'string' && CODES.has(code)) {
      const reasons = s.reasons;
      if (reasons === undefined || reasons === null) return { code: code as Code, reasons: [] };
      if (Array.isArray(reasons)) {
        if (code === s.code && reasons.every((r) => typeof r === 'string')) return v as StatusT;
        return { code: code as Code, reasons: reasons.map(String) };
      }
      if (typeof reasons === 'string') return { code: code as Code, reasons: [reasons] };
    }
  }
  throw new CallError(`${what} returned ${describe(v)}, which is not a Status (use Status.success(), Status.unschedulable(reason), ...)`);
}

/** A status from the wire (PostFilter's node statuses), with an unknown code as ERROR. */
export function fromWire(s: { code?: unknown; reasons?: unknown } | null | undefined): StatusT {
  if (!s) return SUCCESS;
  const code = typeof s.code === 'string' && CODES.has(s.code) ? (s.code as Code) : 'ERROR';
  return { code, reasons: Array.isArray(s.reasons) ? s.reasons.map(String) : [] };
}

export function describe(v: unknown): string {
  if (typeof v === 'string') return JSON.stringify(v.length > 60 ? v.slice(0, 60) + '...' : v);
  if (typeof v === 'object' && v !== null) {
    try {
      const j = JSON.stringify(v);
      return j.length > 80 ? j.slice(0, 80) + '...' : j;
    } catch {
      return Object.prototype.toString.call(v);
    }
  }
  return String(v);
}
