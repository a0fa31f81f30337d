// Alike pods: the signature and scoreNormalization declarations (handshake, refusals
// at start), the standard normalisations against upstream's DefaultNormalizeScore,
// and raw scores when the scheduler asks for them (ScoreRequest.normalize false,
// FilterRequest.rawScores), in the service and on the wire.
'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const grpc = require('@grpc/grpc-js');
const { PluginService, Status, makeNode, makePod, normalizeScores, serve } = require('@switchyard/plugin-sdk');
const { load } = require('../dist/proto.js');

const quiet = { info() {}, warn() {}, error() {}, debug() {} };
const delta = (d) => ({ full: false, upsertNodes: [], removeNodes: [], upsertPods: [], removePods: [], updatePods: [], ...d });
const msg = (generation, kind, body) => ({ generation, kind, [kind]: body, ack: false, more: [] });
const call = (plugin, cycle, generation, extra = {}) => ({ requestId: 9, plugin, cycle, generation, traceparent: '', ...extra });
const filterReq = (plugin, nodes, extra = {}) =>
  call(plugin, 7, 2, { nodes, deltas: [], scoreFirst: 0, preScore: false, groupFailures: false, rawScores: false, ...extra });

/** Scores a node by its `n` label (as TaintToleration counts untolerated taints),
 * normalised the upstream way: the SDK must apply it, never a normalizeScore. */
function counter(extra = {}) {
  return {
    name: 'Count',
    nodeLocal: true,
    signature: ['tolerations'],
    scoreNormalization: 'defaultReverse',
    filter: () => undefined,
    score: (cycle, node) => Number(node.label('n')),
    ...extra,
  };
}

/** Nodes a, b, c (ids 1-3) scoring 2, 0, 4 raw; cycle 7 started at generation 2. */
function setup(plugins) {
  const svc = new PluginService(plugins, { logger: quiet, generationWaitMs: 200 });
  const nodes = [makeNode({ id: 1, name: 'a', labels: { n: '2' } }), makeNode({ id: 2, name: 'b', labels: { n: '0' } }), makeNode({ id: 3, name: 'c', labels: { n: '4' } })];
  const next = svc.apply(msg(1, 'delta', delta({ full: true, upsertNodes: nodes })), undefined);
  svc.apply(msg(2, 'cycleStart', { cycle: 7, pod: makePod({ uid: 'me', name: 'me' }), profile: '' }), next);
  return svc;
}

test('handshake: signature and scoreNormalization as the proto enums; CUSTOM and none by default', () => {
  const none = { name: 'Zone', nodeLocal: true, signature: ['none'], filter: () => undefined };
  const plain = { name: 'Plain', filter: () => undefined, score: () => 1 };
  const own = { name: 'Own', filter: () => undefined, score: () => 1, normalizeScore: () => undefined };
  const svc = new PluginService([counter({ signature: ['tolerations', 'labels', 'schedulerName'] }), none, plain, own], { logger: quiet });
  const [c, z, p, o] = svc.handshake({ protocolVersions: ['v1'] }).plugins;
  assert.deepEqual(c.signature, ['POD_FIELD_TOLERATIONS', 'POD_FIELD_LABELS', 'POD_FIELD_SCHEDULER_NAME']);
  assert.equal(c.scoreNormalization, 'SCORE_NORMALIZATION_DEFAULT_REVERSE');
  assert.equal(c.normalizeScore, true, 'a standard normalisation is a NormalizeScore');
  assert.equal(c.nodeLocal, true);
  assert.deepEqual(z.signature, ['POD_FIELD_NONE']);
  assert.equal(z.scoreNormalization, 'SCORE_NORMALIZATION_CUSTOM');
  assert.deepEqual([p.signature, p.scoreNormalization, p.normalizeScore], [[], 'SCORE_NORMALIZATION_CUSTOM', false]);
  assert.deepEqual([o.signature, o.scoreNormalization, o.normalizeScore], [[], 'SCORE_NORMALIZATION_CUSTOM', true]);
});

test('declarations the scheduler could not use are refused at start, naming plugin, value and fix', () => {
  const refused = (plugin, re) => assert.throws(() => new PluginService([plugin], { logger: quiet }), re);
  refused(counter({ signature: ['tolerations', 'podLabels'] }), /plugin "Count": unknown signature field "podLabels" \(one of 'namespace', 'labels',.*'volumeClaims', 'none'\)/);
  refused(counter({ signature: ['POD_FIELD_LABELS'] }), /unknown signature field "POD_FIELD_LABELS"/);
  refused(counter({ signature: 'labels' }), /plugin "Count": signature "labels" is not an array of pod field names/);
  refused(counter({ signature: ['none', 'labels'] }), /plugin "Count": signature lists 'none' with other fields/);
  refused(counter({ nodeLocal: false }), /plugin "Count" declares a signature but not nodeLocal.*set nodeLocal: true if they do, else drop the signature/);
  refused(counter({ scoreNormalization: 'reverse' }), /plugin "Count": unknown scoreNormalization "reverse" \(one of 'custom', 'default', 'defaultReverse'\)/);
  refused({ name: 'F', filter: () => undefined, scoreNormalization: 'default' }, /plugin "F" declares scoreNormalization "default" but has no score/);
  // Declaring nothing needs nothing.
  new PluginService([counter({ nodeLocal: false, signature: [] }), { name: 'F', filter: () => undefined, scoreNormalization: 'custom' }], { logger: quiet });
});

test('signatureNodePods: a quota signs its tenant label without nodeLocal; misuse is refused', () => {
  const quota = (extra) => ({
    name: 'Quota',
    signature: ['none'],
    signatureNodePods: true,
    signatureLabelKeys: ['team'],
    preFilter: () => undefined,
    filter: () => undefined,
    ...extra,
  });
  const [q] = new PluginService([quota({})], { logger: quiet }).handshake({ protocolVersions: ['v1'] }).plugins;
  assert.deepEqual([q.signature, q.signatureNodePods, q.signatureLabelKeys, q.nodeLocal], [['POD_FIELD_NONE'], true, ['team'], false]);
  const refused = (plugin, re) => assert.throws(() => new PluginService([plugin], { logger: quiet }), re);
  refused(quota({ signature: [] }), /plugin "Quota" declares signatureNodePods without a signature/);
  refused(quota({ signatureNodePods: false }), /declares a signature but not nodeLocal/);
  refused(quota({ signatureLabelKeys: 'team' }), /signatureLabelKeys "team" is not an array of label keys/);
  refused(quota({ signatureLabelKeys: ['team'], signatureNodePods: false, nodeLocal: true, preFilter: undefined }), /signatureLabelKeys without signatureNodePods, or with nodeLocal/);
  // preFilterPodOnly: declared with signatureNodePods, refused without.
  assert.equal(q.preFilterPodOnly, false);
  const [po] = new PluginService([quota({ preFilterPodOnly: true })], { logger: quiet }).handshake({ protocolVersions: ['v1'] }).plugins;
  assert.equal(po.preFilterPodOnly, true);
  refused(
    quota({ preFilterPodOnly: true, signatureNodePods: false, signature: [], signatureLabelKeys: [] }),
    /plugin "Quota" declares preFilterPodOnly without signatureNodePods/,
  );
});

test('standard normalisations are upstream DefaultNormalizeScore(100, reverse)', () => {
  const norm = (kind, scores) => {
    const s = scores.slice();
    assert.equal(normalizeScores(kind, s), true);
    return s;
  };
  assert.deepEqual(norm('default', [0, 5, 10]), [0, 50, 100]);
  assert.deepEqual(norm('default', [1, 2, 3]), [33, 66, 100], 'integer division');
  assert.deepEqual(norm('default', [-1, 300, -450]), [0, 100, -150], 'truncated toward zero, no -0');
  assert.deepEqual(norm('defaultReverse', [0, 5, 10]), [100, 50, 0]);
  assert.deepEqual(norm('defaultReverse', [1, 2, 3]), [67, 34, 0]);
  // The highest is 0: upstream leaves the scores alone, or makes them all 100 reversed.
  assert.deepEqual(norm('default', [0, 0, -3]), [0, 0, -3]);
  assert.deepEqual(norm('defaultReverse', [0, 0, -3]), [100, 100, 100]);
  assert.deepEqual(norm('default', []), []);
  // Exact past 2^53, as the scheduler's i128 arithmetic (a float division gives 100).
  assert.deepEqual(norm('default', [2 ** 53 - 3, 2 ** 53 - 2]), [99, 100]);
  const custom = [3, 1];
  assert.equal(normalizeScores('custom', custom), false);
  assert.deepEqual(custom, [3, 1], 'custom leaves them to the plugin');
  assert.throws(() => normalizeScores('reverse', [1]), /unknown kind "reverse"/);
});

test('Score: the SDK normalises with the declared standard (over the plugin’s own), raw when normalize is false', async () => {
  let own = 0;
  const svc = setup([counter({ normalizeScore: () => { own++; return Status.error('must not run'); } })]);
  const norm = await svc.score(call('Count', 7, 2, { nodes: [1, 2, 3], normalize: true, afterPreScore: false }));
  assert.equal(norm.status.code, 'SUCCESS');
  assert.deepEqual([norm.scores, norm.normalized], [[50, 100, 0], true]);
  const raw = await svc.score(call('Count', 7, 2, { nodes: [1, 2, 3], normalize: false, afterPreScore: false }));
  assert.deepEqual([raw.scores, raw.normalized], [[2, 0, 4], false]);
  const n = await svc.normalizeScore(call('Count', 7, 2, { nodes: [1, 2, 3], scores: [2, 0, 4] }));
  assert.equal(n.status.code, 'SUCCESS');
  assert.deepEqual([n.scores, n.normalized], [[50, 100, 0], true]);
  assert.equal(own, 0, "the plugin's own normalizeScore is not called");
});

test('score ahead: rawScores answers raw scores (normalized false); without it, normalised', async () => {
  const plain = { name: 'Plain', nodeLocal: true, filter: () => undefined, score: (c, n) => Number(n.label('n')) };
  const svc = setup([counter(), plain]);
  const raw = await svc.filter(filterReq('Count', [1, 2, 3], { scoreFirst: 3, rawScores: true }));
  assert.equal(raw.error, null);
  assert.deepEqual([raw.score.status.code, raw.score.scores, raw.score.normalized], ['SUCCESS', [2, 0, 4], false]);
  const norm = await svc.filter(filterReq('Count', [1, 2, 3], { scoreFirst: 3 }));
  assert.deepEqual([norm.score.scores, norm.score.normalized], [[50, 100, 0], true]);
  // Without a NormalizeScore raw scores are final.
  const fin = await svc.filter(filterReq('Plain', [1, 2, 3], { scoreFirst: 3, rawScores: true }));
  assert.deepEqual([fin.score.scores, fin.score.normalized], [[2, 0, 4], true]);
});

test('on the wire: the handshake declares, raw_scores and normalize=false return raw scores', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sy-node-alike-'));
  const sock = path.join(dir, 'p.sock');
  const sidecar = await serve([counter({ signature: ['tolerations', 'nodeSelector'] })], { listen: `unix://${sock}`, logger: quiet, generationWaitMs: 500 });
  const { PluginClient } = load();
  const client = new PluginClient(`unix:${sock}`, grpc.credentials.createInsecure());
  const next = (stream) => new Promise((res) => stream.once('data', res));
  try {
    const hs = await new Promise((res, rej) => client.Handshake({ protocolVersions: ['v1'] }, (e, r) => (e ? rej(e) : res(r))));
    assert.deepEqual(hs.plugins[0].signature, ['POD_FIELD_TOLERATIONS', 'POD_FIELD_NODE_SELECTOR']);
    assert.equal(hs.plugins[0].scoreNormalization, 'SCORE_NORMALIZATION_DEFAULT_REVERSE');
    assert.equal(hs.plugins[0].normalizeScore, true);

    const rep = client.Replicate();
    const acked = next(rep);
    rep.write({
      generation: 1,
      delta: delta({ full: true, upsertNodes: [makeNode({ id: 1, name: 'a', labels: { n: '1' } }), makeNode({ id: 2, name: 'b', labels: { n: '3' } })] }),
      more: [{ generation: 2, cycleStart: { cycle: 5, pod: makePod({ uid: 'u', name: 'p' }), profile: '' } }],
      ack: true,
    });
    await acked;

    const filter = client.Filter();
    let reply = next(filter);
    filter.write({ requestId: 1, plugin: 'Count', cycle: 5, generation: 2, nodes: [1, 2], scoreFirst: 2, rawScores: true });
    let r = await reply;
    assert.deepEqual([r.score.scores, r.score.normalized], [[1, 3], false]);
    reply = next(filter);
    filter.write({ requestId: 2, plugin: 'Count', cycle: 5, generation: 2, nodes: [1, 2], scoreFirst: 2 });
    r = await reply;
    assert.deepEqual([r.score.scores, r.score.normalized], [[67, 0], true]);

    const score = client.Score();
    reply = next(score);
    score.write({ requestId: 3, plugin: 'Count', cycle: 5, generation: 2, nodes: [1, 2], normalize: false });
    r = await reply;
    assert.deepEqual([r.status.code, r.scores, r.normalized], ['SUCCESS', [1, 3], false]);
    filter.end();
    score.end();
    rep.end();
  } finally {
    client.close();
    await sidecar.shutdown(500);
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
