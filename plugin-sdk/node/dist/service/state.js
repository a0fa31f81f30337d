"use strict";
// The state every call shares: the plugins, the replica and the cycles applied from
// Replicate messages, the pods waiting at Permit, and the steps each call begins
// with (find the plugin, wait for the generation, find the cycle). The calls
// themselves are functions over it, one file per group of extension points.
Object.defineProperty(exports, "__esModule", { value: true });
exports.ServiceState = exports.q = exports.Entry = exports.MAX_CYCLES = void 0;
exports.pointOutcome = pointOutcome;
exports.isThenable = isThenable;
exports.malformed = malformed;
exports.consoleLogger = consoleLogger;
const labelscore_js_1 = require("../labelscore.js");
const plugin_js_1 = require("../plugin.js");
const snapshot_js_1 = require("../snapshot.js");
const status_js_1 = require("../status.js");
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
    /** PreScore and PreFilter outcomes by plugin index, for Score and Filter calls
     * sent right behind them; the waiters are called at every outcome. */
    preScores = new Map();
    preFilters = new Map();
    /** Reserve outcomes, for Permit calls sent right behind them. */
    reserves = new Map();
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
        return this.record(this.preScores, idx, s);
    }
    recordPreFilter(idx, s) {
        return this.record(this.preFilters, idx, s);
    }
    recordReserve(idx, s) {
        return this.record(this.reserves, idx, s);
    }
    record(outcomes, idx, s) {
        outcomes.set(idx, s);
        for (const w of this.preScoreWaiters)
            w();
        return s;
    }
}
exports.Entry = Entry;
/** Waits (up to the generation wait) until `outcomes` holds plugin `idx`'s: the
 * PreScore or PreFilter a call was sent right behind (`what` names it). */
function pointOutcome(st, e, outcomes, idx, what) {
    const have = outcomes.get(idx);
    if (have)
        return Promise.resolve(have);
    return new Promise((resolve, reject) => {
        const done = () => {
            const s = outcomes.get(idx);
            if (s === undefined && !e.ended)
                return;
            clearTimeout(timer);
            e.preScoreWaiters.delete(done);
            if (s !== undefined)
                resolve(s);
            else
                reject(new status_js_1.CallError(`cycle ${e.id} ended while waiting: ${what}`));
        };
        const timer = setTimeout(() => {
            e.preScoreWaiters.delete(done);
            reject(new status_js_1.CallError(`${what} of cycle ${e.id} that did not arrive within ${st.generationWaitMs / 1000}s`));
        }, st.generationWaitMs);
        e.preScoreWaiters.add(done);
    });
}
function isThenable(v) {
    return v !== null && (typeof v === 'object' || typeof v === 'function') && typeof v.then === 'function';
}
const q = (s) => JSON.stringify(s);
exports.q = q;
/** Throws the CallError of a request the transport could not decode. */
function malformed(req) {
    if (req.$malformed)
        throw new status_js_1.CallError(`malformed request: ${req.$malformed}`);
}
/** What the calls share; [`PluginService`](../service.ts) puts one method per call on it. */
class ServiceState {
    plugins;
    replica;
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
    byName = new Map();
    /** The Permit handles, by plugin index (made by the service). */
    handles = [];
    #waiters = [];
    #closed = false;
    #logged = { window: 0, count: 0, dropped: 0 };
    constructor(plugins, options = {}) {
        (0, plugin_js_1.checkPlugins)(plugins);
        plugins = plugins.map(labelscore_js_1.labelScored);
        this.plugins = plugins;
        this.replica = new snapshot_js_1.Snapshot().withIndexes(plugins.flatMap((p) => p.indexes ?? []));
        plugins.forEach((p, i) => this.byName.set(p.name, i));
        this.generationWaitMs = options.generationWaitMs ?? 5000;
        this.maxBatchNodes = options.maxBatchNodes ?? 0;
        this.capabilities = options.capabilities ?? true;
        this.log = options.logger ?? consoleLogger();
    }
    /** Ends a cycle: its state is dropped, and a Score waiting for its PreScore fails. */
    endCycle(e) {
        e.ended = true;
        this.cycles.delete(e.id);
        for (const w of e.preScoreWaiters)
            w();
    }
    endCycles() {
        for (const e of [...this.cycles.values()])
            this.endCycle(e);
    }
    /** Resolves the generation waits the last applied message satisfies. */
    wake() {
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
    /** The plugin a call names, with its index. */
    plugin(name) {
        const i = this.byName.get(name);
        if (i === undefined)
            throw new status_js_1.CallError(`this sidecar serves no plugin named ${(0, exports.q)(String(name))}`);
        return [i, this.plugins[i]];
    }
    /** The cycle a call names, once the replica has reached its generation. A
     * node-local plugin's call (`relaxed`) may name a generation after the cycle's
     * start. */
    async cycle(cycle, generation, relaxed) {
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
    replicaAt(e, relaxed) {
        const r = this.replica;
        if (!relaxed && r.generation !== e.snapshotGeneration) {
            throw new status_js_1.CallError(`the replica moved on to generation ${r.generation} since cycle ${e.id} (at ${e.snapshotGeneration}) started`);
        }
        return r;
    }
    /** After a plugin method returned a Promise the replica may have changed under the
     * call: a call that must be evaluated at its cycle's generation fails then. */
    unmoved(e, relaxed, version) {
        if (e.ended)
            throw new status_js_1.CallError(`cycle ${e.id} ended while the call was evaluated`);
        if (!relaxed && this.replica.version !== version) {
            throw new status_js_1.CallError(`the replica changed while the call was evaluated (cycle ${e.id}); the scheduler asks again`);
        }
    }
    cycleOf(e, idx) {
        let c = e.cycles[idx];
        if (c === undefined) {
            c = new plugin_js_1.Cycle(e.id, e.pod, e.profile, this.replica);
            e.cycles[idx] = c;
        }
        return c;
    }
    nodes(ids) {
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
    failure(point, plugin, e) {
        if (e instanceof status_js_1.CallError)
            return e.status;
        const msg = e instanceof Error ? e.message : (0, status_js_1.describe)(e);
        this.logThrow(point, plugin, e);
        return status_js_1.Status.error(`${point} of plugin ${(0, exports.q)(String(plugin))} threw: ${msg}`);
    }
    logThrow(point, plugin, e) {
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
        this.log.error(`${point} of plugin ${(0, exports.q)(String(plugin))} threw (answered with an Error status): ${detail}`);
    }
}
exports.ServiceState = ServiceState;
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
