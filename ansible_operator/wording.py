"""How a task result is put into words for people: Secret values redacted, a failure as one line.

The one owner of this wording: results (the failed task of a ``RunResult``, hence status conditions and
Events), logs (task lines) and ``ansible-operator runs`` (a run's tasks) all use it, so a failure reads the
same everywhere and no Secret value reaches any of them.

* :func:`redact_result`: a copy of a task result with every Kubernetes Secret value replaced, at any depth
  and in any free text of the result (and of later results of the same run);
* :func:`failure_message`: the most useful single line of a failed result: the module's ``msg``, except
  when that is generic ("non-zero return code", "MODULE FAILURE") and stderr says more; Kubernetes API
  errors from kubernetes.core are reduced to the API's own message plus the HTTP status and reason.
"""

from __future__ import annotations

import ast
import base64
import binascii
import json
import re
from typing import Any, Mapping

__all__ = ["failure_message", "one_line", "redact_result", "REDACTED", "MAX_MESSAGE"]

MAX_MESSAGE = 1000
_GENERIC_MESSAGES = {
    "",
    "non-zero return code",
    "the command exited with a non-zero return code.",  # ansible-core 2.20+'s command/shell modules
    "module failure",
    "module failure\nsee stdout/stderr for the exact error",
    "all items completed",
    "one or more items failed",
}

REDACTED = "<redacted>"
_SECRET_FIELDS = ("data", "stringData")
_MIN_SCRUBBED = 4
"""Secret values shorter than this are not searched for in free text (they would match everywhere)."""


def _is_secret(obj: Mapping[str, Any]) -> bool:
    if obj.get("kind") == "Secret":
        return True
    # List items (k8s_info ``resources``, a ``get`` of a list) carry no kind; a Secret always has ``type``.
    meta = obj.get("metadata")
    return (isinstance(obj.get("type"), str) and isinstance(meta, Mapping) and "name" in meta
            and any(isinstance(obj.get(f), Mapping) for f in _SECRET_FIELDS))


def _asks_for_secrets(res: Mapping[str, Any]) -> bool:
    """A module called with ``kind: Secret`` (k8s, k8s_info...): every data/stringData in its result is."""
    invocation = res.get("invocation")
    args = invocation.get("module_args") if isinstance(invocation, Mapping) else None
    return isinstance(args, Mapping) and str(args.get("kind") or "").lower() in ("secret", "secrets")


def _secret_values(values: Mapping[str, Any], field_name: str, found: set[str]) -> None:
    for value in values.values():
        if not isinstance(value, str) or not value:
            continue
        found.add(value)
        if field_name == "data":  # base64 in the API; roles often decode it (b64decode) and print that
            try:
                decoded = base64.b64decode(value, validate=True).decode("utf-8")
            except (binascii.Error, ValueError):
                continue
            if decoded:
                found.add(decoded)


def redact_result(res: Any, seen: set[str] | None = None) -> Any:
    """A copy of a task result in which no Secret value survives, at any verbosity.

    Kubernetes Secrets anywhere in the result (``kind: Secret``, kind-less list items shaped like one, or
    anything returned by a module called with ``kind: Secret``) get every ``data``/``stringData`` value
    replaced by ``<redacted>``; then every occurrence of those values (and of the base64-decoded ``data``
    values) in any string of the same result (``msg``, ``stdout``, a loop ``item``...) is replaced too.
    Values Ansible already censored (``no_log``) stay censored.

    ``seen`` (one set per run) remembers the values found so far, so a later task of the same run that
    prints one (``fail: msg="{{ secret.data.pw | b64decode }}"``) has it scrubbed too.
    """
    if not isinstance(res, Mapping):
        return res
    found: set[str] = set()
    everything = _asks_for_secrets(res)

    def walk(value: Any, in_secret: bool) -> Any:
        if isinstance(value, Mapping):
            secret = in_secret or _is_secret(value)
            out: dict[str, Any] = {}
            for key, item in value.items():
                if key in _SECRET_FIELDS and isinstance(item, Mapping) and (secret or everything):
                    _secret_values(item, key, found)
                    out[key] = {k: REDACTED for k in item}
                else:
                    out[key] = walk(item, False)
            return out
        if isinstance(value, list):
            return [walk(item, in_secret) for item in value]
        return value

    redacted = walk(res, False)
    if seen is not None:
        seen.update(v for v in found if len(v) >= _MIN_SCRUBBED)
        found = found | seen
    secrets = sorted((v for v in found if len(v) >= _MIN_SCRUBBED), key=len, reverse=True)
    if not secrets:
        return redacted

    def scrub(value: Any) -> Any:
        if isinstance(value, str):
            for secret in secrets:
                if secret in value:
                    value = value.replace(secret, REDACTED)
            return value
        if isinstance(value, Mapping):
            return {k: scrub(v) for k, v in value.items()}
        if isinstance(value, list):
            return [scrub(v) for v in value]
        return value

    return scrub(redacted)


# ---- messages --------------------------------------------------------------------------------------


def one_line(text: str, limit: int = MAX_MESSAGE) -> str:
    """``text`` on one line (whitespace runs collapsed), cut to ``limit`` characters with an ellipsis."""
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _last_line(text: Any) -> str:
    if isinstance(text, list):
        text = "\n".join(str(t) for t in text)
    lines = [ln.strip() for ln in str(text or "").splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def _api_status(msg: str) -> dict[str, Any] | None:
    """A Kubernetes ``Status`` body embedded in a kubernetes.core error message, e.g.
    ``Failed to create object: b'{"kind":"Status",...,"message":"...","reason":"Invalid","code":422}'``."""
    start, end = msg.find("{"), msg.rfind("}")
    if start < 0 or end <= start:
        return None
    body = msg[start: end + 1]
    candidates = [body]
    if msg[start - 2: start] in ("b'", 'b"'):  # str(bytes): a Python literal, escapes and all
        try:
            raw = ast.literal_eval(msg[start - 2: msg.rfind(msg[start - 1]) + 1])
            candidates.insert(0, raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw))
        except (ValueError, SyntaxError):
            pass
    for text in candidates:
        try:
            data = json.loads(text)
        except ValueError:
            continue
        if isinstance(data, dict) and isinstance(data.get("message"), str):
            return data
    m = re.search(r'"message"\s*:\s*"((?:[^"\\]|\\.)*)"', body)
    if not m:
        return None
    out: dict[str, Any] = {"message": m.group(1).replace('\\"', '"')}
    code = re.search(r'"code"\s*:\s*(\d+)', body)
    reason = re.search(r'"reason"\s*:\s*"([^"]*)"', body)
    if code:
        out["code"] = int(code.group(1))
    if reason:
        out["reason"] = reason.group(1)
    return out


def failure_message(res: Mapping[str, Any] | None) -> str:
    """The most useful one-line text of a failed (or unreachable) task result."""
    if not isinstance(res, Mapping):
        return "task failed"
    results = res.get("results")
    if isinstance(results, list):
        for item in results:
            if isinstance(item, Mapping) and (item.get("failed") or item.get("unreachable")):
                label = item.get("_ansible_item_label", item.get("item"))
                text = failure_message(item)
                return one_line(f"{text} (item={label!r})" if label is not None else text)
    msg = res.get("msg")
    if isinstance(msg, str):
        msg_text = one_line(msg)
    else:
        msg_text = one_line(json.dumps(msg)) if msg is not None else ""

    if isinstance(msg, str) and "{" in msg:
        api = _api_status(msg)
        if api is not None:
            head = msg[: msg.find("{")].rstrip(" b'\"")
            prefix = head[:-1].strip() if head.endswith(":") else head.strip()
            code = api.get("code", res.get("status"))
            reason = api.get("reason", res.get("reason"))
            detail = " ".join(str(x) for x in (code, reason) if x not in (None, ""))
            text = f"{prefix}: {api['message']}" if prefix else str(api["message"])
            return one_line(f"{text} ({detail})" if detail else text)
    status, reason = res.get("status"), res.get("reason")
    if isinstance(status, int) and not isinstance(status, bool) and msg_text:
        detail = f"{status} {reason}" if isinstance(reason, str) and reason else str(status)
        return one_line(f"{msg_text} ({detail})")

    generic = msg_text.lower() in _GENERIC_MESSAGES or msg_text.lower().startswith("module failure")
    if msg_text and not generic:
        return msg_text
    for key in ("stderr", "module_stderr", "stdout", "module_stdout", "reason"):
        line = _last_line(res.get(key))
        if line:
            rc = res.get("rc")
            suffix = f" (rc={rc})" if isinstance(rc, int) and key in ("stderr", "stdout") else ""
            return one_line(line + suffix)
    exc = _last_line(res.get("exception"))
    if exc and exc != "(traceback unavailable)":
        return one_line(exc)
    if res.get("censored"):
        return one_line(str(res["censored"]))
    if msg_text:
        rc = res.get("rc")
        return msg_text + (f" (rc={rc})" if isinstance(rc, int) else "")
    return "task failed"
