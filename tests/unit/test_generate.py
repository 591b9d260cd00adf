"""`generate rbac`: ClusterRole from watches.yaml and the k8s tasks of the roles/playbooks it runs."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from ansible_operator.cli import build_parser
from ansible_operator.generate import main, plural_of, render_cluster_role, scan_watches


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


@pytest.fixture
def project(tmp_path: Path) -> Path:
    write(tmp_path / "watches.yaml", """\
        - version: v1alpha1
          group: cache.example.com
          kind: Memcached
          role: memcached
          finalizer:
            name: cache.example.com/finalizer
            role: cleanup
        - version: v1
          group: apps.example.com
          kind: Gadget
          playbook: playbooks/gadget.yml
        """)
    write(tmp_path / "crds" / "memcached.yaml", """\
        apiVersion: apiextensions.k8s.io/v1
        kind: CustomResourceDefinition
        metadata: {name: memcacheds.cache.example.com}
        spec:
          group: cache.example.com
          names: {kind: Memcached, plural: memcacheds, singular: memcached, listKind: MemcachedList}
          scope: Namespaced
          versions: [{name: v1alpha1, served: true, storage: true}]
        """)
    write(tmp_path / "roles" / "memcached" / "tasks" / "main.yml", """\
        - name: deployment
          kubernetes.core.k8s:
            definition:
              apiVersion: apps/v1
              kind: Deployment
              metadata: {name: "{{ ansible_operator_meta.name }}"}
        - name: service from template
          k8s:
            definition: "{{ lookup('template', 'service.yaml.j2') | from_yaml }}"
        - name: pods
          kubernetes.core.k8s_info:
            kind: Pod
            namespace: "{{ ansible_operator_meta.namespace }}"
        - name: remove old secret
          kubernetes.core.k8s:
            api_version: v1
            kind: Secret
            name: old
            state: absent
        - name: scale
          kubernetes.core.k8s_scale:
            api_version: apps/v1
            kind: StatefulSet
            name: x
            replicas: 2
        - block:
            - name: pod logs
              kubernetes.core.k8s_log:
                name: x
          rescue:
            - name: monitor
              kubernetes.core.k8s:
                api_version: monitoring.coreos.com/v1
                kind: ServiceMonitor
                name: x
        - include_tasks: extra.yml
        - import_role:
            name: common
        - name: read the live object with a computed api_version
          kubernetes.core.k8s_info:
            api_version: "{{ memcached_api_version }}"
            kind: Memcached
            name: x
        - name: computed api_version of an unknown kind
          kubernetes.core.k8s_info:
            api_version: "{{ foo_api_version }}"
            kind: Foo
        - name: update status (already granted)
          operator_sdk.util.k8s_status:
            api_version: cache.example.com/v1alpha1
            kind: Memcached
            name: x
            status: {}
        """)
    write(tmp_path / "roles" / "memcached" / "tasks" / "extra.yml", """\
        - name: something computed
          kubernetes.core.k8s:
            api_version: v1
            kind: "{{ target_kind }}"
            name: x
        - name: a custom kind nobody has a table entry for
          kubernetes.core.k8s:
            api_version: widgets.example.org/v2
            kind: Sprocket
            name: x
        """)
    write(tmp_path / "roles" / "memcached" / "templates" / "service.yaml.j2", """\
        apiVersion: v1
        kind: Service
        metadata:
          name: {{ ansible_operator_meta.name }}
        spec:
          ports:
        {% for p in ports %}
            - port: {{ p }}
        {% endfor %}
        """)
    write(tmp_path / "roles" / "common" / "tasks" / "main.yml", """\
        - kubernetes.core.k8s:
            state: present
            src: pdb.yaml
        """)
    write(tmp_path / "roles" / "common" / "files" / "pdb.yaml", """\
        apiVersion: policy/v1
        kind: PodDisruptionBudget
        metadata: {name: x}
        """)
    write(tmp_path / "roles" / "common" / "meta" / "main.yml", """\
        dependencies:
          - role: netpol
        """)
    write(tmp_path / "roles" / "netpol" / "tasks" / "main.yml", """\
        - k8s: kind=NetworkPolicy api_version=networking.k8s.io/v1 name=deny-all
        """)
    write(tmp_path / "roles" / "cleanup" / "tasks" / "main.yml", """\
        - kubernetes.core.k8s:
            api_version: batch/v1
            kind: Job
            name: backup
            state: absent
        """)
    write(tmp_path / "playbooks" / "gadget.yml", """\
        - hosts: localhost
          gather_facts: false
          roles:
            - gadget_role
          tasks:
            - kubernetes.core.k8s_exec:
                namespace: x
                pod: y
                command: date
            - kubernetes.core.k8s:
                definition: "{{ some_var }}"
        """)
    write(tmp_path / "playbooks" / "roles" / "gadget_role" / "tasks" / "main.yml", """\
        - kubernetes.core.k8s:
            definition:
              - {apiVersion: v1, kind: ConfigMap, metadata: {name: a}}
              - {apiVersion: rbac.authorization.k8s.io/v1, kind: RoleBinding, metadata: {name: b}}
        """)
    return tmp_path


def rules_by_resource(doc: dict[str, Any]) -> dict[tuple[str, str], list[str]]:
    out = {}
    for rule in doc["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                assert (group, resource) not in out, f"{group}/{resource} appears in two rules"
                out[(group, resource)] = rule["verbs"]
    return out


def test_generate_rbac_covers_watches_and_role_tasks(project: Path) -> None:
    scan, watches = scan_watches(project / "watches.yaml")
    text = render_cluster_role(scan, "my-role")
    doc = yaml.safe_load(text)
    assert doc["kind"] == "ClusterRole" and doc["metadata"]["name"] == "my-role"
    r = rules_by_resource(doc)
    all_verbs = ["get", "list", "watch", "create", "update", "patch", "delete"]
    for res in ("memcacheds", "memcacheds/status", "memcacheds/finalizers"):
        assert r[("cache.example.com", res)] == all_verbs
    assert r[("apps.example.com", "gadgets")] == all_verbs
    assert r[("apps", "deployments")] == ["get", "list", "watch", "create", "update", "patch"]
    assert r[("", "services")] == ["get", "list", "watch", "create", "update", "patch"]  # via template lookup
    assert r[("", "pods")] == ["get", "list", "watch"]  # k8s_info + k8s_log + k8s_exec
    assert r[("", "pods/log")] == ["get"]
    assert r[("", "pods/exec")] == ["get", "create"]
    assert r[("", "secrets")] == ["get", "list", "watch", "delete"]
    assert r[("apps", "statefulsets/scale")] == ["get", "update", "patch"]
    assert r[("monitoring.coreos.com", "servicemonitors")][:3] == ["get", "list", "watch"]  # from rescue
    assert ("widgets.example.org", "sprockets") in r
    assert ("policy", "poddisruptionbudgets") in r  # import_role → src file
    assert ("networking.k8s.io", "networkpolicies") in r  # role meta dependency, free-form args
    assert r[("batch", "jobs")] == ["get", "list", "watch", "delete"]  # finalizer role
    assert ("rbac.authorization.k8s.io", "rolebindings") in r  # playbook roles: list definition
    # always: events, leases, configmaps
    assert r[("", "events")] == ["create", "patch"]
    assert r[("coordination.k8s.io", "leases")] == all_verbs
    assert r[("", "configmaps")] == all_verbs
    # the k8s_status task must not add anything beyond the CR's own rules
    assert not any(g == "cache.example.com" and not res.startswith("memcacheds") for g, res in r)
    # what could not be resolved is reported, not dropped
    header = text.split("apiVersion:")[0]
    assert "Could not resolve" in header
    assert "'{{ target_kind }}'" in header and "extra.yml" in header
    assert "definition is a Jinja expression '{{ some_var }}'" in header
    assert "Sprocket (widgets.example.org/v2) → widgets.example.org/sprockets" in header
    assert "Gadget (apps.example.com/v1) → apps.example.com/gadgets (no CRD found" in header
    assert "Memcached (cache" not in header  # its plural came from crds/memcached.yaml
    assert "Memcached (api_version '{{ memcached_api_version }}') → assumed group cache.example.com" in header
    assert "kind 'Foo' / api_version '{{ foo_api_version }}' is dynamic" in header
    assert header.count("gadget.yml") == 1  # one reason per task, not two


def test_output_is_deterministic(project: Path) -> None:
    first = render_cluster_role(scan_watches(project / "watches.yaml")[0], "x")
    second = render_cluster_role(scan_watches(project / "watches.yaml")[0], "x")
    assert first == second


def test_cli(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = build_parser().parse_args(["generate", "rbac", "--watches-file", str(project / "watches.yaml"),
                                      "--name", "op-role"])
    assert main(args) == 0
    out = capsys.readouterr().out
    assert yaml.safe_load(out)["metadata"]["name"] == "op-role"


def test_cli_bad_watches(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = build_parser().parse_args(["generate", "rbac", "--watches-file", str(tmp_path / "missing.yaml")])
    assert main(args) == 1
    err = capsys.readouterr().err
    assert "missing.yaml" in err and "not found" in err


def test_roles_dir_option(project: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (project / "roles" / "memcached").rename(elsewhere / "memcached")
    scan, _ = scan_watches(project / "watches.yaml", [elsewhere])
    assert ("apps", "deployments") in scan.rules


@pytest.mark.parametrize("kind,plural", [("Memcached", "memcacheds"), ("Policy", "policies"),
                                         ("Ingress", "ingresses"), ("Gateway", "gateways")])
def test_plural_of(kind: str, plural: str) -> None:
    assert plural_of(kind) == plural
