// Indexes the replica keeps current as deltas arrive, so a plugin that looks at the
// whole cluster (a quota, a gang, rack locality) reads a count in its preFilter or
// preScore instead of scanning every pod of the cluster in every cycle. A plugin
// declares the indexes it reads (`indexes` on the plugin); the SDK builds them when
// the full snapshot arrives and updates them with each pod and node a delta adds,
// moves or removes. The same indexes as the Rust SDK's `Index`.

import type { Node, Pod } from './types.js';

/** What an index counts: placed pods by the value of a pod label per node, placed
 * pods by namespace per node, nodes by the value of a node label, or the placed pods
 * themselves by namespace and the value of a pod label (the members of a gang or a
 * job, to tell which are placed and where). */
export type Index =
  | { kind: 'podsByLabel'; key: string }
  | { kind: 'podsByNamespace' }
  | { kind: 'nodesByLabel'; key: string }
  | { kind: 'podListsByLabel'; key: string };

const hasOwn = Object.prototype.hasOwnProperty;

/** Placed pods per node for each value of one key (a label's value, a namespace). */
export class PodCounts {
  readonly #byValue = new Map<string, { total: number; byNode: Map<number, number> }>();

  /** Pods with `value` in the whole replica. */
  total(value: string): number {
    return this.#byValue.get(value)?.total ?? 0;
  }
  /** Pods with `value` on node `nodeId`. */
  onNode(value: string, nodeId: number): number {
    return this.#byValue.get(value)?.byNode.get(nodeId) ?? 0;
  }
  /** [node id, count] of the nodes holding pods with `value`, in no order. */
  nodes(value: string): IterableIterator<[number, number]> {
    return (this.#byValue.get(value)?.byNode ?? new Map<number, number>()).entries();
  }
  /** [value, total] of every value counted. */
  *values(): IterableIterator<[string, number]> {
    for (const [k, v] of this.#byValue) yield [k, v.total];
  }
  /** @internal */
  add(value: string, node: number): void {
    let v = this.#byValue.get(value);
    if (v === undefined) {
      v = { total: 0, byNode: new Map() };
      this.#byValue.set(value, v);
    }
    v.total++;
    v.byNode.set(node, (v.byNode.get(node) ?? 0) + 1);
  }
  /** @internal */
  remove(value: string, node: number): void {
    const v = this.#byValue.get(value);
    if (v === undefined) return;
    v.total = Math.max(0, v.total - 1);
    const c = v.byNode.get(node);
    if (c !== undefined) {
      if (c <= 1) v.byNode.delete(node);
      else v.byNode.set(node, c - 1);
    }
    if (v.total === 0) this.#byValue.delete(value);
  }
}

/** Nodes by the value of one node label. */
export class NodeSets {
  readonly #byValue = new Map<string, number[]>();
  #count = 0;

  /** How many nodes carry the label (any value). */
  count(): number {
    return this.#count;
  }
  /** The ids of the nodes whose label has `value` (read-only). */
  nodes(value: string): readonly number[] {
    return this.#byValue.get(value) ?? [];
  }
  /** [value, node ids] of every value. */
  values(): IterableIterator<[string, readonly number[]]> {
    return this.#byValue.entries();
  }
  /** @internal */
  add(value: string, node: number): void {
    const v = this.#byValue.get(value);
    if (v === undefined) this.#byValue.set(value, [node]);
    else v.push(node);
    this.#count++;
  }
  /** @internal */
  remove(value: string, node: number): void {
    const v = this.#byValue.get(value);
    if (v === undefined) return;
    const i = v.indexOf(node);
    if (i >= 0) {
      v[i] = v[v.length - 1];
      v.pop();
      this.#count--;
    }
    if (v.length === 0) this.#byValue.delete(value);
  }
}

/** Placed pods by namespace and the value of one pod label. A pod without a
 * namespace is in `default`, as the API server defaults it. */
export class PodLists {
  readonly #byNamespace = new Map<string, Map<string, Map<string, Pod>>>();

  /** The placed pods in `namespace` whose label has `value` (in no order). */
  pods(namespace: string, value: string): IterableIterator<Pod> {
    return (this.#byNamespace.get(namespace || 'default')?.get(value) ?? new Map<string, Pod>()).values();
  }
  /** How many placed pods in `namespace` have `value`. */
  count(namespace: string, value: string): number {
    return this.#byNamespace.get(namespace || 'default')?.get(value)?.size ?? 0;
  }
  /** [namespace, value, count] of everything listed. */
  *values(): IterableIterator<[string, string, number]> {
    for (const [ns, values] of this.#byNamespace) {
      for (const [v, m] of values) yield [ns, v, m.size];
    }
  }
  /** @internal */
  add(value: string, p: Pod): void {
    const ns = p.namespace || 'default';
    let values = this.#byNamespace.get(ns);
    if (values === undefined) {
      values = new Map();
      this.#byNamespace.set(ns, values);
    }
    let m = values.get(value);
    if (m === undefined) {
      m = new Map();
      values.set(value, m);
    }
    m.set(p.uid, p);
  }
  /** @internal */
  remove(value: string, p: Pod): void {
    const ns = p.namespace || 'default';
    const values = this.#byNamespace.get(ns);
    if (values === undefined) return;
    const m = values.get(value);
    if (m !== undefined) {
      m.delete(p.uid);
      if (m.size === 0) values.delete(value);
    }
    if (values.size === 0) this.#byNamespace.delete(ns);
  }
}

/** @internal One replica's indexes. */
export class Indexes {
  readonly podsByLabel = new Map<string, PodCounts>();
  podsByNamespace: PodCounts | undefined;
  readonly nodesByLabel = new Map<string, NodeSets>();
  readonly podListsByLabel = new Map<string, PodLists>();

  /** Adds `index` (empty; the caller fills it); false when already declared. */
  declare(index: Index): boolean {
    switch (index?.kind) {
      case 'podsByLabel':
        if (this.podsByLabel.has(index.key)) return false;
        this.podsByLabel.set(index.key, new PodCounts());
        return true;
      case 'podsByNamespace':
        if (this.podsByNamespace !== undefined) return false;
        this.podsByNamespace = new PodCounts();
        return true;
      case 'nodesByLabel':
        if (this.nodesByLabel.has(index.key)) return false;
        this.nodesByLabel.set(index.key, new NodeSets());
        return true;
      case 'podListsByLabel':
        if (this.podListsByLabel.has(index.key)) return false;
        this.podListsByLabel.set(index.key, new PodLists());
        return true;
      default:
        throw new Error(
          `unknown index ${JSON.stringify(index)}: use {kind: 'podsByLabel', key}, {kind: 'podsByNamespace'}, {kind: 'nodesByLabel', key} or {kind: 'podListsByLabel', key}`,
        );
    }
  }
  /** Empties every index, keeping the declarations. */
  clear(): void {
    for (const k of this.podsByLabel.keys()) this.podsByLabel.set(k, new PodCounts());
    if (this.podsByNamespace !== undefined) this.podsByNamespace = new PodCounts();
    for (const k of this.nodesByLabel.keys()) this.nodesByLabel.set(k, new NodeSets());
    for (const k of this.podListsByLabel.keys()) this.podListsByLabel.set(k, new PodLists());
  }
  /** A pod placed on node `node` (`add`) or taken off it. */
  pod(p: Pod, node: number, add: boolean): void {
    for (const [key, c] of this.podsByLabel) {
      if (hasOwn.call(p.labels, key)) {
        if (add) c.add(p.labels[key], node);
        else c.remove(p.labels[key], node);
      }
    }
    const ns = this.podsByNamespace;
    if (ns !== undefined) {
      if (add) ns.add(p.namespace, node);
      else ns.remove(p.namespace, node);
    }
    for (const [key, l] of this.podListsByLabel) {
      if (hasOwn.call(p.labels, key)) {
        if (add) l.add(p.labels[key], p);
        else l.remove(p.labels[key], p);
      }
    }
  }
  /** A node added (`add`) or removed, with the labels it has then. */
  node(n: Node, add: boolean): void {
    for (const [key, s] of this.nodesByLabel) {
      if (hasOwn.call(n.labels, key)) {
        if (add) s.add(n.labels[key], n.id);
        else s.remove(n.labels[key], n.id);
      }
    }
  }
}
