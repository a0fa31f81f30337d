#!/usr/bin/env node
// @ts-check
// Accelerator: a pod annotated `accelerator.switchyard.dev/type: T` fits only nodes
// labelled with the same type; Score packs it with the pods of its type.
//   node examples/accelerator.js --listen unix:///tmp/accelerator.sock
'use strict';
const { main, Status } = require('@switchyard/plugin-sdk');

const KEY = 'accelerator.switchyard.dev/type';

/** The accelerator type a pod asks for, or undefined. */
const wanted = (/** @type {import('@switchyard/plugin-sdk').Pod} */ pod) =>
  Object.hasOwn(pod.annotations, KEY) ? pod.annotations[KEY] : undefined;

/** @type {import('@switchyard/plugin-sdk').Plugin} */
const accelerator = {
  name: 'Accelerator',
  // Filter and Score look only at the pod and the node asked about.
  nodeLocal: true,
  events: { Node: ['Add', 'UpdateNodeLabel'] },

  filter(cycle, node) {
    const type = wanted(cycle.pod);
    if (type === undefined || node.label(KEY) === type) return Status.success();
    return Status.unschedulable(`node has no ${type} accelerator`);
  },

  // Pods of the same type on the node (0 for a pod without one).
  score(cycle, node) {
    const type = wanted(cycle.pod);
    if (type === undefined) return 0;
    let n = 0;
    for (const pod of node.pods) if (wanted(pod) === type) n++;
    return n;
  },

  // To 0..100 by the highest (all 0 when the highest is 0), in place.
  normalizeScore(cycle, scores) {
    const max = scores.reduce((m, s) => Math.max(m, s), 0);
    for (let i = 0; i < scores.length; i++) scores[i] = max === 0 ? 0 : Math.floor((scores[i] * 100) / max);
  },
};

main(accelerator);
