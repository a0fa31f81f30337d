import type { FailureGroup, FilterBatchRequest, FilterBatchResponse, FilterRequest, FilterResponse, NodeStatus, PreFilterRequest, PreFilterResponse } from '../types.js';
import { type ServiceState } from './state.js';
/** Groups a Filter reply's failures by status (FilterRequest.groupFailures): each
 * distinct status (code and reasons) once, with the indices of the items failing with
 * it, in item order; groups in the order of their first item. A status may be the
 * plugin's own object (shared by several items, kept by the plugin), so each group
 * gets a copy and the plugin's object is never touched. */
export declare function groupFailures(failures: NodeStatus[]): FailureGroup[];
export declare function preFilter(st: ServiceState, req: PreFilterRequest): Promise<PreFilterResponse>;
export declare function filter(st: ServiceState, req: FilterRequest): Promise<FilterResponse>;
/** The calls of a FilterBatch message, each answered as it would be alone on the
 * Filter stream, in order. `each` wraps each call (its span). */
export declare function filterBatch(st: ServiceState, req: FilterBatchRequest, each?: (call: FilterRequest, run: () => Promise<FilterResponse>) => Promise<FilterResponse>): Promise<FilterBatchResponse>;
