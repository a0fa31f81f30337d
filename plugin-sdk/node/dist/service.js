"use strict";
// The protocol, transport aside (a port of plugin-sdk/rust/src/service.rs): the replica
// and the cycles, applied from Replicate messages, and one method per extension-point
// call that evaluates it against the replica at the generation it names and returns
// its reply. The methods never throw: a malformed call, an unknown plugin, cycle or
// node, a point the plugin lacks, or an exception in plugin code is an Error status
// in that call's reply. server.ts puts them on gRPC streams.
Object.defineProperty(exports, "__esModule", { value: true });
exports.HandshakeError = exports.PluginService = exports.MAX_CYCLES = exports.CAPABILITY_REPLICATE_BATCH = exports.CAPABILITY_FILTER_BATCH = exports.PROTOCOL_VERSION = void 0;
exports.consoleLogger = consoleLogger;
const plugin_js_1 = require("./plugin.js");
const snapshot_js_1 = require("./snapshot.js");
const status_js_1 = require("./status.js");
const types_js_1 = require("./types.js");
exports.PROTOCOL_VERSION = 'v1';
exports.CAPABILITY_FILTER_BATCH = 'filter-batch';
exports.CAPABILITY_REPLICATE_BATCH = 'replicate-batch';
/** Cycles held at most (the oldest is dropped past it): a scheduler that never sends
 * CycleEnd cannot grow the sidecar without bound. */
exports.MAX_CYCLES = 16384;
/** One scheduling attempt the sidecar knows about (CycleStart to CycleEnd). */
class Entry {
    id;
    pod;
    profile;
    generation;
    snapshotGeneration;
    /** The plugins' Cycles (their state), by plugin index, made at first use. */
    cycles;
    /** PreScore outcomes by plugin index, for Score calls sent right behind them. */
    preScores = new Map();
    preScoreWaiters = new Set();
    ended = false;
    constructor(id, pod, profile, 
    /** Generation of the CycleStart: the cycle's calls name it. */
    generation, 
    /** Replica generation the cycle's scheduling calls are evaluated at. */
    snapshotGeneration, plugins) {
        this.id = id;
        this.pod = pod;
        this.profile = profile;
        this.generation = generation;
        this.snapshotGeneration = snapshotGeneration;
        this.cycles = new Array(plugins).fill(undefined);
    }
    recordPreScore(idx, s) {
        this.preScores.set(idx, s);
        for (const w of this.preScoreWaiters)
            w();
        return s;
    }
}
function isThenable(v) {
    return v !== null && (typeof v === 'object' || typeof v === 'function') && typeof v.then === 'function';
}
const q = (s) => JSON.stringify(s);
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
class PluginService {
    plugins;
    replica = new snapshot_js_1.Snapshot();
    /** Generation of the last Replicate message applied (any kind). */
    applied = 0;
    cycles = new Map();
    /** Pods some plugin answered WAIT for at Permit, by uid. */
    waiting = new Map();
    /** Writes to the open Permit stream, for decisions about waiting pods. */
    permitSink = null;
    generationWaitMs;
    maxBatchNodes;
    capabilities;
    log;
    #byName = new Map();
    #handles;
    #waiters = [];
    #closed = false;
    #logged = { window: 0, count: 0, dropped: 0 };
    constructor(plugins, options = {}) {
        (0, plugin_js_1.checkPlugins)(plugins);
        this.plugins = plugins;
        plugins.forEach((p, i) => this.#byName.set(p.name, i));
        this.generationWaitMs = options.generationWaitMs ?? 5000;
        this.maxBatchNodes = options.maxBatchNodes ?? 0;
        this.capabilities = options.capabilities ?? true;
        this.log = options.logger ?? consoleLogger();
        this.#handles = plugins.map((p) => this.#makeHandle(p.name));
    }
    /** The handle a plugin decides about its waiting pods with. */
    permitHandle(plugin) {
        const i = this.#byName.get(plugin);
        if (i === undefined)
            throw new Error(`no plugin named ${q(plugin)}`);
        return this.#handles[i];
    }
    // ---------------------------------------------------------------- handshake
    /** The handshake reply; throws a FAILED_PRECONDITION-worthy error when the
     * scheduler offers no version this SDK speaks. */
    handshake(req) {
        const versions = Array.isArray(req.protocolVersions) ? req.protocolVersions : [];
        if (!versions.includes(exports.PROTOCOL_VERSION)) {
            throw new HandshakeError(`this sidecar speaks protocol ${exports.PROTOCOL_VERSION}; the scheduler offered ${JSON.stringify(versions)}`);
        }
        const offered = Array.isArray(req.capabilities) ? req.capabilities : [];
        return {
            protocolVersion: exports.PROTOCOL_VERSION,
            plugins: this.plugins.map((p) => ({
                name: p.name,
                extensionPoints: (0, plugin_js_1.extensionPoints)(p),
                preFilterExtensions: (0, plugin_js_1.hasPreFilterExtensions)(p),
                normalizeScore: (0, plugin_js_1.hasNormalize)(p),
                events: (0, plugin_js_1.pluginEvents)(p),
                nodeLocal: !!p.nodeLocal,
                signature: (0, plugin_js_1.pluginSignature)(p),
                scoreNormalization: plugin_js_1.SCORE_NORMALIZATIONS.get(typeof p.score === 'function' ? (0, plugin_js_1.scoreNormalizationOf)(p) : 'custom'),
            })),
            maxBatchNodes: this.maxBatchNodes,
            capabilities: this.capabilities
                ? offered.filter((c) => c === exports.CAPABILITY_FILTER_BATCH || c === exports.CAPABILITY_REPLICATE_BATCH)
                : [],
        };
    }
    // ---------------------------------------------------------------- replication
    /** Applies one Replicate message (without its `more`); returns the generation the
     * next must have. `expect` is undefined before the stream's first message. Throws
     * ReplicationError when the stream must end (gap, no full snapshot first, a
     * delta the replica cannot apply). */
    apply(msg, expect) {
        if (msg.$malformed) {
            throw new snapshot_js_1.ReplicationError(`a Replicate message could not be decoded: ${msg.$malformed}`);
        }
        const g = msg.generation;
        const full = msg.kind === 'delta' && !!msg.delta?.full;
        if (expect === undefined && !full) {
            throw new snapshot_js_1.ReplicationError(`the first message of a Replicate stream must be a full snapshot (got generation ${g})`);
        }
        if (expect !== undefined && !full && g !== expect) {
            throw new snapshot_js_1.ReplicationError(`generation gap: expected ${expect}, got ${g}`);
        }
        switch (msg.kind) {
            case 'delta': {
                if (full) {
                    this.#endCycles();
                    this.waiting.clear();
                }
                this.replica.apply(g, msg.delta);
                break;
            }
            case 'cycleStart': {
                const c = msg.cycleStart;
                const pod = c.pod ?? (0, types_js_1.emptyPod)();
                this.replica.noteCyclePod(pod);
                const old = this.cycles.get(c.cycle);
                if (old)
                    this.#endCycle(old);
                if (this.cycles.size >= exports.MAX_CYCLES) {
                    const oldest = this.cycles.keys().next().value;
                    this.#endCycle(this.cycles.get(oldest));
                }
                this.cycles.set(c.cycle, new Entry(c.cycle, pod, c.profile, g, this.replica.generation, this.plugins.length));
                break;
            }
            case 'cycleEnd': {
                const e = this.cycles.get(msg.cycleEnd.cycle);
                if (e) {
                    this.#endCycle(e);
                    this.waiting.delete(e.pod.uid);
                }
                break;
            }
            default:
                throw new snapshot_js_1.ReplicationError(`generation ${g}: empty Replicate message`);
        }
        this.applied = g;
        this.#wake();
        return g + 1;
    }
    #endCycle(e) {
        e.ended = true;
        this.cycles.delete(e.id);
        for (const w of e.preScoreWaiters)
            w();
    }
    #endCycles() {
        for (const e of [...this.cycles.values()])
            this.#endCycle(e);
    }
    #wake() {
        if (this.#waiters.length === 0)
            return;
        const still = [];
        for (const w of this.#waiters) {
            if (w.generation <= this.applied) {
                clearTimeout(w.timer);
                w.resolve();
            }
            else
                still.push(w);
        }
        this.#waiters = still;
    }
    /** Resolves once the replica has applied `generation`, or rejects with a CallError
     * after the bounded wait. Undefined when it has already (no promise, no tick). */
    reached(generation) {
        if (this.applied >= generation)
            return undefined;
        if (this.#closed)
            return Promise.reject(new status_js_1.CallError('the sidecar is shutting down'));
        return new Promise((resolve, reject) => {
            const w = {
                generation,
                resolve,
                reject,
                timer: setTimeout(() => {
                    this.#waiters = this.#waiters.filter((x) => x !== w);
                    reject(new status_js_1.CallError(`generation ${generation} not reached within ${this.generationWaitMs / 1000}s (replica at ${this.applied})`));
                }, this.generationWaitMs),
            };
            this.#waiters.push(w);
        });
    }
    /** Fails every pending generation wait (shutdown). */
    close() {
        this.#closed = true;
        for (const w of this.#waiters) {
            clearTimeout(w.timer);
            w.reject(new status_js_1.CallError('the sidecar is shutting down'));
        }
        this.#waiters = [];
    }
    // ---------------------------------------------------------------- shared steps
    #plugin(name) {
        const i = this.#byName.get(name);
        if (i === undefined)
            throw new status_js_1.CallError(`this sidecar serves no plugin named ${q(String(name))}`);
        return [i, this.plugins[i]];
    }
    /** The cycle a call names, once the replica has reached its generation. A
     * node-local plugin's call (`relaxed`) may name a generation after the cycle's
     * start. */
    async #cycle(cycle, generation, relaxed) {
        const w = this.reached(generation);
        if (w)
            await w;
        const e = this.cycles.get(cycle);
        if (e === undefined)
            throw new status_js_1.CallError(`cycle ${cycle} is unknown (never started, or already ended)`);
        if (e.generation === generation || (relaxed && e.generation <= generation))
            return e;
        throw new status_js_1.CallError(`cycle ${cycle} started at generation ${e.generation}, not ${generation}`);
    }
    /** For a scheduling-cycle call: the replica must still be at the cycle's
     * generation, never a later one, unless the plugin is node-local. */
    #replicaAt(e, relaxed) {
        const r = this.replica;
        if (!relaxed && r.generation !== e.snapshotGeneration) {
            throw new status_js_1.CallError(`the replica moved on to generation ${r.generation} since cycle ${e.id} (at ${e.snapshotGeneration}) started`);
        }
        return r;
    }
    /** After a plugin method returned a Promise the replica may have changed under the
     * call: a call that must be evaluated at its cycle's generation fails then. */
    #unmoved(e, relaxed, version) {
        if (e.ended)
            throw new status_js_1.CallError(`cycle ${e.id} ended while the call was evaluated`);
        if (!relaxed && this.replica.version !== version) {
            throw new status_js_1.CallError(`the replica changed while the call was evaluated (cycle ${e.id}); the scheduler asks again`);
        }
    }
    #cycleOf(e, idx) {
        let c = e.cycles[idx];
        if (c === undefined) {
            c = new plugin_js_1.Cycle(e.id, e.pod, e.profile, this.replica);
            e.cycles[idx] = c;
        }
        return c;
    }
    #nodes(ids) {
        const out = new Array(ids.length);
        for (let i = 0; i < ids.length; i++) {
            const ni = this.replica.node(ids[i]);
            if (ni === undefined)
                throw new status_js_1.CallError(`unknown node id ${ids[i]}`);
            out[i] = ni;
        }
        return out;
    }
    /** The status a failed call answers: a CallError's own, or an Error status for an
     * exception in plugin code (logged, rate-limited). */
    #failure(point, plugin, e) {
        if (e instanceof status_js_1.CallError)
            return e.status;
        const msg = e instanceof Error ? e.message : (0, status_js_1.describe)(e);
        this.#logThrow(point, plugin, e);
        return status_js_1.Status.error(`${point} of plugin ${q(String(plugin))} threw: ${msg}`);
    }
    #logThrow(point, plugin, e) {
        const now = Date.now();
        const l = this.#logged;
        if (now - l.window > 60_000) {
            if (l.dropped > 0)
                this.log.error(`${l.dropped} more plugin exceptions in the last minute were not logged`);
            l.window = now;
            l.count = 0;
            l.dropped = 0;
        }
        if (l.count++ >= 20) {
            l.dropped++;
            return;
        }
        const detail = e instanceof Error ? (e.stack ?? e.message) : (0, status_js_1.describe)(e);
        this.log.error(`${point} of plugin ${q(String(plugin))} threw (answered with an Error status): ${detail}`);
    }
    static #malformed(req) {
        if (req.$malformed)
            throw new status_js_1.CallError(`malformed request: ${req.$malformed}`);
    }
    // ---------------------------------------------------------------- calls
    async preEnqueue(req) {
        let status;
        try {
            PluginService.#malformed(req);
            const [, p] = this.#plugin(req.plugin);
            if (typeof p.preEnqueue !== 'function')
                throw new status_js_1.CallError(`plugin ${q(req.plugin)} has no PreEnqueue`);
            if (!req.pod)
                throw new status_js_1.CallError('PreEnqueue request without a pod');
            let r = p.preEnqueue(req.pod);
            if (isThenable(r))
                r = await r;
            status = (0, status_js_1.toStatus)(r, `PreEnqueue of plugin ${q(req.plugin)}`);
        }
        catch (e) {
            status = this.#failure('PreEnqueue', req.plugin, e);
        }
        return { requestId: req.requestId, status, generation: 0 };
    }
    async queueSort(req) {
        const out = { requestId: req.requestId, sortKey: EMPTY, status: status_js_1.Status.SUCCESS };
        try {
            PluginService.#malformed(req);
            const [, p] = this.#plugin(req.plugin);
            if (typeof p.sortKey !== 'function' || !req.pod) {
                throw new status_js_1.CallError(`plugin ${q(req.plugin)} has no QueueSort, or the request has no pod`);
            }
            let k = p.sortKey(req.pod);
            if (isThenable(k))
                k = await k;
            if (typeof k === 'string')
                out.sortKey = Buffer.from(k, 'utf8');
            else if (k instanceof Uint8Array)
                out.sortKey = k;
            else
                throw new status_js_1.CallError(`sortKey of plugin ${q(req.plugin)} returned ${(0, status_js_1.describe)(k)}, not a Uint8Array or string`);
        }
        catch (e) {
            out.status = this.#failure('QueueSort', req.plugin, e);
        }
        return out;
    }
    async preFilter(req) {
        const out = {
            requestId: req.requestId,
            status: status_js_1.Status.SUCCESS,
            generation: req.generation,
            hasNodeNames: false,
            nodeNames: [],
        };
        try {
            PluginService.#malformed(req);
            const [idx, p] = this.#plugin(req.plugin);
            const local = !!p.nodeLocal;
            const e = await this.#cycle(req.cycle, req.generation, local);
            if (typeof p.preFilter !== 'function')
                throw new status_js_1.CallError(`plugin ${q(req.plugin)} has no PreFilter`);
            this.#replicaAt(e, local);
            const version = this.replica.version;
            let r = p.preFilter(this.#cycleOf(e, idx));
            if (isThenable(r)) {
                r = await r;
                this.#unmoved(e, local, version);
            }
            const what = `PreFilter of plugin ${q(req.plugin)}`;
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
            out.status = this.#failure('PreFilter', req.plugin, e);
            out.hasNodeNames = false;
            out.nodeNames = [];
        }
        return out;
    }
    async filter(req) {
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
            PluginService.#malformed(req);
            const [failures, ahead] = await this.#filter(req);
            out.evaluated = req.nodes.length;
            if (req.groupFailures)
                out.failureGroups = groupFailures(failures);
            else
                out.failures = failures;
            out.score = ahead;
        }
        catch (e) {
            out.error = this.#failure('Filter', req.plugin, e);
        }
        return out;
    }
    /** The calls of a FilterBatch message, each answered as it would be alone on the
     * Filter stream, in order. `each` wraps each call (its span). */
    async filterBatch(req, each = (_c, run) => run()) {
        const calls = !req.$malformed && Array.isArray(req.calls) ? req.calls : [];
        const replies = [];
        // One bounded wait for the latest generation the calls name: a replica that
        // never gets there fails them all at once, not one wait after another.
        let missed = req.$malformed ? status_js_1.Status.error(`malformed request: ${req.$malformed}`) : null;
        let latest = 0;
        for (const c of calls)
            latest = Math.max(latest, c.generation);
        try {
            const w = this.reached(latest);
            if (w)
                await w;
        }
        catch (e) {
            missed = this.#failure('FilterBatch', '', e);
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
                replies.push(await each(call, () => this.filter(call)));
            }
        }
        return { requestId: req.requestId, replies };
    }
    async #filter(req) {
        const [idx, p] = this.#plugin(req.plugin);
        const local = !!p.nodeLocal;
        const e = await this.#cycle(req.cycle, req.generation, local);
        if (typeof p.filter !== 'function')
            throw new status_js_1.CallError(`plugin ${q(req.plugin)} has no Filter`);
        const replica = this.#replicaAt(e, local);
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
        const cycle = this.#cycleOf(e, idx);
        const failures = [];
        let awaited = false;
        const what = `Filter of plugin ${q(req.plugin)}`;
        // The hot loop: nothing is allocated per node but the failures of the reply.
        for (let i = 0; i < n; i++) {
            const ni = replica.node(ids[i]);
            const d = deltas === undefined ? undefined : deltas[i];
            let r = d === undefined ? p.filter(cycle, ni) : this.#filterWithDelta(p, cycle, ni, d);
            if (isThenable(r)) {
                r = await r;
                awaited = true;
            }
            if (!(0, status_js_1.isSuccessValue)(r))
                failures.push({ index: i, status: (0, status_js_1.toStatus)(r, what) });
        }
        if (awaited)
            this.#unmoved(e, local, version);
        let ahead = null;
        if (req.scoreFirst > 0)
            ahead = await this.#scoreAhead(req, p, cycle, deltas, failures);
        return [failures, ahead];
    }
    /** Filter on a what-if copy of the node: pods removed and added, the plugin's
     * state forked and updated by its removePod/addPod (in that order, as upstream's
     * dry run). A problem with the delta is that item's Error status. */
    async #filterWithDelta(p, base, node, d) {
        const ni = node.clone();
        const ext = (0, plugin_js_1.hasPreFilterExtensions)(p);
        const fork = base.fork(p.cloneState?.bind(p));
        for (const uid of d.removePods) {
            const pod = ni.removePod(uid);
            if (pod === undefined)
                return status_js_1.Status.error(`delta removes pod ${uid}, which is not on node ${node.name}`);
            if (ext && typeof p.removePod === 'function') {
                let s = p.removePod(fork, pod, ni);
                if (isThenable(s))
                    s = await s;
                if (!(0, status_js_1.isSuccessValue)(s))
                    return status_js_1.Status.error(`RemovePod: ${status_js_1.Status.message((0, status_js_1.toStatus)(s, 'RemovePod'))}`);
            }
        }
        const adds = [];
        for (const uid of d.addPods) {
            const pod = this.replica.pod(uid);
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
                if (isThenable(s))
                    s = await s;
                if (!(0, status_js_1.isSuccessValue)(s))
                    return status_js_1.Status.error(`AddPod: ${status_js_1.Status.message((0, status_js_1.toStatus)(s, 'AddPod'))}`);
            }
        }
        return p.filter(fork, ni);
    }
    /** PreScore (on a fork), Score and NormalizeScore over the first `scoreFirst`
     * passing items of a Filter batch; null when the plugin does not score or an item
     * has a delta. */
    async #scoreAhead(req, p, cycle, deltas, failures) {
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
            nodes.push(this.replica.node(req.nodes[i]));
        }
        try {
            let c = cycle;
            if (req.preScore && typeof p.preScore === 'function') {
                c = cycle.fork(p.cloneState?.bind(p));
                let s = p.preScore(c, nodes);
                if (isThenable(s))
                    s = await s;
                const st = (0, status_js_1.toStatus)(s, `PreScore of plugin ${q(req.plugin)}`);
                if (st.code !== 'SUCCESS')
                    return { status: st, scores: [], normalized: false };
            }
            // rawScores: the scheduler keeps raw scores to reuse for alike pods and
            // normalises them itself.
            const [scores, normalized] = await this.#scoreNodes(p, c, nodes, !req.rawScores, req.plugin);
            return { status: status_js_1.Status.SUCCESS, scores, normalized };
        }
        catch (e) {
            return { status: this.#failure('Score', req.plugin, e), scores: [], normalized: false };
        }
    }
    /** Score over `nodes`, then NormalizeScore when asked; the flag says whether the
     * scores are final: true without a NormalizeScore (raw scores are final), false
     * for raw scores the scheduler must still normalise. */
    async #scoreNodes(p, cycle, nodes, normalize, name) {
        const scores = new Array(nodes.length);
        for (let i = 0; i < nodes.length; i++) {
            let v = p.score(cycle, nodes[i]);
            if (isThenable(v))
                v = await v;
            if (typeof v !== 'number' || !Number.isSafeInteger(v)) {
                if (v !== null && typeof v === 'object' && 'code' in v) {
                    throw status_js_1.CallError.of((0, status_js_1.toStatus)(v, `Score of plugin ${q(name)}`));
                }
                throw new status_js_1.CallError(`Score of plugin ${q(name)} returned ${(0, status_js_1.describe)(v)} for node ${nodes[i].name}: a score is an integer`);
            }
            scores[i] = v;
        }
        if (!(0, plugin_js_1.hasNormalize)(p))
            return [scores, true];
        if (!normalize)
            return [scores, false];
        return [await this.#normalize(p, cycle, scores, nodes, name), true];
    }
    /** The declared standard normalisation, else the plugin's own normalizeScore. */
    async #normalize(p, cycle, scores, nodes, name) {
        if ((0, plugin_js_1.normalizeScores)((0, plugin_js_1.scoreNormalizationOf)(p), scores))
            return scores;
        let r = p.normalizeScore(cycle, scores, nodes);
        if (isThenable(r))
            r = await r;
        let out = scores;
        if (Array.isArray(r)) {
            if (r.length !== scores.length) {
                throw new status_js_1.CallError(`NormalizeScore of plugin ${q(name)} returned ${r.length} scores for ${scores.length}`);
            }
            out = r;
        }
        else {
            const s = (0, status_js_1.toStatus)(r, `NormalizeScore of plugin ${q(name)}`);
            if (s.code !== 'SUCCESS')
                throw status_js_1.CallError.of(s);
        }
        for (const v of out) {
            if (typeof v !== 'number' || !Number.isSafeInteger(v)) {
                throw new status_js_1.CallError(`NormalizeScore of plugin ${q(name)} left ${(0, status_js_1.describe)(v)}: a score is an integer`);
            }
        }
        return out;
    }
    async score(req) {
        const out = {
            requestId: req.requestId,
            status: status_js_1.Status.SUCCESS,
            generation: req.generation,
            scores: [],
            normalized: false,
        };
        try {
            PluginService.#malformed(req);
            const [idx, p] = this.#plugin(req.plugin);
            const local = !!p.nodeLocal;
            const e = await this.#cycle(req.cycle, req.generation, local);
            if (typeof p.score !== 'function')
                throw new status_js_1.CallError(`plugin ${q(req.plugin)} has no Score`);
            if (req.afterPreScore) {
                const s = await this.#preScoreOutcome(e, idx);
                if (s.code !== 'SUCCESS')
                    throw status_js_1.CallError.of(s);
            }
            this.#replicaAt(e, local);
            const version = this.replica.version;
            const nodes = this.#nodes(req.nodes);
            const [scores, normalized] = await this.#scoreNodes(p, this.#cycleOf(e, idx), nodes, req.normalize, req.plugin);
            this.#unmoved(e, local, version);
            out.scores = scores;
            out.normalized = normalized;
        }
        catch (e) {
            out.status = this.#failure('Score', req.plugin, e);
        }
        return out;
    }
    /** Waits (bounded) for this cycle's PreScore of plugin `idx`, sent just before. */
    #preScoreOutcome(e, idx) {
        const have = e.preScores.get(idx);
        if (have)
            return Promise.resolve(have);
        return new Promise((resolve, reject) => {
            const done = () => {
                const s = e.preScores.get(idx);
                if (s === undefined && !e.ended)
                    return;
                clearTimeout(timer);
                e.preScoreWaiters.delete(done);
                if (s !== undefined)
                    resolve(s);
                else
                    reject(new status_js_1.CallError(`cycle ${e.id} ended while Score waited for its PreScore`));
            };
            const timer = setTimeout(() => {
                e.preScoreWaiters.delete(done);
                reject(new status_js_1.CallError(`Score named a PreScore of cycle ${e.id} that did not arrive within ${this.generationWaitMs / 1000}s`));
            }, this.generationWaitMs);
            e.preScoreWaiters.add(done);
        });
    }
    async preScore(req) {
        let status;
        try {
            PluginService.#malformed(req);
            const [idx, p] = this.#plugin(req.plugin);
            const local = !!p.nodeLocal;
            const e = await this.#cycle(req.cycle, req.generation, local);
            try {
                if (typeof p.preScore !== 'function')
                    throw new status_js_1.CallError(`plugin ${q(req.plugin)} has no PreScore`);
                this.#replicaAt(e, local);
                const version = this.replica.version;
                const nodes = this.#nodes(req.nodes);
                let r = p.preScore(this.#cycleOf(e, idx), nodes);
                if (isThenable(r)) {
                    r = await r;
                    this.#unmoved(e, local, version);
                }
                status = e.recordPreScore(idx, (0, status_js_1.toStatus)(r, `PreScore of plugin ${q(req.plugin)}`));
            }
            catch (err) {
                status = e.recordPreScore(idx, this.#failure('PreScore', req.plugin, err));
            }
        }
        catch (e) {
            status = this.#failure('PreScore', req.plugin, e);
        }
        return { requestId: req.requestId, status, generation: req.generation };
    }
    async normalizeScore(req) {
        const out = {
            requestId: req.requestId,
            status: status_js_1.Status.SUCCESS,
            generation: req.generation,
            scores: [],
            normalized: false,
        };
        try {
            PluginService.#malformed(req);
            const [idx, p] = this.#plugin(req.plugin);
            const local = !!p.nodeLocal;
            const e = await this.#cycle(req.cycle, req.generation, local);
            if (!(0, plugin_js_1.hasNormalize)(p)) {
                throw new status_js_1.CallError(`plugin ${q(req.plugin)} has no NormalizeScore`);
            }
            this.#replicaAt(e, local);
            if (req.scores.length !== req.nodes.length) {
                throw new status_js_1.CallError(`NormalizeScore with ${req.scores.length} scores for ${req.nodes.length} nodes`);
            }
            const nodes = this.#nodes(req.nodes);
            out.scores = await this.#normalize(p, this.#cycleOf(e, idx), req.scores.slice(), nodes, req.plugin);
            out.normalized = true;
        }
        catch (e) {
            out.status = this.#failure('NormalizeScore', req.plugin, e);
            out.scores = [];
        }
        return out;
    }
    async postFilter(req) {
        const out = {
            requestId: req.requestId,
            status: status_js_1.Status.SUCCESS,
            generation: req.generation,
            nominatedNodeName: '',
        };
        try {
            PluginService.#malformed(req);
            const [idx, p] = this.#plugin(req.plugin);
            const local = !!p.nodeLocal;
            const e = await this.#cycle(req.cycle, req.generation, local);
            if (typeof p.postFilter !== 'function')
                throw new status_js_1.CallError(`plugin ${q(req.plugin)} has no PostFilter`);
            this.#replicaAt(e, local);
            const statuses = new Map();
            for (const [k, v] of Object.entries(req.nodeStatuses ?? {}))
                statuses.set(k, (0, status_js_1.fromWire)(v));
            let r = p.postFilter(this.#cycleOf(e, idx), statuses);
            if (isThenable(r))
                r = await r;
            const what = `PostFilter of plugin ${q(req.plugin)}`;
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
            out.status = this.#failure('PostFilter', req.plugin, e);
            out.nominatedNodeName = '';
        }
        return out;
    }
    /** Reserve, Unreserve, PreBind, Bind, PostBind: a cycle, a node, a status. */
    async cycleCall(req, point) {
        let status;
        try {
            PluginService.#malformed(req);
            const [idx, p] = this.#plugin(req.plugin);
            const e = await this.#cycle(req.cycle, req.generation, !!p.nodeLocal);
            const missing = () => new status_js_1.CallError(`plugin ${q(req.plugin)} has no ${point}`);
            const cycle = this.#cycleOf(e, idx);
            const node = req.nodeName;
            const what = `${point} of plugin ${q(req.plugin)}`;
            let r;
            switch (point) {
                case 'Reserve':
                    if (typeof p.reserve !== 'function' && typeof p.unreserve !== 'function')
                        throw missing();
                    r = typeof p.reserve === 'function' ? p.reserve(cycle, node) : undefined;
                    if (isThenable(r))
                        r = await r;
                    status = (0, status_js_1.toStatus)(r, what);
                    break;
                case 'Unreserve':
                    if (typeof p.reserve !== 'function' && typeof p.unreserve !== 'function')
                        throw missing();
                    r = typeof p.unreserve === 'function' ? p.unreserve(cycle, node) : undefined;
                    if (isThenable(r))
                        await r;
                    status = status_js_1.Status.SUCCESS;
                    break;
                case 'PreBind':
                    if (typeof p.preBind !== 'function')
                        throw missing();
                    r = p.preBind(cycle, node);
                    if (isThenable(r))
                        r = await r;
                    status = (0, status_js_1.toStatus)(r, what);
                    break;
                case 'Bind':
                    if (typeof p.bind !== 'function')
                        throw missing();
                    r = p.bind(cycle, node);
                    if (isThenable(r))
                        r = await r;
                    status = (0, status_js_1.toStatus)(r, what);
                    break;
                case 'PostBind':
                    if (typeof p.postBind !== 'function')
                        throw missing();
                    r = p.postBind(cycle, node);
                    if (isThenable(r))
                        await r;
                    status = status_js_1.Status.SUCCESS;
                    break;
            }
        }
        catch (e) {
            status = this.#failure(point, req.plugin, e);
        }
        return { requestId: req.requestId, status: status, generation: req.generation };
    }
    async permit(req) {
        const out = {
            requestId: req.requestId,
            status: status_js_1.Status.SUCCESS,
            generation: req.generation,
            timeoutMillis: 0,
            decision: null,
        };
        try {
            PluginService.#malformed(req);
            const [idx, p] = this.#plugin(req.plugin);
            const e = await this.#cycle(req.cycle, req.generation, !!p.nodeLocal);
            if (typeof p.permit !== 'function')
                throw new status_js_1.CallError(`plugin ${q(req.plugin)} has no Permit`);
            // The pod is registered as waiting only after the plugin answers WAIT:
            // waitingPods() inside permit lists its siblings, not itself.
            let r = p.permit(this.#cycleOf(e, idx), req.nodeName, this.#handles[idx]);
            if (isThenable(r))
                r = await r;
            const what = `Permit of plugin ${q(req.plugin)}`;
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
                let w = this.waiting.get(e.pod.uid);
                if (!w) {
                    w = { pod: e.pod, plugins: [] };
                    this.waiting.set(e.pod.uid, w);
                }
                if (!w.plugins.includes(req.plugin))
                    w.plugins.push(req.plugin);
            }
            out.status = status;
            out.timeoutMillis = timeout;
        }
        catch (e) {
            out.status = this.#failure('Permit', req.plugin, e);
            out.timeoutMillis = 0;
        }
        return out;
    }
    #makeHandle(plugin) {
        return {
            plugin,
            allow: (uid) => this.#decide(plugin, uid, true, ''),
            reject: (uid, message = '') => this.#decide(plugin, uid, false, String(message)),
            waitingPods: () => {
                const out = [];
                for (const w of this.waiting.values())
                    if (w.plugins.includes(plugin))
                        out.push(w.pod);
                return out;
            },
        };
    }
    #decide(plugin, uid, allow, message) {
        const w = this.waiting.get(uid);
        if (!w)
            return false;
        const i = w.plugins.indexOf(plugin);
        if (i < 0)
            return false;
        w.plugins.splice(i, 1);
        if (!allow || w.plugins.length === 0)
            this.waiting.delete(uid);
        const sink = this.permitSink;
        if (!sink)
            return false;
        sink({
            requestId: 0,
            status: null,
            generation: 0,
            timeoutMillis: 0,
            decision: { podUid: uid, plugin, allow, message },
        });
        return true;
    }
}
exports.PluginService = PluginService;
const EMPTY = new Uint8Array(0);
class HandshakeError extends Error {
}
exports.HandshakeError = HandshakeError;
function consoleLogger(prefix = 'switchyard-plugin') {
    const debug = /^(1|true|debug)$/i.test(process.env.SWITCHYARD_PLUGIN_DEBUG ?? '');
    return {
        info: (m) => console.error(`${prefix}: ${m}`),
        warn: (m) => console.error(`${prefix}: warning: ${m}`),
        error: (m) => console.error(`${prefix}: error: ${m}`),
        debug: (m) => {
            if (debug)
                console.error(`${prefix}: debug: ${m}`);
        },
    };
}
