"use strict";
// Indexes the replica keeps current as deltas arrive, so a plugin that looks at the
// whole cluster (a quota, a gang, rack locality) reads a count in its preFilter or
// preScore instead of scanning every pod of the cluster in every cycle. A plugin
// declares the indexes it reads (`indexes` on the plugin); the SDK builds them when
// the full snapshot arrives and updates them with each pod and node a delta adds,
// moves or removes. The same indexes as the Rust SDK's `Index`.
Object.defineProperty(exports, "__esModule", { value: true });
exports.Indexes = exports.PodLists = exports.NodeSets = exports.PodCounts = void 0;
const hasOwn = Object.prototype.hasOwnProperty;
/** Placed pods per node for each value of one key (a label's value, a namespace). */
class PodCounts {
    #byValue = new Map();
    /** Pods with `value` in the whole replica. */
    total(value) {
        return this.#byValue.get(value)?.total ?? 0;
    }
    /** Pods with `value` on node `nodeId`. */
    onNode(value, nodeId) {
        return this.#byValue.get(value)?.byNode.get(nodeId) ?? 0;
    }
    /** [node id, count] of the nodes holding pods with `value`, in no order. */
    nodes(value) {
        return (this.#byValue.get(value)?.byNode ?? new Map()).entries();
    }
    /** [value, total] of every value counted. */
    *values() {
        for (const [k, v] of this.#byValue)
            yield [k, v.total];
    }
    /** @internal */
    add(value, node) {
        let v = this.#byValue.get(value);
        if (v === undefined) {
            v = { total: 0, byNode: new Map() };
            this.#byValue.set(value, v);
        }
        v.total++;
        v.byNode.set(node, (v.byNode.get(node) ?? 0) + 1);
    }
    /** @internal */
    remove(value, node) {
        const v = this.#byValue.get(value);
        if (v === undefined)
            return;
        v.total = Math.max(0, v.total - 1);
        const c = v.byNode.get(node);
        if (c !== undefined) {
            if (c <= 1)
                v.byNode.delete(node);
            else
                v.byNode.set(node, c - 1);
        }
        if (v.total === 0)
            this.#byValue.delete(value);
    }
}
exports.PodCounts = PodCounts;
/** Nodes by the value of one node label. */
class NodeSets {
    #byValue = new Map();
    #count = 0;
    /** How many nodes carry the label (any value). */
    count() {
        return this.#count;
    }
    /** The ids of the nodes whose label has `value` (read-only). */
    nodes(value) {
        return this.#byValue.get(value) ?? [];
    }
    /** [value, node ids] of every value. */
    values() {
        return this.#byValue.entries();
    }
    /** @internal */
    add(value, node) {
        const v = this.#byValue.get(value);
        if (v === undefined)
            this.#byValue.set(value, [node]);
        else
            v.push(node);
        this.#count++;
    }
    /** @internal */
    remove(value, node) {
        const v = this.#byValue.get(value);
        if (v === undefined)
            return;
        const i = v.indexOf(node);
        if (i >= 0) {
            v[i] = v[v.length - 1];
            v.pop();
            this.#count--;
        }
        if (v.length === 0)
            this.#byValue.delete(value);
    }
}
exports.NodeSets = NodeSets;
/** Placed pods by namespace and the value of one pod label. A pod without a
 * namespace is in `default`, as the API server defaults it. */
class PodLists {
    #byNamespace = new Map();
    /** The placed pods in `namespace` whose label has `value` (in no order). */
    pods(namespace, value) {
        return (this.#byNamespace.get(namespace || 'default')?.get(value) ?? new Map()).values();
    }
    /** How many placed pods in `namespace` have `value`. */
    count(namespace, value) {
        return this.#byNamespace.get(namespace || 'default')?.get(value)?.size ?? 0;
    }
    /** [namespace, value, count] of everything listed. */
    *values() {
        for (const [ns, values] of this.#byNamespace) {
            for (const [v, m] of values)
                yield [ns, v, m.size];
        }
    }
    /** @internal */
    add(value, p) {
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
    remove(value, p) {
        const ns = p.namespace || 'default';
        const values = this.#byNamespace.get(ns);
        if (values === undefined)
            return;
        const m = values.get(value);
        if (m !== undefined) {
            m.delete(p.uid);
            if (m.size === 0)
                values.delete(value);
        }
        if (values.size === 0)
            this.#byNamespace.delete(ns);
    }
}
exports.PodLists = PodLists;
/** @internal One replica's indexes. */
class Indexes {
    podsByLabel = new Map();
    podsByNamespace;
    nodesByLabel = new Map();
    podListsByLabel = new Map();
    /** Adds `index` (empty; the caller fills it); false when already declared. */
    declare(index) {
        switch (index?.kind) {
            case 'podsByLabel':
                if (this.podsByLabel.has(index.key))
                    return false;
                this.podsByLabel.set(index.key, new PodCounts());
                return true;
            case 'podsByNamespace':
                if (this.podsByNamespace !== undefined)
                    return false;
                this.podsByNamespace = new PodCounts();
                return true;
            case 'nodesByLabel':
                if (this.nodesByLabel.has(index.key))
                    return false;
                this.nodesByLabel.set(index.key, new NodeSets());
                return true;
            case 'podListsByLabel':
                if (this.podListsByLabel.has(index.key))
                    return false;
                this.podListsByLabel.set(index.key, new PodLists());
                return true;
            default:
                throw new Error(`unknown index ${JSON.stringify(index)}: use {kind: 'podsByLabel', key}, {kind: 'podsByNamespace'}, {kind: 'nodesByLabel', key} or {kind: 'podListsByLabel', key}`);
        }
    }
    /** Empties every index, keeping the declarations. */
    clear() {
        for (const k of this.podsByLabel.keys())
            this.podsByLabel.set(k, new PodCounts());
        if (this.podsByNamespace !== undefined)
            this.podsByNamespace = new PodCounts();
        for (const k of this.nodesByLabel.keys())
            this.nodesByLabel.set(k, new NodeSets());
        for (const k of this.podListsByLabel.keys())
            this.podListsByLabel.set(k, new PodLists());
    }
    /** A pod placed on node `node` (`add`) or taken off it. */
    pod(p, node, add) {
        for (const [key, c] of this.podsByLabel) {
            if (hasOwn.call(p.labels, key)) {
                if (add)
                    c.add(p.labels[key], node);
                else
                    c.remove(p.labels[key], node);
            }
        }
        const ns = this.podsByNamespace;
        if (ns !== undefined) {
            if (add)
                ns.add(p.namespace, node);
            else
                ns.remove(p.namespace, node);
        }
        for (const [key, l] of this.podListsByLabel) {
            if (hasOwn.call(p.labels, key)) {
                if (add)
                    l.add(p.labels[key], p);
                else
                    l.remove(p.labels[key], p);
            }
        }
    }
    /** A node added (`add`) or removed, with the labels it has then. */
    node(n, add) {
        for (const [key, s] of this.nodesByLabel) {
            if (hasOwn.call(n.labels, key)) {
                if (add)
                    s.add(n.labels[key], n.id);
                else
                    s.remove(n.labels[key], n.id);
            }
        }
    }
}
exports.Indexes = Indexes;
