// The replica: deltas, node slots, PodUpdates, the CycleStart pods (a port of the
// Rust SDK's snapshot tests).
'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const { PodLists, Snapshot, makeNode, makePod, MAX_PENDING_PODS } = require('@switchyard/plugin-sdk');

const node = (id, name, labels = {}) => makeNode({ id, name, labels });
const pod = (uid, nodeName, cpu) => makePod({ uid, name: uid, nodeName, requests: { cpu } });
const delta = (d) => ({ full: false, upsertNodes: [], removeNodes: [], upsertPods: [], removePods: [], updatePods: [], ...d });
const update = (uid, nodeName) => ({ uid, nodeName, nominatedNodeName: '', phase: 'Running', terminating: false, startTimeMicros: 7 });

test('deltas move pods and nodes; a full snapshot replaces everything', () => {
  const s = new Snapshot();
  s.apply(1, delta({ full: true, upsertNodes: [node(1, 'a'), node(2, 'b')], upsertPods: [pod('p1', 'a', 100), pod('p2', 'a', 200)] }));
  assert.equal(s.nodeByName('a').requested('cpu'), 300);
  s.apply(2, delta({ upsertPods: [pod('p1', 'b', 100)], removePods: ['p2'], removeNodes: [1] }));
  assert.equal(s.nodeByName('a'), undefined);
  assert.equal(s.node(2).requested('cpu'), 100);
  assert.equal(s.pod('p2'), undefined);
  assert.equal(s.generation, 2);
  s.apply(3, delta({ full: true, upsertNodes: [node(7, 'c')] }));
  assert.equal(s.numNodes, 1);
  assert.equal(s.pod('p1'), undefined);
  assert.equal(s.node(2), undefined);
});

test('removing a node keeps the others reachable by id and name, large ids too', () => {
  const s = new Snapshot();
  const far = (1 << 22) + 7;
  s.apply(1, delta({ full: true, upsertNodes: [node(1, 'a'), node(2, 'b'), node(3, 'c'), node(far, 'far')], upsertPods: [pod('p3', 'c', 100)] }));
  s.apply(2, delta({ removeNodes: [1], upsertNodes: [node(4, 'd')], upsertPods: [pod('p4', 'd', 50)] }));
  assert.equal(s.node(1), undefined);
  assert.equal(s.node(3).name, 'c');
  assert.equal(s.nodeByName('c').requested('cpu'), 100);
  assert.equal(s.node(4).requested('cpu'), 50);
  assert.equal(s.node(far).name, 'far');
  assert.equal(s.node(far + 1), undefined);
  assert.equal(s.node(99), undefined);
  assert.deepEqual([...s.nodes()].map((n) => n.name).sort(), ['b', 'c', 'd', 'far']);
  s.apply(3, delta({ removeNodes: [4, far], removePods: ['p3'] }));
  assert.equal(s.numNodes, 2);
  assert.equal(s.node(3).requested('cpu'), 0);
});

test('a pod whose node goes away stays held, unplaced', () => {
  const s = new Snapshot();
  s.apply(1, delta({ full: true, upsertNodes: [node(1, 'a')], upsertPods: [pod('p', 'a', 1)] }));
  s.apply(2, delta({ removeNodes: [1] }));
  assert.ok(s.pod('p'));
  s.apply(3, delta({ upsertNodes: [node(2, 'a')] }));
  assert.equal(s.node(2).pods.length, 0, 'pods are placed by upserts and updates only');
  s.apply(4, delta({ removePods: ['p'] }));
  assert.equal(s.numPods, 0);
});

test('fromObjects numbers nodes and places pods', () => {
  const s = Snapshot.fromObjects([{ name: 'a' }, { id: 5, name: 'b' }, { name: 'c' }], [pod('p1', 'c', 100), pod('p2', 'gone', 50)]);
  assert.equal(s.numNodes, 3);
  assert.equal(s.node(5).name, 'b');
  assert.equal(s.node(6).name, 'a');
  assert.equal(s.node(7).name, 'c');
  assert.equal(s.nodeByName('c').requested('cpu'), 100);
  assert.equal(s.numPods, 2, 'a pod on an unknown node is still held');
  assert.throws(() => Snapshot.fromObjects([{ name: 'a' }, { name: 'a' }]), /"a" is given twice/);
});

test('a node arriving under another id is a replication error', () => {
  const s = new Snapshot();
  s.apply(1, delta({ full: true, upsertNodes: [node(1, 'a')] }));
  assert.throws(() => s.apply(2, delta({ upsertNodes: [node(2, 'a')] })), /id 2/);
});

test('PodUpdates place CycleStart pods and move replica pods; unknown pods are errors', () => {
  const s = new Snapshot();
  s.apply(1, delta({ full: true, upsertNodes: [node(1, 'a'), node(2, 'b')], upsertPods: [pod('p1', 'a', 100)] }));
  s.noteCyclePod(pod('c1', '', 300));
  s.apply(2, delta({ updatePods: [update('c1', 'b'), update('p1', 'b')] }));
  assert.equal(s.node(2).requested('cpu'), 400, 'spec kept');
  assert.equal(s.node(1).pods.length, 0);
  assert.equal(s.pod('c1').phase, 'Running');
  assert.equal(s.pod('c1').startTimeMicros, 7);
  s.apply(3, delta({ updatePods: [update('c1', 'a')] }));
  assert.equal(s.node(1).requested('cpu'), 300);
  assert.throws(() => s.apply(4, delta({ updatePods: [update('nobody', 'a')] })), /nobody/);
});

test('CycleStart pods are forgotten all at once at 1024, and by a full snapshot', () => {
  const s = new Snapshot();
  s.apply(1, delta({ full: true }));
  for (let i = 0; i < MAX_PENDING_PODS; i++) s.noteCyclePod(pod(`c${i}`, '', 1));
  assert.equal(s.numPending, MAX_PENDING_PODS);
  s.noteCyclePod(pod('last', '', 1));
  assert.equal(s.numPending, 1);
  s.apply(2, delta({ full: true }));
  assert.equal(s.numPending, 0);
});

test('NodeInfo helpers read own keys only', () => {
  const s = Snapshot.fromObjects([{ name: 'a', labels: { x: 'y' }, allocatable: { cpu: 4000 } }]);
  const ni = s.nodeByName('a');
  assert.equal(ni.label('x'), 'y');
  assert.equal(ni.label('toString'), undefined);
  assert.equal(ni.allocatable('cpu'), 4000);
  assert.equal(ni.allocatable('constructor'), 0);
  const c = ni.clone();
  c.pods.push(pod('p', 'a', 1));
  assert.equal(ni.pods.length, 0, 'a clone has its own pod list');
});

// Every index as sorted lines, to compare a replica moved by deltas with a fresh one.
function indexContents(s) {
  const out = [];
  for (const [name, counts] of [['team', s.podsByLabel('team')], ['ns', s.podsByNamespace()]]) {
    for (const [v, total] of counts.values()) {
      const nodes = [...counts.nodes(v)].sort((a, b) => a[0] - b[0]);
      out.push(`${name} ${v}=${total} ${JSON.stringify(nodes)}`);
    }
  }
  const racks = s.nodesByLabel('rack');
  for (const [v, nodes] of racks.values()) out.push(`rack ${v} ${JSON.stringify([...nodes].sort())} of ${racks.count()}`);
  const lists = s.podListsByLabel('team');
  for (const [ns, v, n] of lists.values()) {
    const uids = [...lists.pods(ns, v)].map((p) => `${p.uid}@${p.nodeName}`).sort();
    assert.equal(uids.length, n);
    assert.equal(lists.count(ns, v), n);
    out.push(`list ${ns}/${v} ${JSON.stringify(uids)}`);
  }
  return out.sort();
}

test('indexes follow deltas as a fresh build would', () => {
  const indexes = [
    { kind: 'podsByLabel', key: 'team' },
    { kind: 'podsByNamespace' },
    { kind: 'nodesByLabel', key: 'rack' },
    { kind: 'podListsByLabel', key: 'team' },
  ];
  const teamed = (uid, nodeName, team, namespace) => makePod({ uid, name: uid, nodeName, labels: { team }, namespace });
  const s = new Snapshot().withIndexes(indexes);
  s.apply(1, delta({
    full: true,
    upsertNodes: [node(1, 'a', { rack: 'r1' }), node(2, 'b', { rack: 'r1' }), node(3, 'c')],
    upsertPods: [teamed('p1', 'a', 'red', 'x'), teamed('p2', 'a', 'blue', 'x'), teamed('p3', 'b', 'red', 'y'), pod('p4', 'c', 1)],
  }));
  assert.equal(s.podsByLabel('team').onNode('red', 1), 1);
  assert.equal(s.nodesByLabel('rack').count(), 2);
  s.apply(2, delta({
    upsertNodes: [node(2, 'b', { rack: 'r2' }), node(4, 'd', { rack: 'r1' })],
    upsertPods: [teamed('p1', 'c', 'red', 'x'), teamed('p5', 'd', 'blue', 'y'), teamed('p6', 'nowhere', 'red', 'y')],
    removePods: ['p2'],
    removeNodes: [1],
  }));
  const fresh = Snapshot.fromObjects(
    [node(2, 'b', { rack: 'r2' }), node(3, 'c'), node(4, 'd', { rack: 'r1' })],
    [teamed('p1', 'c', 'red', 'x'), teamed('p3', 'b', 'red', 'y'), pod('p4', 'c', 1), teamed('p5', 'd', 'blue', 'y')],
  ).withIndexes(indexes);
  assert.deepEqual(indexContents(s), indexContents(fresh));
  assert.equal(s.podsByLabel('team').total('red'), 2);
  assert.equal(s.podsByLabel('other'), undefined);
  // p3 is placed in y/red; p6's node is not in the replica.
  assert.equal(s.podListsByLabel('team').count('y', 'red'), 1);
  assert.throws(() => s.declareIndex({ kind: 'podsByColour' }), /unknown index/);
});

test('pod lists keep namespaces apart and default the empty one', () => {
  const lists = new PodLists();
  const [a, b, c] = [['a', ''], ['b', 'default'], ['c', 'other']].map(([uid, namespace]) => makePod({ uid, name: uid, namespace }));
  for (const p of [a, b, c, a]) lists.add('g', p);
  assert.deepEqual([lists.count('default', 'g'), lists.count('', 'g'), lists.count('other', 'g')], [2, 2, 1]);
  lists.remove('g', a);
  assert.deepEqual([...lists.pods('default', 'g')].map((p) => p.uid), ['b']);
  lists.remove('g', b);
  lists.remove('g', b);
  assert.equal([...lists.values()].length, 1);
});
