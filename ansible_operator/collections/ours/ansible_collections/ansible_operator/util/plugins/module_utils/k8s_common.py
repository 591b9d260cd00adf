# -*- coding: utf-8 -*-
# Apache-2.0 (see the project's LICENSE)
"""Shared plumbing for this collection's modules: kubernetes.core's argument specs and API client.

We build on kubernetes.core's module_utils rather than re-implementing authentication so our modules
accept exactly the same connection options (``kubeconfig``, ``context``, ``host``, ``api_key``,
``validate_certs``, ``impersonate_user``...) and the same ``K8S_AUTH_*`` environment variables as
``kubernetes.core.k8s`` -- which is how the operator points a run at its per-run kubeconfig.
"""

from __future__ import absolute_import, annotations, division, print_function

import copy
import json
from typing import TYPE_CHECKING

__metaclass__ = type

from ansible_collections.kubernetes.core.plugins.module_utils.args_common import AUTH_ARG_SPEC

IMPORT_ERROR = None
try:
    from ansible_collections.kubernetes.core.plugins.module_utils.k8s.client import get_api_client
    from ansible_collections.kubernetes.core.plugins.module_utils.k8s.exceptions import CoreException
    from kubernetes.dynamic.exceptions import DynamicApiError, ResourceNotFoundError, ResourceNotUniqueError
except ImportError as exc:  # reported by AnsibleK8SModule's "requires kubernetes" check
    IMPORT_ERROR = exc

if TYPE_CHECKING:  # annotations only: never evaluated (postponed), so no import at run time
    from typing import Any

    from ansible_collections.kubernetes.core.plugins.module_utils.k8s.client import K8SClient
    from ansible_collections.kubernetes.core.plugins.module_utils.k8s.core import AnsibleK8SModule
    from kubernetes.dynamic.resource import Resource

NAME_ARG_SPEC = {
    "api_version": {"type": "str", "default": "v1", "aliases": ["api", "version"]},
    "kind": {"type": "str", "required": True},
    "name": {"type": "str", "required": True},
    "namespace": {"type": "str"},
}


def auth_argspec() -> dict[str, Any]:
    """A fresh copy of kubernetes.core's connection options (callers extend it)."""
    return copy.deepcopy(AUTH_ARG_SPEC)


def client_for(module: AnsibleK8SModule) -> K8SClient | None:
    """kubernetes.core's DynamicClient wrapper for this module's connection options."""
    try:
        return get_api_client(module=module)
    except CoreException as exc:
        module.fail_json(msg=str(exc))
    except Exception as exc:  # kubeconfig unreadable, no in-cluster config...
        module.fail_json(msg="Could not create an API client: {0}".format(exc))
    return None


def find_resource(client: K8SClient, kind: str, api_version: str) -> Resource | None:
    """The API resource for ``kind`` (also accepts plural, singular and short names), or ``None``."""
    try:
        return client.resource(kind, api_version)
    except (ResourceNotFoundError, ResourceNotUniqueError):
        return None


def api_error(exc: Exception) -> dict[str, Any]:
    """A compact, JSON-friendly description of an API error for ``fail_json``."""
    body = getattr(exc, "body", None)
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    try:
        body = json.loads(body) if isinstance(body, str) else body
    except ValueError:
        pass
    message = body.get("message") if isinstance(body, dict) else None
    return {
        "status": getattr(exc, "status", None),
        "reason": getattr(exc, "reason", None),
        "message": message,
        "body": body,
    }


def is_api_error(exc: Exception, status: int | None = None) -> bool:
    if IMPORT_ERROR is not None or not isinstance(exc, DynamicApiError):
        return False
    return status is None or getattr(exc, "status", None) == status
