"use strict";
// The objects of switchyard.plugin.v1 as the SDK hands them to plugins: exactly what
// @grpc/proto-loader delivers with the SDK's options (see `LOADER_OPTIONS` in
// proto.ts): field names in lowerCamelCase, every scalar field present (proto3
// defaults), maps as plain objects, enums as their names, and 64-bit integers as
// JavaScript numbers (exact up to 2^53: ids, generations and microseconds are far
// below it; a quantity above 2^53 bytes would be rounded).
Object.defineProperty(exports, "__esModule", { value: true });
exports.emptyPod = emptyPod;
exports.makePod = makePod;
exports.makeNode = makeNode;
/** An empty pod, as the wire's defaults make one. */
function emptyPod() {
    return {
        uid: '',
        namespace: '',
        name: '',
        labels: {},
        annotations: {},
        schedulerName: '',
        priority: 0,
        priorityClassName: '',
        nodeName: '',
        nominatedNodeName: '',
        requests: {},
        tolerations: [],
        nodeSelector: {},
        phase: '',
        terminating: false,
        creationTimestampMicros: 0,
        startTimeMicros: 0,
        ownerReferences: [],
        volumeClaims: [],
    };
}
/** A pod with the wire's defaults for every field `fields` leaves out (for tests). */
function makePod(fields = {}) {
    return { ...emptyPod(), ...fields };
}
/** A node with the wire's defaults for every field `fields` leaves out (for tests). */
function makeNode(fields = {}) {
    return {
        id: 0,
        name: '',
        uid: '',
        labels: {},
        allocatable: {},
        taints: [],
        unschedulable: false,
        ...fields,
    };
}
