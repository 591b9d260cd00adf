"""ObjectMeta label and annotation validation as kube-apiserver's does it (422 with its messages).

Keys are qualified names (``[prefix/]name``: a DNS-subdomain prefix up to 253 characters, a name up to 63
characters of alphanumerics, ``-``, ``_`` and ``.``, starting and ending alphanumeric); label values are empty
or a name-like string up to 63 characters; all annotations together may not exceed 256 KiB. Messages follow
``k8s.io/apimachinery/pkg/util/validation`` word for word; the key and value checks themselves are the
:mod:`ansible_operator_sandbox.labels` (shared with label selectors).
"""

from __future__ import annotations

import random
from typing import Any

from ansible_operator_sandbox import schema
from ansible_operator_sandbox.labels import label_value_errors, qualified_name_errors

ANNOTATIONS_MAX_BYTES = 256 * 1024


#: apimachinery's rand.String alphabet (no vowels, no look-alikes): generateName suffixes, pod-template
#: hashes, the service-account volume's name
SAFE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def random_suffix(length: int = 5) -> str:
    """What ``generateName`` appends (``rand.String(5)``)."""
    return "".join(random.choice(SAFE_ALPHABET) for _ in range(length))


def validate_labels(labels: Any, path: str = "metadata.labels") -> list[schema.FieldError]:
    """``ValidateLabels``: each key a qualified name, each value a label value (one error per detail)."""
    if not isinstance(labels, dict):
        return []
    out: list[schema.FieldError] = []
    for k, v in labels.items():
        out.extend(schema.invalid(path, k, d) for d in qualified_name_errors(str(k)))
        if isinstance(v, str):
            out.extend(schema.invalid(path, v, d) for d in label_value_errors(v))
    return out


def validate_annotations(annotations: Any, path: str = "metadata.annotations") -> list[schema.FieldError]:
    """``ValidateAnnotations``: keys are qualified names (checked lower-cased), total size at most 256 KiB."""
    if not isinstance(annotations, dict):
        return []
    out: list[schema.FieldError] = []
    total = 0
    for k, v in annotations.items():
        out.extend(schema.invalid(path, k, d) for d in qualified_name_errors(str(k).lower()))
        total += len(str(k).encode()) + len((str(v) if v is not None else "").encode())  # bytes, as Go len()
    if total > ANNOTATIONS_MAX_BYTES:
        out.append(schema.FieldError("FieldValueTooLong", path,
                                     f"Too long: may not be more than {ANNOTATIONS_MAX_BYTES} bytes"))
    return out


def validate_metadata(meta: Any) -> list[schema.FieldError]:
    """Label and annotation errors of one ObjectMeta."""
    if not isinstance(meta, dict):
        return []
    return validate_labels(meta.get("labels")) + validate_annotations(meta.get("annotations"))
