// Serving: the service on gRPC streams, gRPC health, listen addresses (Unix socket,
// TCP, TLS), and a main() that serves until SIGTERM/SIGINT.

import * as fs from 'node:fs';
import * as net from 'node:net';
import * as path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import type { PermitHandle, Plugin } from './plugin.js';
import { load } from './proto.js';
import { ReplicationError } from './snapshot.js';
import { HandshakeError, PluginService, consoleLogger, type Logger } from './service.js';
import { Tracer, loadOtel, type OtelApi } from './tracing.js';
import type { FilterBatchRequest, ReplicateRequest } from './types.js';

export const LISTEN_ENV = 'SWITCHYARD_PLUGIN_LISTEN';
/** The environment fallback of `--no-optional-capabilities`: `off` (or `false`, `0`)
 * offers none of the optional capabilities. Read only by `main`. */
export const CAPABILITIES_ENV = 'SWITCHYARD_PLUGIN_CAPABILITIES';
/** `main`'s flag for `capabilities: false` (the same spelling in every SDK). */
export const NO_OPTIONAL_CAPABILITIES_FLAG = '--no-optional-capabilities';
export const TLS_CERT_ENV = 'SWITCHYARD_PLUGIN_TLS_CERT';
export const TLS_KEY_ENV = 'SWITCHYARD_PLUGIN_TLS_KEY';
export const TLS_CLIENT_CA_ENV = 'SWITCHYARD_PLUGIN_TLS_CLIENT_CA';
export const PLUGIN_SERVICE = 'switchyard.plugin.v1.Plugin';
/** One gRPC message at most, either way (clause L1). */
const MAX_MESSAGE = 64 << 20;
const VERSION: string = (() => {
  try {
    return JSON.parse(fs.readFileSync(path.join(__dirname, '..', 'package.json'), 'utf8')).version;
  } catch {
    return '0.0.0';
  }
})();

/** Where a sidecar listens. */
export type Listen =
  | { kind: 'unix'; path: string }
  | { kind: 'tcp'; host: string; port: number }
  | { kind: 'tls'; host: string; port: number };

/** Parses `unix:///path.sock`, `unix:path.sock`, `tcp://host:port`, `http://host:port`,
 * `https://host:port` (TLS) or `host:port` (`[::1]:port` for IPv6). */
export function parseListen(s: string): Listen {
  const bad = () =>
    new Error(
      `listen address ${JSON.stringify(s)}: expected unix:///path/to.sock, tcp://host:port, https://host:port or host:port`,
    );
  if (typeof s !== 'string') throw bad();
  s = s.trim();
  for (const pre of ['unix://', 'unix:']) {
    if (s.startsWith(pre)) {
      const p = s.slice(pre.length);
      if (!p) throw bad();
      return { kind: 'unix', path: p };
    }
  }
  let kind: 'tcp' | 'tls' = 'tcp';
  let hp = s;
  if (s.startsWith('https://')) {
    kind = 'tls';
    hp = s.slice(8);
  } else if (s.startsWith('tcp://')) hp = s.slice(6);
  else if (s.startsWith('http://')) hp = s.slice(7);
  hp = hp.replace(/\/$/, '');
  const m = /^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]+):(\d{1,5})$/.exec(hp);
  if (!m) throw bad();
  const port = Number(m[2]);
  if (port > 65535) throw bad();
  return { kind, host: m[1], port };
}

export function formatListen(l: Listen): string {
  return l.kind === 'unix' ? `unix://${l.path}` : `${l.kind === 'tls' ? 'https' : 'tcp'}://${l.host}:${l.port}`;
}

/** `flag`, else `env`, else `unix:///tmp/switchyard/<plugin name, lowercase>.sock`. */
export function resolveListen(flag: string | undefined, env: string | undefined, pluginName: string): Listen {
  const v = flag ?? (env && env.trim() !== '' ? env : undefined);
  if (v !== undefined) return parseListen(v);
  return { kind: 'unix', path: `/tmp/switchyard/${pluginName.toLowerCase()}.sock` };
}

export interface ServeOptions {
  /** Where to listen: a Listen or an address string. Default: $SWITCHYARD_PLUGIN_LISTEN,
   * else unix:///tmp/switchyard/<first plugin>.sock. */
  listen?: Listen | string;
  /** Longest a call waits for the replica to reach its generation (default 5000 ms). */
  generationWaitMs?: number;
  /** Advertised batch limit (0 = none). */
  maxBatchNodes?: number;
  /** Offer the protocol's optional capabilities when the scheduler does
   * (filter-batch: several pods' Filter calls per message for node-local plugins;
   * replicate-batch: several Replicate messages per message). Default true; false
   * serves as a sidecar built before them would (the scheduler then calls it one pod
   * at a time). `main` also turns it off for `--no-optional-capabilities`, or, as its
   * fallback, SWITCHYARD_PLUGIN_CAPABILITIES=off. */
  capabilities?: boolean;
  /** TLS files for https:// (default: from SWITCHYARD_PLUGIN_TLS_* ). */
  tls?: { cert: Buffer; key: Buffer; clientCa?: Buffer };
  logger?: Logger;
  /** The @opentelemetry/api module to start call spans with (default: found if
   * installed; `null` turns tracing off). */
  opentelemetry?: OtelApi | null;
}

/** A running sidecar. */
export interface Sidecar {
  /** Where it listens (for TCP port 0, the port chosen). */
  readonly listen: Listen;
  /** The handle plugin `name` decides about waiting pods with (Permit WAIT). */
  permitHandle(name: string): PermitHandle;
  /** Stops: health turns NOT_SERVING, each stream finishes its call in flight and
   * ends, the server stops (forced after `graceMs`), the socket file is removed. */
  shutdown(graceMs?: number): Promise<void>;
  /** Resolves once shut down. */
  readonly closed: Promise<void>;
  /** @internal */
  readonly service: PluginService;
}

type AnyCall = grpc.ServerDuplexStream<any, any>;

/** Serves `plugins` (one or more) until `shutdown()`. */
export async function serve(plugins: Plugin | Plugin[], options: ServeOptions = {}): Promise<Sidecar> {
  const list = Array.isArray(plugins) ? plugins : [plugins];
  const log = options.logger ?? consoleLogger();
  const svc = new PluginService(list, {
    generationWaitMs: options.generationWaitMs,
    maxBatchNodes: options.maxBatchNodes,
    capabilities: options.capabilities ?? true,
    logger: log,
  });
  let listen: Listen =
    typeof options.listen === 'string'
      ? parseListen(options.listen)
      : (options.listen ?? resolveListen(undefined, process.env[LISTEN_ENV], list[0].name));
  const tracer = new Tracer(options.opentelemetry === undefined ? loadOtel() : options.opentelemetry, VERSION);
  const protos = load();
  const server = new grpc.Server({
    'grpc.max_receive_message_length': MAX_MESSAGE,
    'grpc.max_send_message_length': MAX_MESSAGE,
  });

  // ------------------------------------------------------------ streams
  const open = new Set<{ call: AnyCall; busy: boolean }>();
  let closing = false;

  /** Serves one bidirectional stream: its requests one at a time, in order, one reply
   * each (as the Rust SDK's `bidi`), so a call waiting for its generation holds back
   * only the later calls of its own stream. */
  function bidi<Req extends { requestId?: number; plugin?: string; traceparent?: string }>(
    point: string,
    handle: (req: Req) => Promise<object>,
    onOpen?: (call: AnyCall) => () => void,
  ): grpc.handleBidiStreamingCall<Req, object> {
    return (call: AnyCall) => {
      const s = { call, busy: false };
      open.add(s);
      call.on('error', (e: Error) => log.debug(`${point} stream: ${e.message}`));
      const onClose = onOpen?.(call);
      (async () => {
        try {
          for await (const req of requests<Req>(call)) {
            s.busy = true;
            const reply = await tracer.run(point, String(req.plugin ?? ''), String(req.traceparent ?? ''), () =>
              handle(req),
            );
            s.busy = false;
            if (call.cancelled || call.destroyed || call.writableEnded) break;
            if (!call.write(reply)) await drained(call);
            if (closing) break;
          }
          if (!call.writableEnded && !call.destroyed) call.end();
        } catch (e) {
          log.debug(`${point} stream closed: ${e instanceof Error ? e.message : String(e)}`);
        } finally {
          open.delete(s);
          onClose?.();
        }
      })();
    };
  }

  const impl: grpc.UntypedServiceImplementation = {
    Handshake: (call: grpc.ServerUnaryCall<any, any>, cb: grpc.sendUnaryData<any>) => {
      try {
        if (call.request?.$malformed) throw new HandshakeError(`malformed HandshakeRequest: ${call.request.$malformed}`);
        cb(null, svc.handshake(call.request ?? {}));
      } catch (e) {
        cb({
          code: e instanceof HandshakeError ? grpc.status.FAILED_PRECONDITION : grpc.status.INTERNAL,
          details: e instanceof Error ? e.message : String(e),
        });
      }
    },
    Replicate: (call: AnyCall) => {
      const s = { call, busy: false };
      open.add(s);
      call.on('error', (e: Error) => log.debug(`Replicate stream: ${e.message}`));
      (async () => {
        let expect: number | undefined;
        try {
          for await (const first of requests<ReplicateRequest>(call)) {
            const msgs = [first, ...(Array.isArray(first.more) ? first.more : [])];
            for (const msg of msgs) {
              if (msg !== first && Array.isArray(msg.more) && msg.more.length > 0) {
                throw new ReplicationError(`generation ${msg.generation}: a message inside \`more\` has \`more\``);
              }
              expect = svc.apply(msg, expect);
              if (msg.ack) call.write({ appliedGeneration: msg.generation });
            }
            if (closing) break;
          }
          if (!call.writableEnded && !call.destroyed) call.end();
        } catch (e) {
          const msg = e instanceof Error ? e.message : String(e);
          if (e instanceof ReplicationError) {
            log.warn(`replication failed; closing the stream: ${msg}`);
            if (!call.destroyed) call.emit('error', { code: grpc.status.FAILED_PRECONDITION, details: msg });
          } else log.debug(`Replicate stream closed: ${msg}`);
        } finally {
          open.delete(s);
        }
      })();
    },
    PreEnqueue: bidi('PreEnqueue', (r: any) => svc.preEnqueue(r)),
    QueueSort: bidi('QueueSort', (r: any) => svc.queueSort(r)),
    PreFilter: bidi('PreFilter', (r: any) => svc.preFilter(r)),
    Filter: bidi('Filter', (r: any) => svc.filter(r)),
    FilterBatch: bidi('FilterBatch', (r: FilterBatchRequest) =>
      svc.filterBatch(r, (c, run) => tracer.run('Filter', c.plugin, c.traceparent, run)),
    ),
    PostFilter: bidi('PostFilter', (r: any) => svc.postFilter(r)),
    PreScore: bidi('PreScore', (r: any) => svc.preScore(r)),
    Score: bidi('Score', (r: any) => svc.score(r)),
    NormalizeScore: bidi('NormalizeScore', (r: any) => svc.normalizeScore(r)),
    Reserve: bidi('Reserve', (r: any) => svc.cycleCall(r, 'Reserve')),
    Unreserve: bidi('Unreserve', (r: any) => svc.cycleCall(r, 'Unreserve')),
    // Replies and unsolicited decisions share the stream.
    Permit: bidi(
      'Permit',
      (r: any) => svc.permit(r),
      (call) => {
        const sink = (resp: object) => {
          if (!call.cancelled && !call.destroyed && !call.writableEnded) call.write(resp);
        };
        svc.permitSink = sink;
        return () => {
          if (svc.permitSink === sink) svc.permitSink = null;
        };
      },
    ),
    PreBind: bidi('PreBind', (r: any) => svc.cycleCall(r, 'PreBind')),
    Bind: bidi('Bind', (r: any) => svc.cycleCall(r, 'Bind')),
    PostBind: bidi('PostBind', (r: any) => svc.cycleCall(r, 'PostBind')),
  };
  server.addService(protos.plugin, impl);

  // ------------------------------------------------------------ health
  let serving = 'SERVING';
  const watchers = new Set<grpc.ServerWritableStream<any, any>>();
  const known = (service: unknown) => service === '' || service === undefined || service === PLUGIN_SERVICE;
  server.addService(protos.health, {
    Check: (call: grpc.ServerUnaryCall<any, any>, cb: grpc.sendUnaryData<any>) => {
      const service = call.request?.service ?? '';
      if (!known(service)) {
        cb({
          code: grpc.status.NOT_FOUND,
          details: `unknown service ${JSON.stringify(service)}; this sidecar reports "" and "${PLUGIN_SERVICE}"`,
        });
      } else cb(null, { status: serving });
    },
    Watch: (call: grpc.ServerWritableStream<any, any>) => {
      const ok = known(call.request?.service ?? '');
      call.write({ status: ok ? serving : 'SERVICE_UNKNOWN' });
      if (!ok) return;
      watchers.add(call);
      call.on('cancelled', () => watchers.delete(call));
      call.on('error', () => watchers.delete(call));
    },
  });

  // ------------------------------------------------------------ listen
  let credentials = grpc.ServerCredentials.createInsecure();
  if (listen.kind === 'tls') {
    const tls = options.tls ?? tlsFromEnv();
    credentials = grpc.ServerCredentials.createSsl(
      tls.clientCa ?? null,
      [{ cert_chain: tls.cert, private_key: tls.key }],
      !!tls.clientCa,
    );
  }
  let target: string;
  if (listen.kind === 'unix') {
    const p = listen.path;
    // A socket left by a previous run would make bind fail.
    try {
      if (fs.statSync(p).isSocket()) fs.unlinkSync(p);
    } catch {
      // none there
    }
    try {
      fs.mkdirSync(path.dirname(p) || '.', { recursive: true });
    } catch (e) {
      throw new Error(`cannot listen on ${formatListen(listen)}: ${(e as Error).message}; ${unixHint(p)}`);
    }
    target = `unix:${p}`;
  } else target = `${listen.host}:${listen.port}`;
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync(target, credentials, (err, port) => (err ? reject(err) : resolve(port))),
  ).catch(async (e: Error) => {
    throw new Error(`cannot listen on ${formatListen(listen)}: ${e.message}; ${await listenHint(listen)}`);
  });
  if (listen.kind !== 'unix') listen = { ...listen, port };
  log.info(
    `serving plugin${list.length > 1 ? 's' : ''} ${list.map((p) => p.name).join(', ')} on ${formatListen(listen)}` +
      (tracer.enabled ? ' (call spans: @opentelemetry/api)' : ''),
  );

  // ------------------------------------------------------------ shutdown
  let resolveClosed!: () => void;
  const closed = new Promise<void>((r) => (resolveClosed = r));
  let stopping: Promise<void> | undefined;
  const shutdown = (graceMs = 5000): Promise<void> => {
    stopping ??= (async () => {
      serving = 'NOT_SERVING';
      for (const w of watchers) {
        try {
          w.write({ status: serving });
          w.end();
        } catch {
          // gone
        }
      }
      watchers.clear();
      closing = true;
      svc.close();
      // Idle streams end now; busy ones after the reply of their call in flight.
      for (const s of open) if (!s.busy && !s.call.writableEnded) s.call.end();
      await new Promise<void>((resolve) => {
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
        } catch {
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
    permitHandle: (name: string) => svc.permitHandle(name),
    shutdown,
    closed,
    service: svc,
  };
}

/** The requests of a stream, in order. Leaving the loop must not destroy the call
 * (the default of a stream's async iterator): its status still has to be sent. */
function requests<T>(call: AnyCall): AsyncIterable<T> {
  return call.iterator({ destroyOnReturn: false }) as AsyncIterable<T>;
}

function drained(call: AnyCall): Promise<void> {
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

function tlsFromEnv(): { cert: Buffer; key: Buffer; clientCa?: Buffer } {
  const read = (v: string, required: boolean): Buffer | undefined => {
    const p = (process.env[v] ?? '').trim();
    if (!p) {
      if (required) {
        throw new Error(`an https:// listen address needs ${v} (a PEM file); set ${TLS_CERT_ENV} and ${TLS_KEY_ENV}`);
      }
      return undefined;
    }
    try {
      return fs.readFileSync(p);
    } catch (e) {
      throw new Error(`${v}=${p}: cannot read: ${(e as Error).message}`);
    }
  };
  return { cert: read(TLS_CERT_ENV, true)!, key: read(TLS_KEY_ENV, true)!, clientCa: read(TLS_CLIENT_CA_ENV, false) };
}

function unixHint(p: string): string {
  const dir = path.dirname(p) || '.';
  return `the directory ${dir} must exist (or be creatable) and be writable by this user: choose another path with --listen or ${LISTEN_ENV}`;
}

/** What to do when listening failed: the missing piece and the one change that fixes it. */
async function listenHint(l: Listen): Promise<string> {
  if (l.kind === 'unix') return unixHint(l.path);
  const how = `--listen or ${LISTEN_ENV}`;
  const code = await new Promise<string | undefined>((resolve) => {
    const s = net.createServer();
    s.once('error', (e: NodeJS.ErrnoException) => resolve(e.code));
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
export async function probe(listen: Listen | string, timeoutMs = 5000): Promise<void> {
  const l = typeof listen === 'string' ? parseListen(listen) : listen;
  const { HealthClient } = load();
  let target: string;
  let creds = grpc.credentials.createInsecure();
  const options: grpc.ChannelOptions = {};
  if (l.kind === 'unix') target = `unix:${l.path}`;
  else {
    const host = l.host === '0.0.0.0' ? '127.0.0.1' : l.host === '[::]' ? '[::1]' : l.host;
    target = `${host}:${l.port}`;
    if (l.kind === 'tls') {
      const tls = tlsFromEnv();
      creds = grpc.credentials.createSsl(
        tls.clientCa ?? tls.cert,
        tls.clientCa ? tls.key : null,
        tls.clientCa ? tls.cert : null,
      );
      options['grpc.ssl_target_name_override'] = 'localhost';
    }
  }
  const client = new HealthClient(target, creds, options) as unknown as grpc.Client & {
    Check(req: object, opts: grpc.CallOptions, cb: (e: grpc.ServiceError | null, r: { status: string }) => void): void;
  };
  try {
    const r = await new Promise<{ status: string }>((resolve, reject) =>
      client.Check({ service: '' }, { deadline: Date.now() + timeoutMs }, (e, r) => (e ? reject(e) : resolve(r))),
    );
    if (r.status !== 'SERVING') throw new Error(`health check of ${formatListen(l)}: ${r.status}`);
  } catch (e) {
    if ((e as grpc.ServiceError).code !== undefined) {
      throw new Error(`health check of ${formatListen(l)}: ${(e as grpc.ServiceError).details || (e as Error).message}`);
    }
    throw e;
  } finally {
    client.close();
  }
}

export interface MainOptions extends Omit<ServeOptions, 'listen'> {
  /** Arguments (default: process.argv.slice(2)). */
  argv?: string[];
  /** Called with the running sidecar (e.g. to keep its Permit handles). */
  onServe?: (sidecar: Sidecar) => void;
}

/** A sidecar's main: reads `--listen ADDRESS` (or SWITCHYARD_PLUGIN_LISTEN; default
 * unix:///tmp/switchyard/<first plugin>.sock), `--probe` (check a running sidecar's
 * health and exit), `--no-optional-capabilities` (`capabilities: false`; or
 * SWITCHYARD_PLUGIN_CAPABILITIES=off, its fallback, read here and nowhere else) and
 * `--help`, serves until SIGTERM or SIGINT, then shuts down cleanly. Sets
 * process.exitCode (1 on failure); never calls process.exit. */
export async function main(plugins: Plugin | Plugin[], options: MainOptions = {}): Promise<void> {
  const list = Array.isArray(plugins) ? plugins : [plugins];
  const argv = options.argv ?? process.argv.slice(2);
  const name = list[0]?.name ?? 'plugin';
  let flag: string | undefined;
  let probeOnly = false;
  let capabilities = !/^(off|false|0)$/i.test((process.env[CAPABILITIES_ENV] ?? '').trim());
  try {
    for (let i = 0; i < argv.length; i++) {
      const a = argv[i];
      if (a === '--probe') probeOnly = true;
      else if (a === NO_OPTIONAL_CAPABILITIES_FLAG) capabilities = false;
      else if (a === '--listen') {
        flag = argv[++i];
        if (flag === undefined) throw new Error('--listen needs an address, e.g. unix:///tmp/p.sock');
      } else if (a.startsWith('--listen=')) flag = a.slice('--listen='.length);
      else if (a === '-h' || a === '--help') {
        console.log(
          `usage: ${path.basename(process.argv[1] ?? 'sidecar')} [--listen ADDRESS] [--probe] [--no-optional-capabilities]\n\n` +
            `Serves the Switchyard plugin(s) ${list.map((p) => p.name).join(', ')} over gRPC until SIGTERM.\n\n` +
            `  --listen ADDRESS  unix:///path.sock, tcp://host:port, host:port, or\n` +
            `                    https://host:port with ${TLS_CERT_ENV} and ${TLS_KEY_ENV}\n` +
            `                    naming PEM files (${TLS_CLIENT_CA_ENV}: require client\n` +
            `                    certificates from that CA). Default: $${LISTEN_ENV},\n` +
            `                    else unix:///tmp/switchyard/<plugin>.sock\n` +
            `  --probe           check the running sidecar at that address (gRPC\n` +
            `                    health) and exit 0 if it is serving, 1 if not\n` +
            `  --no-optional-capabilities\n` +
            `                    offer none of the protocol's optional capabilities\n` +
            `                    (filter-batch, replicate-batch, filter-after-pre-filter,\n` +
            `                    permit-after-reserve): serve as a sidecar built before\n` +
            `                    them would. Default: offered, unless\n` +
            `                    ${CAPABILITIES_ENV}=off`,
        );
        return;
      } else throw new Error(`unknown argument ${JSON.stringify(a)}; try --help`);
    }
    const listen = resolveListen(flag, process.env[LISTEN_ENV], name);
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
    const stop = (sig: string) => {
      (options.logger ?? consoleLogger()).info(`${sig}: shutting down`);
      void sidecar.shutdown();
    };
    const onTerm = () => stop('SIGTERM');
    const onInt = () => stop('SIGINT');
    process.once('SIGTERM', onTerm);
    process.once('SIGINT', onInt);
    await sidecar.closed;
    process.off('SIGTERM', onTerm);
    process.off('SIGINT', onInt);
  } catch (e) {
    console.error(`${name}: ${e instanceof Error ? e.message : String(e)}`);
    process.exitCode = 1;
  }
}
