"""Network helpers shared by the server, the sidecar, the CLI, the tests and the benches."""

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


def check_address(flag: str, text: str, *, several: bool = False, port_zero: bool = False) -> None:
    """``host:port`` (``several``: a comma-separated list of them) with a port that fits in 16
    bits (grpc would wrap 70000 to 4464); ``port_zero`` (a listen address) allows port 0 (pick a
    free one) and an empty host."""
    shape = "host:port[,host:port...]" if several else "host:port"
    parts = [part.strip() for part in text.split(",")] if several else [text.strip()]
    if not any(parts) or (not several and len(parts) != 1):
        raise ValueError(f"{flag}: expected {shape}, got {text!r}")
    for part in parts:
        if not part:
            continue
        host, sep, port = part.rpartition(":")
        if not sep or not (host or port_zero) or not port.isdigit() or not (0 if port_zero else 1) <= int(port) <= 65535:
            low = 0 if port_zero else 1
            raise ValueError(f"{flag}: expected {shape} with a port from {low} to 65535, got {part!r}")


def free_port() -> int:
    """A loopback port free right now, for tests and benches that start a server on it (a
    child process, which cannot be handed port 0 and tell its choice back as easily)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
