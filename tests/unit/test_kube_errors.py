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
    with pytest.raises(kube.Conflict, match="the object has been modified"):
        k._request_sync("PATCH", "/x", {}, None, [])


def test_no_answer_is_a_server_error() -> None:
    import urllib3

    class Down:
        def call_api(self, *args: object, **kwargs: object) -> None:
            raise urllib3.exceptions.MaxRetryError(None, "/x", "connection refused")  # type: ignore[arg-type]

    k = kube.Kube.__new__(kube.Kube)
    k.api_client = Down()  # type: ignore[assignment]
    with pytest.raises(kube.ServerError) as exc:
        k._request_sync("GET", "/x", None, None, [])
    assert exc.value.status == 0 and "connection refused" in exc.value.message
