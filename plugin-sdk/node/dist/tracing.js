"use strict";
// Trace context: every call carries the W3C `traceparent` of the scheduler's span
// for it. When @opentelemetry/api is installed (an optional peer dependency) the SDK
// starts a span per call under it ("<Point> <plugin>"); exporting is the
// application's OpenTelemetry SDK's business (e.g. @opentelemetry/sdk-node). Without
// the API the traceparent is ignored.
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
exports.Tracer = void 0;
exports.loadOtel = loadOtel;
exports.parseTraceparent = parseTraceparent;
const node_module_1 = require("node:module");
const path = __importStar(require("node:path"));
/** Finds @opentelemetry/api from the SDK, then from the application (the working
 * directory and the main module): an SDK installed as a link from the repository
 * does not see the application's node_modules otherwise. */
function loadOtel() {
    const tries = [
        () => require('@opentelemetry/api'),
        () => (0, node_module_1.createRequire)(path.join(process.cwd(), 'index.js'))('@opentelemetry/api'),
        () => (require.main ? require.main.require('@opentelemetry/api') : null),
    ];
    for (const t of tries) {
        try {
            const api = t();
            if (api && api.trace && typeof api.trace.getTracer === 'function')
                return api;
        }
        catch {
            // not installed there
        }
    }
    return null;
}
const TRACEPARENT = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$/;
/** The fields of a W3C traceparent, or null when it is not a valid one. */
function parseTraceparent(tp) {
    if (typeof tp !== 'string' || tp.length < 55 || tp.length > 512)
        return null;
    const m = TRACEPARENT.exec(tp);
    if (!m)
        return null;
    const [, version, traceId, spanId, flags, rest] = m;
    if (version === 'ff' || (version === '00' && rest !== undefined))
        return null;
    if (/^0+$/.test(traceId) || /^0+$/.test(spanId))
        return null;
    return { traceId, spanId, traceFlags: parseInt(flags, 16) & 1 };
}
class Tracer {
    #api;
    #tracer;
    constructor(api, version) {
        this.#api = api;
        this.#tracer = api ? api.trace.getTracer('@switchyard/plugin-sdk', version) : null;
    }
    get enabled() {
        return this.#tracer !== null;
    }
    /** Runs `fn` inside a span for the call, a child of the scheduler's span, when
     * the call is traced and the API is present; else just runs it. */
    run(point, plugin, traceparent, fn) {
        if (!this.#tracer || !traceparent)
            return fn();
        const sc = parseTraceparent(traceparent);
        if (!sc)
            return fn();
        const api = this.#api;
        const ctx = api.trace.setSpanContext(api.ROOT_CONTEXT, { ...sc, isRemote: true });
        const attributes = { 'switchyard.extension_point': point, 'switchyard.plugin': plugin };
        return this.#tracer.startActiveSpan(`${point} ${plugin}`, { kind: api.SpanKind.SERVER, attributes }, ctx, async (span) => {
            try {
                return await fn();
            }
            catch (e) {
                span.recordException(e);
                span.setStatus({ code: api.SpanStatusCode.ERROR });
                throw e;
            }
            finally {
                span.end();
            }
        });
    }
}
exports.Tracer = Tracer;
