"""Label and annotation validation as kube-apiserver's ObjectMeta validation does it (422 with its messages).

Keys are qualified names (``[prefix/]name``: a DNS-subdomain prefix up to 253 characters, a name up to 63
characters of alphanumerics, ``-``, ``_`` and ``.``, starting and ending alphanumeric); label values are empty
or a name-like string up to 63 characters; all annotations together may not exceed 256 KiB. Messages follow
``k8s.io/apimachinery/pkg/util/validation`` word for word.
"""

from __future__ import annotations

import re
from typing import Any

from ansible_operator.sandbox import schema

_QNAME_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_QNAME = re.compile(f"^{_QNAME_FMT}$")
_LABEL_VALUE = re.compile(f"^({_QNAME_FMT})?$")
_DNS1123_SUBDOMAIN_FMT = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
_DNS1123_SUBDOMAIN = re.compile(f"^{_DNS1123_SUBDOMAIN_FMT}$")
_QNAME_MAX = 63
_SUBDOMAIN_MAX = 253
ANNOTATIONS_MAX_BYTES = 256 * 1024

_QNAME_ERR = ("must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
              "alphanumeric character")
_QNAME_EXAMPLES = (
    "(e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '" + _QNAME_FMT + "')"
)
_SUBDOMAIN_ERR = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used "
    "for validation is '" + _DNS1123_SUBDOMAIN_FMT + "')"
)
_LABEL_VALUE_ERR = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
    "'my_value',  or '12345', regex used for validation is '(" + _QNAME_FMT + ")?')"
)


def qualified_name_errors(value: str) -> list[str]:
    """``validation.IsQualifiedName``: the detail strings for a bad label/annotation key (empty when
    valid)."""
    parts = value.split("/")
    if len(parts) == 1:
        name = parts[0]
        errs: list[str] = []
    elif len(parts) == 2:
        prefix, name = parts
        errs = []
        if not prefix:
            errs.append("prefix part must be non-empty")
        else:
            if len(prefix) > _SUBDOMAIN_MAX:
                errs.append(f"prefix part must be no more than {_SUBDOMAIN_MAX} characters")
            if not _DNS1123_SUBDOMAIN.match(prefix):
                errs.append(f"prefix part {_SUBDOMAIN_ERR}")
    else:
        return [
            f"a qualified name {_QNAME_ERR} {_QNAME_EXAMPLES} with an optional DNS subdomain prefix and '/' "
            "(e.g. 'example.com/MyName')"
        ]
    if not name:
        errs.append("name part must be non-empty")
    elif len(name) > _QNAME_MAX:
        errs.append(f"name part must be no more than {_QNAME_MAX} characters")
    if name and not _QNAME.match(name):
        errs.append(f"name part {_QNAME_ERR} {_QNAME_EXAMPLES}")
    return errs


def label_value_errors(value: str) -> list[str]:
    """``validation.IsValidLabelValue``."""
    errs = []
    if len(value) > _QNAME_MAX:
        errs.append(f"must be no more than {_QNAME_MAX} characters")
    if not _LABEL_VALUE.match(value):
        errs.append(_LABEL_VALUE_ERR)
    return errs


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
