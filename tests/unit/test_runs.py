"""`ansible-operator runs`: listing and showing runs from a realistic artifacts tree.

One run's events come from really running ansible-runner on a tiny failing playbook (once per module), so
the parser is tested against the exact job_events shapes ansible-runner writes, not hand-made guesses.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from ansible_operator import runs
from ansible_operator.cli import build_parser

FAILED_ID = "20261122T134501Z-abc123"
OK_ID = "20261122T140000Z-00ff00"
RUNNING_ID = "20261122T141500Z-123456"
ORPHAN_ID = "20261122T120000Z-deadbe"
CLUSTER_ID = "20261122T130000Z-c1c1c1"

PLAYBOOK = """\
- hosts: localhost
  gather_facts: false
  tasks:
    - name: say hi
      debug: msg=hi
    - name: make change
      command: /bin/true
    - name: skip me
      debug: msg=x
      when: false
    - name: optional step
      command: /bin/false
      ignore_errors: true
    - name: validate replicas
      fail:
        msg: "spec.size must be positive, got -1"
"""


def _obj_dir(root: Path, kind: str = "Memcached", ns: str = "default", name: str = "example",
             group: str = "cache.example.com") -> Path:
    return root / group / "v1alpha1" / kind / ns / name


def _summary(run_id: str, **over: Any) -> dict[str, Any]:
    base = {
        "run_id": run_id, "group": "cache.example.com", "version": "v1alpha1", "kind": "Memcached",
        "namespace": "default", "name": "example", "uid": "u-1", "generation": 2, "phase": "reconcile",
        "executor": "runner", "started": f"{run_id[:4]}-{run_id[4:6]}-{run_id[6:8]}T{run_id[9:11]}:"
        f"{run_id[11:13]}:{run_id[13:15]}Z", "finished": None, "duration_s": None, "result": "running",
        "stats": None, "failed_task": None, "changed_tasks": [],
    }
    base.update(over)
    return base


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import ansible_runner

    root = tmp_path_factory.mktemp("runs")
    run_dir = _obj_dir(root) / FAILED_ID
    (run_dir / "project").mkdir(parents=True)
    (run_dir / "project" / "site.yml").write_text(PLAYBOOK)
    (run_dir / "inventory").mkdir()
    (run_dir / "inventory" / "hosts").write_text(
        f"localhost ansible_connection=local ansible_python_interpreter={sys.executable}\n")
    bin_dir = str(Path(sys.executable).parent)
    with pytest.MonkeyPatch.context() as mp:
        if shutil.which("ansible-playbook") is None:
            mp.setenv("PATH", bin_dir + os.pathsep + os.environ.get("PATH", ""))
        result = ansible_runner.run(private_data_dir=str(run_dir), playbook="site.yml", ident=FAILED_ID,
                                    quiet=True)
    assert result.status == "failed", result.stdout.read()
    (run_dir / "run.json").write_text(json.dumps(_summary(
        FAILED_ID, finished="2026-11-22T13:45:03Z", duration_s=1.8, result="failed",
        stats={"ok": 2, "changed": 2, "skipped": 1, "failures": 1, "unreachable": 0, "rescued": 0,
               "ignored": 1},
        failed_task={"name": "validate replicas", "action": "fail", "role": None,
                     "message": "spec.size must be positive, got -1", "host": "localhost"},
        changed_tasks=["make change"], artifacts_dir=str(run_dir))))

    ok_dir = _obj_dir(root) / OK_ID
    ok_dir.mkdir()
    (ok_dir / "run.json").write_text(
        json.dumps(
            _summary(
                OK_ID,
                finished="2026-11-22T14:00:01Z",
                duration_s=0.42,
                result="successful",
                stats={
                    "ok": 3,
                    "changed": 0,
                    "skipped": 0,
                    "failures": 0,
                    "unreachable": 0,
                    "rescued": 0,
                    "ignored": 0,
                },
            )
        )
    )

    running = _obj_dir(root, ns="prod", name="big") / RUNNING_ID
    running.mkdir(parents=True)
    (running / "run.json").write_text(json.dumps(_summary(RUNNING_ID, namespace="prod", name="big")))

    orphan = _obj_dir(root, ns="prod", name="big") / ORPHAN_ID
    (orphan / "artifacts" / ORPHAN_ID).mkdir(parents=True)
    (orphan / "artifacts" / ORPHAN_ID / "status").write_text("failed")

    cluster = _obj_dir(root, kind="Policy", ns="_cluster", name="global", group="core") / CLUSTER_ID
    cluster.mkdir(parents=True)
    (cluster / "run.json").write_text(json.dumps(_summary(
        CLUSTER_ID, group="", version="v1alpha1", kind="Policy", namespace=None, name="global",
        result="successful", duration_s=75.0, finished="2026-11-22T13:01:15Z")))
    (root / "README").write_text("not a run")  # stray files are ignored
    return root


def test_default_artifacts_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("ANSIBLE_OPERATOR_ARTIFACTS", str(tmp_path / "a"))
    assert runs.default_artifacts_dir() == tmp_path / "a"
    monkeypatch.delenv("ANSIBLE_OPERATOR_ARTIFACTS")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    assert runs.default_artifacts_dir() == tmp_path / "state" / "ansible-operator" / "runs"
    monkeypatch.delenv("XDG_STATE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert (
        runs.default_artifacts_dir() == tmp_path / "home" / ".local" / "state" / "ansible-operator" / "runs"
    )


def test_list_newest_first_and_filters(artifacts: Path) -> None:
    ids = [r.run_id for r in runs.list_runs(artifacts)]
    assert ids == [RUNNING_ID, OK_ID, FAILED_ID, CLUSTER_ID, ORPHAN_ID]
    assert [r.run_id for r in runs.list_runs(artifacts, limit=2)] == [RUNNING_ID, OK_ID]
    assert [r.run_id for r in runs.list_runs(artifacts, namespace="default")] == [OK_ID, FAILED_ID]
    for target in ("Memcached/example", "memcacheds/example", "memcached.cache.example.com/example"):
        assert [r.run_id for r in runs.list_runs(artifacts, target=target)] == [OK_ID, FAILED_ID], target
    assert runs.list_runs(artifacts, target="memcached.other.io/example") == []
    assert [r.run_id for r in runs.list_runs(artifacts, target="policies/global")] == [CLUSTER_ID]
    assert len(runs.list_runs(artifacts, target="Memcached")) == 4


def test_run_without_summary_is_still_listed(artifacts: Path) -> None:
    (orphan,) = [r for r in runs.list_runs(artifacts) if r.run_id == ORPHAN_ID]
    assert (orphan.kind, orphan.namespace, orphan.name) == ("Memcached", "prod", "big")
    assert orphan.result == "failed" and orphan.error == "run.json missing"
    assert orphan.started == "2026-11-22T12:00:00Z"


def test_invalid_target(artifacts: Path) -> None:
    with pytest.raises(runs.RunsError, match="KIND/NAME"):
        runs.list_runs(artifacts, target="Memcached/")


def test_show_failed_run_from_real_events(artifacts: Path) -> None:
    text = runs.show_run(artifacts, FAILED_ID)
    lines = text.splitlines()
    assert "RESULT    failed" in lines
    assert "TASK [say hi]  ansible.builtin.debug" in lines
    i = lines.index("TASK [validate replicas]  ansible.builtin.fail")
    assert lines[i + 1].startswith("  failed: localhost  ")
    assert lines[i + 2].strip() == "spec.size must be positive, got -1"
    assert any(line.startswith("  changed: localhost") for line in lines[lines.index(
        "TASK [make change]  ansible.builtin.command"):])
    assert any(line.startswith("  skipped: localhost") for line in lines)
    j = lines.index("TASK [optional step]  ansible.builtin.command")
    assert lines[j + 1].startswith("  ignored: localhost") and "non-zero return code" in lines[j + 2]
    assert "  localhost: ok=3 changed=2 unreachable=0 failed=1 skipped=1 rescued=0 ignored=1" in lines


def test_show_by_prefix_and_unknown(artifacts: Path) -> None:
    assert runs.find_run(artifacts, "20261122T1345").name == FAILED_ID
    with pytest.raises(runs.RunsError, match="ambiguous"):
        runs.find_run(artifacts, "20261122T1")
    with pytest.raises(runs.RunsError, match="no run 'nope'"):
        runs.show_run(artifacts, "nope")


def _main(argv: list[str]) -> int:
    args = build_parser().parse_args(["runs", *argv])
    return runs.main(args)


def test_cli_table(artifacts: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _main(["--artifacts-dir", str(artifacts), "-n", "default"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["KIND", "NAMESPACE", "NAME", "RUN", "STARTED", "DURATION", "RESULT", "CHANGED",
                              "FAILED", "TASK"]
    failed_row = next(line for line in out if FAILED_ID in line)
    assert "failed" in failed_row and "1.8s" in failed_row
    assert "validate replicas: spec.size must be positive, got -1" in failed_row
    ok_row = next(line for line in out if OK_ID in line)
    assert "successful" in ok_row and "0.4s" in ok_row
    assert str(artifacts) not in "\n".join(out)  # narrow by default, as kubectl's tables


def test_cli_wide_table_adds_the_artifacts_directory(artifacts: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    assert _main(["--artifacts-dir", str(artifacts), "-n", "default", "-o", "wide"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[-1] == "ARTIFACTS"
    assert str(artifacts) in next(line for line in out if OK_ID in line)


def test_cli_json_and_show(artifacts: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _main(["--artifacts-dir", str(artifacts), "Memcached/example", "-o", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [r["run_id"] for r in data] == [OK_ID, FAILED_ID]
    assert _main(["--artifacts-dir", str(artifacts), "--show", FAILED_ID, "-o", "json"]) == 0
    detail = json.loads(capsys.readouterr().out)
    failed = [t for t in detail["tasks"] if t["result"] == "failed"]
    assert failed == [{"task": "validate replicas", "role": None, "action": "ansible.builtin.fail",
                       "host": "localhost", "result": "failed", "duration_s": failed[0]["duration_s"],
                       "message": "spec.size must be positive, got -1"}]


def test_cli_errors(artifacts: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _main(["--artifacts-dir", str(artifacts), "Memcached/missing"]) == 1
    assert "no runs found for Memcached/missing" in capsys.readouterr().err
    assert _main(["--artifacts-dir", str(tmp_path / "absent")]) == 1
    assert "does not exist" in capsys.readouterr().err
    assert _main(["--artifacts-dir", str(artifacts), "--show", "20991231T000000Z-000000"]) == 1
    assert "no run '20991231T000000Z-000000'" in capsys.readouterr().err
    args = argparse.Namespace(artifacts_dir=str(artifacts), show=None, output="table", namespace=None,
                              target="Bad/", limit=20)
    assert runs.main(args) == 1
    assert "invalid target" in capsys.readouterr().err
