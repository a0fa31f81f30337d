// The protocol, transport aside (a port of plugin-sdk/rust/src/service.rs): the replica
// and the cycles, applied from Replicate messages, and one method per extension-point
// call that evaluates it against the replica at the generation it names and returns
// its reply. The methods never throw: a malformed call, an unknown plugin, cycle or
// node, a point the plugin lacks, or an exception in plugin code is an Error status
// in that call's reply. server.ts puts them on gRPC streams.

import {
  Cycle,
  checkPlugins,
  extensionPoints,
  hasNormalize,
  hasPreFilterExtensions,
  normalizeScores,
  pluginEvents,
  pluginSignature,
  SCORE_NORMALIZATIONS,
  scoreNormalizationOf,
  type PermitHandle,
  type Plugin,
} from './plugin.js';
import { NodeInfo, ReplicationError, Snapshot } from './snapshot.js';
import { CallError, Status, describe, fromWire, isSuccessValue, toStatus } from './status.js';
import type {
  CycleRequest,
  FailureGroup,
  FilterBatchRequest,
  FilterBatchResponse,
  FilterRequest,
  FilterResponse,
  NodeDelta,
  NodeStatus,
  NormalizeScoreRequest,
  PermitResponse,
  Pod,
  PodRequest,
  PostFilterRequest,
  PostFilterResponse,
  PreFilterRequest,
  PreFilterResponse,
  PreScoreRequest,
  QueueSortResponse,
  ReplicateRequest,
  ScoreAhead,
  ScoreRequest,
  ScoreResponse,
  Status as StatusT,
  StatusResponse,
} from './types.js';
import { emptyPod } from './types.js';

export const PROTOCOL_VERSION = 'v1';
export const CAPABILITY_FILTER_BATCH = 'filter-batch';
export const CAPABILITY_REPLICATE_BATCH = 'replicate-batch';
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
class Entry {
  /** The plugins' Cycles (their state), by plugin index, made at first use. */
  readonly cycles: (Cycle | undefined)[];
  /** PreScore outcomes by plugin index, for Score calls sent right behind them. */
  readonly preScores = new Map<number, StatusT>();
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
    this.preScores.set(idx, s);
    for (const w of this.preScoreWaiters) w();
    return s;
  }
}

interface Waiter {
  generation: number;
  resolve(): void;
  reject(e: Error): void;
  timer: NodeJS.Timeout;
}

function isThenable(v: unknown): v is PromiseLike<unknown> {
  return v !== null && (typeof v === 'object' || typeof v === 'function') && typeof (v as PromiseLike<unknown>).then === 'function';
}

const q = (s: string) => JSON.stringify(s);

/** Groups a Filter reply's failures by status (FilterRequest.groupFailures): each
 * distinct status (code and reasons) once, with the indices of the items failing with
 * it, in item order; groups in the order of their first item. A status may be the
 * plugin's own object (shared by several items, kept by the plugin), so each group
 * gets a copy and the plugin's object is never touched. */
function groupFailures(failures: NodeStatus[]): FailureGroup[] {
  const groups: FailureGroup[] = [];
  const byStatus = new Map<string, FailureGroup>();
  for (const f of failures) {
    const { code, reasons } = f.status;
    const key = JSON.stringify([code, reasons]);
    let g = byStatus.get(key);
    if (g === undefined) {
      g = { status: { code, reasons: [...reasons] }, indices: [] };
      byStatus.set(key, g);
      groups.push(g);
    }
    g.indices.push(f.index);
  }
  return groups;
}

export class PluginService {
  readonly plugins: readonly Plugin[];
  readonly replica = new Snapshot();
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
  readonly #byName = new Map<string, number>();
  readonly #handles: PermitHandle[];
  #waiters: Waiter[] = [];
  #closed = false;
  #logged = { window: 0, count: 0, dropped: 0 };

  constructor(plugins: readonly Plugin[], options: ServiceOptions = {}) {
    checkPlugins(plugins);
    this.plugins = plugins;
    plugins.forEach((p, i) => this.#byName.set(p.name, i));
    this.generationWaitMs = options.generationWaitMs ?? 5000;
    this.maxBatchNodes = options.maxBatchNodes ?? 0;
    this.capabilities = options.capabilities ?? true;
    this.log = options.logger ?? consoleLogger();
    this.#handles = plugins.map((p) => this.#makeHandle(p.name));
  }

  /** The handle a plugin decides about its waiting pods with. */
  permitHandle(plugin: string): PermitHandle {
    const i = this.#byName.get(plugin);
    if (i === undefined) throw new Error(`no plugin named ${q(plugin)}`);
    return this.#handles[i];
  }

  // ---------------------------------------------------------------- handshake

  /** The handshake reply; throws a FAILED_PRECONDITION-worthy error when the
   * scheduler offers no version this SDK speaks. */
  handshake(req: { protocolVersions?: string[]; capabilities?: string[]; scheduler?: string }): object {
    const versions = Array.isArray(req.protocolVersions) ? req.protocolVersions : [];
    if (!versions.includes(PROTOCOL_VERSION)) {
      throw new HandshakeError(
        `this sidecar speaks protocol ${PROTOCOL_VERSION}; the scheduler offered ${JSON.stringify(versions)}`,
      );
    }
    const offered = Array.isArray(req.capabilities) ? req.capabilities : [];
    return {
      protocolVersion: PROTOCOL_VERSION,
      plugins: this.plugins.map((p) => ({
        name: p.name,
        extensionPoints: extensionPoints(p),
        preFilterExtensions: hasPreFilterExtensions(p),
        normalizeScore: hasNormalize(p),
        events: pluginEvents(p),
        nodeLocal: !!p.nodeLocal,
        signature: pluginSignature(p),
        scoreNormalization: SCORE_NORMALIZATIONS.get(typeof p.score === 'function' ? scoreNormalizationOf(p) : 'custom'),
      })),
      maxBatchNodes: this.maxBatchNodes,
      capabilities: this.capabilities
        ? offered.filter((c) => c === CAPABILITY_FILTER_BATCH || c === CAPABILITY_REPLICATE_BATCH)
        : [],
    };
  }

  // ---------------------------------------------------------------- replication

  /** Applies one Replicate message (without its `more`); returns the generation the
   * next must have. `expect` is undefined before the stream's first message. Throws
   * ReplicationError when the stream must end (gap, no full snapshot first, a
   * delta the replica cannot apply). */
  apply(msg: ReplicateRequest, expect: number | undefined): number {
    if ((msg as { $malformed?: string }).$malformed) {
      throw new ReplicationError(`a Replicate message could not be decoded: ${(msg as { $malformed?: string }).$malformed}`);
    }
    const g = msg.generation;
    const full = msg.kind === 'delta' && !!msg.delta?.full;
    if (expect === undefined && !full) {
      throw new ReplicationError(
        `the first message of a Replicate stream must be a full snapshot (got generation ${g})`,
      );
    }
    if (expect !== undefined && !full && g !== expect) {
      throw new ReplicationError(`generation gap: expected ${expect}, got ${g}`);
    }
    switch (msg.kind) {
      case 'delta': {
        if (full) {
          this.#endCycles();
          this.waiting.clear();
        }
        this.replica.apply(g, msg.delta!);
        break;
      }
      case 'cycleStart': {
        const c = msg.cycleStart!;
        const pod = c.pod ?? emptyPod();
        this.replica.noteCyclePod(pod);
        const old = this.cycles.get(c.cycle);
        if (old) this.#endCycle(old);
        if (this.cycles.size >= MAX_CYCLES) {
          const oldest = this.cycles.keys().next().value as number;
          this.#endCycle(this.cycles.get(oldest)!);
        }
        this.cycles.set(
          c.cycle,
          new Entry(c.cycle, pod, c.profile, g, this.replica.generation, this.plugins.length),
        );
        break;
      }
      case 'cycleEnd': {
        const e = this.cycles.get(msg.cycleEnd!.cycle);
        if (e) {
          this.#endCycle(e);
          this.waiting.delete(e.pod.uid);
        }
        break;
      }
      default:
        throw new ReplicationError(`generation ${g}: empty Replicate message`);
    }
    this.applied = g;
    this.#wake();
    return g + 1;
  }

  #endCycle(e: Entry): void {
    e.ended = true;
    this.cycles.delete(e.id);
    for (const w of e.preScoreWaiters) w();
  }
  #endCycles(): void {
    for (const e of [...this.cycles.values()]) this.#endCycle(e);
  }

  #wake(): void {
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

  // ---------------------------------------------------------------- shared steps

  #plugin(name: string): [number, Plugin] {
    const i = this.#byName.get(name);
    if (i === undefined) throw new CallError(`this sidecar serves no plugin named ${q(String(name))}`);
    return [i, this.plugins[i]];
  }

  /** The cycle a call names, once the replica has reached its generation. A
   * node-local plugin's call (`relaxed`) may name a generation after the cycle's
   * start. */
  async #cycle(cycle: number, generation: number, relaxed: boolean): Promise<Entry> {
    const w = this.reached(generation);
    if (w) await w;
    const e = this.cycles.get(cycle);
    if (e === undefined) throw new CallError(`cycle ${cycle} is unknown (never started, or already ended)`);
    if (e.generation === generation || (relaxed && e.generation <= generation)) return e;
    throw new CallError(`cycle ${cycle} started at generation ${e.generation}, not ${generation}`);
  }

  /** For a scheduling-cycle call: the replica must still be at the cycle's
   * generation, never a later one, unless the plugin is node-local. */
  #replicaAt(e: Entry, relaxed: boolean): Snapshot {
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
  #unmoved(e: Entry, relaxed: boolean, version: number): void {
    if (e.ended) throw new CallError(`cycle ${e.id} ended while the call was evaluated`);
    if (!relaxed && this.replica.version !== version) {
      throw new CallError(
        `the replica changed while the call was evaluated (cycle ${e.id}); the scheduler asks again`,
      );
    }
  }

  #cycleOf(e: Entry, idx: number): Cycle {
    let c = e.cycles[idx];
    if (c === undefined) {
      c = new Cycle(e.id, e.pod, e.profile, this.replica);
      e.cycles[idx] = c;
    }
    return c;
  }

  #nodes(ids: readonly number[]): NodeInfo[] {
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
  #failure(point: string, plugin: string, e: unknown): StatusT {
    if (e instanceof CallError) return e.status;
    const msg = e instanceof Error ? e.message : describe(e);
    this.#logThrow(point, plugin, e);
    return Status.error(`${point} of plugin ${q(String(plugin))} threw: ${msg}`);
  }

  #logThrow(point: string, plugin: string, e: unknown): void {
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

  static #malformed(req: { $malformed?: string }): void {
    if (req.$malformed) throw new CallError(`malformed request: ${req.$malformed}`);
  }

  // ---------------------------------------------------------------- calls

  async preEnqueue(req: PodRequest): Promise<StatusResponse> {
    let status: StatusT;
    try {
      PluginService.#malformed(req);
      const [, p] = this.#plugin(req.plugin);
      if (typeof p.preEnqueue !== 'function') throw new CallError(`plugin ${q(req.plugin)} has no PreEnqueue`);
      if (!req.pod) throw new CallError('PreEnqueue request without a pod');
      let r: unknown = p.preEnqueue(req.pod);
      if (isThenable(r)) r = await r;
      status = toStatus(r, `PreEnqueue of plugin ${q(req.plugin)}`);
    } catch (e) {
      status = this.#failure('PreEnqueue', req.plugin, e);
    }
    return { requestId: req.requestId, status, generation: 0 };
  }

  async queueSort(req: PodRequest): Promise<QueueSortResponse> {
    const out: QueueSortResponse = { requestId: req.requestId, sortKey: EMPTY, status: Status.SUCCESS };
    try {
      PluginService.#malformed(req);
      const [, p] = this.#plugin(req.plugin);
      if (typeof p.sortKey !== 'function' || !req.pod) {
        throw new CallError(`plugin ${q(req.plugin)} has no QueueSort, or the request has no pod`);
      }
      let k: unknown = p.sortKey(req.pod);
      if (isThenable(k)) k = await k;
      if (typeof k === 'string') out.sortKey = Buffer.from(k, 'utf8');
      else if (k instanceof Uint8Array) out.sortKey = k;
      else throw new CallError(`sortKey of plugin ${q(req.plugin)} returned ${describe(k)}, not a Uint8Array or string`);
    } catch (e) {
      out.status = this.#failure('QueueSort', req.plugin, e);
    }
    return out;
  }

  async preFilter(req: PreFilterRequest): Promise<PreFilterResponse> {
    const out: PreFilterResponse = {
      requestId: req.requestId,
      status: Status.SUCCESS,
      generation: req.generation,
      hasNodeNames: false,
      nodeNames: [],
    };
    try {
      PluginService.#malformed(req);
      const [idx, p] = this.#plugin(req.plugin);
      const local = !!p.nodeLocal;
      const e = await this.#cycle(req.cycle, req.generation, local);
      if (typeof p.preFilter !== 'function') throw new CallError(`plugin ${q(req.plugin)} has no PreFilter`);
      this.#replicaAt(e, local);
      const version = this.replica.version;
      let r: unknown = p.preFilter(this.#cycleOf(e, idx));
      if (isThenable(r)) {
        r = await r;
        this.#unmoved(e, local, version);
      }
      const what = `PreFilter of plugin ${q(req.plugin)}`;
      if (r !== null && typeof r === 'object' && !('code' in r)) {
        const res = r as { status?: unknown; nodeNames?: unknown };
        out.status = toStatus(res.status, what);
        if (res.nodeNames !== undefined && res.nodeNames !== null) {
          if (!Array.isArray(res.nodeNames) || !res.nodeNames.every((n) => typeof n === 'string')) {
            throw new CallError(`${what} returned nodeNames that are not an array of strings`);
          }
          out.hasNodeNames = true;
          out.nodeNames = res.nodeNames;
        }
      } else {
        out.status = toStatus(r, what);
      }
    } catch (e) {
      out.status = this.#failure('PreFilter', req.plugin, e);
      out.hasNodeNames = false;
      out.nodeNames = [];
    }
    return out;
  }

  async filter(req: FilterRequest): Promise<FilterResponse> {
    const out: FilterResponse = {
      requestId: req.requestId,
      generation: req.generation,
      evaluated: 0,
      failures: [],
      error: null,
      score: null,
      failureGroups: [],
    };
    try {
      PluginService.#malformed(req);
      const [failures, ahead] = await this.#filter(req);
      out.evaluated = req.nodes.length;
      if (req.groupFailures) out.failureGroups = groupFailures(failures);
      else out.failures = failures;
      out.score = ahead;
    } catch (e) {
      out.error = this.#failure('Filter', req.plugin, e);
    }
    return out;
  }

  /** The calls of a FilterBatch message, each answered as it would be alone on the
   * Filter stream, in order. `each` wraps each call (its span). */
  async filterBatch(
    req: FilterBatchRequest,
    each: (call: FilterRequest, run: () => Promise<FilterResponse>) => Promise<FilterResponse> = (_c, run) => run(),
  ): Promise<FilterBatchResponse> {
    const calls = !req.$malformed && Array.isArray(req.calls) ? req.calls : [];
    const replies: FilterResponse[] = [];
    // One bounded wait for the latest generation the calls name: a replica that
    // never gets there fails them all at once, not one wait after another.
    let missed: StatusT | null = req.$malformed ? Status.error(`malformed request: ${req.$malformed}`) : null;
    let latest = 0;
    for (const c of calls) latest = Math.max(latest, c.generation);
    try {
      const w = this.reached(latest);
      if (w) await w;
    } catch (e) {
      missed = this.#failure('FilterBatch', '', e);
    }
    for (const call of calls) {
      if (missed) {
        replies.push({
          requestId: call.requestId,
          generation: call.generation,
          evaluated: 0,
          failures: [],
          error: missed,
          score: null,
          failureGroups: [],
        });
      } else {
        replies.push(await each(call, () => this.filter(call)));
      }
    }
    return { requestId: req.requestId, replies };
  }

  async #filter(req: FilterRequest): Promise<[NodeStatus[], ScoreAhead | null]> {
    const [idx, p] = this.#plugin(req.plugin);
    const local = !!p.nodeLocal;
    const e = await this.#cycle(req.cycle, req.generation, local);
    if (typeof p.filter !== 'function') throw new CallError(`plugin ${q(req.plugin)} has no Filter`);
    const replica = this.#replicaAt(e, local);
    const version = replica.version;
    const ids = req.nodes;
    const n = ids.length;
    for (let i = 0; i < n; i++) {
      if (replica.node(ids[i]) === undefined) throw new CallError(`unknown node id ${ids[i]}`);
    }
    let deltas: (NodeDelta | undefined)[] | undefined;
    if (req.deltas.length > 0) {
      deltas = new Array(n);
      for (const d of req.deltas) {
        if (!(d.index < n)) throw new CallError(`delta for item ${d.index} of a batch of ${n}`);
        deltas[d.index] = d;
      }
    }
    const cycle = this.#cycleOf(e, idx);
    const failures: NodeStatus[] = [];
    let awaited = false;
    const what = `Filter of plugin ${q(req.plugin)}`;
    // The hot loop: nothing is allocated per node but the failures of the reply.
    for (let i = 0; i < n; i++) {
      const ni = replica.node(ids[i])!;
      const d = deltas === undefined ? undefined : deltas[i];
      let r: unknown = d === undefined ? p.filter(cycle, ni) : this.#filterWithDelta(p, cycle, ni, d);
      if (isThenable(r)) {
        r = await r;
        awaited = true;
      }
      if (!isSuccessValue(r)) failures.push({ index: i, status: toStatus(r, what) });
    }
    if (awaited) this.#unmoved(e, local, version);
    let ahead: ScoreAhead | null = null;
    if (req.scoreFirst > 0) ahead = await this.#scoreAhead(req, p, cycle, deltas, failures);
    return [failures, ahead];
  }

  /** Filter on a what-if copy of the node: pods removed and added, the plugin's
   * state forked and updated by its removePod/addPod (in that order, as upstream's
   * dry run). A problem with the delta is that item's Error status. */
  async #filterWithDelta(p: Plugin, base: Cycle, node: NodeInfo, d: NodeDelta): Promise<unknown> {
    const ni = node.clone();
    const ext = hasPreFilterExtensions(p);
    const fork = base.fork(p.cloneState?.bind(p));
    for (const uid of d.removePods) {
      const pod = ni.removePod(uid);
      if (pod === undefined) return Status.error(`delta removes pod ${uid}, which is not on node ${node.name}`);
      if (ext && typeof p.removePod === 'function') {
        let s: unknown = p.removePod(fork, pod, ni);
        if (isThenable(s)) s = await s;
        if (!isSuccessValue(s)) return Status.error(`RemovePod: ${Status.message(toStatus(s, 'RemovePod'))}`);
      }
    }
    const adds: Pod[] = [];
    for (const uid of d.addPods) {
      const pod = this.replica.pod(uid);
      if (pod === undefined) return Status.error(`delta adds pod ${uid}, which the replica does not hold`);
      adds.push(pod);
    }
    for (const pod of d.addPodObjects) adds.push(pod);
    for (const added of adds) {
      const pod = { ...added, nodeName: ni.name };
      ni.pods.push(pod);
      if (ext && typeof p.addPod === 'function') {
        let s: unknown = p.addPod(fork, pod, ni);
        if (isThenable(s)) s = await s;
        if (!isSuccessValue(s)) return Status.error(`AddPod: ${Status.message(toStatus(s, 'AddPod'))}`);
      }
    }
    return p.filter!(fork, ni);
  }

  /** PreScore (on a fork), Score and NormalizeScore over the first `scoreFirst`
   * passing items of a Filter batch; null when the plugin does not score or an item
   * has a delta. */
  async #scoreAhead(
    req: FilterRequest,
    p: Plugin,
    cycle: Cycle,
    deltas: (NodeDelta | undefined)[] | undefined,
    failures: NodeStatus[],
  ): Promise<ScoreAhead | null> {
    if (typeof p.score !== 'function') return null;
    const nodes: NodeInfo[] = [];
    let f = 0;
    for (let i = 0; i < req.nodes.length && nodes.length < req.scoreFirst; i++) {
      if (f < failures.length && failures[f].index === i) {
        f++;
        continue;
      }
      if (deltas !== undefined && deltas[i] !== undefined) return null;
      nodes.push(this.replica.node(req.nodes[i])!);
    }
    try {
      let c = cycle;
      if (req.preScore && typeof p.preScore === 'function') {
        c = cycle.fork(p.cloneState?.bind(p));
        let s: unknown = p.preScore(c, nodes);
        if (isThenable(s)) s = await s;
        const st = toStatus(s, `PreScore of plugin ${q(req.plugin)}`);
        if (st.code !== 'SUCCESS') return { status: st, scores: [], normalized: false };
      }
      // rawScores: the scheduler keeps raw scores to reuse for alike pods and
      // normalises them itself.
      const [scores, normalized] = await this.#scoreNodes(p, c, nodes, !req.rawScores, req.plugin);
      return { status: Status.SUCCESS, scores, normalized };
    } catch (e) {
      return { status: this.#failure('Score', req.plugin, e), scores: [], normalized: false };
    }
  }

  /** Score over `nodes`, then NormalizeScore when asked; the flag says whether the
   * scores are final: true without a NormalizeScore (raw scores are final), false
   * for raw scores the scheduler must still normalise. */
  async #scoreNodes(
    p: Plugin,
    cycle: Cycle,
    nodes: NodeInfo[],
    normalize: boolean,
    name: string,
  ): Promise<[number[], boolean]> {
    const scores = new Array<number>(nodes.length);
    for (let i = 0; i < nodes.length; i++) {
      let v: unknown = p.score!(cycle, nodes[i]);
      if (isThenable(v)) v = await v;
      if (typeof v !== 'number' || !Number.isSafeInteger(v)) {
        if (v !== null && typeof v === 'object' && 'code' in v) {
          throw CallError.of(toStatus(v, `Score of plugin ${q(name)}`));
        }
        throw new CallError(
          `Score of plugin ${q(name)} returned ${describe(v)} for node ${nodes[i].name}: a score is an integer`,
        );
      }
      scores[i] = v;
    }
    if (!hasNormalize(p)) return [scores, true];
    if (!normalize) return [scores, false];
    return [await this.#normalize(p, cycle, scores, nodes, name), true];
  }

  /** The declared standard normalisation, else the plugin's own normalizeScore. */
  async #normalize(p: Plugin, cycle: Cycle, scores: number[], nodes: NodeInfo[], name: string): Promise<number[]> {
    if (normalizeScores(scoreNormalizationOf(p), scores)) return scores;
    let r: unknown = p.normalizeScore!(cycle, scores, nodes);
    if (isThenable(r)) r = await r;
    let out = scores;
    if (Array.isArray(r)) {
      if (r.length !== scores.length) {
        throw new CallError(`NormalizeScore of plugin ${q(name)} returned ${r.length} scores for ${scores.length}`);
      }
      out = r;
    } else {
      const s = toStatus(r, `NormalizeScore of plugin ${q(name)}`);
      if (s.code !== 'SUCCESS') throw CallError.of(s);
    }
    for (const v of out) {
      if (typeof v !== 'number' || !Number.isSafeInteger(v)) {
        throw new CallError(`NormalizeScore of plugin ${q(name)} left ${describe(v)}: a score is an integer`);
      }
    }
    return out;
  }

  async score(req: ScoreRequest): Promise<ScoreResponse> {
    const out: ScoreResponse = {
      requestId: req.requestId,
      status: Status.SUCCESS,
      generation: req.generation,
      scores: [],
      normalized: false,
    };
    try {
      PluginService.#malformed(req);
      const [idx, p] = this.#plugin(req.plugin);
      const local = !!p.nodeLocal;
      const e = await this.#cycle(req.cycle, req.generation, local);
      if (typeof p.score !== 'function') throw new CallError(`plugin ${q(req.plugin)} has no Score`);
      if (req.afterPreScore) {
        const s = await this.#preScoreOutcome(e, idx);
        if (s.code !== 'SUCCESS') throw CallError.of(s);
      }
      this.#replicaAt(e, local);
      const version = this.replica.version;
      const nodes = this.#nodes(req.nodes);
      const [scores, normalized] = await this.#scoreNodes(p, this.#cycleOf(e, idx), nodes, req.normalize, req.plugin);
      this.#unmoved(e, local, version);
      out.scores = scores;
      out.normalized = normalized;
    } catch (e) {
      out.status = this.#failure('Score', req.plugin, e);
    }
    return out;
  }

  /** Waits (bounded) for this cycle's PreScore of plugin `idx`, sent just before. */
  #preScoreOutcome(e: Entry, idx: number): Promise<StatusT> {
    const have = e.preScores.get(idx);
    if (have) return Promise.resolve(have);
    return new Promise<StatusT>((resolve, reject) => {
      const done = () => {
        const s = e.preScores.get(idx);
        if (s === undefined && !e.ended) return;
        clearTimeout(timer);
        e.preScoreWaiters.delete(done);
        if (s !== undefined) resolve(s);
        else reject(new CallError(`cycle ${e.id} ended while Score waited for its PreScore`));
      };
      const timer = setTimeout(() => {
        e.preScoreWaiters.delete(done);
        reject(
          new CallError(
            `Score named a PreScore of cycle ${e.id} that did not arrive within ${this.generationWaitMs / 1000}s`,
          ),
        );
      }, this.generationWaitMs);
      e.preScoreWaiters.add(done);
    });
  }

  async preScore(req: PreScoreRequest): Promise<StatusResponse> {
    let status: StatusT;
    try {
      PluginService.#malformed(req);
      const [idx, p] = this.#plugin(req.plugin);
      const local = !!p.nodeLocal;
      const e = await this.#cycle(req.cycle, req.generation, local);
      try {
        if (typeof p.preScore !== 'function') throw new CallError(`plugin ${q(req.plugin)} has no PreScore`);
        this.#replicaAt(e, local);
        const version = this.replica.version;
        const nodes = this.#nodes(req.nodes);
        let r: unknown = p.preScore(this.#cycleOf(e, idx), nodes);
        if (isThenable(r)) {
          r = await r;
          this.#unmoved(e, local, version);
        }
        status = e.recordPreScore(idx, toStatus(r, `PreScore of plugin ${q(req.plugin)}`));
      } catch (err) {
        status = e.recordPreScore(idx, this.#failure('PreScore', req.plugin, err));
      }
    } catch (e) {
      status = this.#failure('PreScore', req.plugin, e);
    }
    return { requestId: req.requestId, status, generation: req.generation };
  }

  async normalizeScore(req: NormalizeScoreRequest): Promise<ScoreResponse> {
    const out: ScoreResponse = {
      requestId: req.requestId,
      status: Status.SUCCESS,
      generation: req.generation,
      scores: [],
      normalized: false,
    };
    try {
      PluginService.#malformed(req);
      const [idx, p] = this.#plugin(req.plugin);
      const local = !!p.nodeLocal;
      const e = await this.#cycle(req.cycle, req.generation, local);
      if (!hasNormalize(p)) {
        throw new CallError(`plugin ${q(req.plugin)} has no NormalizeScore`);
      }
      this.#replicaAt(e, local);
      if (req.scores.length !== req.nodes.length) {
        throw new CallError(`NormalizeScore with ${req.scores.length} scores for ${req.nodes.length} nodes`);
      }
      const nodes = this.#nodes(req.nodes);
      out.scores = await this.#normalize(p, this.#cycleOf(e, idx), req.scores.slice(), nodes, req.plugin);
      out.normalized = true;
    } catch (e) {
      out.status = this.#failure('NormalizeScore', req.plugin, e);
      out.scores = [];
    }
    return out;
  }

  async postFilter(req: PostFilterRequest): Promise<PostFilterResponse> {
    const out: PostFilterResponse = {
      requestId: req.requestId,
      status: Status.SUCCESS,
      generation: req.generation,
      nominatedNodeName: '',
    };
    try {
      PluginService.#malformed(req);
      const [idx, p] = this.#plugin(req.plugin);
      const local = !!p.nodeLocal;
      const e = await this.#cycle(req.cycle, req.generation, local);
      if (typeof p.postFilter !== 'function') throw new CallError(`plugin ${q(req.plugin)} has no PostFilter`);
      this.#replicaAt(e, local);
      const statuses = new Map<string, StatusT>();
      for (const [k, v] of Object.entries(req.nodeStatuses ?? {})) statuses.set(k, fromWire(v));
      let r: unknown = p.postFilter(this.#cycleOf(e, idx), statuses);
      if (isThenable(r)) r = await r;
      const what = `PostFilter of plugin ${q(req.plugin)}`;
      if (r !== null && typeof r === 'object' && !('code' in r)) {
        const res = r as { status?: unknown; nominatedNodeName?: unknown };
        out.status = toStatus(res.status, what);
        if (res.nominatedNodeName !== undefined && res.nominatedNodeName !== null) {
          if (typeof res.nominatedNodeName !== 'string') throw new CallError(`${what} returned a nominatedNodeName that is not a string`);
          out.nominatedNodeName = res.nominatedNodeName;
        }
      } else out.status = toStatus(r, what);
    } catch (e) {
      out.status = this.#failure('PostFilter', req.plugin, e);
      out.nominatedNodeName = '';
    }
    return out;
  }

  /** Reserve, Unreserve, PreBind, Bind, PostBind: a cycle, a node, a status. */
  async cycleCall(req: CycleRequest, point: 'Reserve' | 'Unreserve' | 'PreBind' | 'Bind' | 'PostBind'): Promise<StatusResponse> {
    let status: StatusT;
    try {
      PluginService.#malformed(req);
      const [idx, p] = this.#plugin(req.plugin);
      const e = await this.#cycle(req.cycle, req.generation, !!p.nodeLocal);
      const missing = () => new CallError(`plugin ${q(req.plugin)} has no ${point}`);
      const cycle = this.#cycleOf(e, idx);
      const node = req.nodeName;
      const what = `${point} of plugin ${q(req.plugin)}`;
      let r: unknown;
      switch (point) {
        case 'Reserve':
          if (typeof p.reserve !== 'function' && typeof p.unreserve !== 'function') throw missing();
          r = typeof p.reserve === 'function' ? p.reserve(cycle, node) : undefined;
          if (isThenable(r)) r = await r;
          status = toStatus(r, what);
          break;
        case 'Unreserve':
          if (typeof p.reserve !== 'function' && typeof p.unreserve !== 'function') throw missing();
          r = typeof p.unreserve === 'function' ? p.unreserve(cycle, node) : undefined;
          if (isThenable(r)) await r;
          status = Status.SUCCESS;
          break;
        case 'PreBind':
          if (typeof p.preBind !== 'function') throw missing();
          r = p.preBind(cycle, node);
          if (isThenable(r)) r = await r;
          status = toStatus(r, what);
          break;
        case 'Bind':
          if (typeof p.bind !== 'function') throw missing();
          r = p.bind(cycle, node);
          if (isThenable(r)) r = await r;
          status = toStatus(r, what);
          break;
        case 'PostBind':
          if (typeof p.postBind !== 'function') throw missing();
          r = p.postBind(cycle, node);
          if (isThenable(r)) await r;
          status = Status.SUCCESS;
          break;
      }
    } catch (e) {
      status = this.#failure(point, req.plugin, e);
    }
    return { requestId: req.requestId, status: status!, generation: req.generation };
  }

  async permit(req: CycleRequest): Promise<PermitResponse> {
    const out: PermitResponse = {
      requestId: req.requestId,
      status: Status.SUCCESS,
      generation: req.generation,
      timeoutMillis: 0,
      decision: null,
    };
    try {
      PluginService.#malformed(req);
      const [idx, p] = this.#plugin(req.plugin);
      const e = await this.#cycle(req.cycle, req.generation, !!p.nodeLocal);
      if (typeof p.permit !== 'function') throw new CallError(`plugin ${q(req.plugin)} has no Permit`);
      // The pod is registered as waiting only after the plugin answers WAIT:
      // waitingPods() inside permit lists its siblings, not itself.
      let r: unknown = p.permit(this.#cycleOf(e, idx), req.nodeName, this.#handles[idx]);
      if (isThenable(r)) r = await r;
      const what = `Permit of plugin ${q(req.plugin)}`;
      let status: StatusT;
      let timeout = 0;
      if (r !== null && typeof r === 'object' && !('code' in r)) {
        const res = r as { status?: unknown; timeoutMillis?: unknown };
        status = toStatus(res.status, what);
        if (res.timeoutMillis !== undefined && res.timeoutMillis !== null) {
          if (typeof res.timeoutMillis !== 'number' || !(res.timeoutMillis >= 0)) {
            throw new CallError(`${what} returned timeoutMillis ${describe(res.timeoutMillis)}`);
          }
          timeout = Math.min(Math.ceil(res.timeoutMillis), 0xffffffff);
        }
      } else status = toStatus(r, what);
      if (status.code === 'WAIT') {
        if (!(timeout > 0)) {
          throw new CallError(`${what} answered WAIT without a timeout: return { status: Status.wait(), timeoutMillis }`);
        }
        if (e.ended) throw new CallError(`cycle ${e.id} ended while Permit was evaluated`);
        let w = this.waiting.get(e.pod.uid);
        if (!w) {
          w = { pod: e.pod, plugins: [] };
          this.waiting.set(e.pod.uid, w);
        }
        if (!w.plugins.includes(req.plugin)) w.plugins.push(req.plugin);
      }
      out.status = status;
      out.timeoutMillis = timeout;
    } catch (e) {
      out.status = this.#failure('Permit', req.plugin, e);
      out.timeoutMillis = 0;
    }
    return out;
  }

  #makeHandle(plugin: string): PermitHandle {
    return {
      plugin,
      allow: (uid: string) => this.#decide(plugin, uid, true, ''),
      reject: (uid: string, message = '') => this.#decide(plugin, uid, false, String(message)),
      waitingPods: () => {
        const out: Pod[] = [];
        for (const w of this.waiting.values()) if (w.plugins.includes(plugin)) out.push(w.pod);
        return out;
      },
    };
  }

  #decide(plugin: string, uid: string, allow: boolean, message: string): boolean {
    const w = this.waiting.get(uid);
    if (!w) return false;
    const i = w.plugins.indexOf(plugin);
    if (i < 0) return false;
    w.plugins.splice(i, 1);
    if (!allow || w.plugins.length === 0) this.waiting.delete(uid);
    const sink = this.permitSink;
    if (!sink) return false;
    sink({
      requestId: 0,
      status: null,
      generation: 0,
      timeoutMillis: 0,
      decision: { podUid: uid, plugin, allow, message },
    });
    return true;
  }
}

const EMPTY = new Uint8Array(0);

export class HandshakeError extends Error {}

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
