/** The part of @opentelemetry/api the SDK uses. */
export interface OtelApi {
    ROOT_CONTEXT: unknown;
    SpanKind: {
        SERVER: number;
    };
    SpanStatusCode: {
        ERROR: number;
    };
    trace: {
        setSpanContext(ctx: unknown, sc: {
            traceId: string;
            spanId: string;
            traceFlags: number;
            isRemote?: boolean;
        }): unknown;
        getTracer(name: string, version?: string): {
            startActiveSpan<T>(name: string, options: object, ctx: unknown, fn: (span: OtelSpan) => T): T;
        };
    };
}
interface OtelSpan {
    end(): void;
    recordException(e: unknown): void;
    setStatus(s: {
        code: number;
        message?: string;
    }): void;
}
/** Finds @opentelemetry/api from the SDK, then from the application (the working
 * directory and the main module): an SDK installed as a link from the repository
 * does not see the application's node_modules otherwise. */
export declare function loadOtel(): OtelApi | null;
/** The fields of a W3C traceparent, or null when it is not a valid one. */
export declare function parseTraceparent(tp: string): {
    traceId: string;
    spanId: string;
    traceFlags: number;
} | null;
export declare class Tracer {
    #private;
    constructor(api: OtelApi | null, version: string);
    get enabled(): boolean;
    /** Runs `fn` inside a span for the call, a child of the scheduler's span, when
     * the call is traced and the API is present; else just runs it. */
    run<T>(point: string, plugin: string, traceparent: string, fn: () => Promise<T>): Promise<T>;
}
export {};
