import type { CycleRequest, PermitResponse, PostFilterRequest, PostFilterResponse, StatusResponse } from '../types.js';
import { type ServiceState } from './state.js';
export declare function postFilter(st: ServiceState, req: PostFilterRequest): Promise<PostFilterResponse>;
/** Reserve, Unreserve, PreBind, Bind, PostBind: a cycle, a node, a status. */
export declare function cycleCall(st: ServiceState, req: CycleRequest, point: 'Reserve' | 'Unreserve' | 'PreBind' | 'Bind' | 'PostBind'): Promise<StatusResponse>;
export declare function permit(st: ServiceState, req: CycleRequest): Promise<PermitResponse>;
