"""Typed API errors (issue 12): callers catch NotFound/Conflict/Gone/Forbidden, not integers."""

from __future__ import annotations

import pytest

from ansible_operator import kube


@pytest.mark.parametrize("status, cls", [
    (400, kube.BadRequest), (401, kube.Unauthorized), (403, kube.Forbidden), (404, kube.NotFound),
    (409, kube.Conflict), (410, kube.Gone), (422, kube.Invalid), (429, kube.TooManyRequests),
    (500, kube.ServerError), (503, kube.ServerError), (0, kube.ServerError), (418, kube.ApiError),
])
def test_api_error_is_typed_by_status(status: int, cls: type[kube.ApiError]) -> None:
    err = kube.api_error(status, "Reason", "the message")
    assert type(err) is cls and isinstance(err, kube.ApiError)
    assert (err.status, err.reason, err.message) == (status, "Reason", "the message")
    assert str(err) == f"{status} Reason: the message"


def test_kube_raises_typed_errors_from_the_client() -> None:
    from kubernetes.client.rest import ApiException

    class Failing:
        def call_api(self, *args: object, **kwargs: object) -> None:
            exc = ApiException(status=409, reason="Conflict")
            exc.body = b'{"kind":"Status","reason":"Conflict","message":"the object has been modified"}'
            raise exc

    k = kube.Kube.__new__(kube.Kube)
    k.api_client = Failing()  # type: ignore[assignment]
    seen: list[tuple[str, str, str]] = []
    k.host, k.observers = "api:6443", [lambda method, code, host, _: seen.append((method, code, host))]
    with pytest.raises(kube.Conflict, match="the object has been modified"):
        k.request_once("PATCH", "/x", {})
    assert seen == [("PATCH", "409", "api:6443")]  # rest_client_requests_total{code="409",method="PATCH"}


def test_no_answer_is_a_server_error() -> None:
    import urllib3

    class Down:
        def call_api(self, *args: object, **kwargs: object) -> None:
            raise urllib3.exceptions.MaxRetryError(None, "/x", "connection refused")  # type: ignore[arg-type]

    k = kube.Kube.__new__(kube.Kube)
    k.api_client = Down()  # type: ignore[assignment]
    seen: list[str] = []
    k.host, k.observers = "api:6443", [lambda method, code, host, _: seen.append(code)]
    with pytest.raises(kube.ServerError) as exc:
        k.request_once("GET", "/x")
    assert exc.value.status == 0 and "connection refused" in exc.value.message
    assert seen == ["<error>"]  # client-go's code label for a request without an answer


def test_raw_http_answers_are_typed() -> None:
    body = b'{"kind":"Status","reason":"NotFound","message":"configmaps \\"x\\" not found","code":404}'
    err = kube.error_from_response(404, body, "GET /api/v1/x")
    assert type(err) is kube.NotFound and err.reason == "NotFound"
    assert err.message == 'GET /api/v1/x: configmaps "x" not found'
    assert type(kube.error_from_response(502, b"<html>bad gateway</html>")) is kube.ServerError
    kube.check_response(201, b"{}")  # a success raises nothing
    with pytest.raises(kube.Conflict):
        kube.check_response(409, b'{"kind":"Status","reason":"Conflict","message":"m"}')


def test_generated_client_errors_are_typed() -> None:
    from kubernetes.client.rest import ApiException

    exc = ApiException(status=404, reason="Not Found")
    exc.body = b'{"kind":"Status","reason":"NotFound","message":"leases \\"l\\" not found"}'
    err = kube.error_from_api_exception(exc)
    assert type(err) is kube.NotFound and err.message == 'leases "l" not found'


def test_kopf_client_errors_are_typed() -> None:
    from kopf._cogs.clients import errors as kopf_errors

    payload = {"apiVersion": "v1", "kind": "Status", "code": 410, "status": "Failure", "reason": "Expired",
               "message": "too old resource version"}
    err = kube.error_from_kopf(kopf_errors.APIClientError(payload, status=410, headers={}))  # type: ignore[arg-type]
    assert type(err) is kube.Gone and err.reason == "Expired" and err.message == "too old resource version"
    forbidden = kube.error_from_kopf(kopf_errors.APIForbiddenError("no", status=403, headers={}))
    assert type(forbidden) is kube.Forbidden
    assert kube.error_from_kopf(RuntimeError("not an API error")) is None
