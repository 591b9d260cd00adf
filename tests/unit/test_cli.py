"""``ansible-operator run`` flags: every Operator SDK flag is accepted with its default and meaning, and a
malformed value is one line on stderr and exit 2, before anything starts.

The SDK flags are those of operator-framework/ansible-operator-plugins ``internal/ansible/flags/flag.go``
plus controller-runtime's zap flags (``internal/cmd/ansible-operator/run/cmd.go`` adds them).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ansible_operator.cli import build_parser, finish_run_args, main


def parse(*argv: str) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(["run", *argv])
    finish_run_args(args.run_parser, args)
    return args


def test_sdk_defaults() -> None:
    a = parse()
    assert a.reconcile_period == 10 * 3600
    assert a.metrics_bind_address == ":8443"
    assert a.health_probe_bind_address == ":6789"
    assert a.graceful_shutdown_timeout == 30
    assert a.leader_elect is False and a.inject_owner_ref is True
    assert a.metrics_secure is False and a.metrics_require_rbac is False and a.enable_http2 is False
    assert a.ansible_log_events == "Tasks" and a.ansible_args == ()
    assert a.leader_elect_lease_duration == 15 and a.leader_elect_renew_deadline == 10
    assert a.log_level == "INFO" and a.log_format == "text"
    assert a.warnings == []


# Every flag of the SDK's `ansible-operator run`, in the forms the scaffold and users write them.
SDK_ARGS = [
    "--watches-file=./watches.yaml",
    "--inject-owner-ref=false",
    "--ansible-verbosity=3",
    "--ansible-roles-path=/opt/ansible/roles",
    "--ansible-collections-path=/opt/ansible/.ansible/collections",
    "--ansible-args=--vault-password-file /etc/vault/pass --tags 'a b' -e @/etc/extra.yml",
    "--ansible-log-events=Everything",
    "--reconcile-period=1h2m3s",
    "--max-concurrent-reconciles=4",
    "--metrics-bind-address=:8443",
    "--health-probe-bind-address=:6789",
    "--leader-elect",
    "--leader-election-id=memcached-operator",
    "--leader-election-namespace=ns",
    "--leader-elect-resource-lock=leases",
    "--leader-elect-lease-duration=30s",
    "--leader-elect-renew-deadline=20s",
    "--graceful-shutdown-timeout=500ms",
    "--proxy-port=8888",
    "--enable-http2=false",
    "--metrics-secure",
    "--metrics-require-rbac",
    "--zap-encoder=json",
    "--zap-log-level=debug",
    "--zap-stacktrace-level=error",
    "--zap-time-encoding=rfc3339",
]


def test_every_sdk_flag_is_accepted_with_its_meaning() -> None:
    a = parse(*SDK_ARGS)
    assert a.inject_owner_ref is False and a.ansible_verbosity == 3
    assert a.ansible_args == (
        "--vault-password-file",
        "/etc/vault/pass",
        "--tags",
        "a b",
        "-e",
        "@/etc/extra.yml",
    )
    assert a.ansible_log_events == "Everything"
    assert a.reconcile_period == 3723 and a.graceful_shutdown_timeout == 0.5
    assert a.leader_elect is True and a.leader_election_id == "memcached-operator"
    assert a.leader_elect_lease_duration == 30 and a.leader_elect_renew_deadline == 20
    assert a.proxy_port == 8888 and a.max_concurrent_reconciles == 4
    assert a.metrics_secure is True and a.metrics_require_rbac is True
    assert a.log_level == "DEBUG" and a.log_format == "sdk-json"  # zap's JSON: the SDK's keys
    # Honoured, apart from three that say so in one line each.
    assert [w.split(":")[0].split(" ")[0] for w in a.warnings] == [
        "--leader-elect-resource-lock",
        "--zap-stacktrace-level=error",
        "--proxy-port",
    ]


def test_space_separated_values_and_go_bools() -> None:
    a = parse(
        "--reconcile-period",
        "500ms",
        "--inject-owner-ref",
        "false",
        "--leader-elect=true",
        "--metrics-secure=1",
        "--enable-http2=F",
    )
    assert a.reconcile_period == 0.5 and a.inject_owner_ref is False and a.leader_elect is True
    assert a.metrics_secure is True and a.enable_http2 is False
    assert parse("--no-inject-owner-ref").inject_owner_ref is False


def test_deprecated_aliases_map_and_warn() -> None:
    a = parse(
        "--metrics-addr=:9090", "--enable-leader-election", "--leader-elect-resource-lock=configmapsleases"
    )
    assert a.metrics_bind_address == ":9090" and a.leader_elect is True
    text = "\n".join(a.warnings)
    assert "--metrics-addr is deprecated" in text and "--enable-leader-election is deprecated" in text
    assert "configmapsleases" in text and "Lease is used" in text


def test_flags_not_honoured_are_accepted_with_one_line_saying_what_they_would_do() -> None:
    a = parse("--enable-http2", "--zap-time-encoding=epoch", "--zap-stacktrace-level=info")
    assert len(a.warnings) == 3 and all("\n" not in w and "would" in w for w in a.warnings)


def test_zap_devel_and_our_flags() -> None:
    a = parse("--zap-devel")
    assert a.log_level == "DEBUG" and a.log_format == "text"
    assert parse("--zap-encoder=console", "--zap-log-level=3").log_level == "DEBUG"
    assert parse("--log-level", "warning", "--log-format", "JSON").log_format == "json"


def test_ansible_debug_logs_env(monkeypatch: pytest.MonkeyPatch) -> None:
    assert parse().ansible_debug_logs is False
    monkeypatch.setenv("ANSIBLE_DEBUG_LOGS", "True")
    assert parse().ansible_debug_logs is True
    monkeypatch.setenv("ANSIBLE_DEBUG_LOGS", "yes please")
    a = parse()
    assert a.ansible_debug_logs is False and any("ANSIBLE_DEBUG_LOGS" in w for w in a.warnings)


def test_environment_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOG_LEVEL", "error")
    monkeypatch.setenv("OPERATOR_NAME", "from-env")
    a = parse()
    assert a.log_level == "ERROR" and a.leader_election_id == "from-env"
    assert any("OPERATOR_NAME" in w for w in a.warnings)
    assert parse("--zap-log-level=info").log_level == "INFO"  # a flag beats the environment


BAD = [
    (["--metrics-bind-address", "foo"], "--metrics-bind-address: invalid bind address 'foo'"),
    (["--health-probe-bind-address=host:http"], "port 'http' is not a number"),
    (["--metrics-addr=:99999"], "port must be 0..65535"),
    (["--reconcile-period=10x"], "--reconcile-period: invalid duration '10x'"),
    (["--graceful-shutdown-timeout=-1s"], "negative durations are not allowed"),
    (["--log-level=verbose"], "unknown log level 'verbose'"),
    (["--zap-log-level=trace"], "invalid log level 'trace'"),
    (["--zap-log-level=0"], "invalid log level '0'"),
    (["--zap-encoder=yaml"], "invalid encoder 'yaml'"),
    (["--ansible-log-events=Some"], "invalid log events value 'Some'"),
    (["--inject-owner-ref=maybe"], "invalid boolean 'maybe'"),
    (["--ansible-args=--tags 'unterminated"], "--ansible-args: cannot split"),
    (["--max-concurrent-reconciles=0"], "must be at least 1"),
    (["--ansible-verbosity=9"], "--ansible-verbosity"),
    (["--proxy-port=http"], "invalid port 'http'"),
    (["--metrics-require-rbac"], "--metrics-secure flag is required when --metrics-require-rbac is present"),
    (
        ["--leader-elect", "--enable-leader-election"],
        "only one of --leader-elect and --enable-leader-election",
    ),
    (["--log-level=info", "--zap-log-level=debug"], "--log-level and --zap-log-level both given"),
    (
        ["--leader-elect", "--leader-elect-renew-deadline=20s"],
        "must be shorter than --leader-elect-lease-duration",
    ),
    (["--no-such-flag"], "unrecognized arguments: --no-such-flag"),
]


@pytest.mark.parametrize(("argv", "message"), BAD, ids=[" ".join(a) for a, _ in BAD])
def test_malformed_values_exit_2_with_one_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["run", *argv])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("ansible-operator"), err
    assert "error: " in err and "usage:" not in err
    assert message in err


def test_bad_environment_value_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LOG_LEVEL", "loud")
    with pytest.raises(SystemExit) as exc:
        main(["run"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "environment variable LOG_LEVEL" in err


def _parsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _parsers(sub)


def test_every_flag_of_every_command_has_help() -> None:
    missing = [
        (p.prog, a.option_strings or a.dest)
        for p in _parsers(build_parser())
        for a in p._actions
        if not a.help and not isinstance(a, argparse._SubParsersAction)
    ]
    assert missing == []
    subparsers = build_parser()._subparsers
    assert subparsers is not None
    action = subparsers._group_actions[0]
    assert isinstance(action, argparse._SubParsersAction)
    run = action.choices["run"]
    groups = [g.title for g in run._action_groups]
    for title in ("Ansible", "Controller", "Metrics and health probes", "Leader election"):
        assert title in groups


def test_bad_value_fails_before_anything_starts(tmp_path: object) -> None:
    """Through the real entry point: no traceback, nothing but the one line."""
    env = {**os.environ, "LOG_FORMAT": "json"}
    proc = subprocess.run(
        [sys.executable, "-m", "ansible_operator", "run", "--metrics-bind-address", "foo"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stdout == "" and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr


def test_leader_election_namespace_is_the_pods_and_must_be_given_out_of_a_cluster(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """As controller-runtime: in a cluster the Lease goes in the pod's namespace (the service account's
    ``namespace`` file); out of one, --leader-elect without --leader-election-namespace refuses to start."""
    from ansible_operator.manager import _leader_election_namespace

    role = tmp_path / "roles" / "noop" / "tasks"
    role.mkdir(parents=True)
    (role / "main.yml").write_text("- debug: msg=hi\n")
    watches = tmp_path / "watches.yaml"
    watches.write_text(f"- {{group: x.example.com, version: v1, kind: X, role: {role.parent}}}\n")
    service_account = tmp_path / "serviceaccount"
    monkeypatch.setenv("ANSIBLE_OPERATOR_SERVICE_ACCOUNT_DIR", str(service_account))

    assert main(["run", "--watches-file", str(watches), "--leader-elect"]) == 2
    err = capsys.readouterr().err
    assert "unable to find the leader election namespace" in err and "--leader-election-namespace" in err
    assert "Traceback" not in err
    assert _leader_election_namespace(parse("--leader-elect")) is None

    service_account.mkdir()
    (service_account / "namespace").write_text("operators\n")
    assert _leader_election_namespace(parse("--leader-elect")) == "operators"
    assert _leader_election_namespace(parse("--leader-elect", "--leader-election-namespace=ns")) == "ns"


def test_ansible_args_drop_one_pair_of_enclosing_single_quotes_as_the_sdk() -> None:
    # advanced-molecule-operator's `- --ansible-args='--vault-password-file /x'` in the
    # Deployment's args reaches the process with its quotes (no shell); the SDK strips one pair (inputdir.go).
    a = parse("--ansible-args='--vault-password-file /opt/ansible/pwd.yml'")
    assert a.ansible_args == ("--vault-password-file", "/opt/ansible/pwd.yml")
    assert parse("--ansible-args=--tags 'a,b'").ansible_args == ("--tags", "a,b")
