"""The ACL and token files, principals of certificates, and the serve settings that turn
authentication on (docs/security.md)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from remote_leader.pki import DevCa
from server.auth import (
    ANONYMOUS,
    Authenticator,
    Gate,
    Operation,
    Principal,
    certificate_principal,
    parse_acl_file,
    parse_token_file,
)
from server.cli import SettingsError, register, settings_from


@pytest.mark.parametrize(("text", "message"), [
    ("acls: {}", "expected a list under 'acls'"),
    ("acls:\n  - operations: [member]\n    group: g", "acls[0].principal: expected a non-empty string"),
    ("acls:\n  - principal: p\n    operations: [write]\n    group: g", "acls[0].operations: expected some of"),
    ("acls:\n  - principal: p\n    operations: [member]", "acls[0].group: expected a group id"),
    ("acls:\n  - principal: p\n    operations: [member]\n    group: g\n    pattern: regex", "acls[0].pattern: expected literal or prefixed"),
    ("acls:\n  - principal: p\n    operations: [member]\n    group: g\n    host: x", "acls[0]: unknown keys ['host']"),
])
def test_a_bad_acl_file_names_the_entry_and_field(text, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_acl_file(text)


def test_tokens_must_be_long_enough_to_guess_hard():
    with pytest.raises(ValueError, match="at least 16 characters"):
        parse_token_file("tokens:\n  short: p\n")


@pytest.mark.parametrize("parse", [parse_token_file, parse_acl_file])
def test_a_file_that_is_no_yaml_names_the_place_not_the_text(parse):
    """A token file's lines are secrets: a syntax error says where, never what is there."""
    secret = "0123456789abcdef-secret"
    with pytest.raises(ValueError, match=r"not valid YAML at line \d+, column \d+") as caught:
        parse(f'tokens:\n  {secret}: "alice\n')
    assert secret not in str(caught.value)


def test_a_token_file_broken_after_start_keeps_its_last_good_tokens(tmp_path, monkeypatch):
    """An audit's find: a YAML syntax error (no ValueError) escaped the reload, every call that
    checked a token answered INTERNAL, and the traceback logged the file's lines."""
    from structlog.testing import capture_logs

    import server.auth

    monkeypatch.setattr(server.auth, "RELOAD_CHECK_S", 0.0)
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text("tokens:\n  0123456789abcdef-alice: alice\n")
    authenticator = Authenticator(token_file=tokens)
    tokens.write_text('tokens:\n  0123456789abcdef-alice: "alice\n  fedcba9876543210-bob: bob\n')
    with capture_logs() as logs:
        for _ in range(3):
            assert authenticator.principal_for(bearer="0123456789abcdef-alice") == Principal("alice", "token")
    failures = [entry for entry in logs if entry["event"] == "auth.file.reload_failed"]
    assert len(failures) == 1  # once per change, not once a second
    assert "0123456789abcdef" not in str(failures) and "fedcba" not in str(failures)
    tokens.write_text("tokens:\n  fedcba9876543210-bob: bob\n")
    # unreadable for a moment (its mode being fixed): read again once it can be, though its
    # time and size are then the same (the review of the change above found it never was)
    read = Path.read_text
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: (_ for _ in ()).throw(PermissionError(13, "denied")))
    assert authenticator.principal_for(bearer="0123456789abcdef-alice") == Principal("alice", "token")
    monkeypatch.setattr(Path, "read_text", read)
    assert authenticator.principal_for(bearer="fedcba9876543210-bob") == Principal("bob", "token")
    with pytest.raises(server.auth.AuthError, match="not known"):
        authenticator.principal_for(bearer="0123456789abcdef-alice")


def _gate(tmp_path, acl: str) -> Gate:
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text("tokens:\n  0123456789abcdef0123: p\n")
    acl_file = tmp_path / "acl.yaml"
    acl_file.write_text(acl)
    return Gate(Authenticator(token_file=tokens), acl_file)


def test_literal_prefixed_wildcard_and_admin_grants(tmp_path):
    gate = _gate(tmp_path, """
acls:
  - {principal: orders, operations: [member], group: orders}
  - {principal: orders, operations: [describe], group: orders-, pattern: prefixed}
  - {principal: "*", operations: [describe], group: public}
  - {principal: sre, operations: [admin], group: "*"}
""")
    orders, sre, other = Principal("orders", "token"), Principal("sre", "token"), Principal("other", "token")
    assert gate.authorize(orders, Operation.MEMBER, "orders")
    assert not gate.authorize(orders, Operation.MEMBER, "orders-eu")  # literal: only that group
    assert gate.authorize(orders, Operation.DESCRIBE, "orders-eu")
    assert not gate.authorize(orders, Operation.DESCRIBE, "orders")  # the prefix "orders-" does not cover it
    assert gate.authorize(other, Operation.DESCRIBE, "public") and not gate.authorize(other, Operation.MEMBER, "public")
    assert gate.authorize(sre, Operation.MEMBER, "anything") and gate.authorize(sre, Operation.DESCRIBE, "anything")
    assert not gate.authorize(sre, Operation.ASSIGN)  # admin of groups is not the Assign grant
    assert not gate.authorize(ANONYMOUS, Operation.DESCRIBE, "public")


def test_with_authentication_off_everything_is_allowed():
    gate = Gate()
    assert not gate.enabled and gate.authorize(ANONYMOUS, Operation.ADMIN, "any")


def test_certificate_principal_prefers_uri_then_dns_then_cn(tmp_path):
    ca = DevCa(tmp_path)
    both = ca.issue("both", cn="cn-name", uris=("spiffe://corp/app",), dns=("app.corp",))
    dns = ca.issue("dns", cn="cn-name", dns=("app.corp",))
    cn = ca.issue("cn", cn="cn-name")
    assert [certificate_principal(i.cert.read_bytes()) for i in (both, dns, cn)] == ["spiffe://corp/app", "app.corp", "cn-name"]


def _serve_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    return parser.parse_args(["serve", *argv])


@pytest.mark.parametrize(("argv", "message"), [
    (["--acl-file", "{acl}"], "--acl-file: needs a way to authenticate"),
    (["--tls-client-ca", "{acl}"], "--tls-client-ca: needs --tls-cert and --tls-key"),
    (["--auth-token-file", "/nonexistent/tokens.yaml"], "--auth-token-file: no such file"),
    (["--metrics-tls", "maybe"], "--metrics-tls: expected true or false"),
])
def test_serve_refuses_half_configured_security(tmp_path, argv, message):
    acl = tmp_path / "acl.yaml"
    acl.write_text("acls: []\n")
    with pytest.raises(SettingsError, match=message):
        settings_from(_serve_args([a.format(acl=acl) for a in argv]), {})


@pytest.mark.parametrize(("listen", "warned"), [("0.0.0.0:0", True), ("127.0.0.1:0", False)])
async def test_a_server_beyond_loopback_without_authentication_warns(tmp_path, listen, warned):
    from structlog.testing import capture_logs

    from server.app import LeaderServer, Settings

    server = LeaderServer(Settings(listen=listen, state_dir=tmp_path, metrics_port=0, drain_timeout_s=0.5))
    with capture_logs() as logs:
        await server.start()
    await server.stop(0)
    assert any(entry["event"] == "server.unauthenticated" for entry in logs) == warned
