// The state every call shares: the plugins, the replica and the cycles applied from
// Replicate messages, the pods waiting at Permit, and the steps each call begins
// with (find the plugin, wait for the generation, find the cycle). The calls
// themselves are functions over it, one file per group of extension points.

import { labelScored } from '../labelscore.js';
import { Cycle, checkPlugins, type PermitHandle, type Plugin } from '../plugin.js';
import { NodeInfo, Snapshot } from '../snapshot.js';
import { CallError, Status, describe } from '../status.js';
import type { PermitResponse, Pod, Status as StatusT } from '../types.js';

/** Cycles held at most (the oldest is dropped past it): a scheduler that never sends
 * CycleEnd cannot grow the sidecar without bound. */
export const MAX_CYCLES = 16384;

export interface Logger {
  info(msg: string): void;
  warn(msg: string): void;
  error(msg: string): void;
  debug(msg: string): void;
}

export interface ServiceOptions {
  /** Longest a call waits for the replica to reach its generation (ms, default 5000). */
  generationWaitMs?: number;
  /** Advertised batch limit (0 = none). */
  maxBatchNodes?: number;
  /** Offer the optional capabilities (filter-batch, replicate-batch); default true. */
  capabilities?: boolean;
  logger?: Logger;
}

/** One scheduling attempt the sidecar knows about (CycleStart to CycleEnd). */
export class Entry {
  /** The plugins' Cycles (their state), by plugin index, made at first use. */
  readonly cycles: (Cycle | undefined)[];
  /** PreScore and PreFilter outcomes by plugin index, for Score and Filter calls
   * sent right behind them; the waiters are called at every outcome. */
  readonly preScores = new Map<number, StatusT>();
  readonly preFilters = new Map<number, StatusT>();
  /** Reserve outcomes, for Permit calls sent right behind them. */
  readonly reserves = new Map<number, StatusT>();
  readonly preScoreWaiters = new Set<() => void>();
  ended = false;
  constructor(
    readonly id: number,
    readonly pod: Pod,
    readonly profile: string,
    /** Generation of the CycleStart: the cycle's calls name it. */
    readonly generation: number,
    /** Replica generation the cycle's scheduling calls are evaluated at. */
    readonly snapshotGeneration: number,
    plugins: number,
  ) {
    this.cycles = new Array(plugins).fill(undefined);
  }
  recordPreScore(idx: number, s: StatusT): StatusT {
    return this.record(this.preScores, idx, s);
  }
  recordPreFilter(idx: number, s: StatusT): StatusT {
    return this.record(this.preFilters, idx, s);
  }
  recordReserve(idx: number, s: StatusT): StatusT {
    return this.record(this.reserves, idx, s);
  }
  private record(outcomes: Map<number, StatusT>, idx: number, s: StatusT): StatusT {
    outcomes.set(idx, s);
    for (const w of this.preScoreWaiters) w();
    return s;
  }
}

/** Waits (up to the generation wait) until `outcomes` holds plugin `idx`'s: the
 * PreScore or PreFilter a call was sent right behind (`what` names it). */
export function pointOutcome(
  st: ServiceState,
  e: Entry,
  outcomes: Map<number, StatusT>,
  idx: number,
  what: string,
): Promise<StatusT> {
  const have = outcomes.get(idx);
  if (have) return Promise.resolve(have);
  return new Promise<StatusT>((resolve, reject) => {
    const done = () => {
      const s = outcomes.get(idx);
      if (s === undefined && !e.ended) return;
      clearTimeout(timer);
      e.preScoreWaiters.delete(done);
      if (s !== undefined) resolve(s);
      else reject(new CallError(`cycle ${e.id} ended while waiting: ${what}`));
    };
    const timer = setTimeout(() => {
      e.preScoreWaiters.delete(done);
      reject(new CallError(`${what} of cycle ${e.id} that did not arrive within ${st.generationWaitMs / 1000}s`));
    }, st.generationWaitMs);
    e.preScoreWaiters.add(done);
  });
}

interface Waiter {
  generation: number;
  resolve(): void;
  reject(e: Error): void;
  timer: NodeJS.Timeout;
}

export function isThenable(v: unknown): v is PromiseLike<unknown> {
  return v !== null && (typeof v === 'object' || typeof v === 'function') && typeof (v as PromiseLike<unknown>).then === 'function';
}

export const q = (s: string) => JSON.stringify(s);

/** Throws the CallError of a request the transport could not decode. */
export function malformed(req: { $malformed?: string }): void {
  if (req.$malformed) throw new CallError(`malformed request: ${req.$malformed}`);
}

/** What the calls share; [`PluginService`](../service.ts) puts one method per call on it. */
export class ServiceState {
  readonly plugins: readonly Plugin[];
  readonly replica: Snapshot;
  /** Generation of the last Replicate message applied (any kind). */
  applied = 0;
  readonly cycles = new Map<number, Entry>();
  /** Pods some plugin answered WAIT for at Permit, by uid. */
  readonly waiting = new Map<string, { pod: Pod; plugins: string[] }>();
  /** Writes to the open Permit stream, for decisions about waiting pods. */
  permitSink: ((r: PermitResponse) => void) | null = null;
  readonly generationWaitMs: number;
  readonly maxBatchNodes: number;
  readonly capabilities: boolean;
  readonly log: Logger;
  protected readonly byName = new Map<string, number>();
  /** The Permit handles, by plugin index (made by the service). */
  handles: PermitHandle[] = [];
  #waiters: Waiter[] = [];
  #closed = false;
  #logged = { window: 0, count: 0, dropped: 0 };

  constructor(plugins: readonly Plugin[], options: ServiceOptions = {}) {
    checkPlugins(plugins);
    plugins = plugins.map(labelScored);
    this.plugins = plugins;
    this.replica = new Snapshot().withIndexes(plugins.flatMap((p) => p.indexes ?? []));
    plugins.forEach((p, i) => this.byName.set(p.name, i));
    this.generationWaitMs = options.generationWaitMs ?? 5000;
    this.maxBatchNodes = options.maxBatchNodes ?? 0;
    this.capabilities = options.capabilities ?? true;
    this.log = options.logger ?? consoleLogger();
  }

  /** Ends a cycle: its state is dropped, and a Score waiting for its PreScore fails. */
  endCycle(e: Entry): void {
    e.ended = true;
    this.cycles.delete(e.id);
    for (const w of e.preScoreWaiters) w();
  }
  endCycles(): void {
    for (const e of [...this.cycles.values()]) this.endCycle(e);
  }

  /** Resolves the generation waits the last applied message satisfies. */
  wake(): void {
    if (this.#waiters.length === 0) return;
    const still: Waiter[] = [];
    for (const w of this.#waiters) {
      if (w.generation <= this.applied) {
        clearTimeout(w.timer);
        w.resolve();
      } else still.push(w);
    }
    this.#waiters = still;
  }

  /** Resolves once the replica has applied `generation`, or rejects with a CallError
   * after the bounded wait. Undefined when it has already (no promise, no tick). */
  reached(generation: number): Promise<void> | undefined {
    if (this.applied >= generation) return undefined;
    if (this.#closed) return Promise.reject(new CallError('the sidecar is shutting down'));
    return new Promise<void>((resolve, reject) => {
      const w: Waiter = {
        generation,
        resolve,
        reject,
        timer: setTimeout(() => {
          this.#waiters = this.#waiters.filter((x) => x !== w);
          reject(
            new CallError(
              `generation ${generation} not reached within ${this.generationWaitMs / 1000}s (replica at ${this.applied})`,
            ),
          );
        }, this.generationWaitMs),
      };
      this.#waiters.push(w);
    });
  }

  /** Fails every pending generation wait (shutdown). */
  close(): void {
    this.#closed = true;
    for (const w of this.#waiters) {
      clearTimeout(w.timer);
      w.reject(new CallError('the sidecar is shutting down'));
    }
    this.#waiters = [];
  }

  /** The plugin a call names, with its index. */
  plugin(name: string): [number, Plugin] {
    const i = this.byName.get(name);
    if (i === undefined) throw new CallError(`this sidecar serves no plugin named ${q(String(name))}`);
    return [i, this.plugins[i]];
  }

  /** The cycle a call names, once the replica has reached its generation. A
   * node-local plugin's call (`relaxed`) may name a generation after the cycle's
   * start. */
  async cycle(cycle: number, generation: number, relaxed: boolean): Promise<Entry> {
    const w = this.reached(generation);
    if (w) await w;
    const e = this.cycles.get(cycle);
    if (e === undefined) throw new CallError(`cycle ${cycle} is unknown (never started, or already ended)`);
    if (e.generation === generation || (relaxed && e.generation <= generation)) return e;
    throw new CallError(`cycle ${cycle} started at generation ${e.generation}, not ${generation}`);
  }

  /** For a scheduling-cycle call: the replica must still be at the cycle's
   * generation, never a later one, unless the plugin is node-local. */
  replicaAt(e: Entry, relaxed: boolean): Snapshot {
    const r = this.replica;
    if (!relaxed && r.generation !== e.snapshotGeneration) {
      throw new CallError(
        `the replica moved on to generation ${r.generation} since cycle ${e.id} (at ${e.snapshotGeneration}) started`,
      );
    }
    return r;
  }

  /** After a plugin method returned a Promise the replica may have changed under the
   * call: a call that must be evaluated at its cycle's generation fails then. */
  unmoved(e: Entry, relaxed: boolean, version: number): void {
    if (e.ended) throw new CallError(`cycle ${e.id} ended while the call was evaluated`);
    if (!relaxed && this.replica.version !== version) {
      throw new CallError(
        `the replica changed while the call was evaluated (cycle ${e.id}); the scheduler asks again`,
      );
    }
  }

  cycleOf(e: Entry, idx: number): Cycle {
    let c = e.cycles[idx];
    if (c === undefined) {
      c = new Cycle(e.id, e.pod, e.profile, this.replica);
      e.cycles[idx] = c;
    }
    return c;
  }

  nodes(ids: readonly number[]): NodeInfo[] {
    const out = new Array<NodeInfo>(ids.length);
    for (let i = 0; i < ids.length; i++) {
      const ni = this.replica.node(ids[i]);
      if (ni === undefined) throw new CallError(`unknown node id ${ids[i]}`);
      out[i] = ni;
    }
    return out;
  }

  /** The status a failed call answers: a CallError's own, or an Error status for an
   * exception in plugin code (logged, rate-limited). */
  failure(point: string, plugin: string, e: unknown): StatusT {
    if (e instanceof CallError) return e.status;
    const msg = e instanceof Error ? e.message : describe(e);
    this.logThrow(point, plugin, e);
    return Status.error(`${point} of plugin ${q(String(plugin))} threw: ${msg}`);
  }

  logThrow(point: string, plugin: string, e: unknown): void {
    const now = Date.now();
    const l = this.#logged;
    if (now - l.window > 60_000) {
      if (l.dropped > 0) this.log.error(`${l.dropped} more plugin exceptions in the last minute were not logged`);
      l.window = now;
      l.count = 0;
      l.dropped = 0;
    }
    if (l.count++ >= 20) {
      l.dropped++;
      return;
    }
    const detail = e instanceof Error ? (e.stack ?? e.message) : describe(e);
    this.log.error(`${point} of plugin ${q(String(plugin))} threw (answered with an Error status): ${detail}`);
  }
}

export function consoleLogger(prefix = 'switchyard-plugin'): Logger {
  const debug = /^(1|true|debug)$/i.test(process.env.SWITCHYARD_PLUGIN_DEBUG ?? '');
  return {
    info: (m) => console.error(`${prefix}: ${m}`),
    warn: (m) => console.error(`${prefix}: warning: ${m}`),
    error: (m) => console.error(`${prefix}: error: ${m}`),
    debug: (m) => {
      if (debug) console.error(`${prefix}: debug: ${m}`);
    },
  };
}
