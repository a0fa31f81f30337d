// The queue's points: PreEnqueue, and QueueSort as a sort key given once per pod.

import { describe, CallError, Status, toStatus } from '../status.js';
import type {
  PodRequest,
  QueueSortResponse,
  Status as StatusT,
  StatusResponse,
} from '../types.js';
import { isThenable, malformed, q, type ServiceState } from './state.js';

const EMPTY = new Uint8Array(0);

export async function preEnqueue(st: ServiceState, req: PodRequest): Promise<StatusResponse> {
  let status: StatusT;
  try {
    malformed(req);
    const [, p] = st.plugin(req.plugin);
    if (typeof p.preEnqueue !== 'function') throw new CallError(`plugin ${q(req.plugin)} has no PreEnqueue`);
    if (!req.pod) throw new CallError('PreEnqueue request without a pod');
    let r: unknown = p.preEnqueue(req.pod);
    if (isThenable(r)) r = await r;
    status = toStatus(r, `PreEnqueue of plugin ${q(req.plugin)}`);
  } catch (e) {
    status = st.failure('PreEnqueue', req.plugin, e);
  }
  return { requestId: req.requestId, status, generation: 0 };
}

export async function queueSort(st: ServiceState, req: PodRequest): Promise<QueueSortResponse> {
  const out: QueueSortResponse = { requestId: req.requestId, sortKey: EMPTY, status: Status.SUCCESS };
  try {
    malformed(req);
    const [, p] = st.plugin(req.plugin);
    if (typeof p.sortKey !== 'function' || !req.pod) {
      throw new CallError(`plugin ${q(req.plugin)} has no QueueSort, or the request has no pod`);
    }
    let k: unknown = p.sortKey(req.pod);
    if (isThenable(k)) k = await k;
    if (typeof k === 'string') out.sortKey = Buffer.from(k, 'utf8');
    else if (k instanceof Uint8Array) out.sortKey = k;
    else throw new CallError(`sortKey of plugin ${q(req.plugin)} returned ${describe(k)}, not a Uint8Array or string`);
  } catch (e) {
    out.status = st.failure('QueueSort', req.plugin, e);
  }
  return out;
}
