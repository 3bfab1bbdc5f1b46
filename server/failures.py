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

log = structlog.get_logger(__name__)

INTERNAL_MESSAGE = "internal error; the server logged the details"


def contain(
    method: str,
    handler: Callable[[Any, grpc.aio.ServicerContext], Awaitable[Any]],
    on_error: Callable[[str], None] | None = None,
) -> Callable[[Any, grpc.aio.ServicerContext], Awaitable[Any]]:
    async def contained(request: Any, context: grpc.aio.ServicerContext) -> Any:
        try:
            return await handler(request, context)
        except (asyncio.CancelledError, grpc.aio.AbortError):
            raise
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
