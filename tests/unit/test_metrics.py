"""Metrics counting and the /metrics, /healthz, /readyz endpoints (served for real on a loopback port)."""

from __future__ import annotations

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from ansible_operator.metrics import Metrics, close_all, parse_bind_address, serve, serve_endpoints

WATCH = "Memcached.cache.example.com"


def sample(metrics: Metrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def test_counts_started_and_finished_runs_by_result() -> None:
    m = Metrics()
    m.run_started(WATCH, "reconcile")
    m.run_started(WATCH, "reconcile")
    m.run_finished(WATCH, "reconcile", "successful", 1.5)
    m.run_finished(WATCH, "reconcile", "failed", 3.0)
    m.run_started(WATCH, "finalize")
    m.run_finished(WATCH, "finalize", "successful", 0.2)

    assert sample(m, "ansible_operator_runs_started_total", watch=WATCH, phase="reconcile") == 2
    assert sample(m, "ansible_operator_runs_total", watch=WATCH, phase="reconcile", result="successful") == 1
    assert sample(m, "ansible_operator_runs_total", watch=WATCH, phase="reconcile", result="failed") == 1
    assert sample(m, "ansible_operator_run_duration_seconds_count", watch=WATCH, phase="reconcile") == 2
    assert sample(m, "ansible_operator_run_duration_seconds_sum", watch=WATCH, phase="reconcile") == 4.5
    assert sample(m, "ansible_operator_finalizer_runs_total", watch=WATCH, result="successful") == 1
    assert sample(m, "ansible_operator_finalizer_runs_total", watch=WATCH, result="failed") is None


def test_gauges_and_operator_sdk_names() -> None:
    m = Metrics()
    m.register_watch(WATCH, "cache.example.com", "v1alpha1", "Memcached")
    m.set_queue_depth(WATCH, 4)
    m.set_cached_objects(WATCH, 7)
    m.set_in_flight(WATCH, 2)
    m.set_leader(True)
    m.reconcile_error(WATCH, "api_error")
    m.run_finished(WATCH, "reconcile", "timeout", 7)
    gvk = "cache.example.com/v1alpha1, Kind=Memcached"
    assert sample(m, "ansible_operator_queue_depth", watch=WATCH) == 4
    assert sample(m, "ansible_operator_cached_objects", watch=WATCH) == 7
    assert sample(m, "ansible_operator_runs_in_flight", watch=WATCH) == 2
    assert sample(m, "ansible_operator_leader") == 1
    assert sample(m, "ansible_operator_reconcile_errors_total", watch=WATCH, reason="api_error") == 1
    assert sample(m, "ansible_operator_reconciles_count", GVK=gvk) == 1
    assert sample(m, "ansible_operator_reconcile_result", GVK=gvk, result="failed") == 1
    assert sample(m, "ansible_operator_build_info", version=__import__("ansible_operator").__version__,
                  commit="") == 1


def test_registries_are_independent_and_phase_is_checked() -> None:
    a, b = Metrics(), Metrics()
    a.run_started(WATCH, "reconcile")
    assert sample(b, "ansible_operator_runs_started_total", watch=WATCH, phase="reconcile") is None
    with pytest.raises(ValueError, match="unknown run phase"):
        a.run_started(WATCH, "delete")


@pytest.mark.parametrize("text,expected", [
    (":8080", (None, 8080)), ("127.0.0.1:0", ("127.0.0.1", 0)), ("[::1]:9000", ("::1", 9000)),
    ("0", None), ("", None), ("localhost:5050", ("localhost", 5050)),
    ("metrics.example.com:80", ("metrics.example.com", 80)),
])
def test_parse_bind_address(text: str, expected: object) -> None:
    assert parse_bind_address(text) == expected


@pytest.mark.parametrize("bad", ["8080x", "host:http", "host:70000", "localhost", "http://localhost:8080",
                                 "foo bar:80", "::1:80", "[not-an-ip]:80", "-host:80"])
def test_parse_bind_address_rejects(bad: str) -> None:
    with pytest.raises(ValueError, match="bind address"):
        parse_bind_address(bad)


async def test_metrics_endpoint_over_http() -> None:
    m = Metrics()
    m.run_started(WATCH, "reconcile")
    m.run_finished(WATCH, "reconcile", "successful", 0.3)
    m.run_started(WATCH, "reconcile")
    m.run_finished(WATCH, "reconcile", "failed", 12)
    handle = await serve("127.0.0.1:0", metrics=m, health=False)
    assert handle is not None
    try:
        async with aiohttp.ClientSession() as session:
            async with session.get(f"{handle.url}/metrics") as resp:
                assert resp.status == 200
                assert resp.headers["Content-Type"].startswith("text/plain")
                body = await resp.text()
            async with session.get(f"{handle.url}/healthz") as resp:
                assert resp.status == 404
    finally:
        await handle.close()
    values = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(body) for s in fam.samples
    }
    key = lambda result: ("ansible_operator_runs_total",  # noqa: E731
                          tuple(sorted({"watch": WATCH, "phase": "reconcile", "result": result}.items())))
    assert values[key("successful")] == 1
    assert values[key("failed")] == 1
    bucket = ("ansible_operator_run_duration_seconds_bucket",
              tuple(sorted({"watch": WATCH, "phase": "reconcile", "le": "0.5"}.items())))
    assert values[bucket] == 1


async def test_health_and_readiness() -> None:
    state: dict[str, object] = {"ready": False}

    def ready() -> bool | tuple[bool, str]:
        return True if state["ready"] else (False, "cache not synced")

    handle = await serve("127.0.0.1:0", ready=ready)
    assert handle is not None
    try:
        async with aiohttp.ClientSession() as session:
            async with session.get(f"{handle.url}/healthz") as resp:
                assert (resp.status, await resp.text()) == (200, "ok")
            async with session.get(f"{handle.url}/readyz") as resp:
                assert resp.status == 500
                assert "cache not synced" in await resp.text()
            state["ready"] = True
            async with session.get(f"{handle.url}/readyz") as resp:
                assert (resp.status, await resp.text()) == (200, "ok")
            async with session.get(f"{handle.url}/metrics") as resp:
                assert resp.status == 404
    finally:
        await handle.close()


async def test_failing_check_reports_500_with_reason() -> None:
    def broken() -> bool:
        raise RuntimeError("boom")

    handle = await serve("127.0.0.1:0", live=broken)
    assert handle is not None
    try:
        async with aiohttp.ClientSession() as session:
            async with session.get(f"{handle.url}/healthz") as resp:
                assert resp.status == 500
                assert "RuntimeError: boom" in await resp.text()
    finally:
        await handle.close()


async def test_serve_endpoints_separate_shared_and_disabled() -> None:
    m = Metrics()
    assert await serve("0", metrics=m) is None
    shared = await serve("127.0.0.1:0", metrics=m)
    assert shared is not None
    port = shared.port
    await shared.close()  # a port just free: the same address twice is one listener
    handles = await serve_endpoints(f"127.0.0.1:{port}", f"127.0.0.1:{port}", metrics=m)
    try:
        assert len(handles) == 1 and set(handles[0].paths) == {"/metrics", "/healthz", "/readyz"}
    finally:
        await close_all(handles)
    # two ":0" are two ports the kernel picks, as controller-runtime's two servers
    for health in ("127.0.0.1:0", "localhost:0"):
        handles = await serve_endpoints("127.0.0.1:0", health, metrics=m)
        try:
            assert [h.paths for h in handles] == [("/metrics",), ("/healthz", "/readyz")]
            assert handles[0].port != handles[1].port
        finally:
            await close_all(handles)
    handles = await serve_endpoints("0", "127.0.0.1:0", metrics=m)
    try:
        assert [h.paths for h in handles] == [("/healthz", "/readyz")]
    finally:
        await close_all(handles)


async def test_all_interfaces_address() -> None:
    handle = await serve(":0", metrics=Metrics())
    assert handle is not None and handle.host is None
    try:
        async with aiohttp.ClientSession() as session:
            async with session.get(f"http://127.0.0.1:{handle.port}/metrics") as resp:
                assert resp.status == 200
                assert "ansible_operator_build_info" in await resp.text()
    finally:
        await handle.close()


@pytest.mark.parametrize("value,text", [
    (0.0, "0"), (1.0, "1"), (-1.0, "-1"), (3.0, "3"), (2.5, "2.5"), (100.0, "100"), (123456.0, "123456"),
    (1e6, "1e+06"), (2032031.0, "2.032031e+06"), (0.0001, "0.0001"), (1e-05, "1e-05"), (1e-08, "1e-08"),
    (9.999999999999999e-06, "9.999999999999999e-06"), (float("inf"), "+Inf"), (float("-inf"), "-Inf"),
    (float("nan"), "NaN"),
])
def test_go_float_is_strconv_formatfloat_g_shortest(value: float, text: str) -> None:
    """client_golang's expfmt writeFloat: strconv.FormatFloat(v, 'g', -1, 64) (%e from exponent 6 on)."""
    from ansible_operator.metrics import go_float

    assert go_float(value) == text


def test_exposition_has_no_created_series_and_the_rest_client_metrics() -> None:
    m = Metrics()
    m.api_request("GET", "200", "10.96.0.1:443", 0.02)
    m.api_request("PATCH", "409", "10.96.0.1:443", 0.3)
    m.api_request("GET", "<error>", "10.96.0.1:443", 5.0)
    text = m.exposition().decode()
    assert "_created" not in text
    assert 'rest_client_requests_total{code="200",host="10.96.0.1:443",method="GET"} 1\n' in text
    assert 'rest_client_requests_total{code="<error>",host="10.96.0.1:443",method="GET"} 1\n' in text
    bucket = 'rest_client_request_duration_seconds_bucket{host="10.96.0.1:443",le="0.025",verb="GET"}'
    assert f"{bucket} 1\n" in text
    assert 'rest_client_request_duration_seconds_count{host="10.96.0.1:443",verb="PATCH"} 1\n' in text
    # what Prometheus parses is unchanged by the Go formatting
    values = {(s.name, tuple(sorted(s.labels.items()))): s.value
              for fam in text_string_to_metric_families(text) for s in fam.samples}
    assert values[("rest_client_requests_total", (("code", "409"), ("host", "10.96.0.1:443"),
                                                  ("method", "PATCH")))] == 1.0
