// The session's first two steps: the handshake (versions, plugins, capabilities) and
// the Replicate stream that keeps the replica and the cycles.

import {
  extensionPoints,
  hasNormalize,
  hasPreFilterExtensions,
  pluginEvents,
  pluginSignature,
  pluginSignatureLabelKeys,
  preFilterPodOnly,
  SCORE_NORMALIZATIONS,
  scoreNormalizationOf,
} from '../plugin.js';
import { ReplicationError } from '../snapshot.js';
import type { ReplicateRequest } from '../types.js';
import { emptyPod } from '../types.js';
import { Entry, MAX_CYCLES, type ServiceState } from './state.js';

export const PROTOCOL_VERSION = 'v1';
export const CAPABILITY_FILTER_BATCH = 'filter-batch';
export const CAPABILITY_REPLICATE_BATCH = 'replicate-batch';
/** A Filter may come right behind its cycle's PreFilter (`afterPreFilter`): it is
 * evaluated once that PreFilter's outcome is recorded, and fails unless it succeeded. */
export const CAPABILITY_FILTER_AFTER_PRE_FILTER = 'filter-after-pre-filter';
/** A Permit may come right behind its cycle's Reserve (`afterReserve`): it is
 * evaluated after that Reserve, and only if the Reserve succeeded. */
export const CAPABILITY_PERMIT_AFTER_RESERVE = 'permit-after-reserve';

export class HandshakeError extends Error {}

/** The handshake reply; throws a FAILED_PRECONDITION-worthy error when the
 * scheduler offers no version this SDK speaks. */
export function handshake(st: ServiceState, req: { protocolVersions?: string[]; capabilities?: string[]; scheduler?: string }): object {
  const versions = Array.isArray(req.protocolVersions) ? req.protocolVersions : [];
  if (!versions.includes(PROTOCOL_VERSION)) {
    throw new HandshakeError(
      `this sidecar speaks protocol ${PROTOCOL_VERSION}; the scheduler offered ${JSON.stringify(versions)}`,
    );
  }
  const offered = Array.isArray(req.capabilities) ? req.capabilities : [];
  return {
    protocolVersion: PROTOCOL_VERSION,
    plugins: st.plugins.map((p) => ({
      name: p.name,
      extensionPoints: extensionPoints(p),
      preFilterExtensions: hasPreFilterExtensions(p),
      normalizeScore: hasNormalize(p),
      events: pluginEvents(p),
      nodeLocal: !!p.nodeLocal,
      signature: pluginSignature(p),
      signatureNodePods: !!p.signatureNodePods,
      signatureLabelKeys: pluginSignatureLabelKeys(p),
      preFilterPodOnly: preFilterPodOnly(p),
      scoreNormalization: SCORE_NORMALIZATIONS.get(typeof p.score === 'function' ? scoreNormalizationOf(p) : 'custom'),
      scoreNodeLabel: typeof p.scoreNodeLabel === 'string' ? p.scoreNodeLabel : '',
    })),
    maxBatchNodes: st.maxBatchNodes,
    capabilities: st.capabilities
      ? offered.filter(
          (c) =>
            c === CAPABILITY_FILTER_BATCH ||
            c === CAPABILITY_REPLICATE_BATCH ||
            c === CAPABILITY_FILTER_AFTER_PRE_FILTER ||
            c === CAPABILITY_PERMIT_AFTER_RESERVE,
        )
      : [],
  };
}

/** Applies one Replicate message (without its `more`); returns the generation the
 * next must have. `expect` is undefined before the stream's first message. Throws
 * ReplicationError when the stream must end (gap, no full snapshot first, a
 * delta the replica cannot apply). */
export function apply(st: ServiceState, msg: ReplicateRequest, expect: number | undefined): number {
  if ((msg as { $malformed?: string }).$malformed) {
    throw new ReplicationError(`a Replicate message could not be decoded: ${(msg as { $malformed?: string }).$malformed}`);
  }
  const g = msg.generation;
  const full = msg.kind === 'delta' && !!msg.delta?.full;
  if (expect === undefined && !full) {
    throw new ReplicationError(
      `the first message of a Replicate stream must be a full snapshot (got generation ${g})`,
    );
  }
  if (expect !== undefined && !full && g !== expect) {
    throw new ReplicationError(`generation gap: expected ${expect}, got ${g}`);
  }
  switch (msg.kind) {
    case 'delta': {
      if (full) {
        st.endCycles();
        st.waiting.clear();
      }
      st.replica.apply(g, msg.delta!);
      break;
    }
    case 'cycleStart': {
      const c = msg.cycleStart!;
      const pod = c.pod ?? emptyPod();
      st.replica.noteCyclePod(pod);
      const old = st.cycles.get(c.cycle);
      if (old) st.endCycle(old);
      if (st.cycles.size >= MAX_CYCLES) {
        const oldest = st.cycles.keys().next().value as number;
        st.endCycle(st.cycles.get(oldest)!);
      }
      st.cycles.set(
        c.cycle,
        new Entry(c.cycle, pod, c.profile, g, st.replica.generation, st.plugins.length),
      );
      break;
    }
    case 'cycleEnd': {
      const e = st.cycles.get(msg.cycleEnd!.cycle);
      if (e) {
        st.endCycle(e);
        st.waiting.delete(e.pod.uid);
      }
      break;
    }
    default:
      throw new ReplicationError(`generation ${g}: empty Replicate message`);
  }
  st.applied = g;
  st.wake();
  return g + 1;
}
