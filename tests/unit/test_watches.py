"""watches.yaml loading: Operator SDK defaults, role lookup, env overrides and one-line errors."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from ansible_operator.watches import (
    WatchesError,
    annotation_overrides,
    env_var_name,
    load_watches,
    parse_duration,
)


def write(tmp_path: Path, text: str, name: str = "watches.yaml") -> Path:
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return p


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "roles" / "memcached" / "tasks").mkdir(parents=True)
    (tmp_path / "roles" / "memcached" / "tasks" / "main.yml").write_text("- debug: msg=hi\n")
    (tmp_path / "playbooks").mkdir()
    (tmp_path / "playbooks" / "site.yml").write_text("- hosts: localhost\n  tasks: []\n")
    return tmp_path


def load(path: Path, **kw):
    kw.setdefault("env", {"HOME": str(path.parent / "home")})
    return load_watches(path, **kw)


def test_defaults_match_operator_sdk_except_mark_unsafe(project: Path) -> None:
    p = write(project, """
        - version: v1alpha1
          group: cache.example.com
          kind: Memcached
          role: memcached
    """)
    [w] = load(p, max_concurrent_reconciles=3)
    assert w.role == str((project / "roles" / "memcached").resolve())
    assert w.playbook is None
    assert (w.group, w.version, w.kind) == ("cache.example.com", "v1alpha1", "Memcached")
    assert w.key == "Memcached.cache.example.com"
    assert w.api_version == "cache.example.com/v1alpha1"
    assert w.var_prefix == "_cache_example_com_memcached"
    assert w.vars == {} and w.finalizer is None and w.selector is None and w.blacklist == ()
    assert w.reconcile_period is None
    assert w.manage_status and w.watch_dependent_resources and w.snake_case_parameters
    assert not w.watch_cluster_scoped_resources and not w.watch_annotations_changes
    assert w.mark_unsafe is True
    assert w.max_runner_artifacts == 20
    assert w.max_concurrent_reconciles == 3
    assert w.ansible_verbosity == 2


def test_all_keys(project: Path) -> None:
    p = write(project, """
        - version: v1
          group: app.example.com
          kind: AppService
          playbook: playbooks/site.yml
          vars: {foo: bar, n: 1}
          maxRunnerArtifacts: 30
          reconcilePeriod: 1h30m
          manageStatus: false
          watchDependentResources: false
          watchClusterScopedResources: true
          watchAnnotationsChanges: true
          snakeCaseParameters: false
          markUnsafe: false
          maxConcurrentReconciles: 4
          selector:
            matchLabels: {foo: bar}
            matchExpressions:
              - {key: foo, operator: In, values: [bar]}
              - {key: baz, operator: Exists, values: []}
          blacklist:
            - group: ""
              version: v1
              kind: ConfigMap
          finalizer:
            name: app.example.com/finalizer
            vars: {state: absent}
    """)
    [w] = load(p)
    assert w.playbook == (project / "playbooks" / "site.yml").resolve()
    assert w.role is None
    assert w.vars == {"foo": "bar", "n": 1}
    assert w.max_runner_artifacts == 30
    assert w.reconcile_period == 5400.0
    assert not w.manage_status and not w.watch_dependent_resources and not w.snake_case_parameters
    assert w.watch_cluster_scoped_resources and w.watch_annotations_changes
    assert w.mark_unsafe is False
    assert w.max_concurrent_reconciles == 4
    assert w.selector == {
        "matchLabels": {"foo": "bar"},
        "matchExpressions": [{"key": "foo", "operator": "In", "values": ["bar"]},
                             {"key": "baz", "operator": "Exists"}],
    }
    assert w.blacklist == ({"group": "", "version": "v1", "kind": "ConfigMap"},)
    assert w.finalizer is not None
    assert w.finalizer.name == "app.example.com/finalizer"
    assert w.finalizer.role is None and w.finalizer.playbook is None
    assert w.finalizer.vars == {"state": "absent"}


def test_core_group_key(project: Path) -> None:
    p = write(project, """
        - {group: "", version: v1, kind: ConfigMap, role: memcached}
    """)
    [w] = load(p)
    assert w.key == "ConfigMap"
    assert w.api_version == "v1"


def test_reconcile_period_flag_default_and_zero(project: Path) -> None:
    p = write(project, """
        - {group: a.io, version: v1, kind: A, role: memcached}
        - {group: a.io, version: v1, kind: B, role: memcached, reconcilePeriod: 0s}
        - {group: a.io, version: v1, kind: C, role: memcached, reconcilePeriod: 45}
    """)
    a, b, c = load(p, reconcile_period=600.0)
    assert a.reconcile_period == 600.0
    assert b.reconcile_period is None
    assert c.reconcile_period == 45.0


def test_max_runner_artifacts_zero_means_default_like_sdk(project: Path) -> None:
    p = write(project, "- {group: a.io, version: v1, kind: A, role: memcached, maxRunnerArtifacts: 0}\n")
    assert load(p)[0].max_runner_artifacts == 20


def test_per_kind_env_overrides_flag(project: Path) -> None:
    p = write(project, """
        - {group: cache.example.com, version: v1, kind: Memcached, role: memcached}
        - {group: other.io, version: v1, kind: Other, role: memcached}
    """)
    env = {
        "MAX_CONCURRENT_RECONCILES_MEMCACHED_CACHE_EXAMPLE_COM": "7",
        "ANSIBLE_VERBOSITY_MEMCACHED_CACHE_EXAMPLE_COM": "4",
        "WORKER_OTHER_OTHER_IO": "5",  # deprecated SDK name still honoured
    }
    m, o = load(p, env=env, max_concurrent_reconciles=2, ansible_verbosity=1)
    assert (m.max_concurrent_reconciles, m.ansible_verbosity) == (7, 4)
    assert (o.max_concurrent_reconciles, o.ansible_verbosity) == (5, 1)
    assert env_var_name("MAX_CONCURRENT_RECONCILES", "Memcached", "cache.example.com") == \
        "MAX_CONCURRENT_RECONCILES_MEMCACHED_CACHE_EXAMPLE_COM"


def test_dashed_group_env_name_also_accepted(project: Path) -> None:
    p = write(project, "- {group: cert-manager.io, version: v1, kind: Cert, role: memcached}\n")
    [w] = load(p, env={"ANSIBLE_VERBOSITY_CERT_CERT_MANAGER_IO": "0"})
    assert w.ansible_verbosity == 0


@pytest.mark.parametrize("env, fragment", [
    ({"MAX_CONCURRENT_RECONCILES_A_A_IO": "x"}, "MAX_CONCURRENT_RECONCILES_A_A_IO='x' is not an integer"),
    ({"MAX_CONCURRENT_RECONCILES_A_A_IO": "0"}, "must be >= 1"),
    ({"ANSIBLE_VERBOSITY_A_A_IO": "9"}, "must be 0..7"),
])
def test_bad_env_values(project: Path, env: dict, fragment: str) -> None:
    p = write(project, "- {group: a.io, version: v1, kind: A, role: memcached}\n")
    with pytest.raises(WatchesError, match="entry 1 \\(A.a.io\\)") as exc:
        load(p, env=env)
    assert fragment in str(exc.value)


def test_env_expansion_in_paths(project: Path) -> None:
    p = write(project, """
        - {group: a.io, version: v1, kind: A, role: "${ROLES}/memcached"}
        - {group: a.io, version: v1, kind: B, playbook: "$PB_DIR/site.yml"}
    """)
    a, b = load(p, env={"ROLES": str(project / "roles"), "PB_DIR": "playbooks"})
    assert a.role == str(project / "roles" / "memcached")
    assert b.playbook == (project / "playbooks" / "site.yml").resolve()


def test_undefined_env_var_is_an_error(project: Path) -> None:
    p = write(project, "- {group: a.io, version: v1, kind: A, role: '${NOPE}/memcached'}\n")
    with pytest.raises(WatchesError, match=r"\$NOPE .* is not set"):
        load(p)


def test_role_lookup_order(project: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    elsewhere = tmp_path_factory.mktemp("rolesenv")
    (elsewhere / "roles" / "memcached" / "tasks").mkdir(parents=True)
    p = write(project, "- {group: a.io, version: v1, kind: A, role: memcached}\n")
    [w] = load(p, env={"ANSIBLE_ROLES_PATH": f"/does/not/exist:{elsewhere}"})
    assert w.role == str((elsewhere / "roles" / "memcached").resolve())
    extra = tmp_path_factory.mktemp("extra")
    (extra / "memcached" / "tasks").mkdir(parents=True)
    [w] = load(p, roles_search=[extra])
    assert w.role == str((extra / "memcached").resolve())


def test_collection_role_fqcn(project: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    coll = tmp_path_factory.mktemp("coll")
    (coll / "ansible_collections" / "ns" / "coll" / "roles" / "thing").mkdir(parents=True)
    p = write(project, "- {group: a.io, version: v1, kind: A, role: ns.coll.thing}\n")
    [w] = load(p, env={"ANSIBLE_COLLECTIONS_PATH": str(coll)})
    assert w.role == "ns.coll.thing"
    assert coll in w.collections_paths
    # also found in collections/ next to watches.yaml, without any env var
    local = project / "collections" / "ansible_collections" / "ns" / "coll" / "roles" / "other"
    local.mkdir(parents=True)
    p = write(project, "- {group: a.io, version: v1, kind: A, role: ns.coll.other}\n")
    [w] = load(p)
    assert w.role == "ns.coll.other"


def test_finalizer_role_and_playbook_resolved(project: Path) -> None:
    p = write(project, """
        - group: a.io
          version: v1
          kind: A
          role: memcached
          finalizer: {name: a.io/cleanup, playbook: playbooks/site.yml, vars: {x: 1}}
        - group: a.io
          version: v1
          kind: B
          role: memcached
          finalizer: {name: a.io/cleanup, role: memcached}
    """)
    a, b = load(p)
    assert a.finalizer.playbook == (project / "playbooks" / "site.yml").resolve()
    assert a.finalizer.vars == {"x": 1}
    assert b.finalizer.role == str((project / "roles" / "memcached").resolve())


@pytest.mark.parametrize(
    "text, expected",
    [
        (
            "- {group: cache.example.com, version: v1, kind: Memcached, rol: memcached}\n",
            "watches.yaml: entry 1 (Memcached.cache.example.com): unknown key 'rol' (did you mean 'role'?)",
        ),
        (
            "- {group: a.io, version: v1, kind: A, role: memcached, reconcileperiod: 5s}\n",
            "unknown key 'reconcileperiod' (did you mean 'reconcilePeriod'?)",
        ),
        (
            "- {group: a.io, version: v1, kind: A, role: memcached, finalizer: {nmae: x, vars: {a: 1}}}\n",
            "unknown key 'finalizer.nmae' (did you mean 'name'?)",
        ),
        (
            "- {group: a.io, version: v1, kind: A, role: memcached, selector: {matchLabel: {a: b}}}\n",
            "unknown key 'selector.matchLabel' (did you mean 'matchLabels'?)",
        ),
        ("- {version: v1, kind: A, role: memcached}\n", "missing required key 'group'"),
        ("- {group: a.io, kind: A, role: memcached}\n", "missing required key 'version'"),
        ("- {group: a.io, version: v1, role: memcached}\n", "missing required key 'kind'"),
        ("- {group: a.io, version: '', kind: A, role: memcached}\n", "'version' must not be empty"),
        ("- {group: a.io, version: v1, kind: A}\n", "exactly one of 'role' or 'playbook' is required"),
        (
            "- {group: a.io, version: v1, kind: A, role: memcached, playbook: playbooks/site.yml}\n",
            "'role' and 'playbook' are mutually exclusive",
        ),
        ("- {group: a.io, version: v1, kind: A, role: nothere}\n", "role 'nothere' not found"),
        (
            "- {group: a.io, version: v1, kind: A, role: /abs/nothere}\n",
            "role directory '/abs/nothere' does not exist",
        ),
        ("- {group: a.io, version: v1, kind: A, playbook: nope.yml}\n", "'playbook': playbook"),
        (
            "- {group: a.io, version: v1, kind: A, role: memcached}\n"
            "- {group: a.io, version: v1, kind: A, role: memcached}\n",
            "entry 2 (A.a.io): duplicate watch for a.io/v1 A (first defined in entry 1)",
        ),
        (
            "- {group: a.io, version: v1, kind: A, role: memcached, reconcilePeriod: abc}\n",
            "'reconcilePeriod': invalid duration 'abc'",
        ),
        ("- {group: a.io, version: v1, kind: A, role: memcached, reconcilePeriod: -5s}\n", "negative"),
        (
            "- {group: a.io, version: v1, kind: A, role: memcached, maxRunnerArtifacts: x}\n",
            "invalid value for 'maxRunnerArtifacts': 'x': must be an integer",
        ),
        (
            "- {group: a.io, version: v1, kind: A, role: memcached, maxRunnerArtifacts: -1}\n",
            "invalid value for 'maxRunnerArtifacts': -1",
        ),
        (
            "- {group: a.io, version: v1, kind: A, role: memcached, manageStatus: 'no'}\n",
            "invalid value for 'manageStatus': 'no': must be true or false",
        ),
        (
            "- {group: a.io, version: v1, kind: A, role: memcached, vars: [1]}\n",
            "invalid value for 'vars': [1]: must be a mapping",
        ),
        (
            "- {group: a.io, version: v1, kind: A, role: memcached, finalizer: {vars: {a: 1}}}\n",
            "missing required key 'finalizer.name'",
        ),
        (
            "- {group: a.io, version: v1, kind: A, role: memcached, finalizer: {name: f}}\n",
            "'finalizer' needs a 'role', a 'playbook' or 'vars'",
        ),
        (
            "- {group: a.io, version: v1, kind: A, role: memcached, finalizer: {name: f, role: memcached,"
            " playbook: playbooks/site.yml}}\n",
            "'finalizer.role' and 'finalizer.playbook' are mutually exclusive",
        ),
        (
            "- {group: a.io, version: v1, kind: A, role: memcached, finalizer: {name: f, role: gone}}\n",
            "'finalizer.role': role 'gone' not found",
        ),
        (
            "- {group: a.io, version: v1, kind: A, role: memcached,"
            " selector: {matchExpressions: [{key: a, operator: Is}]}}\n",
            "selector.matchExpressions[0].operator",
        ),
        (
            "- {group: a.io, version: v1, kind: A, role: memcached,"
            " selector: {matchExpressions: [{key: a, operator: In}]}}\n",
            "operator In needs a non-empty 'values' list",
        ),
        (
            "- {group: a.io, version: v1, kind: A, role: memcached,"
            " selector: {matchExpressions: [{key: a, operator: Exists, values: [x]}]}}\n",
            "operator Exists must not have 'values'",
        ),
        (
            "- {group: a.io, version: v1, kind: A, role: memcached,"
            " blacklist: [{group: '', kind: Secret}]}\n",
            "missing required key 'blacklist[0].version'",
        ),
        ("- just a string\n", "entry 1: expected a mapping"),
        ("group: a.io\n", "expected a list of watches at the top level, got a dict"),
        ("", "is empty"),
        ("[]\n", "the list of watches is empty"),
        ("- {group: a.io\n  version: [\n", "YAML syntax error: line"),
    ],
)
def test_errors_are_one_line(project: Path, text: str, expected: str) -> None:
    p = write(project, text)
    with pytest.raises(WatchesError) as exc:
        load_watches(p, env={"HOME": str(project)})
    msg = str(exc.value)
    assert "\n" not in msg
    assert msg.startswith(f"{p}: ")
    assert expected in msg, msg


def test_error_names_file_as_given(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(project, "- {group: cache.example.com, version: v1, kind: Memcached, rol: memcached}\n")
    monkeypatch.chdir(project)
    with pytest.raises(WatchesError) as exc:
        load_watches("watches.yaml", env={})
    assert str(exc.value) == ("watches.yaml: entry 1 (Memcached.cache.example.com): unknown key 'rol'"
                              " (did you mean 'role'?)")


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(WatchesError, match="file not found"):
        load_watches(tmp_path / "nope.yaml", env={})


def test_bad_flag_values(project: Path) -> None:
    p = write(project, "- {group: a.io, version: v1, kind: A, role: memcached}\n")
    with pytest.raises(WatchesError, match="must be >= 1"):
        load(p, max_concurrent_reconciles=0)
    with pytest.raises(WatchesError, match="0..7"):
        load(p, ansible_verbosity=8)


@pytest.mark.parametrize("text, seconds", [
    ("10s", 10.0), ("1m0s", 60.0), ("1h30m", 5400.0), ("500ms", 0.5), ("1.5h", 5400.0), ("2h45m", 9900.0),
    ("300us", 0.0003), ("0", 0.0), ("30", 30.0), (12, 12.0), (2.5, 2.5), ("1h1m1s1ms", 3661.001),
])
def test_parse_duration(text, seconds) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["abc", "1d", "5 s", "-1s", "s", "", True, None, "1h-5m", float("nan")])
def test_parse_duration_errors(text) -> None:
    with pytest.raises(ValueError, match="invalid duration"):
        parse_duration(text)


def test_annotation_overrides(project: Path) -> None:
    p = write(project, "- {group: a.io, version: v1, kind: A, role: memcached, reconcilePeriod: 1m}\n")
    [w] = load(p)
    got = annotation_overrides(w, {
        "ansible.sdk.operatorframework.io/reconcile-period": "5s",
        "ansible.sdk.operatorframework.io/max-runner-artifacts": "0",
        "ansible.sdk.operatorframework.io/verbosity": "9",
    })
    assert got["reconcile_period"] == 5.0
    assert got["max_runner_artifacts"] == 0
    assert got["ansible_verbosity"] == 2
    assert [i[0] for i in got["invalid"]] == ["ansible.sdk.operatorframework.io/verbosity"]
    assert annotation_overrides(w, None)["reconcile_period"] == 60.0


# ---- issue 11: duplicate keys (defect 9), annotation verbosity cap (defect 4) ---------------------------


@pytest.mark.parametrize(
    "text, fragment",
    [
        (
            "- group: a.io\n  version: v1\n  kind: A\n  role: memcached\n  role: other\n",
            "duplicate key 'role' (first at line 4)",
        ),
        (
            "- group: a.io\n  version: v1\n  kind: A\n  role: memcached\n  vars: {x: 1, x: 2}\n",
            "duplicate key 'x'",
        ),
    ],
)
def test_duplicate_keys_are_refused_in_one_line(project: Path, text: str, fragment: str) -> None:
    p = write(project, text)
    with pytest.raises(WatchesError) as exc:
        load(p)
    msg = str(exc.value)
    assert "\n" not in msg and msg.startswith(f"{p}: YAML syntax error: line ") and fragment in msg, msg


def test_duplicate_key_exits_2_with_one_line(project: Path) -> None:
    import subprocess
    import sys

    p = write(project, "- group: a.io\n  version: v1\n  kind: A\n  role: memcached\n  role: memcached\n")
    proc = subprocess.run([sys.executable, "-m", "ansible_operator", "run", "--watches-file", str(p)],
                          capture_output=True, text=True, timeout=120, cwd=project)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "duplicate key 'role'" in lines[0], proc.stderr


def test_annotation_verbosity_is_capped_by_the_operator(project: Path) -> None:
    p = write(project, "- {group: a.io, version: v1, kind: A, role: memcached}\n")
    annotation = "ansible.sdk.operatorframework.io/verbosity"
    [w] = load(p)
    assert w.max_annotation_verbosity == 2
    got = annotation_overrides(w, {annotation: "7"})
    assert got["ansible_verbosity"] == 2
    assert got["invalid"][0][0] == annotation and "maximum 2" in got["invalid"][0][2]
    assert annotation_overrides(w, {annotation: "0"})["ansible_verbosity"] == 0  # lowering is always fine
    [w] = load(p, max_annotation_verbosity=4)
    assert annotation_overrides(w, {annotation: "4"}) == dict(
        annotation_overrides(w, None), ansible_verbosity=4
    )
    with pytest.raises(WatchesError, match="0..7"):
        load(p, max_annotation_verbosity=8)


@pytest.mark.parametrize("entry, expected", [
    ("role: /etc", "'/etc' is not a role directory (it has none of tasks/, handlers/"),
    ("playbook: /etc/passwd", "'/etc/passwd' is not a playbook (a YAML list of plays)"),
    ("playbook: notyaml.yml", "is not a playbook: "),
    ("playbook: mapping.yml", "is not a playbook (a YAML list of plays)"),
    ("role: empty", "roles/empty' is not a role directory"),
])
def test_role_and_playbook_must_be_a_role_and_a_playbook(project: Path, entry: str, expected: str) -> None:
    """Issue 20: ``role:`` and ``playbook:`` accepted any directory or file."""
    (project / "roles" / "empty").mkdir()
    (project / "notyaml.yml").write_text("- {a: [\n")
    (project / "mapping.yml").write_text("hosts: localhost\n")
    p = write(project, f"- {{group: a.io, version: v1, kind: A, {entry}}}\n")
    with pytest.raises(WatchesError) as exc:
        load_watches(p, env={"HOME": str(project)})
    assert expected in str(exc.value) and "\n" not in str(exc.value), str(exc.value)


def test_a_playbook_with_ansible_tags_is_a_playbook(project: Path) -> None:
    (project / "tagged.yml").write_text("- hosts: localhost\n  vars: {x: !unsafe '{{ y }}'}\n  tasks: []\n")
    p = write(project, "- {group: a.io, version: v1, kind: A, playbook: tagged.yml}\n")
    (watch,) = load(p)
    assert watch.playbook == (project / "tagged.yml").resolve()
