// The test harness: a plugin's points run for a pending pod as the sidecar runs them,
// from a message built here and, for the TenantQuota example, from
// plugins/quota/testdata/cluster.yaml through `switchyard snapshot`.
'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const path = require('node:path');
const { Harness, HarnessError, Status, makeNode, makePod } = require('@switchyard/plugin-sdk');

const repo = path.join(__dirname, '..', '..', '..');

// Rejects nodes labelled bad, scores by the node's score label normalized to 100
// over the highest; preFilter keeps zone=a nodes for pods labelled zonal, skips pods
// labelled skip, rejects pods labelled reject.
const probe = {
  name: 'Probe',
  scoreNormalization: 'default',
  preFilter(cycle) {
    cycle.state = [cycle.pod.name];
    const l = cycle.pod.labels;
    if ('reject' in l) return Status.unresolvable('rejected at PreFilter');
    if ('skip' in l) return Status.skip();
    if ('zonal' in l) {
      return { nodeNames: Array.from(cycle.snapshot.nodes()).filter((n) => n.node.labels.zone === 'a').map((n) => n.name) };
    }
  },
  filter(cycle, node) {
    assert.ok(cycle.state, 'Filter sees the PreFilter state');
    if ('bad' in node.node.labels) return Status.unschedulable('bad node');
  },
  preScore(cycle, nodes) {
    cycle.state.push(`${nodes.length} feasible`);
  },
  score(cycle, node) {
    return Number(node.node.labels.score ?? 0);
  },
};

function harness() {
  const nodes = [
    makeNode({ id: 1, name: 'a1', labels: { zone: 'a', score: '10' } }),
    makeNode({ id: 2, name: 'a2', labels: { zone: 'a', score: '40' } }),
    makeNode({ id: 3, name: 'b1', labels: { zone: 'b', score: '80' } }),
    makeNode({ id: 4, name: 'bad', labels: { zone: 'a', bad: '', score: '99' } }),
  ];
  const more = ['any', 'zonal', 'skip', 'reject'].map((l, i) => ({
    kind: 'cycleStart',
    cycleStart: { cycle: i + 1, profile: 'default-scheduler', pod: makePod({ uid: l, name: l, namespace: 'ns', labels: { [l]: '' } }) },
  }));
  const delta = { full: true, upsertNodes: nodes, removeNodes: [], upsertPods: [], removePods: [], updatePods: [] };
  return new Harness({ generation: 1, kind: 'delta', delta, more });
}

test('the harness runs the points in order with one state', async () => {
  const h = harness();
  assert.deepEqual(h.pending(), ['ns/any', 'ns/zonal', 'ns/skip', 'ns/reject']);
  const out = await h.run(probe, 'ns/any');
  assert.deepEqual(out.feasible(), ['a1', 'a2', 'b1']);
  assert.equal(out.status('bad').code, 'UNSCHEDULABLE');
  assert.deepEqual(out.rawScores.map(([, s]) => s), [10, 40, 80]);
  assert.equal(out.score('b1'), 100);
  assert.equal(out.score('a2'), 50);
  assert.equal(out.best(), 'b1');
  assert.deepEqual(out.state, ['any', '3 feasible']);
});

test('preFilter narrows, skips and rejects', async () => {
  const h = harness();
  const zonal = await h.run(probe, 'ns/zonal');
  assert.deepEqual(zonal.filter.map(([n]) => n), ['a1', 'a2', 'bad']);
  assert.equal(zonal.best(), 'a2');
  assert.equal((await h.run(probe, 'ns/skip')).feasible().length, 4);
  const reject = await h.run(probe, 'ns/reject');
  assert.equal(reject.preFilter.status.code, 'UNSCHEDULABLE_AND_UNRESOLVABLE');
  assert.deepEqual([reject.filter, reject.scores], [[], []]);
  await assert.rejects(h.run(probe, 'ns/nobody'), /no pending pod "ns\/nobody" \(pending: ns\/any/);
  assert.throws(() => Harness.fromManifests(['x.yaml'], { bin: '/nonexistent/switchyard' }), HarnessError);
});

test('the TenantQuota example through switchyard snapshot', async () => {
  const bin = process.env.SWITCHYARD_BIN || path.join(repo, 'target', 'debug', 'switchyard');
  const h = Harness.fromManifests([path.join(repo, 'plugins', 'quota', 'testdata', 'cluster.yaml')], { bin });
  const quota = require('../examples/tenant-quota.js');
  assert.deepEqual(h.pending(), ['default/acme-new', 'default/globex-new', 'default/plain']);
  const acme = await h.run(quota, 'acme-new');
  assert.deepEqual(acme.feasible(), ['two-a', 'free']);
  assert.deepEqual((await h.run(quota, 'default/globex-new')).feasible(), ['two-a', 'two-b', 'free']);
  assert.equal((await h.run(quota, 'plain')).feasible().length, 4);
});
