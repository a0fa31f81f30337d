"use strict";
// What a plugin author writes: an object (or class instance) with a name and the
// methods of the extension points it implements. The SDK declares exactly those
// points at handshake. Every method may return its value or a Promise of it.
Object.defineProperty(exports, "__esModule", { value: true });
exports.EVENT_ACTIONS = exports.EVENT_RESOURCES = exports.SCORE_NORMALIZATIONS = exports.POD_FIELDS = exports.Cycle = void 0;
exports.pluginSignature = pluginSignature;
exports.pluginSignatureLabelKeys = pluginSignatureLabelKeys;
exports.preFilterPodOnly = preFilterPodOnly;
exports.answersAtNamedGeneration = answersAtNamedGeneration;
exports.scoreNormalizationOf = scoreNormalizationOf;
exports.hasNormalize = hasNormalize;
exports.normalizeScores = normalizeScores;
exports.extensionPoints = extensionPoints;
exports.hasPreFilterExtensions = hasPreFilterExtensions;
exports.pluginEvents = pluginEvents;
exports.checkPlugins = checkPlugins;
const labelscore_js_1 = require("./labelscore.js");
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
/** Signature names to the proto's enum names (what the wire carries). */
exports.POD_FIELDS = new Map([
    ['namespace', 'POD_FIELD_NAMESPACE'],
    ['labels', 'POD_FIELD_LABELS'],
    ['annotations', 'POD_FIELD_ANNOTATIONS'],
    ['schedulerName', 'POD_FIELD_SCHEDULER_NAME'],
    ['priority', 'POD_FIELD_PRIORITY'],
    ['requests', 'POD_FIELD_REQUESTS'],
    ['tolerations', 'POD_FIELD_TOLERATIONS'],
    ['nodeSelector', 'POD_FIELD_NODE_SELECTOR'],
    ['ownerReferences', 'POD_FIELD_OWNER_REFERENCES'],
    ['volumeClaims', 'POD_FIELD_VOLUME_CLAIMS'],
    ['none', 'POD_FIELD_NONE'],
]);
exports.SCORE_NORMALIZATIONS = new Map([
    ['custom', 'SCORE_NORMALIZATION_CUSTOM'],
    ['default', 'SCORE_NORMALIZATION_DEFAULT'],
    ['defaultReverse', 'SCORE_NORMALIZATION_DEFAULT_REVERSE'],
]);
/** A plugin's signature as the wire's enum names; throws on what the scheduler could
 * not use: an unknown name, 'none' with fields, a list without `nodeLocal`. */
function pluginSignature(p) {
    const sig = p.signature;
    if (sig === undefined || sig === null)
        return [];
    const q = JSON.stringify(p.name);
    const accepted = `one of ${[...exports.POD_FIELDS.keys()].map((k) => `'${k}'`).join(', ')}`;
    if (!Array.isArray(sig)) {
        throw new Error(`plugin ${q}: signature ${(0, status_js_1.describe)(sig)} is not an array of pod field names (${accepted})`);
    }
    const out = [];
    for (const f of sig) {
        const wire = typeof f === 'string' ? exports.POD_FIELDS.get(f) : undefined;
        if (wire === undefined)
            throw new Error(`plugin ${q}: unknown signature field ${(0, status_js_1.describe)(f)} (${accepted})`);
        if (!out.includes(wire))
            out.push(wire);
    }
    if (out.includes('POD_FIELD_NONE') && out.length > 1) {
        throw new Error(`plugin ${q}: signature lists 'none' with other fields: 'none' alone means the answers read no field of the pod`);
    }
    if (out.length > 0 && !p.nodeLocal && !p.signatureNodePods) {
        throw new Error(`plugin ${q} declares a signature but not nodeLocal: answers reused across pods must depend on the node alone ` +
            '(or, with signatureNodePods, on the node and its pods) as well (set nodeLocal: true if they do, else drop ' +
            'the signature)');
    }
    if (p.signatureNodePods && out.length === 0) {
        throw new Error(`plugin ${q} declares signatureNodePods without a signature: list the pod fields its answers read ` +
            "(['none'] with signatureLabelKeys)");
    }
    return out;
}
/** A plugin's signatureLabelKeys; throws when they are not an array of non-empty
 * strings, or come without signatureNodePods or with nodeLocal. */
function pluginSignatureLabelKeys(p) {
    const keys = p.signatureLabelKeys;
    if (keys === undefined || keys === null)
        return [];
    const q = JSON.stringify(p.name);
    if (!Array.isArray(keys) || !keys.every((k) => typeof k === 'string' && k !== '')) {
        throw new Error(`plugin ${q}: signatureLabelKeys ${(0, status_js_1.describe)(keys)} is not an array of label keys`);
    }
    if (keys.length > 0 && (!p.signatureNodePods || p.nodeLocal)) {
        throw new Error(`plugin ${q} declares signatureLabelKeys without signatureNodePods, or with nodeLocal: set ` +
            'signatureNodePods: true and drop nodeLocal');
    }
    return [...keys];
}
/** A plugin's declared normalisation by name ('custom' when absent); throws on an
 * unknown one, or a standard one without `score`. */
/** Whether the handshake declares `preFilterPodOnly` (only with signatureNodePods). */
function preFilterPodOnly(p) {
    return !!p.preFilterPodOnly && !!p.signatureNodePods;
}
/** Whether the plugin's calls may be answered at the generation they name rather than
 * the one their cycle started at: node-local, or a preFilter that reads only the pod. */
function answersAtNamedGeneration(p) {
    return !!p.nodeLocal || preFilterPodOnly(p);
}
function scoreNormalizationOf(p) {
    const n = p.scoreNormalization;
    if (n === undefined || n === null)
        return 'custom';
    const q = JSON.stringify(p.name);
    if (typeof n !== 'string' || !exports.SCORE_NORMALIZATIONS.has(n)) {
        throw new Error(`plugin ${q}: unknown scoreNormalization ${(0, status_js_1.describe)(n)} ` +
            `(one of ${[...exports.SCORE_NORMALIZATIONS.keys()].map((k) => `'${k}'`).join(', ')})`);
    }
    if (n !== 'custom' && typeof p.score !== 'function') {
        throw new Error(`plugin ${q} declares scoreNormalization ${(0, status_js_1.describe)(n)} but has no score`);
    }
    return n;
}
/** Whether Score has a NormalizeScore: the plugin's own, or a standard one it
 * declared (which wins over its own, as in the Rust SDK). */
function hasNormalize(p) {
    return (typeof p.score === 'function' &&
        (typeof p.normalizeScore === 'function' || scoreNormalizationOf(p) !== 'custom'));
}
const MAX_NODE_SCORE = 100;
/** Applies a standard normalisation to raw scores in place, as upstream's
 * DefaultNormalizeScore(100, reverse) and `switchyard_proto::normalize_scores` do
 * (the scheduler applies the latter to raw scores it reuses, so both ends must get
 * the same numbers); false, scores untouched, for 'custom'. */
function normalizeScores(kind, scores) {
    if (kind === 'custom')
        return false;
    if (kind !== 'default' && kind !== 'defaultReverse') {
        throw new Error(`normalizeScores: unknown kind ${(0, status_js_1.describe)(kind)} (one of 'custom', 'default', 'defaultReverse')`);
    }
    const reverse = kind === 'defaultReverse';
    let max = 0;
    for (const s of scores)
        if (s > max)
            max = s;
    for (let i = 0; i < scores.length; i++) {
        const s = scores[i];
        if (max === 0) {
            // Upstream leaves the scores alone (not 0) when the highest is 0.
            if (reverse)
                scores[i] = MAX_NODE_SCORE;
            continue;
        }
        const scaled = scale(s, max);
        scores[i] = reverse ? MAX_NODE_SCORE - scaled : scaled;
    }
    return true;
}
/** trunc(100 * s / max) as Go's and Rust's integer division: exact for safe integers
 * (BigInt once 100 * s is past 2^53), and never -0. */
function scale(s, max) {
    const a = MAX_NODE_SCORE * s;
    const v = Number.isSafeInteger(a) ? Math.trunc(a / max) : Number((BigInt(MAX_NODE_SCORE) * BigInt(s)) / BigInt(max));
    return v === 0 ? 0 : v;
}
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
 * AddPod/RemovePod without PreFilter, an unknown signature field or one without
 * node-local, an unknown scoreNormalization or a standard one without Score. */
function checkPlugins(plugins) {
    if (plugins.length === 0)
        throw new Error('serve: no plugins given');
    const seen = new Set();
    for (const given of plugins) {
        if (!given || typeof given.name !== 'string' || given.name === '')
            throw new Error('a plugin has no name (a non-empty string)');
        const p = (0, labelscore_js_1.labelScored)(given);
        if (seen.has(p.name))
            throw new Error(`plugin ${JSON.stringify(p.name)} is registered twice`);
        seen.add(p.name);
        const q = JSON.stringify(p.name);
        if (p.nodeLocal && typeof p.preFilter === 'function') {
            throw new Error(`plugin ${q} declares nodeLocal but has a preFilter, whose state may span nodes: drop one of the two`);
        }
        if (p.preFilterPodOnly && (!p.signatureNodePods || p.nodeLocal)) {
            throw new Error(`plugin ${q} declares preFilterPodOnly without signatureNodePods, or with nodeLocal: set ` +
                'signatureNodePods: true (with a signature) and drop nodeLocal');
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
        pluginSignature(p);
        pluginSignatureLabelKeys(p);
        scoreNormalizationOf(p);
    }
}
