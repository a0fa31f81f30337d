// The protocol without the transport: replication order, generation waits, cycle
// state kept and forked for what-if deltas, score ahead, FilterBatch, errors.
'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const { PluginService, Status, makeNode, makePod } = require('@switchyard/plugin-sdk');

const quiet = { info() {}, warn() {}, error() {}, debug() {} };
const node = (id, name, labels = {}) => makeNode({ id, name, labels });
const pod = (uid, nodeName, labels = {}) => makePod({ uid, name: uid, nodeName, labels });
const delta = (d) => ({ full: false, upsertNodes: [], removeNodes: [], upsertPods: [], removePods: [], updatePods: [], ...d });
const msg = (generation, kind, body) => ({ generation, kind, [kind]: body, ack: false, more: [] });
const call = (plugin, cycle, generation, extra = {}) => ({ requestId: 9, plugin, cycle, generation, traceparent: '', ...extra });
const filterReq = (plugin, cycle, generation, nodes, extra = {}) =>
  call(plugin, cycle, generation, { nodes, deltas: [], scoreFirst: 0, preScore: false, groupFailures: false, ...extra });

/** Counts the pods of the cycle pod's team per node (PreFilter state); Filter allows
 * at most `max` of them on a node. */
function teamPlugin(max = 1) {
  const team = (p) => p.labels.team;
  return {
    name: 'Team',
    forks: 0,
    preFilter(cycle) {
      const counts = {};
      for (const n of cycle.snapshot.nodes()) counts[n.name] = n.pods.filter((p) => team(p) === team(cycle.pod)).length;
      cycle.state = { counts };
    },
    addPod(cycle, p, n) {
      if (team(p) === team(cycle.pod)) cycle.state.counts[n.name]++;
    },
    removePod(cycle, p, n) {
      if (team(p) === team(cycle.pod)) cycle.state.counts[n.name]--;
    },
    cloneState(s) {
      this.forks++;
      return { counts: { ...s.counts } };
    },
    filter(cycle, n) {
      return cycle.state.counts[n.name] < max ? undefined : Status.unschedulable(`team full on ${n.name}`);
    },
    score(cycle, n) {
      return cycle.state.counts[n.name] * 10;
    },
  };
}

/** A replica with nodes a (id 1) and b (id 2), pod x of team red on a, and cycle 7
 * (pod "me", team red) started at generation 2. */
function setup(plugins, opts = {}) {
  const svc = new PluginService(plugins, { logger: quiet, generationWaitMs: 200, ...opts });
  let next = svc.apply(msg(1, 'delta', delta({ full: true, upsertNodes: [node(1, 'a'), node(2, 'b')], upsertPods: [pod('x', 'a', { team: 'red' }), pod('y', 'b', { team: 'blue' })] })), undefined);
  next = svc.apply(msg(2, 'cycleStart', { cycle: 7, pod: pod('me', '', { team: 'red' }), profile: 'default-scheduler' }), next);
  return { svc, next };
}

test('replication: the first message must be full, gaps end the stream, a full snapshot starts over', () => {
  const svc = new PluginService([teamPlugin()], { logger: quiet });
  assert.throws(() => svc.apply(msg(1, 'delta', delta({})), undefined), /must be a full snapshot/);
  let next = svc.apply(msg(5, 'delta', delta({ full: true })), undefined);
  assert.equal(next, 6);
  assert.throws(() => svc.apply(msg(7, 'delta', delta({})), next), /generation gap: expected 6, got 7/);
  next = svc.apply(msg(1, 'delta', delta({ full: true })), next);
  assert.equal(svc.applied, 1, 'generations start over with a full snapshot');
  assert.throws(() => svc.apply({ generation: 2, ack: false, more: [] }, next), /empty Replicate message/);
});

test('handshake: points from the methods, capabilities only as offered, FAILED_PRECONDITION without v1', () => {
  const svc = new PluginService([teamPlugin(), { name: 'N', nodeLocal: true, filter() {}, events: { Node: ['Add'] } }], { logger: quiet });
  const hs = svc.handshake({ protocolVersions: ['v1'], capabilities: ['filter-batch', 'bogus'] });
  assert.deepEqual(hs.capabilities, ['filter-batch']);
  assert.deepEqual(hs.plugins[0].extensionPoints, ['PRE_FILTER', 'FILTER', 'SCORE']);
  assert.equal(hs.plugins[0].preFilterExtensions, true);
  assert.equal(hs.plugins[0].nodeLocal, false);
  assert.deepEqual(hs.plugins[1].events, [{ resource: 'Node', actions: ['Add'] }]);
  assert.equal(hs.plugins[1].nodeLocal, true);
  assert.throws(() => svc.handshake({ protocolVersions: ['v2'] }), /speaks protocol v1/);
  const off = new PluginService([teamPlugin()], { logger: quiet, capabilities: false });
  assert.deepEqual(off.handshake({ protocolVersions: ['v1'], capabilities: ['filter-batch'] }).capabilities, []);
});

test('plugins the scheduler could not use are refused at start', () => {
  assert.throws(() => new PluginService([{ name: 'A', nodeLocal: true, preFilter() {}, filter() {} }]), /nodeLocal but has a preFilter/);
  assert.throws(() => new PluginService([{ name: 'A', filter() {} }, { name: 'A', filter() {} }]), /registered twice/);
  assert.throws(() => new PluginService([{ name: 'A', filter() {}, addPod() {} }]), /no preFilter/);
  assert.throws(() => new PluginService([{ name: 'A', normalizeScore() {} }]), /no score/);
  assert.throws(() => new PluginService([{ name: 'A', filter() {}, events: { Nodes: ['Add'] } }]), /unknown event resource/);
  assert.throws(() => new PluginService([{ name: 'A', filter() {}, events: { Node: ['Added'] } }]), /unknown action/);
  assert.throws(() => new PluginService([{ name: '', filter() {} }]), /no name/);
});

test('cycle state: kept from PreFilter on, per cycle; dropped at CycleEnd', async () => {
  const { svc, next } = setup([teamPlugin()]);
  const pf = await svc.preFilter(call('Team', 7, 2));
  assert.equal(pf.status.code, 'SUCCESS');
  assert.equal(pf.generation, 2);
  let r = await svc.filter(filterReq('Team', 7, 2, [1, 2]));
  assert.equal(r.error, null);
  assert.equal(r.evaluated, 2);
  assert.deepEqual(r.failures.map((f) => [f.index, f.status.code]), [[0, 'UNSCHEDULABLE']]);
  // A second cycle of a blue pod has its own state.
  let n2 = svc.apply(msg(3, 'cycleStart', { cycle: 8, pod: pod('me2', '', { team: 'blue' }), profile: '' }), next);
  await svc.preFilter(call('Team', 8, 3));
  r = await svc.filter(filterReq('Team', 8, 3, [1, 2]));
  assert.deepEqual(r.failures.map((f) => f.index), [1]);
  n2 = svc.apply(msg(4, 'cycleEnd', { cycle: 7 }), n2);
  r = await svc.filter(filterReq('Team', 7, 2, [1, 2]));
  assert.match(r.error.reasons[0], /cycle 7 is unknown/);
  assert.equal(r.evaluated, 0);
});

test('non-node-local calls are pinned to the cycle generation; node-local ones may name a later one', async () => {
  const local = { name: 'L', nodeLocal: true, filter: (c, n) => (n.name === 'a' ? undefined : Status.unschedulable('not a')) };
  const { svc, next } = setup([teamPlugin(), local]);
  svc.apply(msg(3, 'delta', delta({ upsertNodes: [node(3, 'c')] })), next);
  const pinned = await svc.preFilter(call('Team', 7, 2));
  assert.match(pinned.status.reasons[0], /moved on to generation 3/);
  const wrongGen = await svc.preFilter(call('Team', 7, 3));
  assert.match(wrongGen.status.reasons[0], /started at generation 2, not 3/);
  const later = await svc.filter(filterReq('L', 7, 3, [1, 3]));
  assert.equal(later.error, null);
  assert.equal(later.generation, 3);
  assert.deepEqual(later.failures.map((f) => f.index), [1]);
});

test('a call waits (bounded) for its generation, without blocking the event loop', async () => {
  const { svc, next } = setup([teamPlugin()]);
  const pending = svc.preFilter(call('Team', 9, 3));
  let ticked = false;
  setImmediate(() => (ticked = true));
  await new Promise((r) => setTimeout(r, 20));
  assert.ok(ticked);
  svc.apply(msg(3, 'cycleStart', { cycle: 9, pod: pod('late', '', { team: 'red' }), profile: '' }), next);
  const r = await pending;
  assert.equal(r.status.code, 'SUCCESS');
  assert.equal(r.generation, 3);
  const t0 = Date.now();
  const never = await svc.preFilter(call('Team', 10, 99));
  assert.match(never.status.reasons[0], /generation 99 not reached within 0.2s/);
  assert.ok(Date.now() - t0 >= 150);
});

test('what-if deltas fork the state and run removePod/addPod; the cycle state is untouched', async () => {
  const plugin = teamPlugin(1);
  const { svc } = setup([plugin]);
  svc.replica.noteCyclePod; // the cycle pod is not in the replica
  await svc.preFilter(call('Team', 7, 2));
  const nominated = pod('nom', '', { team: 'red' });
  const r = await svc.filter(
    filterReq('Team', 7, 2, [1, 1, 2, 2, 1], {
      deltas: [
        { index: 1, removePods: ['x'], addPods: [], addPodObjects: [] }, // a without x: fits
        { index: 2, removePods: [], addPods: ['x'], addPodObjects: [] }, // b with x: full
        { index: 3, removePods: [], addPods: [], addPodObjects: [nominated] }, // b with a nominated red pod
        { index: 4, removePods: ['nobody'], addPods: [], addPodObjects: [] },
      ],
    }),
  );
  assert.equal(r.error, null);
  assert.equal(r.evaluated, 5);
  const byIndex = Object.fromEntries(r.failures.map((f) => [f.index, f.status]));
  assert.equal(byIndex[0].code, 'UNSCHEDULABLE', 'a as the snapshot has it');
  assert.equal(byIndex[1], undefined, 'x removed by the delta');
  assert.equal(byIndex[2].code, 'UNSCHEDULABLE');
  assert.equal(byIndex[3].code, 'UNSCHEDULABLE');
  assert.equal(byIndex[4].code, 'ERROR');
  assert.match(byIndex[4].reasons[0], /removes pod nobody, which is not on node a/);
  assert.equal(plugin.forks, 4, 'one fork per delta item, by the cloneState hook');
  // The cycle's own state and the replica are unchanged.
  const again = await svc.filter(filterReq('Team', 7, 2, [1, 2]));
  assert.deepEqual(again.failures.map((f) => f.index), [0]);
  assert.equal(svc.replica.node(1).pods.length, 1);
  assert.equal(svc.replica.node(2).pods.length, 1);
});

test('without a cloneState hook the state is forked with structuredClone', async () => {
  const p = teamPlugin(1);
  delete p.cloneState;
  const { svc } = setup([p]);
  await svc.preFilter(call('Team', 7, 2));
  const r = await svc.filter(filterReq('Team', 7, 2, [1], { deltas: [{ index: 0, removePods: ['x'], addPods: [], addPodObjects: [] }] }));
  assert.deepEqual(r.failures, []);
  const again = await svc.filter(filterReq('Team', 7, 2, [1]));
  assert.equal(again.failures.length, 1, 'the fork did not leak into the cycle state');
  // A state structuredClone refuses is an Error naming the fix.
  const q = teamPlugin(1);
  delete q.cloneState;
  q.preFilter = (cycle) => {
    cycle.state = { counts: { a: 0, b: 0 }, fn: () => 1 };
  };
  const s2 = setup([q]).svc;
  await s2.preFilter(call('Team', 7, 2));
  const bad = await s2.filter(filterReq('Team', 7, 2, [1], { deltas: [{ index: 0, removePods: [], addPods: [], addPodObjects: [] }] }));
  assert.match(bad.error.reasons[0], /cannot fork the cycle state.*cloneState/);
});

test('score ahead runs PreScore on a fork and Score over the first passing items', async () => {
  const p = teamPlugin(5);
  p.preScore = (cycle) => {
    cycle.state.preScored = true;
  };
  p.normalizeScore = (cycle, scores) => scores.map((s) => Math.min(100, s * 2));
  const { svc } = setup([p]);
  await svc.preFilter(call('Team', 7, 2));
  const r = await svc.filter(filterReq('Team', 7, 2, [1, 2], { scoreFirst: 2, preScore: true }));
  assert.equal(r.score.status.code, 'SUCCESS');
  assert.deepEqual(r.score.scores, [20, 0]);
  assert.equal(r.score.normalized, true);
  const e = svc.cycles.get(7);
  assert.equal(e.cycles[0].state.preScored, undefined, 'PreScore ran on a fork');
  const sc = await svc.score(call('Team', 7, 2, { nodes: [1, 2], normalize: false, afterPreScore: false }));
  assert.deepEqual(sc.scores, [10, 0]);
  assert.equal(sc.normalized, false);
  const n = await svc.normalizeScore(call('Team', 7, 2, { nodes: [1, 2], scores: [10, 0] }));
  assert.deepEqual(n.scores, [20, 0]);
  assert.equal(n.normalized, true);
});

test('Score after a pipelined PreScore waits for it and answers its SKIP', async () => {
  const p = teamPlugin(5);
  p.preScore = () => Status.skip();
  const { svc } = setup([p]);
  await svc.preFilter(call('Team', 7, 2));
  const score = svc.score(call('Team', 7, 2, { nodes: [1, 2], normalize: true, afterPreScore: true }));
  await new Promise((r) => setTimeout(r, 10));
  const pre = await svc.preScore(call('Team', 7, 2, { nodes: [1, 2] }));
  assert.equal(pre.status.code, 'SKIP');
  assert.equal((await score).status.code, 'SKIP');
});

test('FilterBatch answers each call as the Filter stream would, in order', async () => {
  const local = { name: 'L', nodeLocal: true, filter: (c, n) => (c.pod.labels.team === 'red' && n.name === 'b' ? Status.unschedulable('no') : undefined) };
  const { svc, next } = setup([local]);
  svc.apply(msg(3, 'cycleStart', { cycle: 8, pod: pod('blue1', '', { team: 'blue' }), profile: '' }), next);
  const r = await svc.filterBatch({
    requestId: 77,
    calls: [
      { ...filterReq('L', 7, 2, [1, 2]), requestId: 1 },
      { ...filterReq('L', 8, 3, [1, 2]), requestId: 2 },
      { ...filterReq('L', 99, 3, [1]), requestId: 3 },
    ],
  });
  assert.equal(r.requestId, 77);
  assert.deepEqual(r.replies.map((x) => x.requestId), [1, 2, 3]);
  assert.deepEqual(r.replies[0].failures.map((f) => f.index), [1]);
  assert.deepEqual(r.replies[1].failures, []);
  assert.match(r.replies[2].error.reasons[0], /cycle 99 is unknown/);
});

test('groupFailures: each distinct status (code and reasons) once, with its indices; listed without it', async () => {
  // One Status object for every node without a GPU: grouping must not touch it.
  const noGpu = Status.unschedulable('no gpu');
  const verdicts = {
    a: { code: 'UNSCHEDULABLE', reasons: ['busy', 'no gpu'] },
    b: noGpu,
    c: { code: 'UNSCHEDULABLE_AND_UNRESOLVABLE', reasons: ['no gpu'] },
    d: { code: 'UNSCHEDULABLE' },
  };
  const picky = { name: 'P', nodeLocal: true, filter: (c, n) => verdicts[n.name] };
  const { svc, next } = setup([picky]);
  svc.apply(msg(3, 'delta', delta({ upsertNodes: [node(3, 'c'), node(4, 'd'), node(5, 'e')] })), next);
  // Items: 0 a, 1 b, 2 e (passes), 3 c, 4 b, 5 d, 6 d.
  const items = [1, 2, 5, 3, 2, 4, 4];
  const listed = (r) => r.failures.map((f) => [f.index, f.status.code, f.status.reasons]);
  const grouped = (r) => r.failureGroups.map((g) => [g.status.code, g.status.reasons, g.indices]);

  const inline = await svc.filter(filterReq('P', 7, 3, items));
  assert.equal(inline.error, null);
  assert.equal(inline.evaluated, 7);
  assert.deepEqual(inline.failureGroups, []);
  assert.deepEqual(listed(inline), [
    [0, 'UNSCHEDULABLE', ['busy', 'no gpu']],
    [1, 'UNSCHEDULABLE', ['no gpu']],
    [3, 'UNSCHEDULABLE_AND_UNRESOLVABLE', ['no gpu']],
    [4, 'UNSCHEDULABLE', ['no gpu']],
    [5, 'UNSCHEDULABLE', []],
    [6, 'UNSCHEDULABLE', []],
  ]);

  const r = await svc.filter(filterReq('P', 7, 3, items, { groupFailures: true }));
  assert.equal(r.error, null);
  assert.equal(r.evaluated, 7);
  assert.deepEqual(r.failures, [], 'grouped failures are not listed as well');
  assert.deepEqual(grouped(r), [
    ['UNSCHEDULABLE', ['busy', 'no gpu'], [0]],
    ['UNSCHEDULABLE', ['no gpu'], [1, 4]],
    ['UNSCHEDULABLE_AND_UNRESOLVABLE', ['no gpu'], [3]],
    ['UNSCHEDULABLE', [], [5, 6]],
  ]);
  const shared = r.failureGroups[1].status;
  assert.notEqual(shared, noGpu, "a group's status is a copy");
  assert.notEqual(shared.reasons, noGpu.reasons, "a group's reasons are a copy");

  // FilterBatch: each call answers as it asked.
  const b = await svc.filterBatch({
    requestId: 5,
    calls: [
      { ...filterReq('P', 7, 3, [2, 1, 2], { groupFailures: true }), requestId: 1 },
      { ...filterReq('P', 7, 3, [2, 1, 2]), requestId: 2 },
      { ...filterReq('P', 7, 3, [5], { groupFailures: true }), requestId: 3 },
    ],
  });
  assert.deepEqual(b.replies.map((x) => [x.requestId, x.error, x.evaluated]), [
    [1, null, 3],
    [2, null, 3],
    [3, null, 1],
  ]);
  assert.deepEqual(b.replies[0].failures, []);
  assert.deepEqual(grouped(b.replies[0]), [
    ['UNSCHEDULABLE', ['no gpu'], [0, 2]],
    ['UNSCHEDULABLE', ['busy', 'no gpu'], [1]],
  ]);
  assert.deepEqual(b.replies[1].failureGroups, []);
  assert.deepEqual(listed(b.replies[1]), [
    [0, 'UNSCHEDULABLE', ['no gpu']],
    [1, 'UNSCHEDULABLE', ['busy', 'no gpu']],
    [2, 'UNSCHEDULABLE', ['no gpu']],
  ]);
  assert.deepEqual([b.replies[2].failures, b.replies[2].failureGroups], [[], []], 'nothing failed: no groups');
  assert.deepEqual(noGpu, Status.unschedulable('no gpu'), "the plugin's status is untouched");
});

test('errors are Error statuses of the call: points the plugin lacks, bad nodes, bad answers, exceptions', async () => {
  const logged = [];
  const thrower = { name: 'T', nodeLocal: true, filter: (c, n) => { if (n.name === 'b') throw new Error('boom'); }, score: () => 1.5 };
  const liar = { name: 'Liar', nodeLocal: true, filter: () => ({ code: 'UNSCHEDULEABLE' }) };
  const { svc } = setup([thrower, liar], { logger: { ...quiet, error: (m) => logged.push(m) } });
  const missing = await svc.preFilter(call('T', 7, 2));
  assert.match(missing.status.reasons[0], /plugin "T" has no PreFilter/);
  const unknown = await svc.filter(filterReq('Nobody', 7, 2, [1]));
  assert.match(unknown.error.reasons[0], /no plugin named "Nobody"/);
  const badNode = await svc.filter(filterReq('T', 7, 2, [1, 42]));
  assert.match(badNode.error.reasons[0], /unknown node id 42/);
  const badDelta = await svc.filter(filterReq('T', 7, 2, [1], { deltas: [{ index: 3, removePods: [], addPods: [], addPodObjects: [] }] }));
  assert.match(badDelta.error.reasons[0], /delta for item 3 of a batch of 1/);
  const threw = await svc.filter(filterReq('T', 7, 2, [1, 2]));
  assert.match(threw.error.reasons[0], /Filter of plugin "T" threw: boom/);
  assert.equal(threw.evaluated, 0);
  assert.equal(logged.length, 1);
  const score = await svc.score(call('T', 7, 2, { nodes: [1], normalize: false, afterPreScore: false }));
  assert.match(score.status.reasons[0], /returned 1.5 for node a: a score is an integer/);
  const lie = await svc.filter(filterReq('Liar', 7, 2, [1]));
  assert.match(lie.error.reasons[0], /not a Status/);
  const malformed = await svc.filter({ $malformed: 'index out of range', requestId: 5 });
  assert.equal(malformed.requestId, 5);
  assert.match(malformed.error.reasons[0], /malformed request/);
  const reserve = await svc.cycleCall(call('T', 7, 2, { nodeName: 'a' }), 'Reserve');
  assert.match(reserve.status.reasons[0], /has no Reserve/);
});

test('an async plugin is awaited; a replica change while it waits fails a pinned call', async () => {
  let release;
  const p = {
    name: 'Slow',
    preFilter: async (cycle) => {
      await new Promise((r) => (release = r));
      cycle.state = 1;
    },
    filter: async () => undefined,
  };
  const { svc, next } = setup([p]);
  const pf = svc.preFilter(call('Slow', 7, 2));
  await new Promise((r) => setImmediate(r));
  svc.apply(msg(3, 'delta', delta({ upsertNodes: [node(3, 'c')] })), next);
  release();
  assert.match((await pf).status.reasons[0], /replica changed while the call was evaluated/);
});

test('Permit WAIT needs a timeout; the handle sends a decision on the Permit stream', async () => {
  const sent = [];
  const p = {
    name: 'Gate',
    permit: (cycle, nodeName, handle) => (cycle.pod.uid === 'me' ? { status: Status.wait(), timeoutMillis: 1000 } : Status.wait()),
  };
  const { svc, next } = setup([p]);
  svc.permitSink = (r) => sent.push(r);
  const r = await svc.permit(call('Gate', 7, 2, { nodeName: 'a' }));
  assert.equal(r.status.code, 'WAIT');
  assert.equal(r.timeoutMillis, 1000);
  const h = svc.permitHandle('Gate');
  assert.deepEqual(h.waitingPods().map((x) => x.uid), ['me']);
  assert.equal(h.allow('me'), true);
  assert.equal(h.allow('me'), false, 'decided already');
  assert.deepEqual(sent, [{ requestId: 0, status: null, generation: 0, timeoutMillis: 0, decision: { podUid: 'me', plugin: 'Gate', allow: true, message: '' } }]);
  svc.apply(msg(3, 'cycleStart', { cycle: 8, pod: pod('other', ''), profile: '' }), next);
  const noTimeout = await svc.permit(call('Gate', 8, 3, { nodeName: 'a' }));
  assert.equal(noTimeout.status.code, 'ERROR');
  assert.match(noTimeout.status.reasons[0], /WAIT without a timeout/);
});

test('a 5000-node Filter batch is evaluated without per-node garbage beyond the reply', async () => {
  const nodes = [];
  for (let i = 1; i <= 5000; i++) nodes.push(node(i, `n${i}`, i % 10 === 0 ? { gpu: 'a100' } : {}));
  const p = { name: 'Gpu', nodeLocal: true, filter: (c, n) => (n.label('gpu') === 'a100' ? undefined : Status.unschedulable('no gpu')) };
  const svc = new PluginService([p], { logger: quiet });
  let next = svc.apply(msg(1, 'delta', delta({ full: true, upsertNodes: nodes })), undefined);
  next = svc.apply(msg(2, 'cycleStart', { cycle: 1, pod: pod('p', ''), profile: '' }), next);
  const ids = nodes.map((n) => n.id);
  let r;
  for (let i = 0; i < 20; i++) r = await svc.filter(filterReq('Gpu', 1, 2, ids));
  assert.equal(r.evaluated, 5000);
  assert.equal(r.failures.length, 4500);
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < 50; i++) await svc.filter(filterReq('Gpu', 1, 2, ids));
  const ms = Number(process.hrtime.bigint() - t0) / 1e6 / 50;
  const pass = { name: 'Pass', nodeLocal: true, filter: () => undefined };
  const svc2 = new PluginService([pass], { logger: quiet });
  svc2.apply(msg(2, 'cycleStart', { cycle: 1, pod: pod('p', ''), profile: '' }), svc2.apply(msg(1, 'delta', delta({ full: true, upsertNodes: nodes })), undefined));
  for (let i = 0; i < 20; i++) await svc2.filter(filterReq('Pass', 1, 2, ids));
  global.gc?.();
  const before = process.memoryUsage().heapUsed;
  for (let i = 0; i < 5; i++) await svc2.filter(filterReq('Pass', 1, 2, ids));
  const grown = process.memoryUsage().heapUsed - before;
  console.log(`# 5000-node Filter: ${ms.toFixed(2)} ms per batch (4500 failures); all-pass batches grew the heap by ${grown} bytes`);
  assert.ok(ms < 50, `a 5000-node batch took ${ms} ms`);
});

test('filter-after-pre-filter: a Filter sent right behind its PreFilter waits for the outcome, and fails with it', async () => {
  const { svc, next } = setup([teamPlugin()]);
  let done = false;
  const behind = svc.filter(filterReq('Team', 7, 2, [1, 2], { afterPreFilter: true })).then((r) => ((done = true), r));
  await new Promise((r) => setTimeout(r, 30));
  assert.equal(done, false, 'the Filter waits for its PreFilter');
  const pf = await svc.preFilter(call('Team', 7, 2));
  assert.equal(pf.status.code, 'SUCCESS');
  const r = await behind;
  assert.equal(r.error, null);
  assert.deepEqual(r.failures.map((f) => f.index), [0]);
  // A PreFilter that fails (a plugin without one): the Filter behind it fails too.
  svc.apply(msg(next, 'cycleStart', { cycle: 8, pod: pod('me2', '', { team: 'red' }), profile: 'default-scheduler' }), next);
  const noPre = { name: 'NoPre', filter: () => undefined };
  const svc2 = setup([noPre]).svc;
  assert.equal((await svc2.preFilter(call('NoPre', 7, 2))).status.code, 'ERROR');
  const failed = await svc2.filter(filterReq('NoPre', 7, 2, [1], { afterPreFilter: true }));
  assert.match(failed.error.reasons[0], /no PreFilter/);
  // One that never comes: an error after the generation wait.
  const lost = await svc.filter(filterReq('Team', 8, next, [1], { afterPreFilter: true }));
  assert.match(lost.error.reasons[0], /did not arrive/);
  const hs = svc.handshake({ protocolVersions: ['v1'], capabilities: ['filter-after-pre-filter', 'nope'] });
  assert.deepEqual(hs.capabilities, ['filter-after-pre-filter']);
});

test('permit-after-reserve: a Permit sent right behind its Reserve waits for the outcome, and runs only if it succeeded', async () => {
  const permits = [];
  const gate = {
    name: 'Gate',
    reserve: (cycle) => (cycle.pod.labels.deny ? Status.unschedulable('denied') : undefined),
    unreserve: () => undefined,
    permit: (cycle) => {
      permits.push(cycle.pod.uid);
      return undefined;
    },
  };
  const { svc, next } = setup([gate]);
  let done = false;
  const behind = svc.permit(call('Gate', 7, 2, { nodeName: 'a', afterReserve: true })).then((r) => ((done = true), r));
  await new Promise((r) => setTimeout(r, 30));
  assert.equal(done, false, 'the Permit waits for its Reserve');
  assert.equal((await svc.cycleCall(call('Gate', 7, 2, { nodeName: 'a' }), 'Reserve')).status.code, 'SUCCESS');
  assert.equal((await behind).status.code, 'SUCCESS');
  // A Reserve that refuses: the Permit behind it fails, the plugin's Permit never runs.
  svc.apply(msg(next, 'cycleStart', { cycle: 8, pod: pod('denied', '', { deny: 'yes' }), profile: 'default-scheduler' }), next);
  assert.equal((await svc.cycleCall(call('Gate', 8, next, { nodeName: 'a' }), 'Reserve')).status.code, 'UNSCHEDULABLE');
  const refused = await svc.permit(call('Gate', 8, next, { nodeName: 'a', afterReserve: true }));
  assert.equal(refused.status.code, 'ERROR');
  assert.match(refused.status.reasons[0], /behind a Reserve/);
  assert.deepEqual(permits, ['me']);
  const hs = svc.handshake({ protocolVersions: ['v1'], capabilities: ['permit-after-reserve'] });
  assert.deepEqual(hs.capabilities, ['permit-after-reserve']);
});

test('scoreNodeLabel: labelScores served as PreScore (its table in the reply) and Score; bad declarations refused', async () => {
  const byZone = {
    name: 'ByZone',
    scoreNodeLabel: 'zone',
    scoreNormalization: 'default',
    labelScores: (cycle) => (cycle.pod.labels.solo ? Status.skip() : { z2: 1, z1: 3 }),
  };
  const svc = new PluginService([byZone], { logger: quiet, generationWaitMs: 200 });
  const info = svc.handshake({ protocolVersions: ['v1'], capabilities: [] }).plugins[0];
  assert.equal(info.scoreNodeLabel, 'zone');
  assert.deepEqual(info.extensionPoints, ['PRE_SCORE', 'SCORE']);
  assert.equal(info.normalizeScore, true);
  let next = svc.apply(msg(1, 'delta', delta({ full: true, upsertNodes: [node(1, 'a', { zone: 'z1' }), node(2, 'b', { zone: 'z2' }), node(3, 'c')] })), undefined);
  next = svc.apply(msg(2, 'cycleStart', { cycle: 7, pod: pod('me', ''), profile: 'default-scheduler' }), next);
  next = svc.apply(msg(3, 'cycleStart', { cycle: 8, pod: pod('solo', '', { solo: 'y' }), profile: 'default-scheduler' }), next);
  const pre = await svc.preScore(call('ByZone', 7, 2, { nodes: [] }));
  assert.equal(pre.status.code, 'SUCCESS');
  assert.deepEqual(pre.labelScores, { values: ['z1', 'z2'], scores: [3, 1] });
  const sc = await svc.score(call('ByZone', 7, 2, { nodes: [1, 2, 3], normalize: true, afterPreScore: false }));
  assert.deepEqual([sc.scores, sc.normalized], [[100, 33, 0], true]);
  const skipped = await svc.preScore(call('ByZone', 8, 3, { nodes: [] }));
  assert.equal(skipped.status.code, 'SKIP');
  assert.equal(skipped.labelScores, undefined);
  for (const [p, words] of [
    [{ ...byZone, score: () => 0 }, /drop the others/],
    [{ ...byZone, preFilter: () => undefined }, /has preFilter/],
    [{ name: 'NoTable', scoreNodeLabel: 'zone' }, /no labelScores/],
    [{ ...byZone, scoreNodeLabel: '' }, /name a node label/],
  ]) {
    assert.throws(() => new PluginService([p], { logger: quiet }), words);
  }
});
