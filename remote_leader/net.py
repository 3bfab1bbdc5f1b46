"""Network helpers shared by the server and the sidecar."""

from __future__ import annotations

import errno
import socket


def address_in_use(listen: str) -> bool:
    """Whether another program holds ``host:port``, tried the way grpc binds it (SO_REUSEADDR)
    before grpc does: a port in use is then one line of ours naming ``--listen``, not grpc's
    C-level error log. Port 0 (any free port) and names that do not resolve are left to grpc."""
    host, _, port = listen.rpartition(":")
    if not port.isdigit() or int(port) == 0:
        return False
    try:
        addresses = socket.getaddrinfo(host.strip("[]") or None, int(port), type=socket.SOCK_STREAM,
                                       flags=socket.AI_PASSIVE)
    except OSError:
        return False  # grpc says what is wrong with the name
    for family, kind, proto, _, address in addresses:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(address)
            except OSError as error:
                if error.errno == errno.EADDRINUSE:
                    return True
    return False
