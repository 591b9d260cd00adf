"""Prometheus metrics and the ``/metrics``, ``/healthz``, ``/readyz`` HTTP endpoints.

Every metric lives in a ``CollectorRegistry`` owned by one ``Metrics`` object rather than in
prometheus_client's process-global default registry: tests (and an embedded operator next to another
one) can create as many as they like without "Duplicated timeseries" errors.

Metrics are labelled by *watch* (``Watch.key``, i.e. ``Kind.group``), the same name logs use. Operator
SDK's Ansible operator metric names (``ansible_operator_reconciles`` histogram,
``ansible_operator_reconcile_result``, ``ansible_operator_build_info``) are kept next to ours, with its
``GVK`` label, so existing dashboards keep working.

controller-runtime's own series, which the SDK's ``/metrics`` has and users' dashboards and alerts read
(``controller_runtime_reconcile_total{controller,result}``, ``..._reconcile_time_seconds``, ``workqueue_*``
with ``name`` and ``controller``...), are exported with controller-runtime 0.19's names, labels and buckets
(the version the SDK's current ansible-operator is built with) by ``ControllerMetrics``, one per watch,
which the work queue calls (``queue.QueueHooks``). The ``controller`` label is the SDK's controller name,
``<kind>-<version>-controller`` in lower case (``memcached-v1alpha1-controller``).

Custom metrics from roles (``operator_sdk.util.osdk_metric``) are ``UserMetrics``: the JSON the collection
POSTs to ``http://localhost:5050/metrics`` (``serve_osdk_metric``), applied with the rules of the SDK's
``internal/ansible/metrics/metrics.go`` and exported under exactly the name the role gave (no ``_total``
suffix, no labels), as the SDK's Go client does.

The HTTP side is a tiny aiohttp app. ``serve`` starts one listener; ``serve_endpoints`` starts one or two
depending on whether metrics and health probes share an address (they do not by default: ``:8443`` and
``:6789``, as in Operator SDK). ``--metrics-secure`` serves HTTPS (``tls_context``), and
``--metrics-require-rbac`` puts ``RbacFilter`` (TokenReview + SubjectAccessReview) in front of ``/metrics``.
"""

from __future__ import annotations

from ansible_operator.metrics.http import (
    RbacFilter,
    ReadyCheck,
    ServerHandle,
    close_all,
    parse_bind_address,
    serve,
    serve_endpoints,
    tls_context,
)
from ansible_operator.metrics.registry import (
    RECONCILE_TIME_BUCKETS,
    RUN_DURATION_BUCKETS,
    WORKQUEUE_BUCKETS,
    ControllerMetrics,
    Metrics,
    controller_name,
)
from ansible_operator.metrics.roles import (
    OSDK_METRIC_ENV,
    UserMetricError,
    UserMetrics,
    installed_osdk_util,
    serve_osdk_metric,
    start_osdk_metric_endpoint,
)
from ansible_operator.metrics.text import go_float

__all__ = [
    "RECONCILE_TIME_BUCKETS",
    "RUN_DURATION_BUCKETS",
    "OSDK_METRIC_ENV",
    "WORKQUEUE_BUCKETS",
    "ControllerMetrics",
    "Metrics",
    "RbacFilter",
    "ReadyCheck",
    "ServerHandle",
    "UserMetricError",
    "UserMetrics",
    "close_all",
    "controller_name",
    "installed_osdk_util",
    "parse_bind_address",
    "serve",
    "serve_endpoints",
    "serve_osdk_metric",
    "start_osdk_metric_endpoint",
    "go_float",
    "tls_context",
]
