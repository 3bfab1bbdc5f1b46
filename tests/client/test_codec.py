"""One shape on both sides of the wire: the ``MemberAssignment`` the leader builds at SyncGroup
(``server.group``, encoded by ``server.edge``) is the one the worker decodes (``client.codec``),
warm-ups flagged among the standbys and the KIP-535 host maps included; and the topology a
worker declares is the one the leader parses."""

from __future__ import annotations

import dataclasses
from types import MappingProxyType

from assignor.cluster import ClusterMetadata
from assignor.model import AssignmentConfig, AssignmentResult, ClientAssignment, HostInfo, StateStore, TaskId
from assignor.topology import Subtopology, Topology
from client import codec
from remote_leader.v1 import group_leader_pb2 as pb
from server.edge import _HostMapCache, assignment_to_proto, topology_from_proto
from server.group import Group, GroupSettings
from server.model import JoinGroupRequest, Subscription

WORKER_TOPOLOGY = Topology.of("app", (Subtopology.of(0, ("orders",), 4, (StateStore("counts"),)),))
T0, T1, T2, T3 = (TaskId(0, p) for p in range(4))


def _stable_group() -> Group:
    leader_topology = topology_from_proto(codec.topology_to_proto(WORKER_TOPOLOGY), "topology")
    group = Group("app", GroupSettings(initial_rebalance_delay_ms=0))
    for name, port in (("a", 7001), ("b", 7002)):
        subscription = Subscription(2, 2, f"process-{name}", leader_topology, AssignmentConfig(), endpoint=HostInfo(name, port))
        group.join(JoinGroupRequest("app", "", None, 30_000, 30_000, subscription, new_member_id=name), 0, 0)
    result = AssignmentResult(
        MappingProxyType({
            "process-a": ClientAssignment(active=(T0, T1), standby=(T2,), warmup=(T3,)),
            "process-b": ClientAssignment(active=(T2, T3), standby=(T0,)),
        }),
        probing_rebalance_needed=True, followup_rebalance_ms=60_000)
    while group.awaiting_assignment:  # b joined while a's generation was computed: one more round takes both
        group.assignment_computed(group.generation, None, result, "", 1.0, 10)
    return group


def test_the_worker_decodes_the_assignment_the_leader_built():
    group = _stable_group()
    served = group.member_assignment(group.members["a"])
    assert (served.standby, served.warmup) == ((T2, T3), frozenset({T3}))
    wire = pb.SyncGroupResponse.FromString(
        pb.SyncGroupResponse(assignment=assignment_to_proto(served)).SerializeToString()
        + _HostMapCache().get(served.cluster, served.version))
    decoded = codec.assignment_from_proto(wire.assignment, served.generation, WORKER_TOPOLOGY)
    # The worker keeps its own topology (its application id names the changelogs), not the wire's.
    assert decoded == dataclasses.replace(served, cluster=ClusterMetadata(WORKER_TOPOLOGY, served.cluster.hosts))
    assert decoded.configured_standby == (T2,)
    assert decoded.cluster.active_by_host() == {HostInfo("a", 7001): {T0, T1}, HostInfo("b", 7002): {T2, T3}}
    assert decoded.cluster.standby_by_host() == {HostInfo("a", 7001): {T2, T3}, HostInfo("b", 7002): {T0}}


def test_the_leader_parses_the_topology_the_worker_declared():
    parsed = topology_from_proto(codec.topology_to_proto(WORKER_TOPOLOGY), "topology")
    assert parsed == dataclasses.replace(WORKER_TOPOLOGY, application_id="")
    assert parsed.task_ids() == WORKER_TOPOLOGY.task_ids() == (T0, T1, T2, T3)
