"""Owner references for objects roles create, done transparently by a loopback API proxy.

Roles talk to the cluster through kubernetes.core, which only knows "a kubeconfig". Like Operator SDK we
give each run a kubeconfig that points at a small reverse proxy in the operator process; the credential
in that kubeconfig identifies the custom resource (CR) being reconciled, and the proxy adds the owner to
every object the run creates:

* an ``ownerReference`` (apiVersion, kind, name, uid) when the owner is cluster-scoped, or when both are
  namespaced in the same namespace -- Kubernetes garbage-collects these with the CR;
* otherwise (cluster-scoped dependent of a namespaced CR, or another namespace) the two annotations
  ``operator-sdk/primary-resource: <ns>/<name>`` and ``operator-sdk/primary-resource-type: <Kind>.<group>``,
  which :mod:`ansible_operator.dependents` uses to find the owner again.

Owners are added on **create only**, as Operator SDK's proxy does: ``injectOwnerReferenceHandler``
(``internal/ansible/proxy/inject_owner.go`` in operator-framework/ansible-operator-plugins) rewrites the
body of ``POST`` requests and nothing else, deciding the form with ``k8sutil.SupportsOwnerReference``. An
object that already exists is never given a new owner: an update (``PUT``, kubernetes.core's
``force: true``), a patch or a server-side apply of an existing object is forwarded untouched, so a role
that rewrites a user's pre-existing object (say, a finalizer role force-updating a ConfigMap) does not make
it a dependent that garbage collection deletes with the CR. The one case SDK misses: ``PUT`` and
server-side apply (``PATCH`` with ``application/apply-patch+yaml``) *create* the object when it is absent.
When the API server answers such a request ``201 Created``, the proxy adds the owner right after, with a
JSON patch guarded by the new object's ``uid`` (field manager ``ansible-operator``, so the role's later
applies, which do not list the reference, do not remove it) and hands the role the patched object.
``ANSIBLE_OPERATOR_OWNER_ON_APPLY_CREATE=false`` (or ``OwnerProxy(own_put_apply_creates=False)``) turns
that off for SDK's exact behaviour: objects a ``PUT``/apply creates get no owner and outlive the CR.
As in SDK, a ``PUT`` replaces ``metadata`` too: a reference the role's definition does not list is dropped.

The owner reference carries neither ``controller`` nor ``blockOwnerDeletion`` (SDK sets neither; setting
``controller: true`` would make creating an object that already has a controller reference fail, and
``blockOwnerDeletion`` needs extra RBAC on the CR's ``finalizers`` subresource on clusters that enforce it).

Dependent watches (:mod:`ansible_operator.dependents`) are started for a kind when a run creates an object
of it, and -- like SDK's ``recoverDependentWatches`` in ``cache_response.go`` -- when a run reads
(``GET``) an object that already carries an owner of the run's kind, so watches come back after a restart
even if the roles only update what exists.

Everything else -- reads, watches (streamed chunk by chunk), deletes, other patches, subresources,
status codes, headers -- is forwarded unchanged to the real API server using the operator's own
connection settings (TLS, bearer token or basic auth), so it works against any cluster, not just the
sandbox. Requests with an unknown token get ``401``; the token is the only thing tying a request to an
owner, and it lives only for one run (:meth:`~ansible_operator.owners.proxy.OwnerProxy.release`).

The package, one module per concern:

* :mod:`~ansible_operator.owners.injection` -- the rules: :class:`Owner`, :class:`DependentKind`, which form
  the owner takes (:func:`injection_mode`), adding it to a body (:func:`inject_owner`) or to a created object
  (:func:`owner_json_patch`), :func:`owned_by_kind_of`;
* :mod:`~ansible_operator.owners.paths` -- what a request path addresses (:func:`parse_request_path`) and
  what the proxy does with the request (:func:`request_action`);
* :mod:`~ansible_operator.owners.credentials` -- what each run is given to reach the cluster
  (:class:`Credentials`, asked by reconcile once per run): :class:`ProxyCredentials` (a kubeconfig for the
  proxy, the default) or :class:`PassThroughCredentials` (the operator's own kubeconfig,
  ``--inject-owner-ref=false``);
* :mod:`~ansible_operator.owners.proxy` -- :class:`OwnerProxy`, the aiohttp proxy applying the rules;
  :mod:`~ansible_operator.owners.upstream` (the real API server: connection settings, discovery, timeouts),
  :mod:`~ansible_operator.owners.forward` (plain and streamed forwarding),
  :mod:`~ansible_operator.owners.relay` (WebSocket relay for exec/attach/port-forward) and
  :mod:`~ansible_operator.owners.statuses` (the ``Status`` bodies the proxy answers with) under it.

The names below are re-exported for code embedding the runner; the runner itself imports each from its
module.
"""

from __future__ import annotations

from ansible_operator.owners.credentials import Credentials, PassThroughCredentials, ProxyCredentials
from ansible_operator.owners.injection import (
    ANNOTATION_PRIMARY_RESOURCE,
    ANNOTATION_PRIMARY_RESOURCE_TYPE,
    OWN_PUT_APPLY_CREATES_ENV,
    DependentKind,
    Owner,
    inject_owner,
    injection_mode,
    own_put_apply_creates_from_env,
    owned_by_kind_of,
    owner_json_patch,
    owner_ref,
)
from ansible_operator.owners.paths import RequestInfo, parse_request_path, request_action
from ansible_operator.owners.proxy import OwnerProxy
from ansible_operator.owners.upstream import Upstream

__all__ = [
    "ANNOTATION_PRIMARY_RESOURCE",
    "ANNOTATION_PRIMARY_RESOURCE_TYPE",
    "Credentials",
    "DependentKind",
    "Owner",
    "OwnerProxy",
    "PassThroughCredentials",
    "ProxyCredentials",
    "RequestInfo",
    "Upstream",
    "inject_owner",
    "injection_mode",
    "owner_ref",
    "OWN_PUT_APPLY_CREATES_ENV",
    "own_put_apply_creates_from_env",
    "owned_by_kind_of",
    "owner_json_patch",
    "parse_request_path",
    "request_action",
]
