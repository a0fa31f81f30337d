import type { PermitHandle, Plugin } from './plugin.js';
import { PluginService, type Logger } from './service.js';
import { type OtelApi } from './tracing.js';
export declare const LISTEN_ENV = "SWITCHYARD_PLUGIN_LISTEN";
/** The environment fallback of `--no-optional-capabilities`: `off` (or `false`, `0`)
 * offers none of the optional capabilities. Read only by `main`. */
export declare const CAPABILITIES_ENV = "SWITCHYARD_PLUGIN_CAPABILITIES";
/** `main`'s flag for `capabilities: false` (the same spelling in every SDK). */
export declare const NO_OPTIONAL_CAPABILITIES_FLAG = "--no-optional-capabilities";
export declare const TLS_CERT_ENV = "SWITCHYARD_PLUGIN_TLS_CERT";
export declare const TLS_KEY_ENV = "SWITCHYARD_PLUGIN_TLS_KEY";
export declare const TLS_CLIENT_CA_ENV = "SWITCHYARD_PLUGIN_TLS_CLIENT_CA";
export declare const PLUGIN_SERVICE = "switchyard.plugin.v1.Plugin";
/** Where a sidecar listens. */
export type Listen = {
    kind: 'unix';
    path: string;
} | {
    kind: 'tcp';
    host: string;
    port: number;
} | {
    kind: 'tls';
    host: string;
    port: number;
};
/** Parses `unix:///path.sock`, `unix:path.sock`, `tcp://host:port`, `http://host:port`,
 * `https://host:port` (TLS) or `host:port` (`[::1]:port` for IPv6). */
export declare function parseListen(s: string): Listen;
export declare function formatListen(l: Listen): string;
/** `flag`, else `env`, else `unix:///tmp/switchyard/<plugin name, lowercase>.sock`. */
export declare function resolveListen(flag: string | undefined, env: string | undefined, pluginName: string): Listen;
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
    tls?: {
        cert: Buffer;
        key: Buffer;
        clientCa?: Buffer;
    };
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
/** Serves `plugins` (one or more) until `shutdown()`. */
export declare function serve(plugins: Plugin | Plugin[], options?: ServeOptions): Promise<Sidecar>;
/** Checks a running sidecar's gRPC health at `listen` within `timeoutMs`: resolves
 * when it answers SERVING, rejects with why not. */
export declare function probe(listen: Listen | string, timeoutMs?: number): Promise<void>;
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
export declare function main(plugins: Plugin | Plugin[], options?: MainOptions): Promise<void>;
