"use strict";
// The protocol, transport aside (a port of plugin-sdk/rust/src/service/): the replica
// and the cycles, applied from Replicate messages, and one method per extension-point
// call that evaluates it against the replica at the generation it names and returns
// its reply. The methods never throw: a malformed call, an unknown plugin, cycle or
// node, a point the plugin lacks, or an exception in plugin code is an Error status
// in that call's reply. server.ts puts them on gRPC streams.
//
// The shared state is service/state.ts; each group of calls is its own file
// (replicate, queue, filter, score, cycle, waiting), and this class has one line per
// call.
Object.defineProperty(exports, "__esModule", { value: true });
exports.PluginService = exports.consoleLogger = exports.MAX_CYCLES = exports.PROTOCOL_VERSION = exports.HandshakeError = exports.CAPABILITY_REPLICATE_BATCH = exports.CAPABILITY_PERMIT_AFTER_RESERVE = exports.CAPABILITY_FILTER_BATCH = exports.CAPABILITY_FILTER_AFTER_PRE_FILTER = void 0;
const cycle_js_1 = require("./service/cycle.js");
const filter_js_1 = require("./service/filter.js");
const queue_js_1 = require("./service/queue.js");
const replicate_js_1 = require("./service/replicate.js");
const score_js_1 = require("./service/score.js");
const state_js_1 = require("./service/state.js");
const waiting_js_1 = require("./service/waiting.js");
var replicate_js_2 = require("./service/replicate.js");
Object.defineProperty(exports, "CAPABILITY_FILTER_AFTER_PRE_FILTER", { enumerable: true, get: function () { return replicate_js_2.CAPABILITY_FILTER_AFTER_PRE_FILTER; } });
Object.defineProperty(exports, "CAPABILITY_FILTER_BATCH", { enumerable: true, get: function () { return replicate_js_2.CAPABILITY_FILTER_BATCH; } });
Object.defineProperty(exports, "CAPABILITY_PERMIT_AFTER_RESERVE", { enumerable: true, get: function () { return replicate_js_2.CAPABILITY_PERMIT_AFTER_RESERVE; } });
Object.defineProperty(exports, "CAPABILITY_REPLICATE_BATCH", { enumerable: true, get: function () { return replicate_js_2.CAPABILITY_REPLICATE_BATCH; } });
Object.defineProperty(exports, "HandshakeError", { enumerable: true, get: function () { return replicate_js_2.HandshakeError; } });
Object.defineProperty(exports, "PROTOCOL_VERSION", { enumerable: true, get: function () { return replicate_js_2.PROTOCOL_VERSION; } });
var state_js_2 = require("./service/state.js");
Object.defineProperty(exports, "MAX_CYCLES", { enumerable: true, get: function () { return state_js_2.MAX_CYCLES; } });
Object.defineProperty(exports, "consoleLogger", { enumerable: true, get: function () { return state_js_2.consoleLogger; } });
class PluginService extends state_js_1.ServiceState {
    constructor(plugins, options = {}) {
        super(plugins, options);
        this.handles = plugins.map((p) => (0, waiting_js_1.makeHandle)(this, p.name));
    }
    /** The handle a plugin decides about its waiting pods with. */
    permitHandle(plugin) {
        const i = this.byName.get(plugin);
        if (i === undefined)
            throw new Error(`no plugin named ${(0, state_js_1.q)(plugin)}`);
        return this.handles[i];
    }
    /** The handshake reply; throws a HandshakeError (FAILED_PRECONDITION) when the
     * scheduler offers no version this SDK speaks. */
    handshake(req) {
        return (0, replicate_js_1.handshake)(this, req);
    }
    /** Applies one Replicate message; returns the generation the next must have. */
    apply(msg, expect) {
        return (0, replicate_js_1.apply)(this, msg, expect);
    }
    preEnqueue(req) {
        return (0, queue_js_1.preEnqueue)(this, req);
    }
    queueSort(req) {
        return (0, queue_js_1.queueSort)(this, req);
    }
    preFilter(req) {
        return (0, filter_js_1.preFilter)(this, req);
    }
    filter(req) {
        return (0, filter_js_1.filter)(this, req);
    }
    /** The calls of a FilterBatch message, in order; `each` wraps each call (its span). */
    filterBatch(req, each) {
        return (0, filter_js_1.filterBatch)(this, req, each);
    }
    postFilter(req) {
        return (0, cycle_js_1.postFilter)(this, req);
    }
    preScore(req) {
        return (0, score_js_1.preScore)(this, req);
    }
    score(req) {
        return (0, score_js_1.score)(this, req);
    }
    normalizeScore(req) {
        return (0, score_js_1.normalizeScore)(this, req);
    }
    cycleCall(req, point) {
        return (0, cycle_js_1.cycleCall)(this, req, point);
    }
    permit(req) {
        return (0, cycle_js_1.permit)(this, req);
    }
}
exports.PluginService = PluginService;
