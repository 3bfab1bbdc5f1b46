"""Who is calling, and may they (docs/security.md).

Authentication gives every call a principal: the bearer token's (``authorization: Bearer ...``
metadata; a token file mapping tokens to principals, reloaded when it changes, or a JWT verified
with a configured key, principal = its ``sub`` claim) or else the TLS client certificate's
(the first URI subject alternative name, else the first DNS one, else the subject's common
name). Authorization is Kafka's model for group resources: an ACL file grants principals
operations on group-id patterns (literal or prefixed); once any authentication is configured,
whatever is not granted is denied. With none configured (the embedded default) every call is
anonymous and allowed, as before.

Operations: ``member`` (JoinGroup, SyncGroup, Heartbeat, LeaveGroup, RouteQuery), ``describe``
(DescribeGroup; ListGroups shows only describable groups), ``admin`` (implies member and
describe on its groups, and may remove any member with LeaveGroup) and ``assign`` (the
stateless Assign RPC, not tied to a group).

Within a group, ``check_join`` and ``check_member_call`` keep a member id, a process id and a
static instance id to the principal that created it. The pieces are transport-neutral
(``Authenticator.principal_for(bearer=..., certificate_pem=...)``, ``Gate.authorize``) so that
an HTTP endpoint can reuse them; ``Gate.check`` is the gRPC side.
"""

from __future__ import annotations

import enum
import hashlib
import ipaddress
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import structlog
import yaml

log = structlog.get_logger(__name__)

#: How often a token or ACL file is checked for a change (its modification time and size).
RELOAD_CHECK_S = 1.0


class Operation(enum.StrEnum):
    MEMBER = "member"
    DESCRIBE = "describe"
    ADMIN = "admin"
    ASSIGN = "assign"


@dataclass(frozen=True, slots=True)
class Principal:
    name: str
    via: str  # "certificate", "token", "jwt" or "none" (auth off)


ANONYMOUS = Principal("", "none")


class Unauthenticated(enum.StrEnum):
    """Why a call has no principal: the ``reason`` of its refusal in the metrics, one closed set
    so that the metrics can export each at 0 before the first (``server.edge.refusals``)."""

    INVALID_JWT = "invalid_jwt"
    INVALID_TOKEN = "invalid_token"
    NO_CERTIFICATE_NAME = "no_certificate_name"
    NO_CREDENTIALS = "no_credentials"
    BAD_AUTHORIZATION = "bad_authorization"

    @property
    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.UNAUTHENTICATED


class Denied(enum.StrEnum):
    """Why a principal's call is refused, as ``Unauthenticated``."""

    ACL = "acl"
    MEMBER_ID_OWNER = "member_id_owner"
    INSTANCE_ID_OWNER = "instance_id_owner"
    PROCESS_ID_OWNER = "process_id_owner"
    SHUTDOWN_NOT_MEMBER = "shutdown_not_member"

    @property
    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.PERMISSION_DENIED


class AuthError(Exception):
    """Refused: ``code`` (UNAUTHENTICATED or PERMISSION_DENIED) follows from ``reason``, the
    metric's label; the message is the answer's text."""

    def __init__(self, reason: Unauthenticated | Denied, message: str) -> None:
        super().__init__(message)
        self.code = reason.code
        self.reason = reason


class _Watched:
    """A file parsed again when its modification time or size changes (checked at most once a
    second). A file that fails to parse after a change keeps the last good content (logged)."""

    def __init__(self, path: Path, parse) -> None:
        self.path = Path(path)
        self._parse = parse
        self._lock = threading.Lock()
        self._stamp = self._stat()
        self.value = parse(self.path.read_text())  # the first load must succeed
        self._checked = time.monotonic()

    def _stat(self) -> tuple[int, int]:
        st = os.stat(self.path)
        return st.st_mtime_ns, st.st_size

    def current(self) -> Any:
        now = time.monotonic()
        if now - self._checked < RELOAD_CHECK_S:
            return self.value
        with self._lock:
            self._checked = now
            try:
                stamp = self._stat()
                if stamp != self._stamp:
                    text = self.path.read_text()  # unreadable (a mode being fixed): tried again
                    self._stamp = stamp  # read but not valid: reported once, not every second
                    self.value = self._parse(text)
                    log.info("auth.file.reloaded", path=str(self.path))
            except (OSError, ValueError) as error:
                log.error("auth.file.reload_failed", path=str(self.path), error=str(error))
        return self.value


def _yaml(text: str, what: str) -> Any:
    """The document of a token or ACL file; a syntax error as a ValueError that gives its line
    and column but not the text there (a token file's lines are secrets)."""
    try:
        return yaml.safe_load(text) or {}
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise ValueError(f"{what}: not valid YAML{where}") from None


# ---- tokens ---------------------------------------------------------------------------------------


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


def parse_token_file(text: str) -> Mapping[bytes, str]:
    """YAML ``{tokens: {TOKEN: PRINCIPAL}}``; kept as sha256(token) -> principal."""
    document = _yaml(text, "token file")
    tokens = document.get("tokens") if isinstance(document, dict) else None
    if not isinstance(tokens, dict):
        raise ValueError("token file: expected a mapping 'tokens: {TOKEN: PRINCIPAL}'")
    result = {}
    for token, principal in tokens.items():
        if not isinstance(token, str) or len(token) < 16:
            raise ValueError("token file: every token must be a string of at least 16 characters")
        if not isinstance(principal, str) or not principal:
            raise ValueError(f"token file: the principal of a token must be a non-empty string, got {principal!r}")
        result[_digest(token)] = principal
    return result


@dataclass(frozen=True, slots=True)
class JwtSettings:
    key_file: Path
    algorithms: tuple[str, ...] = ("RS256", "ES256", "EdDSA")
    audience: str | None = None
    issuer: str | None = None


class _JwtVerifier:
    def __init__(self, settings: JwtSettings) -> None:
        import jwt  # optional: only when a JWT key is configured

        self._jwt = jwt
        self._settings = settings
        self._key = Path(settings.key_file).read_text()

    def principal(self, token: str) -> str | None:
        s = self._settings
        options = {"require": ["exp", "sub"] + (["aud"] if s.audience else []) + (["iss"] if s.issuer else [])}
        try:
            claims = self._jwt.decode(token, self._key, algorithms=list(s.algorithms), audience=s.audience,
                                      issuer=s.issuer, options=options)
        except self._jwt.PyJWTError as error:
            raise AuthError(Unauthenticated.INVALID_JWT, f"invalid bearer JWT: {error}") from None
        subject = claims.get("sub")
        return subject if isinstance(subject, str) and subject else None


# ---- certificates -----------------------------------------------------------------------------------


def certificate_principal(pem: bytes) -> str | None:
    """The first URI subject alternative name (SPIFFE ids are URIs), else the first DNS one,
    else the subject's common name."""
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    certificate = x509.load_pem_x509_certificate(pem)
    try:
        san = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        san = None
    if san is not None:
        for kind in (x509.UniformResourceIdentifier, x509.DNSName):
            names = san.get_values_for_type(kind)
            if names:
                return names[0]
    common = certificate.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(common[0].value) if common else None


# ---- the authenticator --------------------------------------------------------------------------------


class Authenticator:
    """Principals from bearer tokens or client certificates. ``enabled`` is False when nothing
    is configured: every caller is then ``ANONYMOUS``."""

    def __init__(self, *, client_certificates: bool = False, token_file: Path | None = None,
                 jwt: JwtSettings | None = None) -> None:
        self.client_certificates = client_certificates
        self._tokens = _Watched(token_file, parse_token_file) if token_file else None
        self._jwt = _JwtVerifier(jwt) if jwt else None

    @property
    def enabled(self) -> bool:
        return self.client_certificates or self._tokens is not None or self._jwt is not None

    def principal_for(self, *, bearer: str | None = None, certificate_pem: bytes | None = None) -> Principal:
        """A bearer token, when sent, names the caller (a mesh may terminate TLS before us);
        else the verified client certificate."""
        if not self.enabled:
            return ANONYMOUS
        if bearer is not None:
            if self._tokens is not None:
                name = self._tokens.current().get(_digest(bearer))
                if name is not None:
                    return Principal(name, "token")
            if self._jwt is not None and bearer.count(".") == 2:
                name = self._jwt.principal(bearer)
                if name is not None:
                    return Principal(name, "jwt")
            raise AuthError(Unauthenticated.INVALID_TOKEN, "the bearer token is not known")
        if certificate_pem is not None and self.client_certificates:
            name = certificate_principal(certificate_pem)
            if name:
                return Principal(name, "certificate")
            raise AuthError(Unauthenticated.NO_CERTIFICATE_NAME, "the client certificate has no URI, DNS or CN name")
        raise AuthError(Unauthenticated.NO_CREDENTIALS, "no client certificate and no bearer token")

    def principal_of(self, context: grpc.aio.ServicerContext) -> Principal:
        if not self.enabled:
            return ANONYMOUS
        values = [str(value) for key, value in context.invocation_metadata() or () if key == "authorization"]
        bearer = bearer_token(values, "the authorization metadata", "authorization metadata entry")
        pem = None
        auth = context.auth_context() or {}
        if auth.get("x509_pem_cert"):
            pem = auth["x509_pem_cert"][0]
        return self.principal_for(bearer=bearer, certificate_pem=pem)



def bearer_token(values: list[str], what: str, entry: str) -> str | None:
    """The token of a call's one ``Authorization`` value (gRPC metadata, an HTTP header), which
    must read ``Bearer TOKEN``; None without one. ``AuthError`` (``bad_authorization``) naming
    ``what`` otherwise, and for more than one ``entry``: which one counts would be a proxy's
    guess against ours (an outsider audit's find: the last one counted here)."""
    if not values:
        return None
    if len(values) > 1:
        raise AuthError(Unauthenticated.BAD_AUTHORIZATION, f"more than one {entry}")
    scheme, _, token = values[0].partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise AuthError(Unauthenticated.BAD_AUTHORIZATION, f"{what} must be 'Bearer TOKEN'")
    return token.strip()

# ---- ACLs ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Grant:
    principal: str  # "*" is every authenticated principal
    operations: frozenset[Operation]
    group: str  # "*" (literal) is every group
    prefixed: bool = False

    def covers_group(self, group_id: str) -> bool:
        if self.prefixed:
            return group_id.startswith(self.group)
        return self.group in ("*", group_id)


def parse_acl_file(text: str) -> tuple[Grant, ...]:
    """YAML::

        acls:
          - principal: spiffe://corp/orders-app     # or "*": any authenticated principal
            operations: [member, describe]
            group: orders-                           # "*": every group
            pattern: prefixed                        # or literal (the default)
          - principal: batch-planner
            operations: [assign]                     # Assign is not tied to a group
    """
    document = _yaml(text, "ACL file")
    entries = document.get("acls") if isinstance(document, dict) else None
    if not isinstance(entries, list):
        raise ValueError("ACL file: expected a list under 'acls'")
    grants = []
    for i, entry in enumerate(entries):
        where = f"ACL file: acls[{i}]"
        if not isinstance(entry, dict):
            raise ValueError(f"{where}: expected a mapping")
        unknown = set(entry) - {"principal", "operations", "group", "pattern"}
        if unknown:
            raise ValueError(f"{where}: unknown keys {sorted(unknown)}")
        principal = entry.get("principal")
        if not isinstance(principal, str) or not principal:
            raise ValueError(f"{where}.principal: expected a non-empty string")
        raw_ops = entry.get("operations")
        if not isinstance(raw_ops, list) or not raw_ops:
            raise ValueError(f"{where}.operations: expected a non-empty list of {[o.value for o in Operation]}")
        try:
            operations = frozenset(Operation(op) for op in raw_ops)
        except ValueError:
            raise ValueError(f"{where}.operations: expected some of {[o.value for o in Operation]}, got {raw_ops}") from None
        group = entry.get("group", "*" if operations == {Operation.ASSIGN} else None)
        if not isinstance(group, str) or not group:
            raise ValueError(f"{where}.group: expected a group id, a prefix or '*'")
        pattern = entry.get("pattern", "literal")
        if pattern not in ("literal", "prefixed"):
            raise ValueError(f"{where}.pattern: expected literal or prefixed, got {pattern!r}")
        grants.append(Grant(principal, operations, group, pattern == "prefixed"))
    return tuple(grants)


_IMPLIED = {
    Operation.MEMBER: {Operation.MEMBER, Operation.ADMIN},
    Operation.DESCRIBE: {Operation.DESCRIBE, Operation.ADMIN},
    Operation.ADMIN: {Operation.ADMIN},
    Operation.ASSIGN: {Operation.ASSIGN},
}


class Gate:
    """Authentication plus the ACLs: what the edge (and any other front door) asks."""

    def __init__(self, authenticator: Authenticator | None = None, acl_file: Path | None = None, metrics: Any = None) -> None:
        self.authenticator = authenticator or Authenticator()
        self._acls = _Watched(acl_file, parse_acl_file) if acl_file else None
        self._metrics = metrics

    @property
    def enabled(self) -> bool:
        return self.authenticator.enabled

    def authorize(self, principal: Principal, operation: Operation, group_id: str | None = None) -> bool:
        """May ``principal`` do ``operation`` on ``group_id`` (None for ``assign``)? Everything
        is allowed when authentication is off; nothing that no grant covers when it is on."""
        if not self.enabled:
            return True
        if principal is ANONYMOUS or self._acls is None:
            return False
        wanted = _IMPLIED[operation]
        for grant in self._acls.current():
            if grant.principal not in ("*", principal.name) or not (grant.operations & wanted):
                continue
            if operation is Operation.ASSIGN or (group_id is not None and grant.covers_group(group_id)):
                return True
        return False

    def refuse(self, method: str, principal: Principal | None, error: AuthError, group_id: str | None = None) -> None:
        log.warning("auth.refused", method=method, principal=principal.name if principal else None,
                    via=principal.via if principal else None, group_id=group_id, code=error.code.name,
                    reason=error.reason, detail=str(error))
        if self._metrics is not None:
            self._metrics.refused_seen(method, error.code.name, error.reason)

    async def check(self, context: grpc.aio.ServicerContext, method: str, operation: Operation,
                    group_id: str | None = None) -> Principal:
        """The caller's principal, or the call aborted with UNAUTHENTICATED / PERMISSION_DENIED."""
        if not self.enabled:
            return ANONYMOUS
        principal = None
        try:
            principal = self.authenticator.principal_of(context)
            if not self.authorize(principal, operation, group_id):
                target = f" on group {group_id!r}" if group_id is not None else ""
                raise AuthError(Denied.ACL, f"principal {principal.name!r} may not {operation.value}{target}")
        except AuthError as error:
            self.refuse(method, principal, error, group_id)
            await context.abort(error.code, str(error))
        return principal

    async def principal(self, context: grpc.aio.ServicerContext, method: str) -> Principal:
        """Authenticated, not yet authorized (ListGroups filters per group)."""
        try:
            return self.authenticator.principal_of(context)
        except AuthError as error:
            self.refuse(method, None, error)
            await context.abort(error.code, str(error))
            raise  # unreachable: abort raises


# ---- ownership within a group ---------------------------------------------------------------------


def _check_ids(group: Any, principal: Principal, member_id: str, instance: str | None) -> Any:
    """The member id and the static instance id, if already held in the group, must be held by
    ``principal``; returns the member ``member_id`` names (None when unknown or empty)."""
    member = group.members.get(member_id) if member_id else None
    if member is not None and member.principal != principal.name:
        raise AuthError(Denied.MEMBER_ID_OWNER, f"member id {member_id!r} belongs to another principal")
    if instance and instance in group.instances:
        holder = group.members.get(group.instances[instance])
        if holder is not None and holder.principal != principal.name:
            raise AuthError(Denied.INSTANCE_ID_OWNER, f"group_instance_id {instance!r} belongs to another principal")
    return member


def check_join(group: Any, principal: Principal, member_id: str, instance: str | None, process_id: str,
               shutdown: bool, *, owners: bool = True) -> None:
    """Under the group's lock, before JoinGroup runs: the caller may use only its own member id,
    static instance id and process id (``owners``: with authentication off every member is
    anonymous, and the scan is skipped); a shutdown request comes only from a current member."""
    if group is None:
        if shutdown:
            raise AuthError(Denied.SHUTDOWN_NOT_MEMBER, "a shutdown request is honoured only from a member of the current generation")
        return
    member = _check_ids(group, principal, member_id, instance)
    if owners and (member is None or member.process_id != process_id):
        for other in group.members.values():
            if other.process_id == process_id and other.principal != principal.name:
                raise AuthError(Denied.PROCESS_ID_OWNER, f"process id {process_id} belongs to another principal")
    if shutdown and (member is None or group.generation == 0):
        raise AuthError(Denied.SHUTDOWN_NOT_MEMBER, "a shutdown request is honoured only from a member of the current generation")


def check_member_call(group: Any, principal: Principal, member_id: str, instance: str | None, *,
                      admin_may: bool = False) -> None:
    """SyncGroup, Heartbeat, LeaveGroup: only the member's own principal (LeaveGroup: or a group
    admin, ``admin_may``). An unknown member id is left to the group (UNKNOWN_MEMBER_ID)."""
    if group is None or admin_may:
        return
    _check_ids(group, principal, member_id, instance)


def is_loopback(listen: str) -> bool:
    host = listen.rsplit(":", 1)[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
