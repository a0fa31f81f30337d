// The points after a node is chosen (PostFilter before): Reserve, Unreserve, Permit,
// PreBind, Bind, PostBind.

import { CallError, Status, describe, fromWire, toStatus } from '../status.js';
import type {
  CycleRequest,
  PermitResponse,
  PostFilterRequest,
  PostFilterResponse,
  Status as StatusT,
  StatusResponse,
} from '../types.js';
import { answersAtNamedGeneration } from '../plugin.js';
import { type Entry, isThenable, malformed, pointOutcome, q, type ServiceState } from './state.js';

export async function postFilter(st: ServiceState, req: PostFilterRequest): Promise<PostFilterResponse> {
  const out: PostFilterResponse = {
    requestId: req.requestId,
    status: Status.SUCCESS,
    generation: req.generation,
    nominatedNodeName: '',
  };
  try {
    malformed(req);
    const [idx, p] = st.plugin(req.plugin);
    const local = answersAtNamedGeneration(p);
    const e = await st.cycle(req.cycle, req.generation, local);
    if (typeof p.postFilter !== 'function') throw new CallError(`plugin ${q(req.plugin)} has no PostFilter`);
    st.replicaAt(e, local);
    const statuses = new Map<string, StatusT>();
    for (const [k, v] of Object.entries(req.nodeStatuses ?? {})) statuses.set(k, fromWire(v));
    let r: unknown = p.postFilter(st.cycleOf(e, idx), statuses);
    if (isThenable(r)) r = await r;
    const what = `PostFilter of plugin ${q(req.plugin)}`;
    if (r !== null && typeof r === 'object' && !('code' in r)) {
      const res = r as { status?: unknown; nominatedNodeName?: unknown };
      out.status = toStatus(res.status, what);
      if (res.nominatedNodeName !== undefined && res.nominatedNodeName !== null) {
        if (typeof res.nominatedNodeName !== 'string') throw new CallError(`${what} returned a nominatedNodeName that is not a string`);
        out.nominatedNodeName = res.nominatedNodeName;
      }
    } else out.status = toStatus(r, what);
  } catch (e) {
    out.status = st.failure('PostFilter', req.plugin, e);
    out.nominatedNodeName = '';
  }
  return out;
}

/** Reserve, Unreserve, PreBind, Bind, PostBind: a cycle, a node, a status. */
export async function cycleCall(st: ServiceState, req: CycleRequest, point: 'Reserve' | 'Unreserve' | 'PreBind' | 'Bind' | 'PostBind'): Promise<StatusResponse> {
  let status: StatusT;
  let reserved: [Entry, number] | undefined;
  try {
    malformed(req);
    const [idx, p] = st.plugin(req.plugin);
    const e = await st.cycle(req.cycle, req.generation, answersAtNamedGeneration(p));
    if (point === 'Reserve') reserved = [e, idx];
    const missing = () => new CallError(`plugin ${q(req.plugin)} has no ${point}`);
    const cycle = st.cycleOf(e, idx);
    const node = req.nodeName;
    const what = `${point} of plugin ${q(req.plugin)}`;
    let r: unknown;
    switch (point) {
      case 'Reserve':
        if (typeof p.reserve !== 'function' && typeof p.unreserve !== 'function') throw missing();
        r = typeof p.reserve === 'function' ? p.reserve(cycle, node) : undefined;
        if (isThenable(r)) r = await r;
        status = toStatus(r, what);
        break;
      case 'Unreserve':
        if (typeof p.reserve !== 'function' && typeof p.unreserve !== 'function') throw missing();
        r = typeof p.unreserve === 'function' ? p.unreserve(cycle, node) : undefined;
        if (isThenable(r)) await r;
        status = Status.SUCCESS;
        break;
      case 'PreBind':
        if (typeof p.preBind !== 'function') throw missing();
        r = p.preBind(cycle, node);
        if (isThenable(r)) r = await r;
        status = toStatus(r, what);
        break;
      case 'Bind':
        if (typeof p.bind !== 'function') throw missing();
        r = p.bind(cycle, node);
        if (isThenable(r)) r = await r;
        status = toStatus(r, what);
        break;
      case 'PostBind':
        if (typeof p.postBind !== 'function') throw missing();
        r = p.postBind(cycle, node);
        if (isThenable(r)) await r;
        status = Status.SUCCESS;
        break;
    }
  } catch (e) {
    status = st.failure(point, req.plugin, e);
  }
  // A Permit sent right behind this Reserve (afterReserve) waits for its outcome.
  if (reserved) reserved[0].recordReserve(reserved[1], status!);
  return { requestId: req.requestId, status: status!, generation: req.generation };
}

export async function permit(st: ServiceState, req: CycleRequest): Promise<PermitResponse> {
  const out: PermitResponse = {
    requestId: req.requestId,
    status: Status.SUCCESS,
    generation: req.generation,
    timeoutMillis: 0,
    decision: null,
  };
  try {
    malformed(req);
    const [idx, p] = st.plugin(req.plugin);
    const e = await st.cycle(req.cycle, req.generation, answersAtNamedGeneration(p));
    if (typeof p.permit !== 'function') throw new CallError(`plugin ${q(req.plugin)} has no Permit`);
    if (req.afterReserve) {
      const rs = await pointOutcome(st, e, e.reserves, idx, 'Permit named a Reserve');
      if (rs.code !== 'SUCCESS') throw new CallError(`Permit sent behind a Reserve that returned ${rs.code}`);
    }
    // The pod is registered as waiting only after the plugin answers WAIT:
    // waitingPods() inside permit lists its siblings, not itself.
    let r: unknown = p.permit(st.cycleOf(e, idx), req.nodeName, st.handles[idx]);
    if (isThenable(r)) r = await r;
    const what = `Permit of plugin ${q(req.plugin)}`;
    let status: StatusT;
    let timeout = 0;
    if (r !== null && typeof r === 'object' && !('code' in r)) {
      const res = r as { status?: unknown; timeoutMillis?: unknown };
      status = toStatus(res.status, what);
      if (res.timeoutMillis !== undefined && res.timeoutMillis !== null) {
        if (typeof res.timeoutMillis !== 'number' || !(res.timeoutMillis >= 0)) {
          throw new CallError(`${what} returned timeoutMillis ${describe(res.timeoutMillis)}`);
        }
        timeout = Math.min(Math.ceil(res.timeoutMillis), 0xffffffff);
      }
    } else status = toStatus(r, what);
    if (status.code === 'WAIT') {
      if (!(timeout > 0)) {
        throw new CallError(`${what} answered WAIT without a timeout: return { status: Status.wait(), timeoutMillis }`);
      }
      if (e.ended) throw new CallError(`cycle ${e.id} ended while Permit was evaluated`);
      let w = st.waiting.get(e.pod.uid);
      if (!w) {
        w = { pod: e.pod, plugins: [] };
        st.waiting.set(e.pod.uid, w);
      }
      if (!w.plugins.includes(req.plugin)) w.plugins.push(req.plugin);
    }
    out.status = status;
    out.timeoutMillis = timeout;
  } catch (e) {
    out.status = st.failure('Permit', req.plugin, e);
    out.timeoutMillis = 0;
  }
  return out;
}
