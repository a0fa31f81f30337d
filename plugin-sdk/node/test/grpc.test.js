// The SDK on the wire: a sidecar served on a Unix socket, driven by a gRPC client as
// the scheduler drives it.
'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { once } = require('node:events');
const grpc = require('@grpc/grpc-js');
const { serve, main, probe, parseListen, Status, makeNode, makePod, CAPABILITIES_ENV } = require('@switchyard/plugin-sdk');
const { load } = require('../dist/proto.js');

const quiet = { info() {}, warn() {}, error() {}, debug() {} };
const delta = (d) => ({ full: false, upsertNodes: [], removeNodes: [], upsertPods: [], removePods: [], updatePods: [], ...d });

/** Reads replies of a bidi stream one at a time. */
function reader(stream) {
  const queue = [];
  const waiters = [];
  stream.on('data', (m) => (waiters.length ? waiters.shift()(m) : queue.push(m)));
  return {
    next: () => (queue.length ? Promise.resolve(queue.shift()) : new Promise((r) => waiters.push(r))),
  };
}

async function start(plugins) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sy-node-'));
  const sock = path.join(dir, 'p.sock');
  const sidecar = await serve(plugins, { listen: `unix://${sock}`, logger: quiet, generationWaitMs: 500 });
  const { PluginClient, HealthClient } = load();
  const client = new PluginClient(`unix:${sock}`, grpc.credentials.createInsecure());
  const health = new HealthClient(`unix:${sock}`, grpc.credentials.createInsecure());
  return { dir, sock, sidecar, client, health };
}

const gate = {
  name: 'Gate',
  nodeLocal: true,
  filter: (c, n) => (n.label('ok') === 'yes' ? undefined : Status.unschedulable('not ok')),
  permit: (cycle, nodeName, handle) => {
    setTimeout(() => handle.reject(cycle.pod.uid, 'no quorum'), 5);
    return { status: Status.wait(), timeoutMillis: 2000 };
  },
};

test('handshake, replication with acks, Filter, Permit decisions, health, shutdown', async () => {
  const { sock, sidecar, client, health } = await start([gate]);
  try {
    const hs = await new Promise((res, rej) =>
      client.Handshake({ protocolVersions: ['v1'], capabilities: ['replicate-batch'], scheduler: 'test' }, (e, r) => (e ? rej(e) : res(r))),
    );
    assert.equal(hs.protocolVersion, 'v1');
    assert.deepEqual(hs.capabilities, ['replicate-batch']);
    assert.deepEqual(hs.plugins[0].extensionPoints, ['FILTER', 'PERMIT']);
    const refused = await new Promise((res) => client.Handshake({ protocolVersions: ['v9'] }, (e) => res(e)));
    assert.equal(refused.code, grpc.status.FAILED_PRECONDITION);

    const rep = client.Replicate();
    const acks = reader(rep);
    const pod = makePod({ uid: 'u1', name: 'p1' });
    rep.write({
      generation: 1,
      delta: delta({ full: true, upsertNodes: [makeNode({ id: 1, name: 'a', labels: { ok: 'yes' } }), makeNode({ id: 2, name: 'b' })] }),
      ack: true,
      more: [{ generation: 2, cycleStart: { cycle: 5, pod, profile: 'p' }, ack: true }],
    });
    assert.equal((await acks.next()).appliedGeneration, 1);
    assert.equal((await acks.next()).appliedGeneration, 2);

    const filter = client.Filter();
    const fr = reader(filter);
    filter.write({ requestId: 11, plugin: 'Gate', cycle: 5, generation: 2, nodes: [1, 2, 1] });
    let r = await fr.next();
    assert.deepEqual([r.requestId, r.generation, r.evaluated, r.failures.map((f) => f.index)], [11, 2, 3, [1]]);
    // Bytes that are no FilterRequest: an Error status for that call, the stream stays.
    const raw = new grpc.Client(`unix:${sock}`, grpc.credentials.createInsecure());
    const bad = raw.makeBidiStreamRequest('/switchyard.plugin.v1.Plugin/Filter', (b) => b, (b) => load().plugin.Filter.responseDeserialize(b));
    const br = reader(bad);
    bad.write(Buffer.from([0x08, 0x2a, 0x12, 0xff])); // request_id 42, then a truncated field
    r = await br.next();
    assert.equal(r.requestId, 42);
    assert.match(r.error.reasons[0], /malformed request/);
    bad.write(Buffer.from([0x08, 0x2b, 0x10, 0x05, 0x18, 0x02, 0x20, 0x05]));
    assert.equal((await br.next()).requestId, 43, 'the stream answers the next call');
    bad.end();
    raw.close();

    const permit = client.Permit();
    const pr = reader(permit);
    permit.write({ requestId: 12, plugin: 'Gate', cycle: 5, generation: 2, nodeName: 'a' });
    r = await pr.next();
    assert.deepEqual([r.requestId, r.status.code, r.timeoutMillis], [12, 'WAIT', 2000]);
    r = await pr.next();
    assert.equal(r.requestId, 0);
    assert.deepEqual(r.decision, { podUid: 'u1', plugin: 'Gate', allow: false, message: 'no quorum' });

    // A gap ends the Replicate stream with FAILED_PRECONDITION.
    const ended = once(rep, 'error').catch((e) => e);
    rep.write({ generation: 9, cycleEnd: { cycle: 5 }, ack: true });
    const [err] = await ended;
    assert.equal(err.code, grpc.status.FAILED_PRECONDITION);
    assert.match(err.details, /generation gap: expected 3, got 9/);

    const h = await new Promise((res, rej) => health.Check({ service: '' }, (e, r) => (e ? rej(e) : res(r))));
    assert.equal(h.status, 'SERVING');
    const unknown = await new Promise((res) => health.Check({ service: 'nope' }, (e) => res(e)));
    assert.equal(unknown.code, grpc.status.NOT_FOUND);
    await probe(`unix://${sock}`);

    // Shutdown: streams end, the socket goes away.
    const filterEnded = new Promise((res) => filter.on('status', res));
    await sidecar.shutdown(2000);
    assert.equal((await filterEnded).code, grpc.status.OK);
    assert.equal(fs.existsSync(sock), false);
    await assert.rejects(probe(`unix://${sock}`, 500));
  } finally {
    client.close();
    health.close();
    await sidecar.shutdown(100);
  }
});

test('listen addresses', () => {
  assert.deepEqual(parseListen('unix:///tmp/x.sock'), { kind: 'unix', path: '/tmp/x.sock' });
  assert.deepEqual(parseListen('unix:rel.sock'), { kind: 'unix', path: 'rel.sock' });
  assert.deepEqual(parseListen('tcp://127.0.0.1:9000'), { kind: 'tcp', host: '127.0.0.1', port: 9000 });
  assert.deepEqual(parseListen('localhost:9000'), { kind: 'tcp', host: 'localhost', port: 9000 });
  assert.deepEqual(parseListen('[::1]:9000'), { kind: 'tcp', host: '[::1]', port: 9000 });
  assert.deepEqual(parseListen('https://0.0.0.0:9443'), { kind: 'tls', host: '0.0.0.0', port: 9443 });
  for (const bad of ['', 'unix://', 'tcp://host', 'host:99999', 'ftp://x:1']) assert.throws(() => parseListen(bad), /listen address/);
});

test('serve on TCP port 0 reports the port chosen', async () => {
  const sidecar = await serve(gate, { listen: 'tcp://127.0.0.1:0', logger: quiet });
  try {
    assert.ok(sidecar.listen.port > 0);
    await probe(sidecar.listen);
  } finally {
    await sidecar.shutdown(500);
  }
});

/** The capabilities `main` serves with for `argv` (and the environment as it is). */
async function mainCapabilities(argv) {
  let capabilities;
  await main(gate, {
    argv: [...argv, '--listen', 'tcp://127.0.0.1:0'],
    logger: quiet,
    onServe: (sidecar) => {
      capabilities = sidecar.service.capabilities;
      void sidecar.shutdown(500);
    },
  });
  assert.notEqual(process.exitCode, 1, 'main failed');
  return capabilities;
}

test('--no-optional-capabilities, and its environment fallback read by main alone', async () => {
  const saved = process.env[CAPABILITIES_ENV];
  try {
    delete process.env[CAPABILITIES_ENV];
    assert.equal(await mainCapabilities([]), true);
    assert.equal(await mainCapabilities(['--no-optional-capabilities']), false);
    process.env[CAPABILITIES_ENV] = 'off';
    assert.equal(await mainCapabilities([]), false);
    // serve() itself reads no environment: the option is explicit.
    const sidecar = await serve(gate, { listen: 'tcp://127.0.0.1:0', logger: quiet });
    try {
      assert.equal(sidecar.service.capabilities, true);
    } finally {
      await sidecar.shutdown(500);
    }
  } finally {
    if (saved === undefined) delete process.env[CAPABILITIES_ENV];
    else process.env[CAPABILITIES_ENV] = saved;
  }
});
