"""The ``metav1.Status`` bodies the owner proxy answers with itself (401, refusals, upstream failures)."""

from __future__ import annotations

import http
import json

__all__ = ["status_body", "status_reason"]


def status_reason(code: int) -> str:
    """metav1.StatusReason for an HTTP status (``Forbidden``, ``NotFound``, ``BadRequest``...)."""
    try:
        return http.HTTPStatus(code).phrase.replace(" ", "")
    except ValueError:
        return "Unknown"


def status_body(code: int, reason: str, message: str) -> bytes:
    return json.dumps({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                       "message": message, "reason": reason, "code": code}).encode()
