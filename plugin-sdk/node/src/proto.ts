// Loading the contract's .proto files with @grpc/proto-loader.

import * as fs from 'node:fs';
import * as path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';

const PLUGIN_PROTO = 'switchyard/plugin/v1/plugin.proto';
const HEALTH_PROTO = 'grpc/health/v1/health.proto';

/** How messages are delivered to the SDK (and the types in types.ts): field names in
 * lowerCamelCase, 64-bit integers as JavaScript numbers (scores, generations, ids,
 * microseconds and quantities; exact up to 2^53), enums as their names, every field
 * present with its default, oneofs named by a virtual field (`kind`). */
export const LOADER_OPTIONS: protoLoader.Options = {
  keepCase: false,
  longs: Number,
  enums: String,
  bytes: Buffer,
  defaults: true,
  oneofs: true,
};

/** Where the .proto files are: the package's own `proto/` (copied by `prepack` into
 * a packed or installed package), else the repository's `proto/` two levels up
 * (the package is plugin-sdk/node in the Switchyard repository).
 * SWITCHYARD_PROTO_DIR overrides both. */
export function protoDir(): string {
  const pkg = path.join(__dirname, '..');
  const candidates = [
    process.env.SWITCHYARD_PROTO_DIR,
    // In the repository the repository's files are the source of truth; a copy left
    // by `npm pack` may be stale.
    path.basename(path.dirname(pkg)) === 'plugin-sdk' ? path.join(pkg, '..', '..', 'proto') : undefined,
    path.join(pkg, 'proto'),
    path.join(pkg, '..', '..', 'proto'),
  ];
  for (const dir of candidates) {
    if (dir && fs.existsSync(path.join(dir, PLUGIN_PROTO)) && fs.existsSync(path.join(dir, HEALTH_PROTO))) return dir;
  }
  throw new Error(
    `cannot find ${PLUGIN_PROTO} and ${HEALTH_PROTO}: looked in ${candidates.filter(Boolean).join(', ')}. ` +
      'Install the package packed (npm pack runs prepack, which copies them) or from the Switchyard repository, ' +
      'or set SWITCHYARD_PROTO_DIR',
  );
}

export interface Loaded {
  plugin: grpc.ServiceDefinition;
  health: grpc.ServiceDefinition;
  /** Client constructors (for the probe and the tests). */
  PluginClient: grpc.ServiceClientConstructor;
  HealthClient: grpc.ServiceClientConstructor;
}

let loaded: Loaded | undefined;

export function load(): Loaded {
  if (loaded) return loaded;
  const dir = protoDir();
  const def = protoLoader.loadSync([PLUGIN_PROTO, HEALTH_PROTO], { ...LOADER_OPTIONS, includeDirs: [dir] });
  const pkg = grpc.loadPackageDefinition(def) as unknown as {
    switchyard: { plugin: { v1: { Plugin: grpc.ServiceClientConstructor } } };
    grpc: { health: { v1: { Health: grpc.ServiceClientConstructor } } };
  };
  const PluginClient = pkg.switchyard.plugin.v1.Plugin;
  const HealthClient = pkg.grpc.health.v1.Health;
  loaded = {
    plugin: tolerant(PluginClient.service),
    health: HealthClient.service,
    PluginClient,
    HealthClient,
  };
  return loaded;
}

/** The service with decoders that never throw: a message that cannot be decoded is
 * delivered as `{ $malformed: why, requestId }` (its field 1 read by hand when
 * possible), so the call gets an Error status instead of the stream a gRPC error. */
function tolerant(svc: grpc.ServiceDefinition): grpc.ServiceDefinition {
  const out: Record<string, grpc.MethodDefinition<any, any>> = {};
  for (const [name, m] of Object.entries(svc)) {
    const decode = m.requestDeserialize;
    out[name] = {
      ...m,
      requestDeserialize: (buf: Buffer) => {
        try {
          return decode(buf);
        } catch (e) {
          return malformed(buf, e);
        }
      },
    };
  }
  return out as grpc.ServiceDefinition;
}

function malformed(buf: Buffer, e: unknown): object {
  return {
    $malformed: e instanceof Error ? e.message : String(e),
    requestId: readField1(buf),
    plugin: '',
    cycle: 0,
    generation: 0,
    nodes: [],
    deltas: [],
    calls: [],
    more: [],
    traceparent: '',
  };
}

/** Field 1 (varint) of a message when it comes first, as the encoders write it. */
export function readField1(buf: Buffer): number {
  if (!buf || buf.length < 2 || buf[0] !== 0x08) return 0;
  let v = 0;
  let mul = 1;
  for (let i = 1; i < buf.length && i < 11; i++) {
    const b = buf[i];
    v += (b & 0x7f) * mul;
    if ((b & 0x80) === 0) return Number.isSafeInteger(v) ? v : 0;
    mul *= 128;
  }
  return 0;
}
