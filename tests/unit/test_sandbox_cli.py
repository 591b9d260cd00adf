"""The runner reaches the optional sandbox package only through ansible_operator.sandbox_cli."""

from __future__ import annotations

import pytest

from ansible_operator import cli, sandbox_cli


def test_sandbox_command_passes_its_arguments_to_the_sandbox(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["sandbox", "--port", "70000"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: ansible-operator sandbox") and "port must be 0..65535" in err


@pytest.mark.parametrize("argv", [["sandbox"], ["sandbox", "--help"]])
def test_without_the_package_the_sandbox_command_says_how_to_install_it(
        argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sandbox_cli, "available", lambda: False)
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "ansible-operator-sandbox" in err and "pip install ./sandbox" in err


def test_without_the_package_run_sandbox_is_a_usage_error(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sandbox_cli, "available", lambda: False)
    with pytest.raises(SystemExit) as exc:
        cli.main(["run", "--sandbox"])
    assert exc.value.code == 2
    assert "--sandbox: the sandbox API server is not installed" in capsys.readouterr().err


def test_the_package_is_found_where_it_is_installed() -> None:
    assert sandbox_cli.available()
    assert sandbox_cli.load().Sandbox.__module__ == "ansible_operator_sandbox"
