"use strict";
// The session's first two steps: the handshake (versions, plugins, capabilities) and
// the Replicate stream that keeps the replica and the cycles.
Object.defineProperty(exports, "__esModule", { value: true });
exports.HandshakeError = exports.CAPABILITY_PERMIT_AFTER_RESERVE = exports.CAPABILITY_FILTER_AFTER_PRE_FILTER = exports.CAPABILITY_REPLICATE_BATCH = exports.CAPABILITY_FILTER_BATCH = exports.PROTOCOL_VERSION = void 0;
exports.handshake = handshake;
exports.apply = apply;
const plugin_js_1 = require("../plugin.js");
const snapshot_js_1 = require("../snapshot.js");
const types_js_1 = require("../types.js");
const state_js_1 = require("./state.js");
exports.PROTOCOL_VERSION = 'v1';
exports.CAPABILITY_FILTER_BATCH = 'filter-batch';
exports.CAPABILITY_REPLICATE_BATCH = 'replicate-batch';
/** A Filter may come right behind its cycle's PreFilter (`afterPreFilter`): it is
 * evaluated once that PreFilter's outcome is recorded, and fails unless it succeeded. */
exports.CAPABILITY_FILTER_AFTER_PRE_FILTER = 'filter-after-pre-filter';
/** A Permit may come right behind its cycle's Reserve (`afterReserve`): it is
 * evaluated after that Reserve, and only if the Reserve succeeded. */
exports.CAPABILITY_PERMIT_AFTER_RESERVE = 'permit-after-reserve';
class HandshakeError extends Error {
}
exports.HandshakeError = HandshakeError;
/** The handshake reply; throws a FAILED_PRECONDITION-worthy error when the
 * scheduler offers no version this SDK speaks. */
function handshake(st, req) {
    const versions = Array.isArray(req.protocolVersions) ? req.protocolVersions : [];
    if (!versions.includes(exports.PROTOCOL_VERSION)) {
        throw new HandshakeError(`this sidecar speaks protocol ${exports.PROTOCOL_VERSION}; the scheduler offered ${JSON.stringify(versions)}`);
    }
    const offered = Array.isArray(req.capabilities) ? req.capabilities : [];
    return {
        protocolVersion: exports.PROTOCOL_VERSION,
        plugins: st.plugins.map((p) => ({
            name: p.name,
            extensionPoints: (0, plugin_js_1.extensionPoints)(p),
            preFilterExtensions: (0, plugin_js_1.hasPreFilterExtensions)(p),
            normalizeScore: (0, plugin_js_1.hasNormalize)(p),
            events: (0, plugin_js_1.pluginEvents)(p),
            nodeLocal: !!p.nodeLocal,
            signature: (0, plugin_js_1.pluginSignature)(p),
            signatureNodePods: !!p.signatureNodePods,
            signatureLabelKeys: (0, plugin_js_1.pluginSignatureLabelKeys)(p),
            preFilterPodOnly: (0, plugin_js_1.preFilterPodOnly)(p),
            scoreNormalization: plugin_js_1.SCORE_NORMALIZATIONS.get(typeof p.score === 'function' ? (0, plugin_js_1.scoreNormalizationOf)(p) : 'custom'),
            scoreNodeLabel: typeof p.scoreNodeLabel === 'string' ? p.scoreNodeLabel : '',
        })),
        maxBatchNodes: st.maxBatchNodes,
        capabilities: st.capabilities
            ? offered.filter((c) => c === exports.CAPABILITY_FILTER_BATCH ||
                c === exports.CAPABILITY_REPLICATE_BATCH ||
                c === exports.CAPABILITY_FILTER_AFTER_PRE_FILTER ||
                c === exports.CAPABILITY_PERMIT_AFTER_RESERVE)
            : [],
    };
}
/** Applies one Replicate message (without its `more`); returns the generation the
 * next must have. `expect` is undefined before the stream's first message. Throws
 * ReplicationError when the stream must end (gap, no full snapshot first, a
 * delta the replica cannot apply). */
function apply(st, msg, expect) {
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
                st.endCycles();
                st.waiting.clear();
            }
            st.replica.apply(g, msg.delta);
            break;
        }
        case 'cycleStart': {
            const c = msg.cycleStart;
            const pod = c.pod ?? (0, types_js_1.emptyPod)();
            st.replica.noteCyclePod(pod);
            const old = st.cycles.get(c.cycle);
            if (old)
                st.endCycle(old);
            if (st.cycles.size >= state_js_1.MAX_CYCLES) {
                const oldest = st.cycles.keys().next().value;
                st.endCycle(st.cycles.get(oldest));
            }
            st.cycles.set(c.cycle, new state_js_1.Entry(c.cycle, pod, c.profile, g, st.replica.generation, st.plugins.length));
            break;
        }
        case 'cycleEnd': {
            const e = st.cycles.get(msg.cycleEnd.cycle);
            if (e) {
                st.endCycle(e);
                st.waiting.delete(e.pod.uid);
            }
            break;
        }
        default:
            throw new snapshot_js_1.ReplicationError(`generation ${g}: empty Replicate message`);
    }
    st.applied = g;
    st.wake();
    return g + 1;
}
