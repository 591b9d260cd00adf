"""List and watch consistency options (resourceVersion, resourceVersionMatch, sendInitialEvents, continue)
as kube-apiserver checks and serves them; the wording is held to the real server by tests/differential."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import pytest

from ansible_operator_sandbox import listoptions
from ansible_operator_sandbox.errors import ApiError
from ansible_operator_sandbox.store import Store, TooOldResourceVersion
from ansible_operator_sandbox.testing import SandboxHandle


@pytest.mark.parametrize("query, watch, code, fragment", [
    ({"resourceVersionMatch": "Exact"}, False, 422, "forbidden unless resourceVersion is provided"),
    ({"resourceVersion": "0", "resourceVersionMatch": "Exact"}, False, 422,
     'forbidden for resourceVersion "0"'),
    ({"resourceVersion": "5", "resourceVersionMatch": "Bogus"}, False, 422,
     'Unsupported value: "Bogus": supported values: "Exact", "NotOlderThan", ""'),
    ({"resourceVersion": "5", "resourceVersionMatch": "Exact", "continue": "x"}, False, 422,
     "forbidden when continue is provided"),
    ({"sendInitialEvents": "true"}, False, 422, "sendInitialEvents is forbidden for list"),
    ({"resourceVersion": "abc"}, False, 400, 'parsing "abc": invalid syntax'),
    ({"resourceVersion": "-1"}, True, 400, 'parsing "-1": invalid syntax'),
    ({"resourceVersion": str(2**64)}, False, 400, "value out of range"),
    ({"resourceVersion": "5", "resourceVersionMatch": "NotOlderThan"}, True, 422,
     "forbidden for watch unless sendInitialEvents is provided"),
    ({"sendInitialEvents": "true"}, True, 422, "sendInitialEvents requires setting resourceVersionMatch"),
    ({"sendInitialEvents": "true", "resourceVersionMatch": "Exact"}, True, 422,
     'Unsupported value: "Exact": supported values: "NotOlderThan"'),
])
def test_invalid_combinations_and_values_are_refused(query: dict[str, str], watch: bool, code: int,
                                                     fragment: str) -> None:
    with pytest.raises(ApiError) as refused:
        listoptions.parse(query, watch=watch)
    assert refused.value.code == code and fragment in refused.value.message
    if code == 422:
        assert refused.value.message.startswith('ListOptions.meta.k8s.io "" is invalid: ')
        assert refused.value.details is not None and refused.value.details["kind"] == "ListOptions"


def test_valid_options_parse() -> None:
    assert listoptions.parse({}, watch=False) == listoptions.ListOptions(None, "", None, "")
    parsed = listoptions.parse({"resourceVersion": "7", "resourceVersionMatch": "NotOlderThan",
                                "sendInitialEvents": "true", "allowWatchBookmarks": "true"}, watch=True)
    assert parsed.resource_version == 7 and parsed.send_initial_events is True


def test_continue_tokens_round_trip_and_bad_ones_are_400() -> None:
    token = listoptions.encode_continue(42, ("ns", "b"))
    assert "=" not in token and listoptions.decode_continue(token) == (42, ("ns", "b"))
    for bad, why in (("abc", "invalid character 'i' looking for beginning of value"),
                     ("!!!", "illegal base64 data"), ("e30", "incorrect encoded start")):
        with pytest.raises(ApiError) as refused:
            listoptions.decode_continue(bad)
        assert refused.value.code == 400 and why in refused.value.message, refused.value.message


def _put(store: Store, name: str, data: str) -> None:
    key = ("/configmaps", "ns", name)
    obj = store.get(key) or {"apiVersion": "v1", "kind": "ConfigMap",
                             "metadata": {"name": name, "namespace": "ns"}}
    store.put(key, {**obj, "data": {"v": data}})


def test_a_past_state_is_rebuilt_from_history_until_it_is_compacted() -> None:
    store = Store()
    _put(store, "a", "1")
    _put(store, "b", "1")
    at = store.resource_version
    _put(store, "a", "2")
    store.remove(("/configmaps", "ns", "b"))
    _put(store, "c", "1")
    past = {k[2]: o["data"]["v"] for k, o in store.items_at("/configmaps", "ns", at)}
    assert past == {"a": "1", "b": "1"}
    assert {k[2] for k, _ in store.items("/configmaps", "ns")} == {"a", "c"}
    store.compact()
    with pytest.raises(TooOldResourceVersion) as expired:
        store.items_at("/configmaps", "ns", at)
    assert expired.value.compacted
    store.set_history_limit(1)  # out of the window rather than compacted: the watch cache's words
    _put(store, "a", "3")
    _put(store, "a", "4")
    error = store.too_old(store.resource_version - 2)
    assert error is not None and not error.compacted


def _get(handle: SandboxHandle, path: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(handle.sandbox.url + path, timeout=30) as resp:
            return resp.status, [json.loads(line) for line in resp.read().splitlines() if line.strip()]
    except urllib.error.HTTPError as e:
        return e.code, [json.loads(e.read())]


def test_served_exact_lists_compaction_and_watch_lists(sandbox: SandboxHandle) -> None:
    base = "/api/v1/namespaces/default/configmaps"
    store = sandbox.sandbox.server.store
    for name in ("la", "lb"):
        sandbox.sandbox.call(_put_default, store, name)
    _, (first,) = _get(sandbox, base + "?limit=1")
    at, token = first["metadata"]["resourceVersion"], first["metadata"]["continue"]
    sandbox.sandbox.call(store.remove, ("/configmaps", "default", "la"))
    _, (exact,) = _get(sandbox, f"{base}?resourceVersion={at}&resourceVersionMatch=Exact")
    assert {"la", "lb"} <= {i["metadata"]["name"] for i in exact["items"]}
    assert exact["metadata"]["resourceVersion"] == at
    code, (future,) = _get(sandbox, f"{base}?resourceVersion=99999999")
    assert code == 504 and future["details"]["causes"][0]["reason"] == "ResourceVersionTooLarge"

    sandbox.sandbox.call(store.compact)
    code, (gone,) = _get(sandbox, f"{base}?resourceVersion={at}&resourceVersionMatch=Exact")
    assert (code, gone["message"]) == (410, listoptions.LIST_TOO_OLD)
    code, (gone,) = _get(sandbox, f"{base}?limit=1&continue={token}")
    assert (code, gone["reason"], gone["message"]) == (410, "Expired", listoptions.CONTINUE_TOO_OLD)
    code, rest = _get(sandbox, f"{base}?limit=1&continue={gone['metadata']['continue']}")
    assert code == 200  # the fresh token of the 410 continues (inconsistently) from where the old one was
    code, events = _get(sandbox, f"{base}?watch=1&timeoutSeconds=1&resourceVersion={at}")
    assert code == 200 and events[0]["type"] == "ERROR"
    assert events[0]["object"]["message"] == listoptions.WATCH_TOO_OLD

    # a watch-list from an old (even compacted) resourceVersion: the current state, then the bookmark
    code, events = _get(sandbox, f"{base}?watch=1&timeoutSeconds=1&resourceVersion={at}"
                                 "&sendInitialEvents=true&resourceVersionMatch=NotOlderThan"
                                 "&allowWatchBookmarks=true")
    names = [e["object"]["metadata"].get("name") for e in events if e["type"] == "ADDED"]
    assert "lb" in names and "la" not in names
    bookmark = next(e for e in events if e["type"] == "BOOKMARK")
    assert bookmark["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}


def _put_default(store: Store, name: str) -> None:
    key = ("/configmaps", "default", name)
    store.put(key, {"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": name, "namespace": "default"}})
