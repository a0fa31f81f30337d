"use strict";
// The points after a node is chosen (PostFilter before): Reserve, Unreserve, Permit,
// PreBind, Bind, PostBind.
Object.defineProperty(exports, "__esModule", { value: true });
exports.postFilter = postFilter;
exports.cycleCall = cycleCall;
exports.permit = permit;
const status_js_1 = require("../status.js");
const plugin_js_1 = require("../plugin.js");
const state_js_1 = require("./state.js");
async function postFilter(st, req) {
    const out = {
        requestId: req.requestId,
        status: status_js_1.Status.SUCCESS,
        generation: req.generation,
        nominatedNodeName: '',
    };
    try {
        (0, state_js_1.malformed)(req);
        const [idx, p] = st.plugin(req.plugin);
        const local = (0, plugin_js_1.answersAtNamedGeneration)(p);
        const e = await st.cycle(req.cycle, req.generation, local);
        if (typeof p.postFilter !== 'function')
            throw new status_js_1.CallError(`plugin ${(0, state_js_1.q)(req.plugin)} has no PostFilter`);
        st.replicaAt(e, local);
        const statuses = new Map();
        for (const [k, v] of Object.entries(req.nodeStatuses ?? {}))
            statuses.set(k, (0, status_js_1.fromWire)(v));
        let r = p.postFilter(st.cycleOf(e, idx), statuses);
        if ((0, state_js_1.isThenable)(r))
            r = await r;
        const what = `PostFilter of plugin ${(0, state_js_1.q)(req.plugin)}`;
        if (r !== null && typeof r === 'object' && !('code' in r)) {
            const res = r;
            out.status = (0, status_js_1.toStatus)(res.status, what);
            if (res.nominatedNodeName !== undefined && res.nominatedNodeName !== null) {
                if (typeof res.nominatedNodeName !== 'string')
                    throw new status_js_1.CallError(`${what} returned a nominatedNodeName that is not a string`);
                out.nominatedNodeName = res.nominatedNodeName;
            }
        }
        else
            out.status = (0, status_js_1.toStatus)(r, what);
    }
    catch (e) {
        out.status = st.failure('PostFilter', req.plugin, e);
        out.nominatedNodeName = '';
    }
    return out;
}
/** Reserve, Unreserve, PreBind, Bind, PostBind: a cycle, a node, a status. */
async function cycleCall(st, req, point) {
    let status;
    let reserved;
    try {
        (0, state_js_1.malformed)(req);
        const [idx, p] = st.plugin(req.plugin);
        const e = await st.cycle(req.cycle, req.generation, (0, plugin_js_1.answersAtNamedGeneration)(p));
        if (point === 'Reserve')
            reserved = [e, idx];
        const missing = () => new status_js_1.CallError(`plugin ${(0, state_js_1.q)(req.plugin)} has no ${point}`);
        const cycle = st.cycleOf(e, idx);
        const node = req.nodeName;
        const what = `${point} of plugin ${(0, state_js_1.q)(req.plugin)}`;
        let r;
        switch (point) {
            case 'Reserve':
                if (typeof p.reserve !== 'function' && typeof p.unreserve !== 'function')
                    throw missing();
                r = typeof p.reserve === 'function' ? p.reserve(cycle, node) : undefined;
                if ((0, state_js_1.isThenable)(r))
                    r = await r;
                status = (0, status_js_1.toStatus)(r, what);
                break;
            case 'Unreserve':
                if (typeof p.reserve !== 'function' && typeof p.unreserve !== 'function')
                    throw missing();
                r = typeof p.unreserve === 'function' ? p.unreserve(cycle, node) : undefined;
                if ((0, state_js_1.isThenable)(r))
                    await r;
                status = status_js_1.Status.SUCCESS;
                break;
            case 'PreBind':
                if (typeof p.preBind !== 'function')
                    throw missing();
                r = p.preBind(cycle, node);
                if ((0, state_js_1.isThenable)(r))
                    r = await r;
                status = (0, status_js_1.toStatus)(r, what);
                break;
            case 'Bind':
                if (typeof p.bind !== 'function')
                    throw missing();
                r = p.bind(cycle, node);
                if ((0, state_js_1.isThenable)(r))
                    r = await r;
                status = (0, status_js_1.toStatus)(r, what);
                break;
            case 'PostBind':
                if (typeof p.postBind !== 'function')
                    throw missing();
                r = p.postBind(cycle, node);
                if ((0, state_js_1.isThenable)(r))
                    await r;
                status = status_js_1.Status.SUCCESS;
                break;
        }
    }
    catch (e) {
        status = st.failure(point, req.plugin, e);
    }
    // A Permit sent right behind this Reserve (afterReserve) waits for its outcome.
    if (reserved)
        reserved[0].recordReserve(reserved[1], status);
    return { requestId: req.requestId, status: status, generation: req.generation };
}
async function permit(st, req) {
    const out = {
        requestId: req.requestId,
        status: status_js_1.Status.SUCCESS,
        generation: req.generation,
        timeoutMillis: 0,
        decision: null,
    };
    try {
        (0, state_js_1.malformed)(req);
        const [idx, p] = st.plugin(req.plugin);
        const e = await st.cycle(req.cycle, req.generation, (0, plugin_js_1.answersAtNamedGeneration)(p));
        if (typeof p.permit !== 'function')
            throw new status_js_1.CallError(`plugin ${(0, state_js_1.q)(req.plugin)} has no Permit`);
        if (req.afterReserve) {
            const rs = await (0, state_js_1.pointOutcome)(st, e, e.reserves, idx, 'Permit named a Reserve');
            if (rs.code !== 'SUCCESS')
                throw new status_js_1.CallError(`Permit sent behind a Reserve that returned ${rs.code}`);
        }
        // The pod is registered as waiting only after the plugin answers WAIT:
        // waitingPods() inside permit lists its siblings, not itself.
        let r = p.permit(st.cycleOf(e, idx), req.nodeName, st.handles[idx]);
        if ((0, state_js_1.isThenable)(r))
            r = await r;
        const what = `Permit of plugin ${(0, state_js_1.q)(req.plugin)}`;
        let status;
        let timeout = 0;
        if (r !== null && typeof r === 'object' && !('code' in r)) {
            const res = r;
            status = (0, status_js_1.toStatus)(res.status, what);
            if (res.timeoutMillis !== undefined && res.timeoutMillis !== null) {
                if (typeof res.timeoutMillis !== 'number' || !(res.timeoutMillis >= 0)) {
                    throw new status_js_1.CallError(`${what} returned timeoutMillis ${(0, status_js_1.describe)(res.timeoutMillis)}`);
                }
                timeout = Math.min(Math.ceil(res.timeoutMillis), 0xffffffff);
            }
        }
        else
            status = (0, status_js_1.toStatus)(r, what);
        if (status.code === 'WAIT') {
            if (!(timeout > 0)) {
                throw new status_js_1.CallError(`${what} answered WAIT without a timeout: return { status: Status.wait(), timeoutMillis }`);
            }
            if (e.ended)
                throw new status_js_1.CallError(`cycle ${e.id} ended while Permit was evaluated`);
            let w = st.waiting.get(e.pod.uid);
            if (!w) {
                w = { pod: e.pod, plugins: [] };
                st.waiting.set(e.pod.uid, w);
            }
            if (!w.plugins.includes(req.plugin))
                w.plugins.push(req.plugin);
        }
        out.status = status;
        out.timeoutMillis = timeout;
    }
    catch (e) {
        out.status = st.failure('Permit', req.plugin, e);
        out.timeoutMillis = 0;
    }
    return out;
}
