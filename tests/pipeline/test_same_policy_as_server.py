"""The what-if simulator and the server decide alike (assignor.probing, docs/architecture.md).

One scripted KIP-441 "Scaling Out": three settled clients, a fourth joins. The simulator runs
it on its own. The server's group state machine (``server.group.Group``, pure) runs it with a
fake clock, its members rejoining when a rebalance starts and heart-beating every second with
the lags of a world that restores exactly as the simulator's does (its restoration model,
driven by the assignments the *server* hands out). Both must rebalance at the same moments,
for the same reasons, and hand out the same assignments.

Changelogs are multiples of 10,000 offsets restored at 10,000 offsets/s, so every warm-up
reaches ``acceptable_recovery_lag`` on a whole second, where a heartbeat reports it.
"""

from __future__ import annotations

from dataclasses import dataclass

from assignor import solve
from assignor.convergence import settle
from assignor.model import (
    AssignmentProblem,
    AssignmentResult,
    ClientState,
    StateStore,
    TaskId,
    TaskSpec,
    TopicPartition,
)
from assignor.scenario import problem_to_document, result_to_document
from assignor.topology import SourceTopic, Subtopology, Topology
from pipeline import simulation
from pipeline.simulation import Member, Rates, RunSpec, ScalingEvent, SimConfig
from server.effects import ComputeAssignment
from server.group import Group, GroupSettings, GroupState
from server.model import HeartbeatRequest, JoinGroupRequest, LagReport, Subscription, SyncGroupRequest

CHANGELOGS = (200_000, 900_000, 400_000, 1_250_000, 350_000, 700_000, 1_000_000, 450_000)
TASKS = tuple(TaskSpec(TaskId(0, p), True, size, (TopicPartition("in", p),)) for p, size in enumerate(CHANGELOGS))
TOPOLOGY = Topology((Subtopology(0, (SourceTopic("in", len(CHANGELOGS)),), (StateStore("counts", logged=True),)),))
SIM_CONFIG = SimConfig(acceptable_recovery_lag=10_000, max_warmup_replicas=1, probing_interval_s=600.0,
                       early_probe=True, min_probe_interval_s=60.0)
CONFIG = SIM_CONFIG.assignment_config(standbys=1)
RATES = Rates(restore_rate=10_000, append_rate=0)
HEARTBEAT_MS = 1_000
EVENT_MS = 100_000  # the server's clock when the fourth client joins (the simulator's t = 0)
HORIZON_MS = 3_600_000


@dataclass(frozen=True)
class Rebalance:
    at_ms: int  # since the scale-out
    trigger: str
    assignment: dict


def _assignment(result: AssignmentResult) -> dict:
    return {client: (a.active, a.standby, a.warmup) for client, a in sorted(result.clients.items())}


def _start() -> dict:
    """Three clients settled on the assignor's fixpoint, as a rebalance-log record."""
    clients = [ClientState(f"c{i:04d}") for i in range(3)]
    results, settled = settle(TASKS, clients, CONFIG, max_rounds=30)
    assert not results[-1].probing_rebalance_needed
    return {"input": problem_to_document(AssignmentProblem(TASKS, tuple(settled), CONFIG)),
            "output": result_to_document(results[-1])}


def _simulated(start: dict, monkeypatch) -> list[Rebalance]:
    results: list[AssignmentResult] = []
    assign = simulation._assign

    def recording(world, config):
        results.append(assign(world, config))
        return results[-1]

    monkeypatch.setattr(simulation, "_assign", recording)
    outcome = simulation.simulate(RunSpec("proof", 1, ScalingEvent("scale_out", 1), SIM_CONFIG, start=start, rates=RATES))
    assert outcome["run"]["settled"]
    return [Rebalance(round(step["time_s"] * 1000), step["trigger"], _assignment(result))
            for step, result in zip(outcome["steps"], results, strict=True)]


class _ServerRun:
    """The server's state machine with a fake clock; members report the lags of ``world``."""

    def __init__(self, start: dict) -> None:
        self.world, _ = simulation.world_from_log(start, RATES)
        self.group = Group("app", GroupSettings(initial_rebalance_delay_ms=0, min_probe_interval_ms=60_000,
                                                early_probe=True))
        self.now = 0
        self.calls = 0
        self.member_ids: dict[str, str] = {}
        self.rebalances: list[Rebalance] = []

    def report(self, client: str) -> LagReport:
        lags = simulation._client_state(self.world, self.world.members[client]).lags
        return LagReport(task_lags=lags, end_offsets={spec.id: spec.changelog_offsets for spec in TASKS})

    def join(self, client: str) -> list:
        self.calls += 1
        subscription = Subscription(2, 2, client, TOPOLOGY, CONFIG, lags=self.report(client))
        request = JoinGroupRequest("app", self.member_ids.get(client, ""), None, 600_000, 600_000, subscription,
                                   new_member_id=f"member-{client}")
        self.member_ids[client] = f"member-{client}"
        return self.group.join(request, self.calls, self.now).effects

    def complete(self, effects: list) -> None:
        """Run the assignor the state machine asks for, as the runtime does (joins that arrived
        while it ran supersede its result and ask for one more run), then every member syncs."""
        while True:
            (compute,) = [effect for effect in effects if isinstance(effect, ComputeAssignment)]
            trigger = str(self.group.pending_trigger)
            problem = compute.inputs.build()
            result = solve(problem)
            effects = self.group.assignment_computed(compute.generation, problem, result, "", 0.0, self.now).effects
            if not any(isinstance(effect, ComputeAssignment) for effect in effects):
                break
        simulation._apply(self.world, result)
        for client in sorted(self.member_ids):
            request = SyncGroupRequest("app", self.member_ids[client], None, self.group.generation)
            self.group.sync(request, self.now)
        assert self.group.state is GroupState.STABLE
        self.rebalances.append(Rebalance(self.now - EVENT_MS, trigger, _assignment(result)))

    def rebalance(self) -> None:
        """Every member rejoins with its current lags; the last join completes the barrier."""
        effects: list = []
        for client in sorted(self.world.members):
            effects += self.join(client)
        self.complete(effects)

    def advance_to(self, at_ms: int) -> None:
        simulation._advance(self.world, at_ms - self.now, simulation._Totals())
        self.now = at_ms

    def run(self) -> list[Rebalance]:
        self.rebalance()  # the settled group, before the event
        initial = self.rebalances.pop()
        assert not self.group.result.probing_rebalance_needed and initial.trigger == "member_joined"
        self.advance_to(EVENT_MS)
        newcomer = "c0003"
        self.world.members[newcomer] = self.world.known[newcomer] = Member(newcomer, 1, None)
        self.world.assignment[newcomer] = simulation.ClientAssignment()
        self.world.lags[newcomer], self.world.running[newcomer] = {}, set()
        effects = self.join(newcomer)  # starts the rebalance; the others rejoin
        for client in sorted(self.world.members):
            if client != newcomer:
                effects += self.join(client)
        self.complete(effects)
        while self.group.next_probe_ms is not None and self.now < EVENT_MS + HORIZON_MS:
            self.advance_to(self.now + HEARTBEAT_MS)
            for client in sorted(self.member_ids):
                request = HeartbeatRequest("app", self.member_ids[client], None, self.group.generation,
                                           self.report(client))
                self.group.heartbeat(request, self.now)
            if self.group.next_probe_ms is not None and self.group.next_probe_ms <= self.now:
                assert self.group.probe_due(self.now).effects
                self.rebalance()
        return self.rebalances


def test_server_and_simulator_probe_at_the_same_moments_and_assign_alike(monkeypatch):
    start = _start()
    simulated = _simulated(start, monkeypatch)
    served = _ServerRun(start).run()
    assert [(r.at_ms, r.trigger) for r in served] == [(r.at_ms, r.trigger) for r in simulated]
    assert [r.assignment for r in served] == [r.assignment for r in simulated]
    # the scale-out itself, then probes: some early, none sooner than a minute after the last
    assert simulated[0].trigger == "member_joined" and len(simulated) > 2
    assert {r.trigger for r in simulated[1:]} <= {"early_probe", "probing_rebalance"}
    assert any(r.trigger == "early_probe" for r in simulated)
    assert all(b.at_ms - a.at_ms >= 60_000 for a, b in zip(simulated, simulated[1:], strict=False))
