"""Extra vars: Operator SDK naming (paramconv port), shape, Unsafe marking, refusal, and the YAML dump."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, cast

import pytest
import yaml

from ansible_operator.extravars import (
    RefusedVariable,
    Unsafe,
    build_extra_vars,
    dump,
    object_var_name,
    to_snake_case,
)
from ansible_operator.kubetypes import KubeObject

# Operator SDK internal/ansible/paramconv/paramconv_test.go TestToSnake, verbatim.
SDK_TO_SNAKE = [
    ("var", "var"),
    ("888", "888"),
    ("k8s_var", "k8s_var"),
    ("_k8s_var", "_k8s_var"),
    ("k8s var", "k8s_var"),
    ("ThisShouldHaveUnderscores", "_this_should_have_underscores"),
    ("sizeK8sBuckets", "size_k8s_buckets"),
    ("_CanYou_Handle_mixedVars", "_can_you_handle_mixed_vars"),
    ("this_should_be_a_noop", "this_should_be_a_noop"),
    ("egressIPs", "egress_ips"),
    ("egressIPsEgress", "egress_ips_egress"),
    ("egressIPsegress", "egress_ips_egress"),
    ("IPsegress", "_ips_egress"),
    ("egressIP", "egress_ip"),
    ("egressIPEgress", "egress_ip_egress"),
    ("egressIPegress", "egress_ip_egress"),
    ("URLegressIPEgressHTTP", "url_egress_ip_egress_http"),
    ("URLsegressIPsEgressHTTPs", "_urls_egress_ips_egress_https"),
]

# Further cases, traced by hand through the Go algorithm (these are what Operator SDK produces).
MORE_TO_SNAKE = [
    ("myURLPath", "my_url_path"),
    ("version2Beta", "version2_beta"),
    ("a12b34", "a_12_b34"),  # Go's numberSequence rule inserts spaces
    ("JSONData", "_json_data"),
    ("HTTPServer", "http_server"),
    ("replicaCount", "replica_count"),
    ("foo-bar", "foo_bar"),
    ("URL", "__url"),  # SDK quirk: leading capital prefix + the "_" inserted before a trailing special word
    ("", ""),
]


@pytest.mark.parametrize("name, expected", SDK_TO_SNAKE + MORE_TO_SNAKE)
def test_to_snake_case(name: str, expected: str) -> None:
    assert to_snake_case(name) == expected


def cr(spec: dict | None = None, **meta) -> KubeObject:
    obj = {
        "apiVersion": "cache.example.com/v1alpha1",
        "kind": "Memcached",
        "metadata": {"name": "m1", "namespace": "ns1", **meta},
    }
    if spec is not None:
        obj["spec"] = spec
    return cast(KubeObject, obj)


def test_shape_matches_operator_sdk() -> None:
    obj = cr({"size": 3, "imageTag": "1.6", "nested": {"someKey": [{"innerKey": True}]}})
    ev = build_extra_vars(obj, watch_vars={"state": "present"}, snake_case=True, mark_unsafe=False,
                          group="cache.example.com", kind="Memcached")
    assert ev == {
        "size": 3,
        "image_tag": "1.6",
        "nested": {"some_key": [{"inner_key": True}]},
        "ansible_operator_meta": {"name": "m1", "namespace": "ns1"},
        "_cache_example_com_memcached": obj,
        "_cache_example_com_memcached_spec": obj["spec"],
        "state": "present",
    }
    # the raw copies keep the original keys
    assert ev["_cache_example_com_memcached_spec"]["imageTag"] == "1.6"


def test_snake_case_off_and_no_spec() -> None:
    ev = build_extra_vars(cr({"imageTag": "x"}), watch_vars={}, snake_case=False, mark_unsafe=False,
                          group="cache.example.com", kind="Memcached")
    assert ev["imageTag"] == "x"
    ev = build_extra_vars(cr(None), watch_vars={}, snake_case=True, mark_unsafe=False,
                          group="cache.example.com", kind="Memcached")
    assert ev["_cache_example_com_memcached_spec"] == {}
    assert set(ev) == {
        "ansible_operator_meta",
        "_cache_example_com_memcached",
        "_cache_example_com_memcached_spec",
    }


def test_watch_vars_then_finalizer_vars_win() -> None:
    ev = build_extra_vars(cr({"state": "spec", "size": 1}), watch_vars={"state": "watch", "w": 1},
                          snake_case=True, mark_unsafe=True, group="g.io", kind="K",
                          finalizer_vars={"state": "absent"})
    assert ev["state"] == "absent" and ev["w"] == 1 and ev["size"] == 1


def test_object_var_name() -> None:
    assert object_var_name("cert-manager.k8s.io", "Certificate") == "_cert_manager_k8s_io_certificate"
    assert object_var_name("", "ConfigMap") == "__configmap"


def test_mark_unsafe_wraps_every_cr_string_but_not_watch_vars() -> None:
    obj = cr({"msg": "{{ lookup('pipe','id') }}", "list": ["a", 1, {"k": "v"}], "n": 2, "b": False},
             labels={"x": "y"})
    ev = build_extra_vars(obj, watch_vars={"trusted": "{{ 1 + 1 }}"}, snake_case=True, mark_unsafe=True,
                          group="cache.example.com", kind="Memcached")

    def strings(v):
        if isinstance(v, str):
            yield v
        elif isinstance(v, dict):
            for k, x in v.items():
                yield k
                yield from strings(x)
        elif isinstance(v, list):
            for x in v:
                yield from strings(x)

    derived = [v for k, v in ev.items() if k != "trusted"]  # top-level names are variable names, not data
    found = list(strings(derived))
    assert found and all(isinstance(s, Unsafe) for s in found)
    assert not isinstance(ev["trusted"], Unsafe)
    assert ev["n"] == 2 and ev["b"] is False
    # input not mutated
    assert not isinstance(obj["spec"]["msg"], Unsafe)


def test_mark_unsafe_off_leaves_plain_strings() -> None:
    ev = build_extra_vars(cr({"msg": "x"}), watch_vars={}, snake_case=True, mark_unsafe=False,
                          group="g.io", kind="K")
    assert type(ev["msg"]) is str


@pytest.mark.parametrize("spec_key, variable", [
    ("ansiblePythonInterpreter", "ansible_python_interpreter"),
    ("ansible_become", "ansible_become"),
    ("ansibleConnection", "ansible_connection"),
])
def test_refuses_ansible_variables(spec_key: str, variable: str) -> None:
    with pytest.raises(RefusedVariable) as exc:
        build_extra_vars(cr({spec_key: "x"}), watch_vars={}, snake_case=True, mark_unsafe=True,
                         group="g.io", kind="K")
    assert exc.value.spec_key == f"spec.{spec_key}"
    assert exc.value.variable == variable
    assert f"spec.{spec_key}" in str(exc.value) and variable in str(exc.value)


def test_refuses_ansible_variable_without_snake_case() -> None:
    with pytest.raises(RefusedVariable, match="ansible_host"):
        build_extra_vars(cr({"ansible_host": "evil"}), watch_vars={}, snake_case=False, mark_unsafe=True,
                         group="g.io", kind="K")


def test_nested_ansible_names_are_fine_and_leading_capital_is_not_refused() -> None:
    ev = build_extra_vars(cr({"opts": {"ansibleBecome": True}, "AnsibleThing": 1}), watch_vars={},
                          snake_case=True, mark_unsafe=True, group="g.io", kind="K")
    assert ev["opts"] == {"ansible_become": True}
    assert ev["_ansible_thing"] == 1


def test_refuses_snake_case_collisions() -> None:
    with pytest.raises(RefusedVariable, match="both become the variable 'foo_bar'"):
        build_extra_vars(cr({"fooBar": 1, "foo_bar": 2}), watch_vars={}, snake_case=True, mark_unsafe=True,
                         group="g.io", kind="K")
    with pytest.raises(RefusedVariable, match=r"spec\.a\.abC and spec\.a\.ab_c"):
        build_extra_vars(cr({"a": {"abC": 1, "ab_c": 2}}), watch_vars={}, snake_case=True, mark_unsafe=True,
                         group="g.io", kind="K")


ROUND_TRIP = {
    "int": 3, "neg": -7, "float": 1.5, "big": 10**20, "t": True, "f": False, "none": None,
    "nested": {"list": [1, "two", [3.0, {"four": None}]], "empty": {}, "emptylist": []},
    "unicode": "héllo – 世界 ✓", "multi": "line1\nline2\n", "multi_nl": "a\n\nb", "trailing_space": "x \n y ",
    "yes": "yes", "no": "No", "on": "on", "null": "null", "tilde": "~", "num": "1e3", "octal": "0o17",
    "int_str": "42", "float_str": "3.14", "date": "2001-12-14", "empty": "", "colon": "a: b", "dash": "- x",
    "hash": "# not a comment", "quote": "it's \"quoted\"", "merge": "<<", "eq": "=", "ctrl": "bell\x07",
    "tab": "a\tb", "jinja": "{{ lookup('pipe','id') }}", "block": "{% if true %}x{% endif %}",
}


@pytest.mark.parametrize("unsafe", [False, True])
def test_dump_round_trips_with_pyyaml(unsafe: bool) -> None:
    data = ROUND_TRIP
    if unsafe:
        from ansible_operator.extravars import mark_unsafe
        data = mark_unsafe(ROUND_TRIP)

    class Loader(yaml.SafeLoader):
        pass

    def construct_unsafe(loader: yaml.SafeLoader, node: yaml.Node) -> object:
        assert isinstance(node, yaml.ScalarNode)
        return loader.construct_scalar(node)

    Loader.add_constructor("!unsafe", construct_unsafe)
    text = dump(data)
    assert yaml.load(text, Loader=Loader) == ROUND_TRIP
    if unsafe:
        assert "!unsafe 'jinja': !unsafe" in text
        assert "!unsafe 'yes'" not in text and "'yes': 'yes'" in text
    else:
        assert "!unsafe" not in text


def test_dump_tags_unsafe_keys() -> None:
    text = dump({"d": {Unsafe("{{ k }}"): Unsafe("v")}, "plain": "{{ trusted }}"})
    assert "!unsafe '{{ k }}': !unsafe 'v'" in text
    assert "plain: '{{ trusted }}'" in text


ANSIBLE_PLAYBOOK = Path(sys.executable).with_name("ansible-playbook")

PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  tasks:
    - set_fact:
        y: "{{ x }}"
        copied: "{{ d }}"
        rendered_trusted: "{{ trusted }}"
    - copy:
        dest: "{{ out }}"
        content: "{{ {'x': x, 'y': y, 'copied': copied, 'trusted': rendered_trusted, 'types': types} | to_json }}"
"""  # noqa: E501 (one YAML line of the playbook: a Jinja expression cannot wrap)


def test_unsafe_strings_are_not_templated_by_real_ansible(tmp_path: Path) -> None:
    marker = tmp_path / "executed"
    evil = f"{{{{ lookup('pipe', 'touch {marker} && id') }}}}"
    obj = cr({"x": evil, "d": {"k": evil, "l": [evil]},
              "types": {"yes": "yes", "empty": "", "num": "1e3", "null": "null", "n": 5, "b": True}})
    ev = build_extra_vars(obj, watch_vars={"trusted": "{{ 40 + 2 }}", "out": str(tmp_path / "out.json")},
                          snake_case=True, mark_unsafe=True, group="cache.example.com", kind="Memcached")
    varfile = tmp_path / "extravars"
    varfile.write_text(dump(ev))
    (tmp_path / "pb.yml").write_text(PLAYBOOK)
    env = {**os.environ, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_LOCALHOST_WARNING": "0",
           "ANSIBLE_INVENTORY_UNPARSED_WARNING": "0", "ANSIBLE_HOME": str(tmp_path / "ah"),
           "ANSIBLE_PYTHON_INTERPRETER": sys.executable}
    proc = subprocess.run(
        [
            str(ANSIBLE_PLAYBOOK),
            "-i",
            "localhost,",
            "-c",
            "local",
            str(tmp_path / "pb.yml"),
            "-e",
            f"@{varfile}",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads((tmp_path / "out.json").read_text())
    assert not marker.exists(), "the CR string was evaluated as a template"
    assert result["x"] == evil and result["y"] == evil
    assert result["copied"] == {"k": evil, "l": [evil]}
    # watch vars stay templatable; "{{ 40 + 2 }}" is the string "42" up to ansible-core 2.18 (no native
    # types in templates), the integer 42 from 2.19 on
    from ansible.release import __version__ as ansible_version

    native = tuple(int(p) for p in ansible_version.split(".")[:2]) >= (2, 19)
    assert result["trusted"] == (42 if native else "42")
    assert result["types"] == {"yes": "yes", "empty": "", "num": "1e3", "null": "null", "n": 5, "b": True}


# ---- names ansible-core reserves (issue 11, defect 6) -------------------------------------------------


@pytest.mark.parametrize("spec_key, variable, snake", [
    ("omit", "omit", True),
    ("inventoryHostname", "inventory_hostname", True),
    ("inventory_hostname", "inventory_hostname", False),
    ("hostvars", "hostvars", True),
    ("groupNames", "group_names", True),
    ("playbookDir", "playbook_dir", True),
    ("rolePath", "role_path", True),
    ("lookup", "lookup", True),
    ("query", "query", True),
    ("now", "now", True),
])
def test_refuses_reserved_and_magic_variable_names(spec_key: str, variable: str, snake: bool) -> None:
    with pytest.raises(RefusedVariable) as exc:
        build_extra_vars(cr({spec_key: "x", "size": 1}), watch_vars={}, snake_case=snake, mark_unsafe=True,
                         group="g.io", kind="K")
    assert exc.value.spec_key == f"spec.{spec_key}" and exc.value.variable == variable
    assert "reserves" in str(exc.value)


def test_reserved_names_come_from_ansible_core_itself() -> None:
    import ansible.constants as C
    from ansible.inventory.host import Host

    from ansible_operator.extravars import reserved_names

    names = reserved_names()
    assert set(getattr(C, "INTERNAL_STATIC_VARS", ())) <= names
    assert set(Host("localhost").get_magic_vars()) <= names
    assert {"omit", "inventory_hostname", "hostvars", "lookup", "query", "undef"} <= names
    # the usual spec fields stay usable, playbook keywords and Jinja's own globals included (SDK projects
    # commonly have spec.port, spec.name, spec.namespace, spec.environment; Ansible only warns about them)
    assert not {"size", "image", "replicas", "color", "ansible_operator_meta"} & names
    assert not {"name", "port", "namespace", "environment", "timeout", "tags", "range"} & names


@pytest.mark.parametrize("spec_key", ["port", "name", "namespace", "environment", "timeout"])
def test_playbook_keywords_and_jinja_globals_stay_usable(spec_key: str) -> None:
    result = build_extra_vars(cr({spec_key: "x"}), watch_vars={}, snake_case=True, mark_unsafe=False,
                              group="g.io", kind="K")
    assert result[spec_key] == "x"


async def test_load_reserved_names_matches_the_blocking_one(monkeypatch: pytest.MonkeyPatch) -> None:
    import ansible_operator.extravars as ev

    expected = ev.reserved_names()
    monkeypatch.setattr(ev, "_reserved", None)
    assert await ev.load_reserved_names() == expected


async def test_load_reserved_names_takes_the_executors(monkeypatch: pytest.MonkeyPatch) -> None:
    import ansible_operator.extravars as ev

    class Executor:
        async def reserved_names(self) -> frozenset[str]:
            return frozenset({"from_the_executor"})

    monkeypatch.setattr(ev, "_reserved", None)
    assert await ev.load_reserved_names(Executor()) == {"from_the_executor"}  # type: ignore[arg-type]
    assert ev.reserved_names() == {"from_the_executor"}  # kept for the process


def test_spec_nested_deeper_than_ansible_can_take_is_refused() -> None:
    """A spec deeper than MAX_SPEC_DEPTH is refused with a message naming where: Ansible's variable handling
    dies of a RecursionError just past it (2.19), and past ~500 levels the runner's own conversion raised
    RecursionError (a failed reconcile retried forever, no status). Up to the limit, vars as usual."""
    from ansible_operator.extravars import MAX_SPEC_DEPTH

    def nested(levels: int) -> dict[str, Any]:
        value: dict[str, Any] = {}
        for _ in range(levels - 1):
            value = {"innerKey": value}
        return value

    ok = build_extra_vars(cr({"deepField": nested(MAX_SPEC_DEPTH)}), watch_vars={}, snake_case=True,
                          mark_unsafe=True, group="g.example.com", kind="K")
    assert "inner_key" in ok["deep_field"]
    for levels in (MAX_SPEC_DEPTH + 1, 5000):
        with pytest.raises(RefusedVariable, match=f"more than {MAX_SPEC_DEPTH} levels") as exc:
            build_extra_vars(cr({"size": 1, "deepField": nested(levels)}), watch_vars={}, snake_case=True,
                             mark_unsafe=True, group="g.example.com", kind="K")
        assert (exc.value.spec_key, exc.value.variable) == ("spec.deepField", "deep_field")
        assert "spec.deepField.innerKey.innerKey" in str(exc.value)
