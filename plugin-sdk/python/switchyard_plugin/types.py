"""Typed views of the objects a plugin reads. They are the protobuf messages of
`switchyard.plugin.v1` (proto/switchyard/plugin/v1/plugin.proto); these Protocols
describe their fields for type checkers and editors. Treat them as read-only: the
SDK shares them between calls."""

from __future__ import annotations

from typing import Mapping, Protocol, Sequence


class Toleration(Protocol):
    key: str
    operator: str
    value: str
    effect: str
    toleration_seconds: int


class Taint(Protocol):
    key: str
    value: str
    effect: str


class OwnerReference(Protocol):
    kind: str
    name: str
    uid: str
    controller: bool


class Pod(Protocol):
    uid: str
    namespace: str
    name: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    scheduler_name: str
    priority: int
    priority_class_name: str
    #: Empty for a pending pod; the node for bound and assumed pods.
    node_name: str
    nominated_node_name: str
    #: Effective requests: cpu in millicores, memory and storage in bytes, others in units.
    requests: Mapping[str, int]
    tolerations: Sequence[Toleration]
    node_selector: Mapping[str, str]
    #: Pending, Running, Succeeded, Failed, Unknown.
    phase: str
    terminating: bool
    creation_timestamp_micros: int
    start_time_micros: int
    owner_references: Sequence[OwnerReference]


class Node(Protocol):
    #: The scheduler's number for the node, stable while it exists.
    id: int
    name: str
    uid: str
    labels: Mapping[str, str]
    #: cpu in millicores, memory in bytes, pods and others in units.
    allocatable: Mapping[str, int]
    taints: Sequence[Taint]
    unschedulable: bool
