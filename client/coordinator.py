"""Which replica of the leader a worker talks to for its group, and how it finds another.

With several replicas over PostgreSQL (docs/high-availability.md) each group is owned by one
replica. A call that reaches another one is answered NOT_COORDINATOR with the owner's address,
and the link simply moves there. When the replica it talks to stops answering (killed,
partitioned, draining) the link asks FindCoordinator of the bootstrap replicas in turn (Kafka's
client does the same with its bootstrap servers). A single server answers FindCoordinator with
itself, so none of this changes anything for one instance.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc
import structlog

from remote_leader.v1 import errors_pb2 as epb
from remote_leader.v1 import group_leader_pb2 as pb
from remote_leader.v1 import group_leader_pb2_grpc as pb_grpc

log = structlog.get_logger(__name__)

#: Redirect codes: the member looks for the group's owner instead of backing off blindly.
MOVED = frozenset({epb.ERROR_CODE_NOT_COORDINATOR, epb.ERROR_CODE_COORDINATOR_NOT_AVAILABLE})


def bootstrap_addresses(target: str) -> list[str]:
    """``host:port[,host:port...]``: the replicas to ask first (any of them will do)."""
    addresses = [part.strip() for part in target.split(",") if part.strip()]
    if not addresses:
        raise ValueError(f"expected host:port[,host:port...], got {target!r}")
    return addresses


class CoordinatorLink:
    """The current channel and stub for one group, with the others kept open for reuse."""

    def __init__(self, target: str | grpc.aio.Channel, group_id: str,
                 open_channel: Callable[[str], grpc.aio.Channel]) -> None:
        self.group_id = group_id
        self._open = open_channel
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._bootstrap: list[str] = []
        self._given: grpc.aio.Channel | None = None
        if isinstance(target, str):
            self._bootstrap = bootstrap_addresses(target)
            self.address = self._bootstrap[0]
            self.channel = self._channel(self.address)
        else:
            self._given = self.channel = target
            self.address = ""
        self.stub = pb_grpc.GroupLeaderStub(self.channel)
        self.redirects = 0

    def _channel(self, address: str) -> grpc.aio.Channel:
        if address not in self._channels:
            self._channels[address] = self._open(address)
        return self._channels[address]

    def move_to(self, address: str) -> None:
        if not address or address == self.address:
            return
        log.info("member.coordinator.moved", group_id=self.group_id, address=address, previous=self.address)
        self.address = address
        self.channel = self._channel(address)
        self.stub = pb_grpc.GroupLeaderStub(self.channel)
        self.redirects += 1

    def follow(self, coordinator: Any) -> bool:
        """Move to the owner a NOT_COORDINATOR answer named; False when it named none."""
        if coordinator is not None and coordinator.address:
            self.move_to(coordinator.address)
            return True
        return False

    async def rediscover(self, timeout_s: float = 2.0, *, current_last: bool = False) -> bool:
        """Ask FindCoordinator of the current replica, then of each bootstrap replica; move to
        the first answer. False when nobody answered (the caller backs off and tries again).
        ``current_last``: the current replica did not answer a call, so it is asked last (a
        paused one would cost the whole timeout first)."""
        current = [(self.address, self.channel)]
        others = [(a, self._channel(a)) for a in self._bootstrap if a != self.address]
        candidates: list[tuple[str, grpc.aio.Channel]] = others + current if current_last else current + others
        if self._given is not None and self._given is not self.channel:
            candidates.append(("", self._given))
        for address, channel in candidates:
            try:
                found = await pb_grpc.GroupLeaderStub(channel).FindCoordinator(
                    pb.FindCoordinatorRequest(group_id=self.group_id), timeout=timeout_s)
            except grpc.aio.AioRpcError as error:
                log.debug("member.coordinator.find_failed", address=address, code=error.code().name)
                continue
            if found.error_code != epb.ERROR_CODE_NONE:
                continue
            if found.coordinator.address:
                self.move_to(found.coordinator.address)
            elif channel is not self.channel:  # a single server that does not know its address
                self.channel, self.address = channel, address
                self.stub = pb_grpc.GroupLeaderStub(channel)
            return True
        return False

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close()
        self._channels.clear()
