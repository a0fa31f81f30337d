"use strict";
// The sidecar's replica of the scheduler's snapshot, kept current by the Replicate
// stream (a port of plugin-sdk/rust/src/snapshot.rs). Calls are evaluated against it at
// the generation they name.
Object.defineProperty(exports, "__esModule", { value: true });
exports.Snapshot = exports.ReplicationError = exports.NodeInfo = exports.MAX_PENDING_PODS = void 0;
const indexes_js_1 = require("./indexes.js");
const types_js_1 = require("./types.js");
/** CycleStart pods held for PodUpdates: both sides forget them all at this many. */
exports.MAX_PENDING_PODS = 1024;
/** Node ids below this are indexed by an array; larger ones by a Map. */
const DENSE_IDS = 1 << 22;
const hasOwn = Object.prototype.hasOwnProperty;
/** A node with the pods placed on it (bound or assumed by the scheduler). */
class NodeInfo {
    node;
    pods;
    constructor(node, pods = []) {
        this.node = node;
        this.pods = pods;
    }
    get name() {
        return this.node.name;
    }
    /** The node's label `key`, or undefined (own keys only). */
    label(key) {
        const l = this.node.labels;
        return hasOwn.call(l, key) ? l[key] : undefined;
    }
    /** Sum of one resource requested by the pods on the node (cpu in millicores). */
    requested(resource) {
        let sum = 0;
        for (const p of this.pods) {
            if (hasOwn.call(p.requests, resource))
                sum += p.requests[resource];
        }
        return sum;
    }
    /** Allocatable amount of one resource (0 when the node does not report it). */
    allocatable(resource) {
        const a = this.node.allocatable;
        return hasOwn.call(a, resource) ? a[resource] : 0;
    }
    /** A copy with its own pod list (the node and pods are shared). */
    clone() {
        return new NodeInfo(this.node, this.pods.slice());
    }
    /** Removes the pod `uid` from this NodeInfo's list; the pod, or undefined. */
    removePod(uid) {
        const i = this.pods.findIndex((p) => p.uid === uid);
        if (i < 0)
            return undefined;
        const p = this.pods[i];
        const last = this.pods.pop();
        if (i < this.pods.length)
            this.pods[i] = last;
        return p;
    }
}
exports.NodeInfo = NodeInfo;
/** Thrown when a Replicate message cannot be applied: the replica can no longer be
 * trusted, so the stream ends (the scheduler reconnects with a full snapshot). */
class ReplicationError extends Error {
}
exports.ReplicationError = ReplicationError;
/** The replicated snapshot: nodes by the scheduler's node id, pods by UID. */
class Snapshot {
    #generation = 0;
    /** Bumped by every change: lets a call that awaited notice the replica moved. */
    #version = 0;
    #dense = [];
    #sparse = new Map();
    #nodes = new Map();
    #byName = new Map();
    #pods = new Map();
    /** Pods of CycleStart messages not yet placed, for PodUpdates that name them. */
    #pending = new Map();
    /** The plugins' declared indexes, kept current by every delta. */
    #indexes = new indexes_js_1.Indexes();
    /** Keeps `index` from now on (built at once from what the replica holds); the SDK
     * declares every plugin's `indexes`. */
    declareIndex(index) {
        if (!this.#indexes.declare(index))
            return;
        this.#indexes.clear();
        for (const ni of this.#nodes.values()) {
            this.#indexes.node(ni.node, true);
            for (const p of ni.pods)
                this.#indexes.pod(p, ni.node.id, true);
        }
    }
    /** This replica with `indexes` declared (for plugin unit tests). */
    withIndexes(indexes) {
        for (const i of indexes)
            this.declareIndex(i);
        return this;
    }
    /** Placed pods per node by the value of pod label `key`, when a plugin declared
     * `{kind: 'podsByLabel', key}`. */
    podsByLabel(key) {
        return this.#indexes.podsByLabel.get(key);
    }
    /** Placed pods per node by namespace, when a plugin declared `{kind: 'podsByNamespace'}`. */
    podsByNamespace() {
        return this.#indexes.podsByNamespace;
    }
    /** Nodes by the value of node label `key`, when a plugin declared
     * `{kind: 'nodesByLabel', key}`. */
    nodesByLabel(key) {
        return this.#indexes.nodesByLabel.get(key);
    }
    /** Placed pods by namespace and the value of pod label `key`, when a plugin
     * declared `{kind: 'podListsByLabel', key}`. */
    podListsByLabel(key) {
        return this.#indexes.podListsByLabel.get(key);
    }
    /** A replica holding these nodes and pods, as a full snapshot from the scheduler
     * would build it: for plugin unit tests. Nodes without an id (0) are numbered after
     * the largest id given; a pod goes on the node its `nodeName` names. Partial
     * objects get the wire's defaults. */
    static fromObjects(nodes, pods = []) {
        const ns = nodes.map((n) => (0, types_js_1.makeNode)(n));
        let next = ns.reduce((m, n) => Math.max(m, n.id), 0);
        const names = new Set();
        for (const n of ns) {
            if (names.has(n.name))
                throw new Error(`node ${JSON.stringify(n.name)} is given twice`);
            names.add(n.name);
            if (n.id === 0)
                n.id = ++next;
        }
        const s = new Snapshot();
        s.apply(1, {
            full: true,
            upsertNodes: ns,
            removeNodes: [],
            upsertPods: pods.map((p) => ({ ...(0, types_js_1.emptyPod)(), ...p })),
            removePods: [],
            updatePods: [],
        });
        return s;
    }
    /** Generation of the last snapshot change applied. */
    get generation() {
        return this.#generation;
    }
    /** @internal */
    get version() {
        return this.#version;
    }
    /** The node with the scheduler's id `id`. */
    node(id) {
        return id < DENSE_IDS && id >= 0 ? this.#dense[id] : this.#sparse.get(id);
    }
    nodeByName(name) {
        const id = this.#byName.get(name);
        return id === undefined ? undefined : this.node(id);
    }
    /** Every node, in the order they arrived. */
    nodes() {
        return this.#nodes.values();
    }
    get numNodes() {
        return this.#nodes.size;
    }
    /** A bound or assumed pod by UID. */
    pod(uid) {
        return this.#pods.get(uid)?.pod;
    }
    /** Every bound or assumed pod. */
    *pods() {
        for (const e of this.#pods.values())
            yield e.pod;
    }
    get numPods() {
        return this.#pods.size;
    }
    /** @internal CycleStart pods held (for tests). */
    get numPending() {
        return this.#pending.size;
    }
    #setNode(id, ni) {
        if (id < DENSE_IDS && id >= 0) {
            if (ni === undefined) {
                if (id < this.#dense.length)
                    this.#dense[id] = undefined;
            }
            else {
                while (this.#dense.length < id)
                    this.#dense.push(undefined);
                this.#dense[id] = ni;
            }
        }
        else if (ni === undefined)
            this.#sparse.delete(id);
        else
            this.#sparse.set(id, ni);
        if (ni === undefined)
            this.#nodes.delete(id);
        else
            this.#nodes.set(id, ni);
    }
    /** @internal The pod of a CycleStart: kept until a delta places it. */
    noteCyclePod(pod) {
        if (this.#pending.size >= exports.MAX_PENDING_PODS)
            this.#pending.clear();
        this.#pending.set(pod.uid, pod);
    }
    /** @internal Applies one delta. A ReplicationError means the replica cannot be
     * trusted any more (the scheduler resends a full snapshot on the next stream). */
    apply(generation, d) {
        this.#version++;
        if (d.full) {
            this.#dense = [];
            this.#sparse.clear();
            this.#nodes.clear();
            this.#byName.clear();
            this.#pods.clear();
            this.#pending.clear();
            this.#indexes.clear();
        }
        // Removals first: a node deleted and re-created arrives with a new id.
        for (const id of d.removeNodes) {
            const ni = this.node(id);
            if (ni === undefined)
                continue;
            this.#setNode(id, undefined);
            this.#byName.delete(ni.node.name);
            this.#indexes.node(ni.node, false);
            for (const p of ni.pods) {
                this.#indexes.pod(p, id, false);
                const e = this.#pods.get(p.uid);
                if (e)
                    e.node = undefined;
            }
        }
        for (const uid of d.removePods)
            this.#removePod(uid);
        for (const n of d.upsertNodes) {
            const id = n.id;
            const old = this.#byName.get(n.name);
            if (old !== undefined && old !== id) {
                throw new ReplicationError(`node ${JSON.stringify(n.name)} arrived with id ${id} but the replica has it as ${old}`);
            }
            this.#byName.set(n.name, id);
            const ni = this.node(id);
            if (ni !== undefined) {
                if (ni.node.name !== n.name)
                    this.#byName.delete(ni.node.name);
                this.#indexes.node(ni.node, false);
                this.#indexes.node(n, true);
                ni.node = n;
            }
            else {
                this.#indexes.node(n, true);
                this.#setNode(id, new NodeInfo(n));
            }
        }
        for (const p of d.upsertPods) {
            this.#pending.delete(p.uid);
            this.#place(p);
        }
        for (const u of d.updatePods) {
            const known = this.#pods.get(u.uid)?.pod ?? this.#pending.get(u.uid);
            if (known === undefined) {
                throw new ReplicationError(`an update for pod ${u.uid} the replica does not hold`);
            }
            this.#pending.delete(u.uid);
            this.#place({
                ...known,
                nodeName: u.nodeName,
                nominatedNodeName: u.nominatedNodeName,
                phase: u.phase,
                terminating: u.terminating,
                startTimeMicros: u.startTimeMicros,
            });
        }
        this.#generation = generation;
    }
    /** Puts a pod in the replica, on its node, replacing any earlier copy. */
    #place(p) {
        this.#removePod(p.uid);
        const id = this.#byName.get(p.nodeName);
        const ni = id === undefined ? undefined : this.node(id);
        if (ni !== undefined) {
            ni.pods.push(p);
            this.#indexes.pod(p, id, true);
        }
        this.#pods.set(p.uid, { pod: p, node: ni === undefined ? undefined : id });
    }
    #removePod(uid) {
        const e = this.#pods.get(uid);
        if (e === undefined)
            return;
        this.#pods.delete(uid);
        if (e.node !== undefined && this.node(e.node)?.removePod(uid) !== undefined) {
            this.#indexes.pod(e.pod, e.node, false);
        }
    }
}
exports.Snapshot = Snapshot;
