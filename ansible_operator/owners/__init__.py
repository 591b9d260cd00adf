"""Owner references for objects roles create, done transparently by a loopback API proxy (see
:mod:`ansible_operator.owners.proxy`)."""

from __future__ import annotations

from ansible_operator.owners.proxy import (  # noqa: F401
    ANNOTATION_PRIMARY_RESOURCE,
    ANNOTATION_PRIMARY_RESOURCE_TYPE,
    OWN_PUT_APPLY_CREATES_ENV,
    Credentials,
    DependentKind,
    Owner,
    OwnerProxy,
    PassThroughCredentials,
    ProxyCredentials,
    RequestInfo,
    Upstream,
    inject_owner,
    injection_mode,
    own_put_apply_creates_from_env,
    owned_by_kind_of,
    owner_json_patch,
    owner_ref,
    parse_request_path,
    request_action,
)
from ansible_operator.owners.proxy import __all__ as __all__
from ansible_operator.owners.proxy import (
    _Discovery as _Discovery,
)
