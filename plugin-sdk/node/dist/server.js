"use strict";
// Serving: the service on gRPC streams, gRPC health, listen addresses (Unix socket,
// TCP, TLS), and a main() that serves until SIGTERM/SIGINT.
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
exports.PLUGIN_SERVICE = exports.TLS_CLIENT_CA_ENV = exports.TLS_KEY_ENV = exports.TLS_CERT_ENV = exports.NO_OPTIONAL_CAPABILITIES_FLAG = exports.CAPABILITIES_ENV = exports.LISTEN_ENV = void 0;
exports.parseListen = parseListen;
exports.formatListen = formatListen;
exports.resolveListen = resolveListen;
exports.serve = serve;
exports.probe = probe;
exports.main = main;
const fs = __importStar(require("node:fs"));
const net = __importStar(require("node:net"));
const path = __importStar(require("node:path"));
const grpc = __importStar(require("@grpc/grpc-js"));
const proto_js_1 = require("./proto.js");
const snapshot_js_1 = require("./snapshot.js");
const service_js_1 = require("./service.js");
const tracing_js_1 = require("./tracing.js");
exports.LISTEN_ENV = 'SWITCHYARD_PLUGIN_LISTEN';
/** The environment fallback of `--no-optional-capabilities`: `off` (or `false`, `0`)
 * offers none of the optional capabilities. Read only by `main`. */
exports.CAPABILITIES_ENV = 'SWITCHYARD_PLUGIN_CAPABILITIES';
/** `main`'s flag for `capabilities: false` (the same spelling in every SDK). */
exports.NO_OPTIONAL_CAPABILITIES_FLAG = '--no-optional-capabilities';
exports.TLS_CERT_ENV = 'SWITCHYARD_PLUGIN_TLS_CERT';
exports.TLS_KEY_ENV = 'SWITCHYARD_PLUGIN_TLS_KEY';
exports.TLS_CLIENT_CA_ENV = 'SWITCHYARD_PLUGIN_TLS_CLIENT_CA';
exports.PLUGIN_SERVICE = 'switchyard.plugin.v1.Plugin';
/** One gRPC message at most, either way (clause L1). */
const MAX_MESSAGE = 64 << 20;
const VERSION = (() => {
    try {
        return JSON.parse(fs.readFileSync(path.join(__dirname, '..', 'package.json'), 'utf8')).version;
    }
    catch {
        return '0.0.0';
    }
})();
/** Parses `unix:///path.sock`, `unix:path.sock`, `tcp://host:port`, `http://host:port`,
 * `https://host:port` (TLS) or `host:port` (`[::1]:port` for IPv6). */
function parseListen(s) {
    const bad = () => new Error(`listen address ${JSON.stringify(s)}: expected unix:///path/to.sock, tcp://host:port, https://host:port or host:port`);
    if (typeof s !== 'string')
        throw bad();
    s = s.trim();
    for (const pre of ['unix://', 'unix:']) {
        if (s.startsWith(pre)) {
            const p = s.slice(pre.length);
            if (!p)
                throw bad();
            return { kind: 'unix', path: p };
        }
    }
    let kind = 'tcp';
    let hp = s;
    if (s.startsWith('https://')) {
        kind = 'tls';
        hp = s.slice(8);
    }
    else if (s.startsWith('tcp://'))
        hp = s.slice(6);
    else if (s.startsWith('http://'))
        hp = s.slice(7);
    hp = hp.replace(/\/$/, '');
    const m = /^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]+):(\d{1,5})$/.exec(hp);
    if (!m)
        throw bad();
    const port = Number(m[2]);
    if (port > 65535)
        throw bad();
    return { kind, host: m[1], port };
}
function formatListen(l) {
    return l.kind === 'unix' ? `unix://${l.path}` : `${l.kind === 'tls' ? 'https' : 'tcp'}://${l.host}:${l.port}`;
}
/** `flag`, else `env`, else `unix:///tmp/switchyard/<plugin name, lowercase>.sock`. */
function resolveListen(flag, env, pluginName) {
    const v = flag ?? (env && env.trim() !== '' ? env : undefined);
    if (v !== undefined)
        return parseListen(v);
    return { kind: 'unix', path: `/tmp/switchyard/${pluginName.toLowerCase()}.sock` };
}
/** Serves `plugins` (one or more) until `shutdown()`. */
async function serve(plugins, options = {}) {
    const list = Array.isArray(plugins) ? plugins : [plugins];
    const log = options.logger ?? (0, service_js_1.consoleLogger)();
    const svc = new service_js_1.PluginService(list, {
        generationWaitMs: options.generationWaitMs,
        maxBatchNodes: options.maxBatchNodes,
        capabilities: options.capabilities ?? true,
        logger: log,
    });
    let listen = typeof options.listen === 'string'
        ? parseListen(options.listen)
        : (options.listen ?? resolveListen(undefined, process.env[exports.LISTEN_ENV], list[0].name));
    const tracer = new tracing_js_1.Tracer(options.opentelemetry === undefined ? (0, tracing_js_1.loadOtel)() : options.opentelemetry, VERSION);
    const protos = (0, proto_js_1.load)();
    const server = new grpc.Server({
        'grpc.max_receive_message_length': MAX_MESSAGE,
        'grpc.max_send_message_length': MAX_MESSAGE,
    });
    // ------------------------------------------------------------ streams
    const open = new Set();
    let closing = false;
    /** Serves one bidirectional stream: its requests one at a time, in order, one reply
     * each (as the Rust SDK's `bidi`), so a call waiting for its generation holds back
     * only the later calls of its own stream. */
    function bidi(point, handle, onOpen) {
        return (call) => {
            const s = { call, busy: false };
            open.add(s);
            call.on('error', (e) => log.debug(`${point} stream: ${e.message}`));
            const onClose = onOpen?.(call);
            (async () => {
                try {
                    for await (const req of requests(call)) {
                        s.busy = true;
                        const reply = await tracer.run(point, String(req.plugin ?? ''), String(req.traceparent ?? ''), () => handle(req));
                        s.busy = false;
                        if (call.cancelled || call.destroyed || call.writableEnded)
                            break;
                        if (!call.write(reply))
                            await drained(call);
                        if (closing)
                            break;
                    }
                    if (!call.writableEnded && !call.destroyed)
                        call.end();
                }
                catch (e) {
                    log.debug(`${point} stream closed: ${e instanceof Error ? e.message : String(e)}`);
                }
                finally {
                    open.delete(s);
                    onClose?.();
                }
            })();
        };
    }
    const impl = {
        Handshake: (call, cb) => {
            try {
                if (call.request?.$malformed)
                    throw new service_js_1.HandshakeError(`malformed HandshakeRequest: ${call.request.$malformed}`);
                cb(null, svc.handshake(call.request ?? {}));
            }
            catch (e) {
                cb({
                    code: e instanceof service_js_1.HandshakeError ? grpc.status.FAILED_PRECONDITION : grpc.status.INTERNAL,
                    details: e instanceof Error ? e.message : String(e),
                });
            }
        },
        Replicate: (call) => {
            const s = { call, busy: false };
            open.add(s);
            call.on('error', (e) => log.debug(`Replicate stream: ${e.message}`));
            (async () => {
                let expect;
                try {
                    for await (const first of requests(call)) {
                        const msgs = [first, ...(Array.isArray(first.more) ? first.more : [])];
                        for (const msg of msgs) {
                            if (msg !== first && Array.isArray(msg.more) && msg.more.length > 0) {
                                throw new snapshot_js_1.ReplicationError(`generation ${msg.generation}: a message inside \`more\` has \`more\``);
                            }
                            expect = svc.apply(msg, expect);
                            if (msg.ack)
                                call.write({ appliedGeneration: msg.generation });
                        }
                        if (closing)
                            break;
                    }
                    if (!call.writableEnded && !call.destroyed)
                        call.end();
                }
                catch (e) {
                    const msg = e instanceof Error ? e.message : String(e);
                    if (e instanceof snapshot_js_1.ReplicationError) {
                        log.warn(`replication failed; closing the stream: ${msg}`);
                        if (!call.destroyed)
                            call.emit('error', { code: grpc.status.FAILED_PRECONDITION, details: msg });
                    }
                    else
                        log.debug(`Replicate stream closed: ${msg}`);
                }
                finally {
                    open.delete(s);
                }
            })();
        },
        PreEnqueue: bidi('PreEnqueue', (r) => svc.preEnqueue(r)),
        QueueSort: bidi('QueueSort', (r) => svc.queueSort(r)),
        PreFilter: bidi('PreFilter', (r) => svc.preFilter(r)),
        Filter: bidi('Filter', (r) => svc.filter(r)),
        FilterBatch: bidi('FilterBatch', (r) => svc.filterBatch(r, (c, run) => tracer.run('Filter', c.plugin, c.traceparent, run))),
        PostFilter: bidi('PostFilter', (r) => svc.postFilter(r)),
        PreScore: bidi('PreScore', (r) => svc.preScore(r)),
        Score: bidi('Score', (r) => svc.score(r)),
        NormalizeScore: bidi('NormalizeScore', (r) => svc.normalizeScore(r)),
        Reserve: bidi('Reserve', (r) => svc.cycleCall(r, 'Reserve')),
        Unreserve: bidi('Unreserve', (r) => svc.cycleCall(r, 'Unreserve')),
        // Replies and unsolicited decisions share the stream.
        Permit: bidi('Permit', (r) => svc.permit(r), (call) => {
            const sink = (resp) => {
                if (!call.cancelled && !call.destroyed && !call.writableEnded)
                    call.write(resp);
            };
            svc.permitSink = sink;
            return () => {
                if (svc.permitSink === sink)
                    svc.permitSink = null;
            };
        }),
        PreBind: bidi('PreBind', (r) => svc.cycleCall(r, 'PreBind')),
        Bind: bidi('Bind', (r) => svc.cycleCall(r, 'Bind')),
        PostBind: bidi('PostBind', (r) => svc.cycleCall(r, 'PostBind')),
    };
    server.addService(protos.plugin, impl);
    // ------------------------------------------------------------ health
    let serving = 'SERVING';
    const watchers = new Set();
    const known = (service) => service === '' || service === undefined || service === exports.PLUGIN_SERVICE;
    server.addService(protos.health, {
        Check: (call, cb) => {
            const service = call.request?.service ?? '';
            if (!known(service)) {
                cb({
                    code: grpc.status.NOT_FOUND,
                    details: `unknown service ${JSON.stringify(service)}; this sidecar reports "" and "${exports.PLUGIN_SERVICE}"`,
                });
            }
            else
                cb(null, { status: serving });
        },
        Watch: (call) => {
            const ok = known(call.request?.service ?? '');
            call.write({ status: ok ? serving : 'SERVICE_UNKNOWN' });
            if (!ok)
                return;
            watchers.add(call);
            call.on('cancelled', () => watchers.delete(call));
            call.on('error', () => watchers.delete(call));
        },
    });
    // ------------------------------------------------------------ listen
    let credentials = grpc.ServerCredentials.createInsecure();
    if (listen.kind === 'tls') {
        const tls = options.tls ?? tlsFromEnv();
        credentials = grpc.ServerCredentials.createSsl(tls.clientCa ?? null, [{ cert_chain: tls.cert, private_key: tls.key }], !!tls.clientCa);
    }
    let target;
    if (listen.kind === 'unix') {
        const p = listen.path;
        // A socket left by a previous run would make bind fail.
        try {
            if (fs.statSync(p).isSocket())
                fs.unlinkSync(p);
        }
        catch {
            // none there
        }
        try {
            fs.mkdirSync(path.dirname(p) || '.', { recursive: true });
        }
        catch (e) {
            throw new Error(`cannot listen on ${formatListen(listen)}: ${e.message}; ${unixHint(p)}`);
        }
        target = `unix:${p}`;
    }
    else
        target = `${listen.host}:${listen.port}`;
    const port = await new Promise((resolve, reject) => server.bindAsync(target, credentials, (err, port) => (err ? reject(err) : resolve(port)))).catch(async (e) => {
        throw new Error(`cannot listen on ${formatListen(listen)}: ${e.message}; ${await listenHint(listen)}`);
    });
    if (listen.kind !== 'unix')
        listen = { ...listen, port };
    log.info(`serving plugin${list.length > 1 ? 's' : ''} ${list.map((p) => p.name).join(', ')} on ${formatListen(listen)}` +
        (tracer.enabled ? ' (call spans: @opentelemetry/api)' : ''));
    // ------------------------------------------------------------ shutdown
    let resolveClosed;
    const closed = new Promise((r) => (resolveClosed = r));
    let stopping;
    const shutdown = (graceMs = 5000) => {
        stopping ??= (async () => {
            serving = 'NOT_SERVING';
            for (const w of watchers) {
                try {
                    w.write({ status: serving });
                    w.end();
                }
                catch {
                    // gone
                }
            }
            watchers.clear();
            closing = true;
            svc.close();
            // Idle streams end now; busy ones after the reply of their call in flight.
            for (const s of open)
                if (!s.busy && !s.call.writableEnded)
                    s.call.end();
            await new Promise((resolve) => {
                const t = setTimeout(() => {
                    server.forceShutdown();
                    resolve();
                }, graceMs);
                t.unref?.();
                server.tryShutdown(() => {
                    clearTimeout(t);
                    resolve();
                });
            });
            if (listen.kind === 'unix') {
                try {
                    fs.unlinkSync(listen.path);
                }
                catch {
                    // already gone
                }
            }
            log.info('stopped');
            resolveClosed();
        })();
        return stopping;
    };
    return {
        get listen() {
            return listen;
        },
        permitHandle: (name) => svc.permitHandle(name),
        shutdown,
        closed,
        service: svc,
    };
}
/** The requests of a stream, in order. Leaving the loop must not destroy the call
 * (the default of a stream's async iterator): its status still has to be sent. */
function requests(call) {
    return call.iterator({ destroyOnReturn: false });
}
function drained(call) {
    return new Promise((resolve) => {
        const done = () => {
            call.off('drain', done);
            call.off('close', done);
            call.off('error', done);
            resolve();
        };
        call.on('drain', done);
        call.on('close', done);
        call.on('error', done);
    });
}
function tlsFromEnv() {
    const read = (v, required) => {
        const p = (process.env[v] ?? '').trim();
        if (!p) {
            if (required) {
                throw new Error(`an https:// listen address needs ${v} (a PEM file); set ${exports.TLS_CERT_ENV} and ${exports.TLS_KEY_ENV}`);
            }
            return undefined;
        }
        try {
            return fs.readFileSync(p);
        }
        catch (e) {
            throw new Error(`${v}=${p}: cannot read: ${e.message}`);
        }
    };
    return { cert: read(exports.TLS_CERT_ENV, true), key: read(exports.TLS_KEY_ENV, true), clientCa: read(exports.TLS_CLIENT_CA_ENV, false) };
}
function unixHint(p) {
    const dir = path.dirname(p) || '.';
    return `the directory ${dir} must exist (or be creatable) and be writable by this user: choose another path with --listen or ${exports.LISTEN_ENV}`;
}
/** What to do when listening failed: the missing piece and the one change that fixes it. */
async function listenHint(l) {
    if (l.kind === 'unix')
        return unixHint(l.path);
    const how = `--listen or ${exports.LISTEN_ENV}`;
    const code = await new Promise((resolve) => {
        const s = net.createServer();
        s.once('error', (e) => resolve(e.code));
        s.listen(l.port, l.host.replace(/^\[|\]$/g, ''), () => s.close(() => resolve(undefined)));
    });
    switch (code) {
        case 'EADDRINUSE':
            return `port ${l.port} is already in use by another process (\`ss -ltnp 'sport = :${l.port}'\` shows which): stop it, or choose a free port with ${how}`;
        case 'EADDRNOTAVAIL':
        case 'ENOTFOUND':
            return `${l.host} is not an address of this machine: use 127.0.0.1 (this machine only) or 0.0.0.0 (every interface) with ${how}`;
        case 'EACCES':
            return `ports below 1024 need privileges (CAP_NET_BIND_SERVICE): choose a port of 1024 or above with ${how}`;
        default:
            return `check the address given with ${how}`;
    }
}
/** Checks a running sidecar's gRPC health at `listen` within `timeoutMs`: resolves
 * when it answers SERVING, rejects with why not. */
async function probe(listen, timeoutMs = 5000) {
    const l = typeof listen === 'string' ? parseListen(listen) : listen;
    const { HealthClient } = (0, proto_js_1.load)();
    let target;
    let creds = grpc.credentials.createInsecure();
    const options = {};
    if (l.kind === 'unix')
        target = `unix:${l.path}`;
    else {
        const host = l.host === '0.0.0.0' ? '127.0.0.1' : l.host === '[::]' ? '[::1]' : l.host;
        target = `${host}:${l.port}`;
        if (l.kind === 'tls') {
            const tls = tlsFromEnv();
            creds = grpc.credentials.createSsl(tls.clientCa ?? tls.cert, tls.clientCa ? tls.key : null, tls.clientCa ? tls.cert : null);
            options['grpc.ssl_target_name_override'] = 'localhost';
        }
    }
    const client = new HealthClient(target, creds, options);
    try {
        const r = await new Promise((resolve, reject) => client.Check({ service: '' }, { deadline: Date.now() + timeoutMs }, (e, r) => (e ? reject(e) : resolve(r))));
        if (r.status !== 'SERVING')
            throw new Error(`health check of ${formatListen(l)}: ${r.status}`);
    }
    catch (e) {
        if (e.code !== undefined) {
            throw new Error(`health check of ${formatListen(l)}: ${e.details || e.message}`);
        }
        throw e;
    }
    finally {
        client.close();
    }
}
/** A sidecar's main: reads `--listen ADDRESS` (or SWITCHYARD_PLUGIN_LISTEN; default
 * unix:///tmp/switchyard/<first plugin>.sock), `--probe` (check a running sidecar's
 * health and exit), `--no-optional-capabilities` (`capabilities: false`; or
 * SWITCHYARD_PLUGIN_CAPABILITIES=off, its fallback, read here and nowhere else) and
 * `--help`, serves until SIGTERM or SIGINT, then shuts down cleanly. Sets
 * process.exitCode (1 on failure); never calls process.exit. */
async function main(plugins, options = {}) {
    const list = Array.isArray(plugins) ? plugins : [plugins];
    const argv = options.argv ?? process.argv.slice(2);
    const name = list[0]?.name ?? 'plugin';
    let flag;
    let probeOnly = false;
    let capabilities = !/^(off|false|0)$/i.test((process.env[exports.CAPABILITIES_ENV] ?? '').trim());
    try {
        for (let i = 0; i < argv.length; i++) {
            const a = argv[i];
            if (a === '--probe')
                probeOnly = true;
            else if (a === exports.NO_OPTIONAL_CAPABILITIES_FLAG)
                capabilities = false;
            else if (a === '--listen') {
                flag = argv[++i];
                if (flag === undefined)
                    throw new Error('--listen needs an address, e.g. unix:///tmp/p.sock');
            }
            else if (a.startsWith('--listen='))
                flag = a.slice('--listen='.length);
            else if (a === '-h' || a === '--help') {
                console.log(`usage: ${path.basename(process.argv[1] ?? 'sidecar')} [--listen ADDRESS] [--probe] [--no-optional-capabilities]\n\n` +
                    `Serves the Switchyard plugin(s) ${list.map((p) => p.name).join(', ')} over gRPC until SIGTERM.\n\n` +
                    `  --listen ADDRESS  unix:///path.sock, tcp://host:port, host:port, or\n` +
                    `                    https://host:port with ${exports.TLS_CERT_ENV} and ${exports.TLS_KEY_ENV}\n` +
                    `                    naming PEM files (${exports.TLS_CLIENT_CA_ENV}: require client\n` +
                    `                    certificates from that CA). Default: $${exports.LISTEN_ENV},\n` +
                    `                    else unix:///tmp/switchyard/<plugin>.sock\n` +
                    `  --probe           check the running sidecar at that address (gRPC\n` +
                    `                    health) and exit 0 if it is serving, 1 if not\n` +
                    `  --no-optional-capabilities\n` +
                    `                    offer none of the protocol's optional capabilities\n` +
                    `                    (filter-batch, replicate-batch, filter-after-pre-filter,\n` +
                    `                    permit-after-reserve): serve as a sidecar built before\n` +
                    `                    them would. Default: offered, unless\n` +
                    `                    ${exports.CAPABILITIES_ENV}=off`);
                return;
            }
            else
                throw new Error(`unknown argument ${JSON.stringify(a)}; try --help`);
        }
        const listen = resolveListen(flag, process.env[exports.LISTEN_ENV], name);
        if (probeOnly) {
            await probe(listen);
            return;
        }
        const sidecar = await serve(list, {
            ...options,
            listen,
            capabilities: (options.capabilities ?? true) && capabilities,
        });
        options.onServe?.(sidecar);
        const stop = (sig) => {
            (options.logger ?? (0, service_js_1.consoleLogger)()).info(`${sig}: shutting down`);
            void sidecar.shutdown();
        };
        const onTerm = () => stop('SIGTERM');
        const onInt = () => stop('SIGINT');
        process.once('SIGTERM', onTerm);
        process.once('SIGINT', onInt);
        await sidecar.closed;
        process.off('SIGTERM', onTerm);
        process.off('SIGINT', onInt);
    }
    catch (e) {
        console.error(`${name}: ${e instanceof Error ? e.message : String(e)}`);
        process.exitCode = 1;
    }
}
