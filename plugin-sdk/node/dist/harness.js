"use strict";
// A test harness for plugins: load the manifests `switchyard simulate` reads and run
// a plugin's extension points for a pending pod the way the sidecar does (preFilter,
// filter on every node, preScore, score, normalizeScore, one cycle state), so a
// plugin's unit tests need no scheduler, no sidecar and no hand-built state.
//
//   const h = Harness.fromManifests(['testdata/cluster.yaml']);
//   const out = await h.run(myPlugin, 'default/trainer-0'); // or 'trainer-0'
//   out.status('node-1').code === 'UNSCHEDULABLE'; out.feasible(); out.best();
//
// The manifests are converted by the scheduler itself (`switchyard snapshot`): the
// binary SWITCHYARD_BIN names, else `switchyard` on PATH (or `{ bin }`).
var __createBinding = (this && this.__createBinding) || (Object.create ? (function(o, m, k, k2) {
    if (k2 === undefined) k2 = k;
    var desc = Object.getOwnPropertyDescriptor(m, k);
    if (!desc || ("get" in desc ? !m.__esModule : desc.writable || desc.configurable)) {
      desc = { enumerable: true, get: function() { return m[k]; } };
    }
    Object.defineProperty(o, k2, desc);
}) : (function(o, m, k, k2) {
    if (k2 === undefined) k2 = k;
    o[k2] = m[k];
}));
var __setModuleDefault = (this && this.__setModuleDefault) || (Object.create ? (function(o, v) {
    Object.defineProperty(o, "default", { enumerable: true, value: v });
}) : function(o, v) {
    o["default"] = v;
});
var __importStar = (this && this.__importStar) || (function () {
    var ownKeys = function(o) {
        ownKeys = Object.getOwnPropertyNames || function (o) {
            var ar = [];
            for (var k in o) if (Object.prototype.hasOwnProperty.call(o, k)) ar[ar.length] = k;
            return ar;
        };
        return ownKeys(o);
    };
    return function (mod) {
        if (mod && mod.__esModule) return mod;
        var result = {};
        if (mod != null) for (var k = ownKeys(mod), i = 0; i < k.length; i++) if (k[i] !== "default") __createBinding(result, mod, k[i]);
        __setModuleDefault(result, mod);
        return result;
    };
})();
Object.defineProperty(exports, "__esModule", { value: true });
exports.Harness = exports.Outcome = exports.HarnessError = void 0;
const node_child_process_1 = require("node:child_process");
const fs = __importStar(require("node:fs"));
const labelscore_js_1 = require("./labelscore.js");
const plugin_js_1 = require("./plugin.js");
const proto_js_1 = require("./proto.js");
const score_js_1 = require("./service/score.js");
const state_js_1 = require("./service/state.js");
const snapshot_js_1 = require("./snapshot.js");
const status_js_1 = require("./status.js");
/** The harness could not load the cluster or find the pod. */
class HarnessError extends Error {
}
exports.HarnessError = HarnessError;
/** What one plugin answered for one pod, point by point. A point the plugin does not
 * implement is undefined; points after a rejection are not run (as in an attempt). */
class Outcome {
    preFilter;
    /** Each evaluated node's Filter status, in the replica's node order (every node
     * passes when the plugin has no filter or its preFilter skipped). */
    filter = [];
    preScore;
    /** Score's answers for the feasible nodes, before and after normalization. */
    rawScores = [];
    scores = [];
    /** The status that ended the attempt in score or normalizeScore. */
    error;
    /** The plugin's state at the end of the attempt (`cycle.state`). */
    state;
    status(node) {
        return this.filter.find(([n]) => n === node)?.[1];
    }
    feasible() {
        return this.filter.filter(([, s]) => status_js_1.Status.isSuccess(s)).map(([n]) => n);
    }
    score(node) {
        return this.scores.find(([n]) => n === node)?.[1];
    }
    /** The feasible node scored highest (the first on a tie); the feasible node itself
     * when only one passed and nothing scores. */
    best() {
        let best;
        for (const s of this.scores)
            if (!best || s[1] > best[1])
                best = s;
        if (best)
            return best[0];
        const f = this.feasible();
        return f.length === 1 ? f[0] : undefined;
    }
}
exports.Outcome = Outcome;
const key = (p) => `${p.namespace || 'default'}/${p.name}`;
/** A cluster loaded for tests: the replica the sidecar would hold and the pending
 * pods it would be asked about. */
class Harness {
    snapshot = new snapshot_js_1.Snapshot();
    pendingPods = [];
    /** From the decoded message: its full snapshot, then a pending pod per CycleStart. */
    constructor(req) {
        if (req?.$malformed)
            throw new HarnessError(`not a snapshot message: ${req.$malformed}`);
        if (req?.kind !== 'delta' || !req.delta?.full) {
            throw new HarnessError('not a snapshot message: it does not start with a full snapshot');
        }
        this.snapshot.apply(Math.max(Number(req.generation) || 0, 1), req.delta);
        for (const m of req.more ?? []) {
            if (m.kind === 'cycleStart' && m.cycleStart?.pod) {
                this.pendingPods.push({ cycle: Number(m.cycleStart.cycle), pod: m.cycleStart.pod, profile: m.cycleStart.profile });
            }
        }
    }
    /** Loads manifests (files or directories) through `switchyard snapshot`. */
    static fromManifests(paths, opts = {}) {
        const bin = opts.bin || process.env.SWITCHYARD_BIN || 'switchyard';
        const r = (0, node_child_process_1.spawnSync)(bin, ['snapshot', '--output', '-', '--cluster', ...paths], { maxBuffer: 1 << 30 });
        if (r.error) {
            throw new HarnessError(`cannot run ${bin} (set SWITCHYARD_BIN to the switchyard binary, or put it on PATH): ${r.error.message}`);
        }
        if (r.status !== 0)
            throw new HarnessError(`switchyard snapshot failed: ${r.stderr.toString().trim()}`);
        return Harness.fromBytes(r.stdout);
    }
    /** Loads a message written by `switchyard snapshot --output FILE`. */
    static fromFile(path) {
        return Harness.fromBytes(fs.readFileSync(path));
    }
    static fromBytes(buf) {
        return new Harness((0, proto_js_1.load)().plugin.Replicate.requestDeserialize(buf));
    }
    /** The pending pods, as namespace/name. */
    pending() {
        return this.pendingPods.map((p) => key(p.pod));
    }
    pod(name) {
        return this.find(name)?.pod;
    }
    find(name) {
        const want = name.includes('/') ? name : `default/${name}`;
        return this.pendingPods.find((p) => key(p.pod) === want);
    }
    /** Runs `plugin`'s extension points for pending pod `name` as the sidecar does in
     * one attempt over every node; its indexes are declared first. */
    async run(plugin, name) {
        const e = this.find(name);
        if (!e)
            throw new HarnessError(`no pending pod ${JSON.stringify(name)} (pending: ${this.pending().join(', ')})`);
        for (const i of plugin.indexes ?? [])
            this.snapshot.declareIndex(i);
        return runCycle((0, labelscore_js_1.labelScored)(plugin), new plugin_js_1.Cycle(e.cycle, e.pod, e.profile, this.snapshot));
    }
}
exports.Harness = Harness;
async function settle(v) {
    return (0, state_js_1.isThenable)(v) ? await v : v;
}
async function runCycle(p, cycle) {
    const out = new Outcome();
    let only;
    let filter = typeof p.filter === 'function';
    if (typeof p.preFilter === 'function') {
        const r = await settle(p.preFilter(cycle));
        const isResult = r != null && typeof r === 'object' && !('code' in r) && ('status' in r || 'nodeNames' in r);
        const res = isResult ? r : { status: (0, status_js_1.toStatus)(r, 'PreFilter') };
        const status = (0, status_js_1.toStatus)(res.status ?? status_js_1.Status.success(), 'PreFilter');
        out.preFilter = { status, nodeNames: res.nodeNames };
        if (status.code === 'SKIP')
            filter = false;
        else if (status.code !== 'SUCCESS')
            return done(out, cycle);
        if (res.nodeNames)
            only = new Set(res.nodeNames);
    }
    const nodes = Array.from(cycle.snapshot.nodes()).filter((n) => !only || only.has(n.name));
    for (const n of nodes) {
        out.filter.push([n.name, filter ? (0, status_js_1.toStatus)(await settle(p.filter(cycle, n)), 'Filter') : status_js_1.Status.success()]);
    }
    const feasible = nodes.filter((_, i) => status_js_1.Status.isSuccess(out.filter[i][1]));
    if (feasible.length === 0)
        return done(out, cycle);
    if (typeof p.preScore === 'function') {
        out.preScore = (0, status_js_1.toStatus)(await settle(p.preScore(cycle, feasible)), 'PreScore');
        if (out.preScore.code !== 'SUCCESS')
            return done(out, cycle);
    }
    if (typeof p.score === 'function') {
        const raw = [];
        for (const n of feasible) {
            const v = await settle(p.score(cycle, n));
            if (typeof v !== 'number') {
                out.error = (0, status_js_1.toStatus)(v, 'Score');
                return done(out, cycle);
            }
            raw.push(v);
        }
        let scores = [...raw];
        if ((0, plugin_js_1.hasNormalize)(p)) {
            try {
                scores = await (0, score_js_1.normalizeWith)(p, cycle, scores, feasible, p.name);
            }
            catch (err) {
                if (!(err instanceof status_js_1.CallError))
                    throw err;
                out.error = err.status;
            }
        }
        out.rawScores = feasible.map((n, i) => [n.name, raw[i]]);
        out.scores = feasible.map((n, i) => [n.name, scores[i]]);
    }
    return done(out, cycle);
}
function done(out, cycle) {
    out.state = cycle.state;
    return out;
}
