"use strict";
// What a plugin author writes: an object (or class instance) with a name and the
// methods of the extension points it implements. The SDK declares exactly those
// points at handshake. Every method may return its value or a Promise of it.
Object.defineProperty(exports, "__esModule", { value: true });
exports.EVENT_ACTIONS = exports.EVENT_RESOURCES = exports.Cycle = void 0;
exports.extensionPoints = extensionPoints;
exports.hasPreFilterExtensions = hasPreFilterExtensions;
exports.pluginEvents = pluginEvents;
exports.checkPlugins = checkPlugins;
const status_js_1 = require("./status.js");
/** One scheduling attempt as a plugin call sees it, with the plugin's own state for
 * the attempt. The SDK keeps one Cycle per plugin per attempt, from the attempt's
 * CycleStart to its CycleEnd; what a method stores in `state` (usually PreFilter) the
 * later calls of the attempt see. For what-if evaluations (nominated pods,
 * preemption dry runs) the SDK runs `addPod`/`removePod` and `filter` on a fork: a
 * Cycle whose `state` is a copy (`plugin.cloneState(state)`, else `structuredClone`),
 * so the attempt's own state is never changed by them. */
class Cycle {
    /** The scheduler's attempt number (unique per scheduler process). */
    id;
    /** The pod being scheduled. */
    pod;
    /** The scheduler profile (schedulerName) scheduling it. */
    profile;
    /** The replicated snapshot: at the attempt's generation for scheduling calls (for
     * node-local plugins, at that generation or later). */
    snapshot;
    /** The plugin's state for this attempt: undefined until a method sets it. */
    state;
    constructor(id, pod, profile, snapshot, state) {
        this.id = id;
        this.pod = pod;
        this.profile = profile;
        this.snapshot = snapshot;
        this.state = state;
    }
    /** A Cycle with a copy of this one's state (`clone`, else `structuredClone`). */
    fork(clone) {
        let state;
        if (this.state !== undefined) {
            try {
                state = clone ? clone(this.state) : structuredClone(this.state);
            }
            catch (e) {
                throw new status_js_1.CallError(`cannot fork the cycle state (${e instanceof Error ? e.message : (0, status_js_1.describe)(e)}): ` +
                    'give the plugin a cloneState(state) method');
            }
        }
        return new Cycle(this.id, this.pod, this.profile, this.snapshot, state);
    }
}
exports.Cycle = Cycle;
/** The extension points a plugin implements, by proto enum name, in proto order. */
function extensionPoints(p) {
    const has = (m) => typeof p[m] === 'function';
    const out = [];
    if (has('preEnqueue'))
        out.push('PRE_ENQUEUE');
    if (has('sortKey'))
        out.push('QUEUE_SORT');
    if (has('preFilter'))
        out.push('PRE_FILTER');
    if (has('filter'))
        out.push('FILTER');
    if (has('postFilter'))
        out.push('POST_FILTER');
    if (has('preScore'))
        out.push('PRE_SCORE');
    if (has('score'))
        out.push('SCORE');
    if (has('reserve') || has('unreserve'))
        out.push('RESERVE');
    if (has('permit'))
        out.push('PERMIT');
    if (has('preBind'))
        out.push('PRE_BIND');
    if (has('bind'))
        out.push('BIND');
    if (has('postBind'))
        out.push('POST_BIND');
    return out;
}
function hasPreFilterExtensions(p) {
    return typeof p.preFilter === 'function' && (typeof p.addPod === 'function' || typeof p.removePod === 'function');
}
exports.EVENT_RESOURCES = new Set([
    'Pod',
    'AssignedPod',
    'UnschedulablePod',
    'Node',
    'PodDisruptionBudget',
    'Namespace',
    'PersistentVolume',
    'PersistentVolumeClaim',
    'StorageClass',
    'CSINode',
    'CSIDriver',
    'CSIStorageCapacity',
    '*',
]);
exports.EVENT_ACTIONS = new Set([
    'Add',
    'Delete',
    'Update',
    'UpdateNodeAllocatable',
    'UpdateNodeLabel',
    'UpdateNodeTaint',
    'UpdateNodeCondition',
    'UpdateNodeAnnotation',
    'UpdateNodeDeclaredFeature',
    'UpdatePodLabel',
    'UpdatePodScaleDown',
    'UpdatePodToleration',
    'UpdatePodSchedulingGatesEliminated',
    'UpdatePodGeneratedResourceClaim',
    'All',
    '*',
]);
/** A plugin's events in the wire's form; throws on an unknown resource or action. */
function pluginEvents(p) {
    const ev = p.events;
    if (ev === undefined || ev === null)
        return [];
    const list = Array.isArray(ev)
        ? ev
        : Object.entries(ev).map(([resource, actions]) => ({ resource, actions }));
    return list.map((e) => {
        if (!e || typeof e.resource !== 'string' || !exports.EVENT_RESOURCES.has(e.resource)) {
            throw new Error(`plugin ${JSON.stringify(p.name)}: unknown event resource ${(0, status_js_1.describe)(e?.resource)} ` +
                `(one of ${[...exports.EVENT_RESOURCES].join(', ')})`);
        }
        const actions = Array.isArray(e.actions) ? e.actions : [];
        for (const a of actions) {
            if (typeof a !== 'string' || !exports.EVENT_ACTIONS.has(a)) {
                throw new Error(`plugin ${JSON.stringify(p.name)}: unknown action ${(0, status_js_1.describe)(a)} for ${e.resource} ` +
                    `(one of ${[...exports.EVENT_ACTIONS].join(', ')})`);
            }
        }
        return { resource: e.resource, actions: [...actions] };
    });
}
/** Refuses what the scheduler could not use (clause H3): unnamed or duplicate
 * plugins, unknown events, node-local with a PreFilter, NormalizeScore without Score,
 * AddPod/RemovePod without PreFilter. */
function checkPlugins(plugins) {
    if (plugins.length === 0)
        throw new Error('serve: no plugins given');
    const seen = new Set();
    for (const p of plugins) {
        if (!p || typeof p.name !== 'string' || p.name === '')
            throw new Error('a plugin has no name (a non-empty string)');
        if (seen.has(p.name))
            throw new Error(`plugin ${JSON.stringify(p.name)} is registered twice`);
        seen.add(p.name);
        const q = JSON.stringify(p.name);
        if (p.nodeLocal && typeof p.preFilter === 'function') {
            throw new Error(`plugin ${q} declares nodeLocal but has a preFilter, whose state may span nodes: drop one of the two`);
        }
        if (typeof p.normalizeScore === 'function' && typeof p.score !== 'function') {
            throw new Error(`plugin ${q} has normalizeScore but no score`);
        }
        if ((typeof p.addPod === 'function' || typeof p.removePod === 'function') && typeof p.preFilter !== 'function') {
            throw new Error(`plugin ${q} has addPod/removePod but no preFilter (they update the state preFilter makes)`);
        }
        if (extensionPoints(p).length === 0) {
            throw new Error(`plugin ${q} implements no extension point (filter, score, ...)`);
        }
        pluginEvents(p);
    }
}
