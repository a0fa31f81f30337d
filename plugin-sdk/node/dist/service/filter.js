"use strict";
// PreFilter and Filter: one call per pod over a batch of nodes, dry-run deltas on
// forks of the plugin's state, failures grouped by status, and FilterBatch (several
// pods' Filter calls in one message).
Object.defineProperty(exports, "__esModule", { value: true });
exports.groupFailures = groupFailures;
exports.preFilter = preFilter;
exports.filter = filter;
exports.filterBatch = filterBatch;
const plugin_js_1 = require("../plugin.js");
const status_js_1 = require("../status.js");
const score_js_1 = require("./score.js");
const state_js_1 = require("./state.js");
/** Groups a Filter reply's failures by status (FilterRequest.groupFailures): each
 * distinct status (code and reasons) once, with the indices of the items failing with
 * it, in item order; groups in the order of their first item. A status may be the
 * plugin's own object (shared by several items, kept by the plugin), so each group
 * gets a copy and the plugin's object is never touched. */
function groupFailures(failures) {
    const groups = [];
    const byStatus = new Map();
    for (const f of failures) {
        const { code, reasons } = f.status;
        const key = JSON.stringify([code, reasons]);
        let g = byStatus.get(key);
        if (g === undefined) {
            g = { status: { code, reasons: [...reasons] }, indices: [] };
            byStatus.set(key, g);
            groups.push(g);
        }
        g.indices.push(f.index);
    }
    return groups;
}
async function preFilter(st, req) {
    const out = {
        requestId: req.requestId,
        status: status_js_1.Status.SUCCESS,
        generation: req.generation,
        hasNodeNames: false,
        nodeNames: [],
    };
    let entry;
    try {
        (0, state_js_1.malformed)(req);
        const [idx, p] = st.plugin(req.plugin);
        const local = (0, plugin_js_1.answersAtNamedGeneration)(p);
        const e = await st.cycle(req.cycle, req.generation, local);
        entry = [e, idx];
        if (typeof p.preFilter !== 'function')
            throw new status_js_1.CallError(`plugin ${(0, state_js_1.q)(req.plugin)} has no PreFilter`);
        st.replicaAt(e, local);
        const version = st.replica.version;
        let r = p.preFilter(st.cycleOf(e, idx));
        if ((0, state_js_1.isThenable)(r)) {
            r = await r;
            st.unmoved(e, local, version);
        }
        const what = `PreFilter of plugin ${(0, state_js_1.q)(req.plugin)}`;
        if (r !== null && typeof r === 'object' && !('code' in r)) {
            const res = r;
            out.status = (0, status_js_1.toStatus)(res.status, what);
            if (res.nodeNames !== undefined && res.nodeNames !== null) {
                if (!Array.isArray(res.nodeNames) || !res.nodeNames.every((n) => typeof n === 'string')) {
                    throw new status_js_1.CallError(`${what} returned nodeNames that are not an array of strings`);
                }
                out.hasNodeNames = true;
                out.nodeNames = res.nodeNames;
            }
        }
        else {
            out.status = (0, status_js_1.toStatus)(r, what);
        }
    }
    catch (e) {
        out.status = st.failure('PreFilter', req.plugin, e);
        out.hasNodeNames = false;
        out.nodeNames = [];
    }
    // A Filter sent right behind (afterPreFilter) waits for this outcome.
    if (entry)
        entry[0].recordPreFilter(entry[1], out.status);
    return out;
}
async function filter(st, req) {
    const out = {
        requestId: req.requestId,
        generation: req.generation,
        evaluated: 0,
        failures: [],
        error: null,
        score: null,
        failureGroups: [],
    };
    try {
        (0, state_js_1.malformed)(req);
        const [failures, ahead] = await filterNodes(st, req);
        out.evaluated = req.nodes.length;
        if (req.groupFailures)
            out.failureGroups = groupFailures(failures);
        else
            out.failures = failures;
        out.score = ahead;
    }
    catch (e) {
        out.error = st.failure('Filter', req.plugin, e);
    }
    return out;
}
/** The calls of a FilterBatch message, each answered as it would be alone on the
 * Filter stream, in order. `each` wraps each call (its span). */
async function filterBatch(st, req, each = (_c, run) => run()) {
    const calls = !req.$malformed && Array.isArray(req.calls) ? req.calls : [];
    const replies = [];
    // One bounded wait for the latest generation the calls name: a replica that
    // never gets there fails them all at once, not one wait after another.
    let missed = req.$malformed ? status_js_1.Status.error(`malformed request: ${req.$malformed}`) : null;
    let latest = 0;
    for (const c of calls)
        latest = Math.max(latest, c.generation);
    try {
        const w = st.reached(latest);
        if (w)
            await w;
    }
    catch (e) {
        missed = st.failure('FilterBatch', '', e);
    }
    for (const call of calls) {
        if (missed) {
            replies.push({
                requestId: call.requestId,
                generation: call.generation,
                evaluated: 0,
                failures: [],
                error: missed,
                score: null,
                failureGroups: [],
            });
        }
        else {
            replies.push(await each(call, () => filter(st, call)));
        }
    }
    return { requestId: req.requestId, replies };
}
async function filterNodes(st, req) {
    const [idx, p] = st.plugin(req.plugin);
    const local = (0, plugin_js_1.answersAtNamedGeneration)(p);
    const e = await st.cycle(req.cycle, req.generation, local);
    if (typeof p.filter !== 'function')
        throw new status_js_1.CallError(`plugin ${(0, state_js_1.q)(req.plugin)} has no Filter`);
    if (req.afterPreFilter) {
        const pf = await (0, state_js_1.pointOutcome)(st, e, e.preFilters, idx, 'Filter named a PreFilter');
        if (pf.code === 'ERROR')
            throw status_js_1.CallError.of(pf);
        if (pf.code !== 'SUCCESS')
            throw new status_js_1.CallError(`Filter sent behind a PreFilter that returned ${pf.code}`);
    }
    const replica = st.replicaAt(e, local);
    const version = replica.version;
    const ids = req.nodes;
    const n = ids.length;
    for (let i = 0; i < n; i++) {
        if (replica.node(ids[i]) === undefined)
            throw new status_js_1.CallError(`unknown node id ${ids[i]}`);
    }
    let deltas;
    if (req.deltas.length > 0) {
        deltas = new Array(n);
        for (const d of req.deltas) {
            if (!(d.index < n))
                throw new status_js_1.CallError(`delta for item ${d.index} of a batch of ${n}`);
            deltas[d.index] = d;
        }
    }
    const cycle = st.cycleOf(e, idx);
    const failures = [];
    let awaited = false;
    const what = `Filter of plugin ${(0, state_js_1.q)(req.plugin)}`;
    // The hot loop: nothing is allocated per node but the failures of the reply.
    for (let i = 0; i < n; i++) {
        const ni = replica.node(ids[i]);
        const d = deltas === undefined ? undefined : deltas[i];
        let r = d === undefined ? p.filter(cycle, ni) : filterWithDelta(st, p, cycle, ni, d);
        if ((0, state_js_1.isThenable)(r)) {
            r = await r;
            awaited = true;
        }
        if (!(0, status_js_1.isSuccessValue)(r))
            failures.push({ index: i, status: (0, status_js_1.toStatus)(r, what) });
    }
    if (awaited)
        st.unmoved(e, local, version);
    let ahead = null;
    if (req.scoreFirst > 0)
        ahead = await (0, score_js_1.scoreAhead)(st, req, p, cycle, deltas, failures);
    return [failures, ahead];
}
/** Filter on a what-if copy of the node: pods removed and added, the plugin's
 * state forked and updated by its removePod/addPod (in that order, as upstream's
 * dry run). A problem with the delta is that item's Error status. */
async function filterWithDelta(st, p, base, node, d) {
    const ni = node.clone();
    const ext = (0, plugin_js_1.hasPreFilterExtensions)(p);
    const fork = base.fork(p.cloneState?.bind(p));
    for (const uid of d.removePods) {
        const pod = ni.removePod(uid);
        if (pod === undefined)
            return status_js_1.Status.error(`delta removes pod ${uid}, which is not on node ${node.name}`);
        if (ext && typeof p.removePod === 'function') {
            let s = p.removePod(fork, pod, ni);
            if ((0, state_js_1.isThenable)(s))
                s = await s;
            if (!(0, status_js_1.isSuccessValue)(s))
                return status_js_1.Status.error(`RemovePod: ${status_js_1.Status.message((0, status_js_1.toStatus)(s, 'RemovePod'))}`);
        }
    }
    const adds = [];
    for (const uid of d.addPods) {
        const pod = st.replica.pod(uid);
        if (pod === undefined)
            return status_js_1.Status.error(`delta adds pod ${uid}, which the replica does not hold`);
        adds.push(pod);
    }
    for (const pod of d.addPodObjects)
        adds.push(pod);
    for (const added of adds) {
        const pod = { ...added, nodeName: ni.name };
        ni.pods.push(pod);
        if (ext && typeof p.addPod === 'function') {
            let s = p.addPod(fork, pod, ni);
            if ((0, state_js_1.isThenable)(s))
                s = await s;
            if (!(0, status_js_1.isSuccessValue)(s))
                return status_js_1.Status.error(`AddPod: ${status_js_1.Status.message((0, status_js_1.toStatus)(s, 'AddPod'))}`);
        }
    }
    return p.filter(fork, ni);
}
