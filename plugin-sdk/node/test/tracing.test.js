// Trace context: a span per call under the scheduler's traceparent, through any
// @opentelemetry/api-shaped module (a recording fake here).
'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const { parseTraceparent } = require('@switchyard/plugin-sdk');
const { Tracer } = require('../dist/tracing.js');

test('traceparent parsing follows W3C', () => {
  const tp = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
  assert.deepEqual(parseTraceparent(tp), { traceId: '4bf92f3577b34da6a3ce929d0e0e4736', spanId: '00f067aa0ba902b7', traceFlags: 1 });
  assert.equal(parseTraceparent(''), null);
  assert.equal(parseTraceparent('00-00000000000000000000000000000000-00f067aa0ba902b7-01'), null);
  assert.equal(parseTraceparent('ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01'), null);
  assert.equal(parseTraceparent('00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra'), null);
});

test('a traced call runs in a span whose parent is the scheduler span', async () => {
  const spans = [];
  const api = {
    ROOT_CONTEXT: {},
    SpanKind: { SERVER: 1 },
    SpanStatusCode: { ERROR: 2 },
    trace: {
      setSpanContext: (ctx, sc) => ({ parent: sc }),
      getTracer: () => ({
        startActiveSpan(name, options, ctx, fn) {
          const span = { name, options, parent: ctx.parent, ended: false, end() { this.ended = true; }, recordException() {}, setStatus() {} };
          spans.push(span);
          return fn(span);
        },
      }),
    },
  };
  const t = new Tracer(api, '0.1.0');
  assert.equal(await t.run('Filter', 'Accelerator', '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01', async () => 42), 42);
  assert.equal(await t.run('Filter', 'Accelerator', '', async () => 1), 1, 'untraced: no span');
  assert.equal(spans.length, 1);
  assert.equal(spans[0].name, 'Filter Accelerator');
  assert.equal(spans[0].parent.spanId, '00f067aa0ba902b7');
  assert.equal(spans[0].parent.isRemote, true);
  assert.equal(spans[0].ended, true);
  assert.equal(await new Tracer(null, '0').run('Filter', 'x', '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01', async () => 7), 7);
});
