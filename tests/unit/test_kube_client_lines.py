"""The runner's raw calls and credentials work with both lines of the ``kubernetes`` client: up to 33.x
(python-legacy generator) and 37+ (pydantic generator). CI runs the client-facing tests on the newest
(``./dev.sh test-client-newest``); these pin the two shapes down in whichever is installed."""

from __future__ import annotations

from typing import Any

import kubernetes
import pytest
from kubernetes.client.rest import ApiException

from ansible_operator import kube


@pytest.mark.parametrize("key", ["authorization", "BearerToken"])
def test_bearer_token_is_read_under_either_key(key: str) -> None:
    cfg = kubernetes.client.Configuration()
    cfg.api_key = {key: "sekret"}
    cfg.api_key_prefix = {key: "Bearer"}
    assert kube.bearer_token(cfg) == "Bearer sekret"


def test_no_token_no_header() -> None:
    assert kube.bearer_token(kubernetes.client.Configuration()) is None


class _Legacy:
    """33.x: everything in call_api; raises ApiException itself."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def call_api(self, path: str, method: str, **kwargs: Any) -> Any:
        self.calls.append((method, path, kwargs["query_params"], kwargs["body"]))
        return type("R", (), {"data": b'{"ok": 1}', "status": 200})()


class _Response:
    def __init__(self, status: int, data: bytes) -> None:
        self.status, self._data, self.reason = status, data, "x"
        self.data = data
        self.headers: dict[str, str] = {}

    def read(self) -> bytes:
        return self._data

    def getheaders(self) -> dict[str, str]:
        return {}


class _Pydantic:
    """37+: param_serialize, then call_api returning every answer."""

    def __init__(self, status: int) -> None:
        self.status = status
        self.serialized: list[tuple[Any, ...]] = []

    def param_serialize(self, method: str, path: str, **kwargs: Any) -> tuple[Any, ...]:
        self.serialized.append((method, path, kwargs["query_params"], kwargs["body"]))
        return (method, f"https://x{path}", {}, kwargs["body"], [])

    def call_api(self, *request: Any, _request_timeout: Any = None) -> _Response:
        return _Response(self.status, b'{"ok": 2}')


def test_call_raw_on_the_legacy_client() -> None:
    client = _Legacy()
    assert kube.call_raw(client, "GET", "/api/v1/x", [("a", "1")], {}, None) == (200, b'{"ok": 1}')
    assert client.calls == [("GET", "/api/v1/x", [("a", "1")], None)]


def test_call_raw_on_the_pydantic_client_raises_for_non_2xx() -> None:
    ok = _Pydantic(200)
    assert kube.call_raw(ok, "POST", "/api/v1/x", [], {}, {"k": "v"}) == (200, b'{"ok": 2}')
    assert ok.serialized == [("POST", "/api/v1/x", [], {"k": "v"})]
    with pytest.raises(ApiException) as caught:
        kube.call_raw(_Pydantic(404), "GET", "/api/v1/x", [], {}, None)
    assert caught.value.status == 404
