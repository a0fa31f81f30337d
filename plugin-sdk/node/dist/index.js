"use strict";
// @switchyard/plugin-sdk: Switchyard scheduler plugins as gRPC sidecars in Node.js.
// A plugin is an object with a name and the methods of the extension points it
// implements; `main(plugins)` serves them. Its command line is the same in every
// Switchyard SDK: --listen ADDRESS, --probe, and --no-optional-capabilities (the
// `capabilities: false` option; SWITCHYARD_PLUGIN_CAPABILITIES=off is its fallback).
// See README.md.
Object.defineProperty(exports, "__esModule", { value: true });
exports.protoDir = exports.LOADER_OPTIONS = exports.parseTraceparent = exports.Outcome = exports.HarnessError = exports.Harness = exports.CAPABILITY_REPLICATE_BATCH = exports.CAPABILITY_FILTER_BATCH = exports.PROTOCOL_VERSION = exports.PluginService = exports.serve = exports.resolveListen = exports.probe = exports.parseListen = exports.main = exports.formatListen = exports.TLS_KEY_ENV = exports.TLS_CLIENT_CA_ENV = exports.TLS_CERT_ENV = exports.NO_OPTIONAL_CAPABILITIES_FLAG = exports.LISTEN_ENV = exports.CAPABILITIES_ENV = exports.makePod = exports.makeNode = exports.CallError = exports.Status = exports.PodLists = exports.PodCounts = exports.NodeSets = exports.MAX_PENDING_PODS = exports.ReplicationError = exports.Snapshot = exports.NodeInfo = exports.normalizeScores = exports.Cycle = void 0;
var plugin_js_1 = require("./plugin.js");
Object.defineProperty(exports, "Cycle", { enumerable: true, get: function () { return plugin_js_1.Cycle; } });
Object.defineProperty(exports, "normalizeScores", { enumerable: true, get: function () { return plugin_js_1.normalizeScores; } });
var snapshot_js_1 = require("./snapshot.js");
Object.defineProperty(exports, "NodeInfo", { enumerable: true, get: function () { return snapshot_js_1.NodeInfo; } });
Object.defineProperty(exports, "Snapshot", { enumerable: true, get: function () { return snapshot_js_1.Snapshot; } });
Object.defineProperty(exports, "ReplicationError", { enumerable: true, get: function () { return snapshot_js_1.ReplicationError; } });
Object.defineProperty(exports, "MAX_PENDING_PODS", { enumerable: true, get: function () { return snapshot_js_1.MAX_PENDING_PODS; } });
var indexes_js_1 = require("./indexes.js");
Object.defineProperty(exports, "NodeSets", { enumerable: true, get: function () { return indexes_js_1.NodeSets; } });
Object.defineProperty(exports, "PodCounts", { enumerable: true, get: function () { return indexes_js_1.PodCounts; } });
Object.defineProperty(exports, "PodLists", { enumerable: true, get: function () { return indexes_js_1.PodLists; } });
var status_js_1 = require("./status.js");
Object.defineProperty(exports, "Status", { enumerable: true, get: function () { return status_js_1.Status; } });
Object.defineProperty(exports, "CallError", { enumerable: true, get: function () { return status_js_1.CallError; } });
var types_js_1 = require("./types.js");
Object.defineProperty(exports, "makeNode", { enumerable: true, get: function () { return types_js_1.makeNode; } });
Object.defineProperty(exports, "makePod", { enumerable: true, get: function () { return types_js_1.makePod; } });
var server_js_1 = require("./server.js");
Object.defineProperty(exports, "CAPABILITIES_ENV", { enumerable: true, get: function () { return server_js_1.CAPABILITIES_ENV; } });
Object.defineProperty(exports, "LISTEN_ENV", { enumerable: true, get: function () { return server_js_1.LISTEN_ENV; } });
Object.defineProperty(exports, "NO_OPTIONAL_CAPABILITIES_FLAG", { enumerable: true, get: function () { return server_js_1.NO_OPTIONAL_CAPABILITIES_FLAG; } });
Object.defineProperty(exports, "TLS_CERT_ENV", { enumerable: true, get: function () { return server_js_1.TLS_CERT_ENV; } });
Object.defineProperty(exports, "TLS_CLIENT_CA_ENV", { enumerable: true, get: function () { return server_js_1.TLS_CLIENT_CA_ENV; } });
Object.defineProperty(exports, "TLS_KEY_ENV", { enumerable: true, get: function () { return server_js_1.TLS_KEY_ENV; } });
Object.defineProperty(exports, "formatListen", { enumerable: true, get: function () { return server_js_1.formatListen; } });
Object.defineProperty(exports, "main", { enumerable: true, get: function () { return server_js_1.main; } });
Object.defineProperty(exports, "parseListen", { enumerable: true, get: function () { return server_js_1.parseListen; } });
Object.defineProperty(exports, "probe", { enumerable: true, get: function () { return server_js_1.probe; } });
Object.defineProperty(exports, "resolveListen", { enumerable: true, get: function () { return server_js_1.resolveListen; } });
Object.defineProperty(exports, "serve", { enumerable: true, get: function () { return server_js_1.serve; } });
var service_js_1 = require("./service.js");
Object.defineProperty(exports, "PluginService", { enumerable: true, get: function () { return service_js_1.PluginService; } });
Object.defineProperty(exports, "PROTOCOL_VERSION", { enumerable: true, get: function () { return service_js_1.PROTOCOL_VERSION; } });
Object.defineProperty(exports, "CAPABILITY_FILTER_BATCH", { enumerable: true, get: function () { return service_js_1.CAPABILITY_FILTER_BATCH; } });
Object.defineProperty(exports, "CAPABILITY_REPLICATE_BATCH", { enumerable: true, get: function () { return service_js_1.CAPABILITY_REPLICATE_BATCH; } });
var harness_js_1 = require("./harness.js");
Object.defineProperty(exports, "Harness", { enumerable: true, get: function () { return harness_js_1.Harness; } });
Object.defineProperty(exports, "HarnessError", { enumerable: true, get: function () { return harness_js_1.HarnessError; } });
Object.defineProperty(exports, "Outcome", { enumerable: true, get: function () { return harness_js_1.Outcome; } });
var tracing_js_1 = require("./tracing.js");
Object.defineProperty(exports, "parseTraceparent", { enumerable: true, get: function () { return tracing_js_1.parseTraceparent; } });
var proto_js_1 = require("./proto.js");
Object.defineProperty(exports, "LOADER_OPTIONS", { enumerable: true, get: function () { return proto_js_1.LOADER_OPTIONS; } });
Object.defineProperty(exports, "protoDir", { enumerable: true, get: function () { return proto_js_1.protoDir; } });
