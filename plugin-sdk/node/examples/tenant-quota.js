#!/usr/bin/env node
// @ts-check
// TenantQuota (a port of plugins/quota, plus a Reserve, a Permit and a queue order):
// a node labelled `quota.switchyard.dev/pods-per-tenant: N` takes at most N pods of
// each tenant (`quota.switchyard.dev/tenant` pod label). PreFilter counts the
// tenant's pods per limited node into the cycle state; AddPod/RemovePod keep the
// counts right for what-if deltas (nominated pods, preemption dry runs), on the
// fork the SDK makes. Not node-local: the state spans nodes.
//   node examples/tenant-quota.js --listen unix:///tmp/tenant-quota.sock
'use strict';
const { main, Status } = require('@switchyard/plugin-sdk');

const TENANT = 'quota.switchyard.dev/tenant';
const LIMIT = 'quota.switchyard.dev/pods-per-tenant';

/** @param {import('@switchyard/plugin-sdk').Pod} pod */
const tenantOf = (pod) => (Object.hasOwn(pod.labels, TENANT) && pod.labels[TENANT]) || undefined;

/** @typedef {{ tenant: string, counts: Record<string, number> }} QuotaState */

/** @type {import('@switchyard/plugin-sdk').Plugin<QuotaState> & { reserved: Map<string, string> }} */
const tenantQuota = {
  name: 'TenantQuota',
  events: { Node: ['Add', 'UpdateNodeLabel'], Pod: ['Delete', 'UpdatePodLabel'] },
  /** Pods reserved on a node and not yet bound or unreserved (plugin-wide state). */
  reserved: new Map(),

  // A pod with an empty tenant label is held back: it names no tenant.
  preEnqueue(pod) {
    if (Object.hasOwn(pod.labels, TENANT) && pod.labels[TENANT] === '') {
      return Status.unresolvable(`label ${TENANT} is empty`);
    }
  },

  // Higher priority first, then older first: 4 bytes of inverted priority, 8 of time.
  sortKey(pod) {
    const key = Buffer.alloc(12);
    key.writeUInt32BE((0x7fffffff - pod.priority) >>> 0, 0);
    key.writeBigInt64BE(BigInt(pod.creationTimestampMicros), 4);
    return key;
  },

  preFilter(cycle) {
    const tenant = tenantOf(cycle.pod);
    if (tenant === undefined) return Status.skip();
    /** @type {Record<string, number>} */
    const counts = {};
    let limited = false;
    for (const node of cycle.snapshot.nodes()) {
      if (node.label(LIMIT) === undefined) continue;
      limited = true;
      counts[node.name] = node.pods.filter((p) => p.uid !== cycle.pod.uid && tenantOf(p) === tenant).length;
    }
    if (!limited) return Status.skip();
    cycle.state = { tenant, counts };
  },

  addPod(cycle, pod, node) {
    const s = cycle.state;
    if (s && pod.uid !== cycle.pod.uid && tenantOf(pod) === s.tenant) s.counts[node.name] = (s.counts[node.name] ?? 0) + 1;
  },

  removePod(cycle, pod, node) {
    const s = cycle.state;
    if (s && pod.uid !== cycle.pod.uid && tenantOf(pod) === s.tenant) {
      s.counts[node.name] = Math.max(0, (s.counts[node.name] ?? 0) - 1);
    }
  },

  filter(cycle, node) {
    const s = cycle.state;
    if (!s) return Status.error('TenantQuota: no PreFilter state for this cycle');
    const value = node.label(LIMIT);
    if (value === undefined) return;
    if (!/^\d+$/.test(value)) return Status.unresolvable(`node(s) had an invalid value ${JSON.stringify(value)} for label ${LIMIT}`);
    const limit = Number(value);
    if ((s.counts[node.name] ?? 0) + 1 <= limit) return;
    const reason = `node(s) exceeded the pod quota of tenant ${s.tenant}`;
    return limit === 0 ? Status.unresolvable(reason) : Status.unschedulable(reason);
  },

  reserve(cycle, nodeName) {
    this.reserved.set(cycle.pod.uid, nodeName);
  },

  unreserve(cycle) {
    this.reserved.delete(cycle.pod.uid);
  },

  // A tenant's pod waits at Permit until the SDK's handle lets it go, a moment later
  // (where a real plugin would wait for its gang, an approval, ...).
  permit(cycle, nodeName, handle) {
    if (tenantOf(cycle.pod) === undefined) return Status.success();
    const uid = cycle.pod.uid;
    setTimeout(() => handle.allow(uid), 10);
    return { status: Status.wait(), timeoutMillis: 5000 };
  },

  postBind(cycle) {
    this.reserved.delete(cycle.pod.uid);
  },
};

if (require.main === module) main(tenantQuota);
module.exports = tenantQuota;
