"""Kubernetes ``Status`` failures as exceptions, so every handler error becomes a faithful API response.

Clients branch on ``code`` and ``reason`` (kubectl prints ``message``; the Python client raises
``ApiException(status=code)``; kopf retries on 409/410), so these mirror kube-apiserver's wording.
"""

from __future__ import annotations

from typing import Any

from ansible_operator_sandbox.resources import ResourceType


class ApiError(Exception):
    """An API failure rendered as a ``Status`` object with an HTTP code."""

    def __init__(self, code: int, reason: str, message: str, details: dict[str, Any] | None = None,
                 metadata: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.metadata = metadata or {}
        """ListMeta of the Status (a 410 for an expired continue token carries a fresh token)."""

    def status(self) -> dict[str, Any]:
        """The ``Status`` in metav1.Status field order (kind, apiVersion, metadata, status, message, reason,
        details, code), details in StatusDetails order (name, group, kind, uid, causes, retryAfterSeconds)."""
        body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": dict(self.metadata),
                                "status": "Failure",
                                "message": self.message, "reason": self.reason}
        if self.details is not None:
            body["details"] = _ordered_details(self.details)
        body["code"] = self.code
        return body


_DETAIL_ORDER = ("name", "group", "kind", "uid", "causes", "retryAfterSeconds")
_CAUSE_ORDER = ("reason", "message", "field")


def _ordered_details(details: dict[str, Any]) -> dict[str, Any]:
    """StatusDetails as Go serializes it: struct field order, empty (omitempty) fields left out."""
    out: dict[str, Any] = {}
    for k in _DETAIL_ORDER:
        v = details.get(k)
        if v in (None, "", 0, []):
            continue
        if k == "causes":
            v = [{ck: c[ck] for ck in _CAUSE_ORDER if c.get(ck) not in (None, "")} for c in v]
        out[k] = v
    out.update({k: v for k, v in details.items() if k not in _DETAIL_ORDER})
    return out


def success_status(rtype: ResourceType, name: str, uid: str | None) -> dict[str, Any]:
    """What kube-apiserver answers to a DELETE of a kind whose registry does not return the deleted object."""
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": _ordered_details({"name": name, "group": rtype.group, "kind": rtype.plural, "uid": uid}),
    }


def _details(rtype: ResourceType | None, name: str | None, **extra: Any) -> dict[str, Any]:
    d: dict[str, Any] = {}
    if name:
        d["name"] = name
    if rtype is not None:
        if rtype.group:
            d["group"] = rtype.group
        d["kind"] = rtype.plural
    d.update(extra)
    return d


def not_found(rtype: ResourceType, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{rtype.qualified} "{name}" not found', _details(rtype, name))


def namespace_not_found(name: str) -> ApiError:
    return ApiError(404, "NotFound", f'namespaces "{name}" not found', {"name": name, "kind": "namespaces"})


def already_exists(rtype: ResourceType, name: str) -> ApiError:
    return ApiError(409, "AlreadyExists", f'{rtype.qualified} "{name}" already exists', _details(rtype, name))


def conflict(rtype: ResourceType, name: str, why: str | None = None) -> ApiError:
    why = why or "the object has been modified; please apply your changes to the latest version and try again"
    return ApiError(409, "Conflict", f'Operation cannot be fulfilled on {rtype.qualified} "{name}": {why}',
                    _details(rtype, name))


def invalid(rtype: ResourceType, name: str, causes: list[dict[str, str]], message: str) -> ApiError:
    return ApiError(422, "Invalid", message,
                    {"name": name, "group": rtype.group, "kind": rtype.kind, "causes": causes})


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def forbidden(rtype: ResourceType | None, name: str, why: str) -> ApiError:
    what = f'{rtype.qualified} "{name}"' if rtype is not None else f'"{name}"'
    return ApiError(403, "Forbidden", f"{what} is forbidden: {why}", _details(rtype, name))


def method_not_allowed(message: str = "the server does not allow this method on the requested resource"
                       ) -> ApiError:
    return ApiError(405, "MethodNotAllowed", message)


#: the body types kube-apiserver 1.36 names in a 415 (CBOR is off), for built-in kinds and custom resources
BODY_MEDIA_TYPES = "application/json, application/yaml, application/vnd.kubernetes.protobuf"


def unsupported_media_type(content_type: str, accepted: str = BODY_MEDIA_TYPES) -> ApiError:
    """A body (or patch) type the handler cannot decode, without details as apimachinery's
    negotiation.NewUnsupportedMediaTypeError."""
    return ApiError(
        415,
        "UnsupportedMediaType",
        f"the body of the request was in an unknown format - accepted media types include: {accepted}",
    )


def unsupported_patch_route() -> ApiError:
    """A PATCH of a built-in kind whose Content-Type is not a patch type (none, ``application/json``...):
    kube-apiserver's go-restful routes refuse it before any handler runs, with their own message and an
    empty ``details``."""
    return ApiError(415, "UnsupportedMediaType", "415: Unsupported Media Type", {})


def request_entity_too_large(limit: int) -> ApiError:
    return ApiError(413, "RequestEntityTooLarge", f"Request entity too large: limit is {limit}")


def no_containers(rtype: ResourceType, name: str, sub: str) -> ApiError:
    """pods/log, pods/exec, ... : the sandbox has no kubelet, so say so instead of a generic 404."""
    return ApiError(
        400,
        "BadRequest",
        f'{rtype.plural}/{sub} of {rtype.kind.lower()} "{name}" is not supported by '
        f"the sandbox: no containers run (no kubelet, no container runtime)",
    )


def path_not_found() -> ApiError:
    return ApiError(404, "NotFound", "the server could not find the requested resource", {})


def gone(message: str) -> ApiError:
    return ApiError(410, "Expired", message)
