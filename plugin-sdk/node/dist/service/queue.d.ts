import type { PodRequest, QueueSortResponse, StatusResponse } from '../types.js';
import { type ServiceState } from './state.js';
export declare function preEnqueue(st: ServiceState, req: PodRequest): Promise<StatusResponse>;
export declare function queueSort(st: ServiceState, req: PodRequest): Promise<QueueSortResponse>;
