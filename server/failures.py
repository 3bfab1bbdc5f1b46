"""Containment of unexpected errors at the RPC boundary.

No internal exception text reaches a client: an exception a handler did not turn into a status
itself is logged with its traceback and the request's context (method, peer, group), counted,
and answered INTERNAL with one stable message. grpc would otherwise answer UNKNOWN carrying
``str(exception)`` (a ``KeyError``'s key, a file path, ...).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import structlog
from google.protobuf.message import DecodeError

from server.limits import LimitExceeded

log = structlog.get_logger(__name__)

INTERNAL_MESSAGE = "internal error; the server logged the details"


class Undecodable:
    """What ``decoder`` hands a handler for bytes that are not a valid message: grpc would
    answer UNKNOWN with the parser's text; ``contain`` answers INVALID_ARGUMENT instead."""

    __slots__ = ("type_name",)

    def __init__(self, type_name: str) -> None:
        self.type_name = type_name


def decoder(message_class: Any) -> Callable[[bytes], Any]:
    def decode(data: bytes) -> Any:
        try:
            return message_class.FromString(data)
        except DecodeError:
            return Undecodable(message_class.DESCRIPTOR.full_name)

    return decode


def contain(
    method: str,
    handler: Callable[[Any, grpc.aio.ServicerContext], Awaitable[Any]],
    on_error: Callable[[str], None] | None = None,
    on_refused: Callable[[str, str, str], None] | None = None,
) -> Callable[[Any, grpc.aio.ServicerContext], Awaitable[Any]]:
    """``on_error(method)`` counts an unexpected exception; ``on_refused(method, code, limit)``
    a request refused by a limit (``server.limits.LimitExceeded``, answered with its status)."""
    async def contained(request: Any, context: grpc.aio.ServicerContext) -> Any:
        if isinstance(request, Undecodable):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"request: not a valid {request.type_name} message")
        try:
            return await handler(request, context)
        except (asyncio.CancelledError, grpc.aio.AbortError):
            raise
        except LimitExceeded as error:
            if on_refused is not None:
                on_refused(method, error.code.name, error.limit)
            await context.abort(error.code, str(error))
        except Exception:
            log.exception(
                "rpc.internal_error",
                method=method,
                peer=context.peer(),
                group_id=getattr(request, "group_id", None),
                member_id=getattr(request, "member_id", None),
            )
            if on_error is not None:
                on_error(method)
            await context.abort(grpc.StatusCode.INTERNAL, INTERNAL_MESSAGE)

    return contained
