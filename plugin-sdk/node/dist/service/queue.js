"use strict";
// The queue's points: PreEnqueue, and QueueSort as a sort key given once per pod.
Object.defineProperty(exports, "__esModule", { value: true });
exports.preEnqueue = preEnqueue;
exports.queueSort = queueSort;
const status_js_1 = require("../status.js");
const state_js_1 = require("./state.js");
const EMPTY = new Uint8Array(0);
async function preEnqueue(st, req) {
    let status;
    try {
        (0, state_js_1.malformed)(req);
        const [, p] = st.plugin(req.plugin);
        if (typeof p.preEnqueue !== 'function')
            throw new status_js_1.CallError(`plugin ${(0, state_js_1.q)(req.plugin)} has no PreEnqueue`);
        if (!req.pod)
            throw new status_js_1.CallError('PreEnqueue request without a pod');
        let r = p.preEnqueue(req.pod);
        if ((0, state_js_1.isThenable)(r))
            r = await r;
        status = (0, status_js_1.toStatus)(r, `PreEnqueue of plugin ${(0, state_js_1.q)(req.plugin)}`);
    }
    catch (e) {
        status = st.failure('PreEnqueue', req.plugin, e);
    }
    return { requestId: req.requestId, status, generation: 0 };
}
async function queueSort(st, req) {
    const out = { requestId: req.requestId, sortKey: EMPTY, status: status_js_1.Status.SUCCESS };
    try {
        (0, state_js_1.malformed)(req);
        const [, p] = st.plugin(req.plugin);
        if (typeof p.sortKey !== 'function' || !req.pod) {
            throw new status_js_1.CallError(`plugin ${(0, state_js_1.q)(req.plugin)} has no QueueSort, or the request has no pod`);
        }
        let k = p.sortKey(req.pod);
        if ((0, state_js_1.isThenable)(k))
            k = await k;
        if (typeof k === 'string')
            out.sortKey = Buffer.from(k, 'utf8');
        else if (k instanceof Uint8Array)
            out.sortKey = k;
        else
            throw new status_js_1.CallError(`sortKey of plugin ${(0, state_js_1.q)(req.plugin)} returned ${(0, status_js_1.describe)(k)}, not a Uint8Array or string`);
    }
    catch (e) {
        out.status = st.failure('QueueSort', req.plugin, e);
    }
    return out;
}
