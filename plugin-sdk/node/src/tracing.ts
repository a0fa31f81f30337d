// Trace context: every call carries the W3C `traceparent` of the scheduler's span
// for it. When @opentelemetry/api is installed (an optional peer dependency) the SDK
// starts a span per call under it ("<Point> <plugin>"); exporting is the
// application's OpenTelemetry SDK's business (e.g. @opentelemetry/sdk-node). Without
// the API the traceparent is ignored.

import { createRequire } from 'node:module';
import * as path from 'node:path';

/** The part of @opentelemetry/api the SDK uses. */
export interface OtelApi {
  ROOT_CONTEXT: unknown;
  SpanKind: { SERVER: number };
  SpanStatusCode: { ERROR: number };
  trace: {
    setSpanContext(ctx: unknown, sc: { traceId: string; spanId: string; traceFlags: number; isRemote?: boolean }): unknown;
    getTracer(name: string, version?: string): {
      startActiveSpan<T>(name: string, options: object, ctx: unknown, fn: (span: OtelSpan) => T): T;
    };
  };
}
interface OtelSpan {
  end(): void;
  recordException(e: unknown): void;
  setStatus(s: { code: number; message?: string }): void;
}

/** Finds @opentelemetry/api from the SDK, then from the application (the working
 * directory and the main module): an SDK installed as a link from the repository
 * does not see the application's node_modules otherwise. */
export function loadOtel(): OtelApi | null {
  const tries: (() => unknown)[] = [
    () => require('@opentelemetry/api'),
    () => createRequire(path.join(process.cwd(), 'index.js'))('@opentelemetry/api'),
    () => (require.main ? require.main.require('@opentelemetry/api') : null),
  ];
  for (const t of tries) {
    try {
      const api = t() as OtelApi | null;
      if (api && api.trace && typeof api.trace.getTracer === 'function') return api;
    } catch {
      // not installed there
    }
  }
  return null;
}

const TRACEPARENT = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$/;

/** The fields of a W3C traceparent, or null when it is not a valid one. */
export function parseTraceparent(tp: string): { traceId: string; spanId: string; traceFlags: number } | null {
  if (typeof tp !== 'string' || tp.length < 55 || tp.length > 512) return null;
  const m = TRACEPARENT.exec(tp);
  if (!m) return null;
  const [, version, traceId, spanId, flags, rest] = m;
  if (version === 'ff' || (version === '00' && rest !== undefined)) return null;
  if (/^0+$/.test(traceId) || /^0+$/.test(spanId)) return null;
  return { traceId, spanId, traceFlags: parseInt(flags, 16) & 1 };
}

export class Tracer {
  readonly #api: OtelApi | null;
  readonly #tracer: ReturnType<OtelApi['trace']['getTracer']> | null;

  constructor(api: OtelApi | null, version: string) {
    this.#api = api;
    this.#tracer = api ? api.trace.getTracer('@switchyard/plugin-sdk', version) : null;
  }

  get enabled(): boolean {
    return this.#tracer !== null;
  }

  /** Runs `fn` inside a span for the call, a child of the scheduler's span, when
   * the call is traced and the API is present; else just runs it. */
  run<T>(point: string, plugin: string, traceparent: string, fn: () => Promise<T>): Promise<T> {
    if (!this.#tracer || !traceparent) return fn();
    const sc = parseTraceparent(traceparent);
    if (!sc) return fn();
    const api = this.#api!;
    const ctx = api.trace.setSpanContext(api.ROOT_CONTEXT, { ...sc, isRemote: true });
    const attributes = { 'switchyard.extension_point': point, 'switchyard.plugin': plugin };
    return this.#tracer.startActiveSpan(
      `${point} ${plugin}`,
      { kind: api.SpanKind.SERVER, attributes },
      ctx,
      async (span: OtelSpan) => {
        try {
          return await fn();
        } catch (e) {
          span.recordException(e);
          span.setStatus({ code: api.SpanStatusCode.ERROR });
          throw e;
        } finally {
          span.end();
        }
      },
    );
  }
}
