"""What an API request path addresses, and what the owner proxy does with a request to it.

:func:`parse_request_path` follows kube-apiserver's RequestInfo rules; :func:`request_action` is the
create-only rule of :mod:`ansible_operator.owners.injection` applied to a request.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["APPLY_PATCH", "Action", "RequestInfo", "parse_request_path", "request_action"]

APPLY_PATCH = "application/apply-patch+yaml"


@dataclass(frozen=True)
class RequestInfo:
    """What an API path addresses (a subset of kube-apiserver's RequestInfo)."""

    group: str
    version: str
    resource: str
    namespace: str | None = None
    name: str | None = None
    subresource: str | None = None
    watch_path: bool = False


def parse_request_path(path: str) -> RequestInfo | None:
    """``/api/v1/namespaces/ns/configmaps/x`` -> RequestInfo; ``None`` for non-resource paths (discovery,
    ``/version``, ``/openapi``...). Follows kube-apiserver's rules, including ``namespaces/<ns>/status``."""
    parts = [p for p in path.split("/") if p]
    if not parts:
        return None
    if parts[0] == "api":
        if len(parts) < 2:
            return None
        group, version, rest = "", parts[1], parts[2:]
    elif parts[0] == "apis":
        if len(parts) < 3:
            return None
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    watch_path = False
    if rest and rest[0] == "watch":
        watch_path, rest = True, rest[1:]
    if not rest:
        return None
    namespace = None
    if rest[0] == "namespaces" and len(rest) >= 2:
        namespace = rest[1]
        if len(rest) > 2 and rest[2] not in ("status", "finalize"):
            rest = rest[2:]
        else:
            # the Namespace object itself (or its status/finalize subresource)
            return RequestInfo(group, version, "namespaces", None, rest[1],
                               rest[2] if len(rest) > 2 else None, watch_path)
    return RequestInfo(group, version, rest[0], namespace,
                       rest[1] if len(rest) > 1 else None,
                       "/".join(rest[2:]) or None, watch_path)


Action = Literal["inject", "own_if_created", "recover", "forward"]


def request_action(method: str, info: RequestInfo, content_type: str) -> Action:
    """What the proxy does with a request to a resource path (see :mod:`ansible_operator.owners`).

    ``inject``: ``POST`` to a collection (a create) -- the owner goes into the body, as in SDK;
    ``own_if_created``: ``PUT`` or server-side apply of a named object -- forwarded untouched, the owner is
    added afterwards only if the API server created the object (``201``);
    ``recover``: ``GET`` of one object -- forwarded, and an object already owned by the run's kind
    restarts the dependent watch for its kind; ``forward``: everything else, untouched.
    """
    if info.subresource or info.watch_path:
        return "forward"
    if method == "POST":
        return "inject" if info.name is None else "forward"
    if method == "PUT" and info.name is not None:
        return "own_if_created"
    if method == "PATCH" and info.name is not None and content_type == APPLY_PATCH:
        return "own_if_created"
    if method == "GET" and info.name is not None:
        return "recover"
    return "forward"

