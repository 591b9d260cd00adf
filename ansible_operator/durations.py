"""Go-style duration strings ("1h30m", "500ms", "1m0s") as used by Operator SDK's watches.yaml.

Operator SDK parses ``reconcilePeriod`` with Go's ``time.ParseDuration`` (via ``metav1.Duration``), so
a watches.yaml written for it uses that syntax. We accept the same syntax, plus plain numbers meaning
seconds (YAML ``reconcilePeriod: 30`` is an obvious intent that Go would reject). Negative durations
make no sense for any of our settings and are refused.

The implementation is the collection's ``module_utils/duration.py`` (``requeue_after`` needs it inside
Ansible, where this package may not be importable); this module gives the operator a typed entry to it.
"""

from __future__ import annotations

from ansible_operator.collections.ours.ansible_collections.ansible_operator.util.plugins.module_utils.duration import (  # noqa: E501
    go_duration_ns,
    parse_duration,
)

__all__ = ["go_duration_ns", "parse_duration"]
