// @switchyard/plugin-sdk: Switchyard scheduler plugins as gRPC sidecars in Node.js.
// A plugin is an object with a name and the methods of the extension points it
// implements; `main(plugins)` serves them. Its command line is the same in every
// Switchyard SDK: --listen ADDRESS, --probe, and --no-optional-capabilities (the
// `capabilities: false` option; SWITCHYARD_PLUGIN_CAPABILITIES=off is its fallback).
// See README.md.

export { Cycle, normalizeScores } from './plugin.js';
export type {
  MaybePromise,
  PermitHandle,
  PermitResult,
  Plugin,
  PodFieldName,
  PostFilterResult,
  PreFilterResult,
  ScoreNormalizationName,
  StatusResult,
} from './plugin.js';
export { NodeInfo, Snapshot, ReplicationError, MAX_PENDING_PODS } from './snapshot.js';
export { NodeSets, PodCounts, PodLists } from './indexes.js';
export type { Index } from './indexes.js';
export { Status, CallError } from './status.js';
export type {
  ClusterEvent,
  Code,
  Node,
  OwnerReference,
  Pod,
  Taint,
  Toleration,
  VolumeClaim,
} from './types.js';
export { makeNode, makePod } from './types.js';
export {
  CAPABILITIES_ENV,
  LISTEN_ENV,
  NO_OPTIONAL_CAPABILITIES_FLAG,
  TLS_CERT_ENV,
  TLS_CLIENT_CA_ENV,
  TLS_KEY_ENV,
  formatListen,
  main,
  parseListen,
  probe,
  resolveListen,
  serve,
} from './server.js';
export type { Listen, MainOptions, ServeOptions, Sidecar } from './server.js';
export { PluginService, PROTOCOL_VERSION, CAPABILITY_FILTER_BATCH, CAPABILITY_REPLICATE_BATCH } from './service.js';
export type { Logger, ServiceOptions } from './service.js';
export { Harness, HarnessError, Outcome } from './harness.js';
export { parseTraceparent } from './tracing.js';
export type { OtelApi } from './tracing.js';
export { LOADER_OPTIONS, protoDir } from './proto.js';
