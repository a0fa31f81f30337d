"use strict";
// PreScore, Score and NormalizeScore, and the score-ahead a Filter call may ask for
// (its first passing nodes scored in the same exchange).
Object.defineProperty(exports, "__esModule", { value: true });
exports.scoreAhead = scoreAhead;
exports.normalizeWith = normalizeWith;
exports.score = score;
exports.preScore = preScore;
exports.normalizeScore = normalizeScore;
const labelscore_js_1 = require("../labelscore.js");
const plugin_js_1 = require("../plugin.js");
const status_js_1 = require("../status.js");
const state_js_1 = require("./state.js");
/** PreScore (on a fork), Score and NormalizeScore over the first `scoreFirst`
 * passing items of a Filter batch; null when the plugin does not score or an item
 * has a delta. */
async function scoreAhead(st, req, p, cycle, deltas, failures) {
    if (typeof p.score !== 'function')
        return null;
    const nodes = [];
    let f = 0;
    for (let i = 0; i < req.nodes.length && nodes.length < req.scoreFirst; i++) {
        if (f < failures.length && failures[f].index === i) {
            f++;
            continue;
        }
        if (deltas !== undefined && deltas[i] !== undefined)
            return null;
        nodes.push(st.replica.node(req.nodes[i]));
    }
    try {
        let c = cycle;
        if (req.preScore && typeof p.preScore === 'function') {
            c = cycle.fork(p.cloneState?.bind(p));
            let s = p.preScore(c, nodes);
            if ((0, state_js_1.isThenable)(s))
                s = await s;
            const st = (0, status_js_1.toStatus)(s, `PreScore of plugin ${(0, state_js_1.q)(req.plugin)}`);
            if (st.code !== 'SUCCESS')
                return { status: st, scores: [], normalized: false };
        }
        // rawScores: the scheduler keeps raw scores to reuse for alike pods and
        // normalises them itself.
        const [scores, normalized] = await scoreNodes(st, p, c, nodes, !req.rawScores, req.plugin);
        return { status: status_js_1.Status.SUCCESS, scores, normalized };
    }
    catch (e) {
        return { status: st.failure('Score', req.plugin, e), scores: [], normalized: false };
    }
}
/** Score over `nodes`, then NormalizeScore when asked; the flag says whether the
 * scores are final: true without a NormalizeScore (raw scores are final), false
 * for raw scores the scheduler must still normalise. */
async function scoreNodes(st, p, cycle, nodes, normalize, name) {
    const scores = new Array(nodes.length);
    for (let i = 0; i < nodes.length; i++) {
        let v = p.score(cycle, nodes[i]);
        if ((0, state_js_1.isThenable)(v))
            v = await v;
        if (typeof v !== 'number' || !Number.isSafeInteger(v)) {
            if (v !== null && typeof v === 'object' && 'code' in v) {
                throw status_js_1.CallError.of((0, status_js_1.toStatus)(v, `Score of plugin ${(0, state_js_1.q)(name)}`));
            }
            throw new status_js_1.CallError(`Score of plugin ${(0, state_js_1.q)(name)} returned ${(0, status_js_1.describe)(v)} for node ${nodes[i].name}: a score is an integer`);
        }
        scores[i] = v;
    }
    if (!(0, plugin_js_1.hasNormalize)(p))
        return [scores, true];
    if (!normalize)
        return [scores, false];
    return [await normalizeWith(p, cycle, scores, nodes, name), true];
}
/** The declared standard normalisation, else the plugin's own normalizeScore. */
async function normalizeWith(p, cycle, scores, nodes, name) {
    if ((0, plugin_js_1.normalizeScores)((0, plugin_js_1.scoreNormalizationOf)(p), scores))
        return scores;
    let r = p.normalizeScore(cycle, scores, nodes);
    if ((0, state_js_1.isThenable)(r))
        r = await r;
    let out = scores;
    if (Array.isArray(r)) {
        if (r.length !== scores.length) {
            throw new status_js_1.CallError(`NormalizeScore of plugin ${(0, state_js_1.q)(name)} returned ${r.length} scores for ${scores.length}`);
        }
        out = r;
    }
    else {
        const s = (0, status_js_1.toStatus)(r, `NormalizeScore of plugin ${(0, state_js_1.q)(name)}`);
        if (s.code !== 'SUCCESS')
            throw status_js_1.CallError.of(s);
    }
    for (const v of out) {
        if (typeof v !== 'number' || !Number.isSafeInteger(v)) {
            throw new status_js_1.CallError(`NormalizeScore of plugin ${(0, state_js_1.q)(name)} left ${(0, status_js_1.describe)(v)}: a score is an integer`);
        }
    }
    return out;
}
async function score(st, req) {
    const out = {
        requestId: req.requestId,
        status: status_js_1.Status.SUCCESS,
        generation: req.generation,
        scores: [],
        normalized: false,
    };
    try {
        (0, state_js_1.malformed)(req);
        const [idx, p] = st.plugin(req.plugin);
        const local = (0, plugin_js_1.answersAtNamedGeneration)(p);
        const e = await st.cycle(req.cycle, req.generation, local);
        if (typeof p.score !== 'function')
            throw new status_js_1.CallError(`plugin ${(0, state_js_1.q)(req.plugin)} has no Score`);
        if (req.afterPreScore) {
            const s = await preScoreOutcome(st, e, idx);
            if (s.code !== 'SUCCESS')
                throw status_js_1.CallError.of(s);
        }
        st.replicaAt(e, local);
        const version = st.replica.version;
        const nodes = st.nodes(req.nodes);
        const [scores, normalized] = await scoreNodes(st, p, st.cycleOf(e, idx), nodes, req.normalize, req.plugin);
        st.unmoved(e, local, version);
        out.scores = scores;
        out.normalized = normalized;
    }
    catch (e) {
        out.status = st.failure('Score', req.plugin, e);
    }
    return out;
}
/** Waits (bounded) for this cycle's PreScore of plugin `idx`, sent just before. */
function preScoreOutcome(st, e, idx) {
    return (0, state_js_1.pointOutcome)(st, e, e.preScores, idx, 'Score named a PreScore');
}
async function preScore(st, req) {
    let status;
    let labelScores;
    try {
        (0, state_js_1.malformed)(req);
        const [idx, p] = st.plugin(req.plugin);
        const local = (0, plugin_js_1.answersAtNamedGeneration)(p);
        const e = await st.cycle(req.cycle, req.generation, local);
        try {
            if (typeof p.preScore !== 'function')
                throw new status_js_1.CallError(`plugin ${(0, state_js_1.q)(req.plugin)} has no PreScore`);
            st.replicaAt(e, local);
            const version = st.replica.version;
            const nodes = st.nodes(req.nodes);
            const cycle = st.cycleOf(e, idx);
            let r = p.preScore(cycle, nodes);
            if ((0, state_js_1.isThenable)(r)) {
                r = await r;
                st.unmoved(e, local, version);
            }
            status = e.recordPreScore(idx, (0, status_js_1.toStatus)(r, `PreScore of plugin ${(0, state_js_1.q)(req.plugin)}`));
            if (status_js_1.Status.isSuccess(status))
                labelScores = (0, labelscore_js_1.labelScoresReply)(cycle);
        }
        catch (err) {
            status = e.recordPreScore(idx, st.failure('PreScore', req.plugin, err));
        }
    }
    catch (e) {
        status = st.failure('PreScore', req.plugin, e);
    }
    return { requestId: req.requestId, status, generation: req.generation, labelScores };
}
async function normalizeScore(st, req) {
    const out = {
        requestId: req.requestId,
        status: status_js_1.Status.SUCCESS,
        generation: req.generation,
        scores: [],
        normalized: false,
    };
    try {
        (0, state_js_1.malformed)(req);
        const [idx, p] = st.plugin(req.plugin);
        const local = (0, plugin_js_1.answersAtNamedGeneration)(p);
        const e = await st.cycle(req.cycle, req.generation, local);
        if (!(0, plugin_js_1.hasNormalize)(p)) {
            throw new status_js_1.CallError(`plugin ${(0, state_js_1.q)(req.plugin)} has no NormalizeScore`);
        }
        st.replicaAt(e, local);
        if (req.scores.length !== req.nodes.length) {
            throw new status_js_1.CallError(`NormalizeScore with ${req.scores.length} scores for ${req.nodes.length} nodes`);
        }
        const nodes = st.nodes(req.nodes);
        out.scores = await normalizeWith(p, st.cycleOf(e, idx), req.scores.slice(), nodes, req.plugin);
        out.normalized = true;
    }
    catch (e) {
        out.status = st.failure('NormalizeScore', req.plugin, e);
        out.scores = [];
    }
    return out;
}
