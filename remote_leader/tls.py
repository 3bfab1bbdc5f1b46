"""How the project's own tools connect to a server that requires TLS, client certificates or
bearer tokens (docs/security.md): the worker library, the sidecar, ``describe``/``groups``,
the demo and the health probe all build their channels here.

``ClientTls`` holds the caller's side: the CA that signed the server's certificate (enables
TLS), an optional client certificate and key (mTLS), the name the server's certificate carries
when it is dialled by IP or on loopback, and an optional token file whose content is sent as
``authorization: Bearer ...`` on every call (re-read when the file changes, so a rotated token
is picked up). Imports only grpc, like the health probe beside it.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

#: The largest answer the server sends and every channel built here accepts: a large group's
#: SyncGroup and DescribeGroup answers (host maps of tens of thousands of tasks) outgrow gRPC's
#: default of 4 MiB; ``--max-host-map-bytes`` keeps them well within this.
MAX_ANSWER_BYTES = 64 * 1024 * 1024

#: Flag -> (field, environment variable) shared by every client command.
CLIENT_FLAGS = {
    "--tls-ca": ("ca", "REMOTE_LEADER_CLIENT_TLS_CA"),
    "--tls-cert": ("cert", "REMOTE_LEADER_CLIENT_TLS_CERT"),
    "--tls-key": ("key", "REMOTE_LEADER_CLIENT_TLS_KEY"),
    "--tls-server-name": ("server_name", "REMOTE_LEADER_CLIENT_TLS_SERVER_NAME"),
    "--token-file": ("token_file", "REMOTE_LEADER_CLIENT_TOKEN_FILE"),
}


class _TokenFile:
    """The bearer token in a file, re-read when its modification time changes."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._stamp: int | None = None
        self._token = ""
        self.token()  # fail early on a missing file

    def token(self) -> str:
        stamp = os.stat(self.path).st_mtime_ns
        if stamp != self._stamp:
            self._token, self._stamp = self.path.read_text().strip(), stamp
            if not self._token:
                raise ValueError(f"token file {str(self.path)!r} is empty")
        return self._token


def _check_token(path: Path) -> None:
    """``--token-file`` holds one token on one line of printable ASCII (an HTTP header value):
    checked when the options are read, so that a bad file is one line naming the flag, not a
    traceback from inside a call."""
    try:
        token = path.read_bytes().strip()
    except OSError as error:
        raise ValueError(f"--token-file: cannot read {str(path)!r}: {error.strerror or error}") from None
    if not token:
        raise ValueError(f"--token-file: {str(path)!r} is empty")
    if any(byte < 0x20 or byte > 0x7E for byte in token):
        raise ValueError(f"--token-file: {str(path)!r} must hold one token on one line of printable ASCII")


def _with_token(details: Any, tokens: _TokenFile) -> Any:
    metadata = [(k, v) for k, v in (details.metadata or ()) if k != "authorization"]
    metadata.append(("authorization", f"Bearer {tokens.token()}"))
    return details._replace(metadata=metadata)


class _BearerUnaryUnary(grpc.aio.UnaryUnaryClientInterceptor):
    def __init__(self, tokens: _TokenFile) -> None:
        self._tokens = tokens

    async def intercept_unary_unary(self, continuation, client_call_details, request):
        return await continuation(_with_token(client_call_details, self._tokens), request)


class _BearerUnaryStream(grpc.aio.UnaryStreamClientInterceptor):
    def __init__(self, tokens: _TokenFile) -> None:
        self._tokens = tokens

    async def intercept_unary_stream(self, continuation, client_call_details, request):
        return await continuation(_with_token(client_call_details, self._tokens), request)


#: How grpc ends a connection attempt whose TCP connect succeeded but whose peer hung up before
#: HTTP/2 began: what a server that requires TLS does to a plaintext client (its handshake fails
#: on the HTTP/2 preface). A server that is down refuses the connection instead ("Connection
#: refused"); a TCP proxy with no backend looks the same as TLS, hence a hint, not a verdict.
_CLOSED_AFTER_CONNECT = "Socket closed"
TLS_HINT = ("the server accepted the connection and closed it before speaking gRPC: if it requires TLS, "
            "pass --tls-ca (env REMOTE_LEADER_CLIENT_TLS_CA; ClientTls(ca=...) in Python)")


@dataclass(frozen=True, slots=True)
class ClientTls:
    ca: Path | None = None
    cert: Path | None = None
    key: Path | None = None
    server_name: str | None = None
    token_file: Path | None = None

    def __post_init__(self) -> None:
        if bool(self.cert) != bool(self.key):
            raise ValueError("--tls-cert/--tls-key: set both or neither")
        for name in ("ca", "cert", "key", "token_file"):
            path = getattr(self, name)
            if path is not None and not Path(path).is_file():
                flag = f"--{name.replace('_', '-') if name == 'token_file' else 'tls-' + name}"
                problem = "not a regular file" if Path(path).exists() else "no such file"
                raise ValueError(f"{flag}: {problem} {str(path)!r}")
        if self.token_file is not None:
            _check_token(Path(self.token_file))

    @property
    def secure(self) -> bool:
        return self.ca is not None or self.cert is not None

    def tls_hint(self, error: Any) -> str | None:
        """``TLS_HINT`` when this plaintext side's call (a grpc error) failed to connect the way a
        TLS-only server makes it fail, or None: grpc itself says only UNAVAILABLE, retried forever."""
        details = error.details() or ""
        if (self.secure or error.code() != grpc.StatusCode.UNAVAILABLE or "failed to connect" not in details
                or _CLOSED_AFTER_CONNECT not in details):
            return None
        return TLS_HINT

    def credentials(self) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(
            root_certificates=Path(self.ca).read_bytes() if self.ca else None,
            private_key=Path(self.key).read_bytes() if self.key else None,
            certificate_chain=Path(self.cert).read_bytes() if self.cert else None,
        )

    def _options(self, options: list[tuple[str, Any]] | None) -> list[tuple[str, Any]]:
        extra = [("grpc.ssl_target_name_override", self.server_name)] if self.server_name and self.secure else []
        return [("grpc.max_receive_message_length", MAX_ANSWER_BYTES), *(options or []), *extra]

    def aio_channel(self, target: str, options: list[tuple[str, Any]] | None = None) -> grpc.aio.Channel:
        interceptors = None
        if self.token_file is not None:
            tokens = _TokenFile(self.token_file)
            interceptors = [_BearerUnaryUnary(tokens), _BearerUnaryStream(tokens)]
        if self.secure:
            return grpc.aio.secure_channel(target, self.credentials(), options=self._options(options), interceptors=interceptors)
        return grpc.aio.insecure_channel(target, options=self._options(options), interceptors=interceptors)

    def channel(self, target: str, options: list[tuple[str, Any]] | None = None) -> grpc.Channel:
        """A synchronous channel (the health probe). The token travels as call metadata: use
        ``metadata()`` on each call."""
        if self.secure:
            return grpc.secure_channel(target, self.credentials(), options=self._options(options))
        return grpc.insecure_channel(target, options=self._options(options))

    def metadata(self) -> list[tuple[str, str]]:
        return [("authorization", f"Bearer {_TokenFile(self.token_file).token()}")] if self.token_file else []


PLAINTEXT = ClientTls()


def add_client_arguments(parser: argparse.ArgumentParser, *, prefix: str = "", what: str = "the server") -> None:
    """``--tls-ca``, ``--tls-cert``, ``--tls-key``, ``--tls-server-name``, ``--token-file`` (each
    also read from its REMOTE_LEADER_CLIENT_* environment variable)."""
    helps = {
        "--tls-ca": f"PEM CA that signed {what}'s certificate; enables TLS",
        "--tls-cert": "PEM client certificate (mTLS); with --tls-key",
        "--tls-key": "PEM key of --tls-cert",
        "--tls-server-name": f"name {what}'s certificate carries, when dialled by address or on loopback",
        "--token-file": "file holding a bearer token sent with every call (re-read when it changes)",
    }
    for flag, (name, env) in CLIENT_FLAGS.items():
        option = flag.replace("--", f"--{prefix}", 1)
        parser.add_argument(option, dest=f"{prefix.replace('-', '_')}{name}", default=None,
                            help=f"{helps[flag]} (env {_env(env, prefix)})")


def _env(env: str, prefix: str) -> str:
    return env.replace("REMOTE_LEADER_", f"REMOTE_LEADER_{prefix.replace('-', '_').upper()}", 1) if prefix else env


def client_tls_from(args: argparse.Namespace, environ: Mapping[str, str] | None = None, *, prefix: str = "") -> ClientTls:
    environ = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    for _flag, (name, env) in CLIENT_FLAGS.items():
        raw = getattr(args, f"{prefix.replace('-', '_')}{name}", None) or environ.get(_env(env, prefix)) or None
        if raw is not None:
            values[name] = raw if name == "server_name" else Path(raw)
    return ClientTls(**values)
