import type { PermitHandle } from '../plugin.js';
import type { ServiceState } from './state.js';
export declare function makeHandle(st: ServiceState, plugin: string): PermitHandle;
