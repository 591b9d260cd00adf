"""Operator SDK metrics surface: custom metrics from ``osdk_metric`` (the endpoint the real collection
posts to), HTTPS for /metrics (``--metrics-secure``) and the TokenReview/SubjectAccessReview filter
(``--metrics-require-rbac``) against a small stub API server."""

from __future__ import annotations

import json
import ssl
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from ansible_operator.metrics import (
    Metrics,
    RbacFilter,
    UserMetricError,
    close_all,
    serve_endpoints,
    serve_osdk_metric,
    tls_context,
)


def families(m: Metrics) -> dict[str, Any]:
    return {f.name: f for f in text_string_to_metric_families(m.exposition().decode())}


def real_module_payload(name: str, description: str, **metric: dict[str, Any]) -> dict[str, Any]:
    """The body operator_sdk.util 0.5.x's osdk_metric POSTs (plugins/modules/osdk_metric.py in
    operator-framework/operator-sdk-ansible-util): AnsibleModule fills every sub-option it was not given
    with None, and ``requests.post(url, json=payload)`` sends it as JSON."""
    options = {
        "counter": ("increment", "add"),
        "gauge": ("set", "increment", "decrement", "add", "subtract", "set_to_current_time"),
        "histogram": ("observe",),
        "summary": ("observe",),
    }
    payload: dict[str, Any] = {"name": name, "description": description}
    for kind, given in metric.items():
        payload[kind] = {key: given.get(key) for key in options[kind]}
    return payload


def test_counter_gauge_histogram_summary_with_sdk_names() -> None:
    m = Metrics()
    apply = m.user.apply
    apply(real_module_payload("my_counter", "counts", counter={}))  # `counter: {}` creates it at 0
    apply(real_module_payload("my_counter", "counts", counter={"increment": True}))
    apply(real_module_payload("my_counter", "counts", counter={"add": 2.5}))
    apply(real_module_payload("my_gauge", "level", gauge={"set": 10}))
    apply(real_module_payload("my_gauge", "level", gauge={"increment": True}))
    apply(real_module_payload("my_gauge", "level", gauge={"decrement": True}))
    apply(real_module_payload("my_gauge", "level", gauge={"add": 5}))
    apply(real_module_payload("my_gauge", "level", gauge={"subtract": 1}))
    apply(real_module_payload("my_zero", "zero", gauge={"set": 7}))
    apply(real_module_payload("my_zero", "zero", gauge={"set": 0}))
    before = time.time()
    apply(real_module_payload("my_time", "time", gauge={"set_to_current_time": True}))
    for v in (0.003, 0.3, 30):
        apply(real_module_payload("my_histogram", "sizes", histogram={"observe": v}))
    apply(real_module_payload("my_summary", "lat", summary={"observe": 2}))
    apply(
        real_module_payload("my_summary", "lat", histogram={"observe": 4})
    )  # interchangeable, as in the SDK

    text = m.exposition().decode()
    assert "# TYPE my_counter counter\nmy_counter 3.5\n" in text  # the name as given, no _total suffix
    assert "# HELP my_gauge level\n# TYPE my_gauge gauge\nmy_gauge 14\n" in text
    assert "my_zero 0\n" in text
    assert 'my_histogram_bucket{le="0.005"} 1\n' in text and 'my_histogram_bucket{le="0.5"} 2\n' in text
    assert 'my_histogram_bucket{le="+Inf"} 3\n' in text and "my_histogram_count 3\n" in text
    assert "my_summary_sum 6\nmy_summary_count 2\n" in text
    fams = families(m)  # the whole page parses as Prometheus text
    assert fams["my_histogram"].type == "histogram" and fams["my_summary"].type == "summary"
    assert fams["my_time"].samples[0].value >= before


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"name": "x", "description": "d"}, "at least one metric"),
        ({"name": "x", "description": "d", "counter": {}, "gauge": {}}, "only one metric"),
        ({"name": "x", "description": "d", "counter": {"add": -1}}, "cannot decrease"),
        ({"name": "bad-name", "description": "d", "counter": {}}, "invalid metric name"),
        ({"name": "ansible_operator_runs", "description": "d", "counter": {}}, "exported by the operator"),
        ({"name": "x", "description": "d", "gauge": {"set": "high"}}, "must be a finite number"),
        ([1, 2], "JSON object"),
    ],
)
def test_invalid_requests_are_refused_and_change_nothing(body: Any, message: str) -> None:
    m = Metrics()
    before = m.exposition()
    with pytest.raises(UserMetricError, match=message):
        m.user.apply(body)
    # process_* (CPU seconds...) move on their own between two scrapes
    assert _without_process(m.exposition()) == _without_process(before)


def _without_process(exposition: bytes) -> list[bytes]:
    return [line for line in exposition.splitlines() if b"process_" not in line]


def test_a_metric_keeps_its_type() -> None:
    m = Metrics()
    m.user.apply({"name": "x", "description": "d", "gauge": {"set": 1}})
    with pytest.raises(UserMetricError, match="cannot change metric type of x, which is a gauge"):
        m.user.apply({"name": "x", "description": "d", "counter": {"increment": True}})


async def test_endpoint_answers_the_real_collections_request() -> None:
    """POST http://localhost:5050/metrics with the JSON body, as the upstream module does; 200 when applied,
    400 with the reason when not (the module fails the task with that text), 405 for GET."""
    m = Metrics()
    handle = await serve_osdk_metric("127.0.0.1:0", m.user)
    assert handle is not None
    try:
        async with aiohttp.ClientSession() as s:
            url = f"{handle.url}/metrics"
            body = real_module_payload(
                "my_thing_counter", "This metric counts things", counter={"increment": True}
            )
            async with s.post(url, json=body) as r:
                assert r.status == 200
            async with s.post(
                url, json={"name": "my_thing_counter", "description": "x", "gauge": {"set": 1}}
            ) as r:
                assert r.status == 400 and "cannot change metric type" in await r.text()
            async with s.post(url, data=b"{not json") as r:
                assert r.status == 400
            async with s.get(url) as r:
                assert r.status == 405
    finally:
        await handle.close()
    assert "my_thing_counter 1\n" in m.exposition().decode()


def test_tls_context_uses_a_mounted_certificate_or_makes_one(tmp_path: Path) -> None:
    from ansible_operator.metrics.http import _self_signed

    ctx = tls_context(tmp_path / "absent")
    assert isinstance(ctx, ssl.SSLContext)
    cert, key = _self_signed()
    (tmp_path / "tls.crt").write_bytes(cert)
    (tmp_path / "tls.key").write_bytes(key)
    assert isinstance(tls_context(tmp_path), ssl.SSLContext)
    (tmp_path / "tls.key").write_bytes(b"garbage")
    with pytest.raises(ssl.SSLError):
        tls_context(tmp_path)


# ---- --metrics-require-rbac against a stub API server -------------------------------------------------

TOKENS = {
    "reader-token": {
        "username": "system:serviceaccount:monitoring:prometheus",
        "uid": "u1",
        "groups": ["system:serviceaccounts"],
    },
    "nobody-token": {"username": "system:serviceaccount:default:nobody", "groups": []},
}


@pytest.fixture
async def stub_api() -> AsyncIterator[dict[str, Any]]:
    calls: dict[str, Any] = {"tokenreviews": 0, "sars": [], "fail": False}

    async def token_review(request: web.Request) -> web.Response:
        calls["tokenreviews"] += 1
        if calls["fail"]:
            return web.json_response(
                {"kind": "Status", "reason": "InternalError", "message": "boom"}, status=500
            )
        review = await request.json()
        user = TOKENS.get(review["spec"]["token"])
        review["status"] = {"authenticated": True, "user": user} if user else {"authenticated": False}
        return web.json_response(review, status=201)

    async def sar(request: web.Request) -> web.Response:
        review = await request.json()
        calls["sars"].append(review["spec"])
        allowed = review["spec"]["user"].endswith(":prometheus") and review["spec"][
            "nonResourceAttributes"
        ] == {"path": "/metrics", "verb": "get"}
        review["status"] = {"allowed": allowed}
        return web.json_response(review, status=201)

    app = web.Application()
    app.router.add_post("/apis/authentication.k8s.io/v1/tokenreviews", token_review)
    app.router.add_post("/apis/authorization.k8s.io/v1/subjectaccessreviews", sar)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    calls["url"] = f"http://127.0.0.1:{port}"
    yield calls
    await runner.cleanup()


async def test_metrics_require_a_token_and_rbac_over_https(stub_api: dict[str, Any], tmp_path: Path) -> None:
    import kubernetes.client

    from ansible_operator.kube import Kube

    config = kubernetes.client.Configuration()
    config.host = stub_api["url"]
    kube = Kube(config)

    async def post(path: str, body: dict[str, Any]) -> Any:
        return await kube.request("POST", path, body=body, content_type="application/json")

    m = Metrics()
    handles = await serve_endpoints(
        "127.0.0.1:0", "0", metrics=m, tls=tls_context(tmp_path), metrics_filter=RbacFilter(post)
    )
    try:
        url = f"{handles[0].url}/metrics"
        assert url.startswith("https://")
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=False)) as s:

            async def get(token: str | None) -> tuple[int, str]:
                headers = {"Authorization": f"Bearer {token}"} if token else {}
                async with s.get(url, headers=headers) as r:
                    return r.status, await r.text()

            assert (await get(None))[0] == 401
            assert (await get("forged"))[0] == 401
            status, text = await get("nobody-token")
            assert status == 403 and "nobody" in text
            status, text = await get("reader-token")
            assert status == 200 and "ansible_operator_build_info" in text
            reviews = stub_api["tokenreviews"]
            assert (await get("reader-token"))[0] == 200  # cached: no second TokenReview or SAR
            assert stub_api["tokenreviews"] == reviews
            assert [s["user"] for s in stub_api["sars"]].count(
                "system:serviceaccount:monitoring:prometheus"
            ) == 1
            sar = next(s for s in stub_api["sars"] if s["user"].endswith(":prometheus"))
            assert sar["groups"] == ["system:serviceaccounts"] and sar["uid"] == "u1"
            stub_api["fail"] = True
            status, text = await get("another-token")
            assert status == 500 and "boom" in text
    finally:
        await close_all(handles)
        kube.close()


async def test_cache_expires() -> None:
    now = [0.0]
    answers: list[str] = []

    async def post(path: str, body: dict[str, Any]) -> Any:
        answers.append(path.rsplit("/", 1)[1])
        if path.endswith("tokenreviews"):
            return {"status": {"authenticated": True, "user": {"username": "u"}}}
        return {"status": {"allowed": False}}

    f = RbacFilter(post, clock=lambda: now[0])
    assert (await f.check("Bearer t", "/metrics", "GET"))[0] == 403  # type: ignore[index]
    now[0] += 20
    await f.check("Bearer t", "/metrics", "GET")
    assert answers == ["tokenreviews", "subjectaccessreviews"]
    now[0] += 15  # denied answers are kept 30 s, tokens 60 s
    await f.check("Bearer t", "/metrics", "GET")
    assert answers == ["tokenreviews", "subjectaccessreviews", "subjectaccessreviews"]
    assert json.dumps(answers)


def _upstream_collection(root: Path) -> Path:
    """An installed operator_sdk.util laid out as ansible-galaxy installs it."""
    util = root / "ansible_collections" / "operator_sdk" / "util"
    (util / "plugins" / "modules").mkdir(parents=True)
    (util / "plugins" / "modules" / "osdk_metric.py").write_text("# the upstream module\n")
    return util


async def test_osdk_metric_port_taken_fails_like_the_sdk_when_an_installed_collection_needs_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The SDK serves osdk_metric on localhost:5050 and exits 1 when it cannot. An installed operator_sdk.util
    always posts there, so we fail the same way; with only the bundled module (it reads the URL from the
    environment) a free port serves instead; an address given explicitly must be free."""
    import socket

    from ansible_operator.collections import COMPAT_ROOT, search_path
    from ansible_operator.metrics import installed_osdk_util, start_osdk_metric_endpoint

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        user = Metrics().user
        bundled_only = search_path(str(tmp_path / "none"))  # the runs' path: user entries, then the shim
        assert installed_osdk_util(bundled_only) is None  # the shim (redirects only) does not count
        assert (COMPAT_ROOT / "ansible_collections" / "operator_sdk" / "util").is_dir()

        handle = await start_osdk_metric_endpoint(None, user, collections_path=bundled_only,
                                                  default_address=address)
        assert handle is not None
        try:
            assert handle.port != taken.getsockname()[1]
            assert "osdk_metric served on" in caplog.text
        finally:
            await handle.close()

        upstream = _upstream_collection(tmp_path / "collections")
        with_upstream = search_path(str(tmp_path / "collections"))
        assert installed_osdk_util(with_upstream) == upstream
        with pytest.raises(OSError) as refused:
            await start_osdk_metric_endpoint(None, user, collections_path=with_upstream,
                                             default_address=address)
        assert str(upstream) in str(refused.value) and "--osdk-metric-bind-address" in str(refused.value)

        with pytest.raises(OSError, match="cannot listen on"):
            await start_osdk_metric_endpoint(address, user, collections_path=bundled_only)


def test_counters_are_named_as_given_next_to_the_operators_own() -> None:
    """prometheus_client writes the whole page; a role's counter keeps its name in HELP/TYPE (as Go's client
    writes it), including one named like another counter plus ``_total``; the operator's counters keep
    theirs (``<name>_total``)."""
    m = Metrics()
    m.user.apply({"name": "jobs", "description": "a", "counter": {"add": 2}})
    m.user.apply({"name": "jobs_total", "description": "b", "counter": {"increment": True}})
    text = m.exposition().decode()
    assert "# HELP jobs a\n# TYPE jobs counter\njobs 2\n" in text
    assert "# HELP jobs_total b\n# TYPE jobs_total counter\njobs_total 1\n" in text
    assert "# TYPE ansible_operator_runs_total counter\n" in text
    assert families(m)["jobs"].type == "counter"  # the page parses (the Python parser folds jobs_total in)
