import type { ReplicateRequest } from '../types.js';
import { type ServiceState } from './state.js';
export declare const PROTOCOL_VERSION = "v1";
export declare const CAPABILITY_FILTER_BATCH = "filter-batch";
export declare const CAPABILITY_REPLICATE_BATCH = "replicate-batch";
/** A Filter may come right behind its cycle's PreFilter (`afterPreFilter`): it is
 * evaluated once that PreFilter's outcome is recorded, and fails unless it succeeded. */
export declare const CAPABILITY_FILTER_AFTER_PRE_FILTER = "filter-after-pre-filter";
/** A Permit may come right behind its cycle's Reserve (`afterReserve`): it is
 * evaluated after that Reserve, and only if the Reserve succeeded. */
export declare const CAPABILITY_PERMIT_AFTER_RESERVE = "permit-after-reserve";
export declare class HandshakeError extends Error {
}
/** The handshake reply; throws a FAILED_PRECONDITION-worthy error when the
 * scheduler offers no version this SDK speaks. */
export declare function handshake(st: ServiceState, req: {
    protocolVersions?: string[];
    capabilities?: string[];
    scheduler?: string;
}): object;
/** Applies one Replicate message (without its `more`); returns the generation the
 * next must have. `expect` is undefined before the stream's first message. Throws
 * ReplicationError when the stream must end (gap, no full snapshot first, a
 * delta the replica cannot apply). */
export declare function apply(st: ServiceState, msg: ReplicateRequest, expect: number | undefined): number;
