"""Secure mode of the sandbox: TLS material, authentication, ServiceAccount tokens and the RBAC authorizer.

What kube-apiserver does, reduced to what clients can observe:

* **TLS**: a CA generated per sandbox (kept in ``<data-dir>/pki`` when there is a data dir), a serving
  certificate for the listen address, ``localhost`` and ``127.0.0.1``/``::1``, and client certificates it
  signs (CN = user, O = groups, as kube-apiserver's x509 authenticator reads them). The written kubeconfig
  holds the CA and an admin client certificate in ``system:masters``.
* **Authentication** (``authenticate``): a verified client certificate, or a bearer ServiceAccount token (a
  JWT signed RS256 by the sandbox's service-account key, checked for signature, expiry, audience and that
  the ServiceAccount still exists with the same uid). A request with no credentials is ``system:anonymous``;
  a request with bad credentials gets ``401 Unauthorized``.
* **TokenRequest** (``serviceaccounts/<name>/token``, what ``kubectl create token`` calls), **TokenReview**
  and **SelfSubjectReview** (``kubectl auth whoami``), **SubjectAccessReview**, **LocalSubjectAccessReview**
  and **SelfSubjectAccessReview** (``kubectl auth can-i``), answered by the same authorizer that guards
  requests.
* **Authorization** (``RBACAuthorizer``): ``system:masters`` is always allowed (kube-apiserver's privileged
  group authorizer), everyone else is evaluated against the stored Role/ClusterRole/RoleBinding/
  ClusterRoleBinding objects exactly as ``plugin/pkg/auth/authorizer/rbac/rbac.go`` does:
  ClusterRoleBindings first, then RoleBindings of the request's namespace; verbs, apiGroups, resources with
  subresources (``pods/status``, ``*/scale``), resourceNames and nonResourceURLs (``/healthz``,
  ``/apis/*``). A ClusterRole with an ``aggregationRule`` has the rules of the ClusterRoles its selectors
  match (what the aggregation controller would write into it). Denials are ``403 Forbidden`` with the
  apiserver's message (``pods is forbidden: User "..." cannot list resource "pods" in API group "" in the
  namespace "ns"``).
* **Impersonation** (``Impersonate-User``/``-Group``/``-Uid`` headers, ``kubectl --as``): allowed when RBAC
  grants ``impersonate`` on ``users``/``groups``/``serviceaccounts``/``uids``, as the impersonation filter
  checks.

Tokens bound to a Pod or Secret (``boundObjectRef``, as the kubelet asks for them) stop working when that
object is deleted, as on a real cluster.

Not emulated: ``Impersonate-Extra-*``, token/webhook/OIDC authenticators, the Node and ABAC authorizers.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import ipaddress
import json
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from ansible_operator_sandbox.errors import ApiError, bad_request
from ansible_operator_sandbox.labels import SelectorError, label_selector_from_dict

ISSUER = "https://kubernetes.default.svc.cluster.local"
API_AUDIENCES = (ISSUER,)
DEFAULT_TOKEN_SECONDS = 3600
MIN_TOKEN_SECONDS = 600
MASTERS = "system:masters"
AUTHENTICATED = "system:authenticated"
UNAUTHENTICATED = "system:unauthenticated"
ANONYMOUS = "system:anonymous"
ADMIN_USER = "kubernetes-admin"
CREDENTIAL_ID = "authentication.kubernetes.io/credential-id"
RBAC_GROUP = "rbac.authorization.k8s.io"
SA_PREFIX = "system:serviceaccount:"


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _b64url_decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _rfc3339(ts: float) -> str:
    return dt.datetime.fromtimestamp(int(ts), dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def unauthorized() -> ApiError:
    """kube-apiserver's answer to credentials it cannot verify (body exactly as the real server's)."""
    return ApiError(401, "Unauthorized", "Unauthorized")


# ---------------------------------------------------------------------------------------------------
# TLS material


def _pem_cert(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _pem_key(key: Any) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _key_usage(**on: bool) -> x509.KeyUsage:
    names = (
        "digital_signature",
        "content_commitment",
        "key_encipherment",
        "data_encipherment",
        "key_agreement",
        "key_cert_sign",
        "crl_sign",
        "encipher_only",
        "decipher_only",
    )
    return x509.KeyUsage(**{n: on.get(n, False) for n in names})


class Pki:
    """The sandbox's CA, serving certificate and service-account signing key.

    ``directory`` holds ``ca.crt``/``ca.key``/``sa.key`` (reused when present, so a restart on the same data
    dir keeps tokens and kubeconfigs valid) and the serving ``server.crt``/``server.key`` (made per start for
    the addresses served).
    """

    def __init__(self, directory: Path, hosts: Iterable[str]) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        directory.chmod(0o700)
        ca_crt, ca_key, sa_key = directory / "ca.crt", directory / "ca.key", directory / "sa.key"
        if ca_crt.is_file() and ca_key.is_file() and sa_key.is_file():
            self.ca_cert = x509.load_pem_x509_certificate(ca_crt.read_bytes())
            self.ca_key: Any = serialization.load_pem_private_key(ca_key.read_bytes(), None)
            self.sa_key: Any = serialization.load_pem_private_key(sa_key.read_bytes(), None)
        else:
            self.ca_key = ec.generate_private_key(ec.SECP256R1())
            name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "sandbox-ca")])
            start = dt.datetime.now(dt.timezone.utc) - dt.timedelta(minutes=5)
            self.ca_cert = (
                x509.CertificateBuilder()
                .subject_name(name)
                .issuer_name(name)
                .public_key(self.ca_key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(start)
                .not_valid_after(start + dt.timedelta(days=3650))
                .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                .add_extension(
                    _key_usage(digital_signature=True, key_cert_sign=True, crl_sign=True), critical=True
                )
                .add_extension(
                    x509.SubjectKeyIdentifier.from_public_key(self.ca_key.public_key()), critical=False
                )
                .sign(self.ca_key, hashes.SHA256())
            )
            self.sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
            self._write(ca_key, _pem_key(self.ca_key))
            self._write(sa_key, _pem_key(self.sa_key))
            self._write(ca_crt, _pem_cert(self.ca_cert))
        self.ca_pem = _pem_cert(self.ca_cert).decode()
        cert_pem, key_pem = self._issue("kube-apiserver", (), server_hosts=tuple(hosts))
        self.server_cert_file = directory / "server.crt"
        self.server_key_file = directory / "server.key"
        self._write(self.server_key_file, key_pem)
        self._write(self.server_cert_file, cert_pem)
        self.key_id = _b64url(self._sa_public_der_digest())

    @staticmethod
    def _write(path: Path, data: bytes) -> None:
        path.write_bytes(data)
        path.chmod(0o600)

    def _sa_public_der_digest(self) -> bytes:
        der = self.sa_key.public_key().public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        digest = hashes.Hash(hashes.SHA256())
        digest.update(der)
        return digest.finalize()

    def _issue(
        self, common_name: str, groups: Iterable[str], server_hosts: tuple[str, ...] = (), days: int = 365
    ) -> tuple[bytes, bytes]:
        key = ec.generate_private_key(ec.SECP256R1())
        attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, g) for g in groups]
        attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
        start = dt.datetime.now(dt.timezone.utc) - dt.timedelta(minutes=5)
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name(attrs))
            .issuer_name(self.ca_cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(start + dt.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(_key_usage(digital_signature=True, key_encipherment=True), critical=True)
        )
        if server_hosts:
            sans: list[x509.GeneralName] = []
            for h in dict.fromkeys(
                server_hosts
                + (
                    "localhost",
                    "127.0.0.1",
                    "::1",
                    "kubernetes",
                    "kubernetes.default",
                    "kubernetes.default.svc",
                )
            ):
                try:
                    sans.append(x509.IPAddress(ipaddress.ip_address(h)))
                except ValueError:
                    if h:
                        sans.append(x509.DNSName(h))
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False).add_extension(
                x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
            )
        else:
            builder = builder.add_extension(
                x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False
            )
        cert = builder.sign(self.ca_key, hashes.SHA256())
        return _pem_cert(cert), _pem_key(key)

    def client_certificate(self, user: str, groups: Iterable[str] = ()) -> tuple[str, str]:
        """PEM certificate and key for ``user`` in ``groups``, signed by the sandbox CA."""
        cert, key = self._issue(user, tuple(groups))
        return cert.decode(), key.decode()

    def ssl_context(self) -> Any:
        """Server-side TLS: serving certificate, client certificates verified against the CA when sent."""
        import ssl

        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(str(self.server_cert_file), str(self.server_key_file))
        ctx.load_verify_locations(cadata=self.ca_pem)
        ctx.verify_mode = ssl.CERT_OPTIONAL
        return ctx

    # ---- JWT (RS256) ---------------------------------------------------------------------------
    def sign_jwt(self, claims: dict[str, Any]) -> str:
        header = {"alg": "RS256", "kid": self.key_id}
        signing_input = (
            _b64url(json.dumps(header, separators=(",", ":")).encode())
            + "."
            + _b64url(json.dumps(claims, separators=(",", ":")).encode())
        )
        signature = self.sa_key.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
        return signing_input + "." + _b64url(signature)

    def verify_jwt(self, token: str) -> dict[str, Any] | None:
        """The claims of a token this sandbox signed, or None (malformed, foreign or tampered)."""
        parts = token.split(".")
        if len(parts) != 3:
            return None
        try:
            header = json.loads(_b64url_decode(parts[0]))
            if not isinstance(header, dict) or header.get("alg") != "RS256":
                return None
            self.sa_key.public_key().verify(
                _b64url_decode(parts[2]),
                f"{parts[0]}.{parts[1]}".encode(),
                padding.PKCS1v15(),
                hashes.SHA256(),
            )
            claims = json.loads(_b64url_decode(parts[1]))
        except (ValueError, InvalidSignature, UnicodeDecodeError):
            return None
        return claims if isinstance(claims, dict) else None


# ---------------------------------------------------------------------------------------------------
# identities and request attributes


@dataclass(frozen=True)
class UserInfo:
    name: str
    groups: tuple[str, ...] = ()
    uid: str = ""
    extra: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"username": self.name}
        if self.uid:
            out["uid"] = self.uid
        if self.groups:
            out["groups"] = list(self.groups)
        if self.extra:
            out["extra"] = {k: list(v) for k, v in self.extra.items()}
        return out


ANONYMOUS_USER = UserInfo(ANONYMOUS, (UNAUTHENTICATED,))


@dataclass(frozen=True)
class Attributes:
    """authorizer.Attributes: what a request does, derived like apiserver's RequestInfoFactory."""

    user: UserInfo
    verb: str
    resource_request: bool
    path: str = ""
    namespace: str = ""
    api_group: str = ""
    api_version: str = ""
    resource: str = ""
    subresource: str = ""
    name: str = ""


_VERBS = {
    "POST": "create",
    "GET": "get",
    "HEAD": "get",
    "PUT": "update",
    "PATCH": "patch",
    "DELETE": "delete",
}
_NAMESPACE_SUBRESOURCES = ("status", "finalize")


def request_attributes(user: UserInfo, method: str, path: str, query: Mapping[str, str]) -> Attributes:
    """The authorization attributes of an HTTP request (apiserver's endpoints/request/requestinfo.go)."""
    parts = [p for p in path.split("/") if p]
    nonresource = Attributes(user, method.lower(), False, path=path)
    if not parts or parts[0] not in ("api", "apis"):
        return nonresource
    if parts[0] == "api":
        if len(parts) < 2:
            return nonresource
        group, version, rest = "", parts[1], parts[2:]
    else:
        if len(parts) < 3:
            return nonresource
        group, version, rest = parts[1], parts[2], parts[3:]
    if not rest:
        return nonresource
    verb = _VERBS.get(method.upper(), method.lower())
    if rest[0] == "watch" and method.upper() == "GET":
        verb, rest = "watch", rest[1:]
    namespace = ""
    if rest and rest[0] == "namespaces" and len(rest) > 1:
        namespace = rest[1]
        if len(rest) > 2 and rest[2] not in _NAMESPACE_SUBRESOURCES:
            rest = rest[2:]
    if not rest:
        return nonresource
    resource = rest[0]
    name = rest[1] if len(rest) > 1 else ""
    sub = rest[2] if len(rest) > 2 else ""
    if not name and verb == "get":
        verb = "watch" if (query.get("watch") or "").lower() in ("1", "true") else "list"
        for term in (query.get("fieldSelector") or "").split(","):
            key, sep, value = term.partition("=")
            if key.strip() == "metadata.name" and sep and not value.startswith("="):
                name = value.strip()
    if not name and verb == "delete":
        verb = "deletecollection"
    return Attributes(
        user,
        verb,
        True,
        path=path,
        namespace=namespace,
        api_group=group,
        api_version=version,
        resource=resource,
        subresource=sub,
        name=name,
    )


def forbidden(attrs: Attributes, reason: str = "") -> ApiError:
    """403 exactly as responsewriters.Forbidden + apierrors.NewForbidden word it."""
    user = attrs.user.name
    if not attrs.resource_request:
        msg = f"User {json.dumps(user)} cannot {attrs.verb} path {json.dumps(attrs.path)}"
    else:
        resource = attrs.resource + (f"/{attrs.subresource}" if attrs.subresource else "")
        msg = (
            f"User {json.dumps(user)} cannot {attrs.verb} resource {json.dumps(resource)} in API group "
            f"{json.dumps(attrs.api_group)}"
        )
        msg += (
            f" in the namespace {json.dumps(attrs.namespace)}" if attrs.namespace else " at the cluster scope"
        )
    if reason:
        msg = f"{msg}: {reason}"
    if not attrs.resource_request:
        return ApiError(403, "Forbidden", f"forbidden: {msg}", {})
    qualified = f"{attrs.resource}.{attrs.api_group}" if attrs.api_group else attrs.resource
    prefix = f"{qualified} {json.dumps(attrs.name)}" if attrs.name else qualified
    return ApiError(
        403,
        "Forbidden",
        f"{prefix} is forbidden: {msg}",
        {"name": attrs.name, "group": attrs.api_group, "kind": attrs.resource},
    )


# ---------------------------------------------------------------------------------------------------
# RBAC


def _verb_matches(rule: Mapping[str, Any], verb: str) -> bool:
    verbs = rule.get("verbs") or []
    return "*" in verbs or verb in verbs


def _group_matches(rule: Mapping[str, Any], group: str) -> bool:
    groups = rule.get("apiGroups") or []
    return "*" in groups or group in groups


def _resource_matches(rule: Mapping[str, Any], combined: str, sub: str) -> bool:
    for r in rule.get("resources") or []:
        if r == "*" or r == combined or (sub and r == "*/" + sub):
            return True
    return False


def _name_matches(rule: Mapping[str, Any], name: str) -> bool:
    names = rule.get("resourceNames") or []
    return not names or name in names


def _url_matches(rule: Mapping[str, Any], path: str) -> bool:
    for url in rule.get("nonResourceURLs") or []:
        if url == "*" or url == path or (url.endswith("*") and path.startswith(url[:-1])):
            return True
    return False


def rule_allows(attrs: Attributes, rule: Mapping[str, Any]) -> bool:
    """rbac.RuleAllows."""
    if attrs.resource_request:
        combined = attrs.resource + (f"/{attrs.subresource}" if attrs.subresource else "")
        return (
            _verb_matches(rule, attrs.verb)
            and _group_matches(rule, attrs.api_group)
            and _resource_matches(rule, combined, attrs.subresource)
            and _name_matches(rule, attrs.name)
        )
    return _verb_matches(rule, attrs.verb) and _url_matches(rule, attrs.path)


def _applies_to(user: UserInfo, subject: Mapping[str, Any], namespace: str) -> bool:
    """rbac.appliesToUser."""
    kind, name = subject.get("kind"), subject.get("name", "")
    if kind == "User":
        return user.name == name
    if kind == "Group":
        return name in user.groups
    if kind == "ServiceAccount":
        sa_ns = subject.get("namespace") or namespace
        return bool(sa_ns) and user.name == f"{SA_PREFIX}{sa_ns}:{name}"
    return False


def _describe_subject(subject: Mapping[str, Any], binding_namespace: str) -> str:
    kind, name = subject.get("kind", ""), subject.get("name", "")
    if kind == "ServiceAccount":
        return f"{kind} {json.dumps(name + '/' + (subject.get('namespace') or binding_namespace))}"
    return f"{kind} {json.dumps(name)}"


class RBACAuthorizer:
    """Decisions from the stored RBAC objects (reads the sandbox store; never writes)."""

    def __init__(self, store: Any) -> None:
        self.store = store

    def _role_rules(self, ref: Mapping[str, Any], namespace: str) -> tuple[list[Any], str]:
        kind, name = ref.get("kind"), ref.get("name", "")
        if kind == "ClusterRole":
            obj = self.store.peek((f"{RBAC_GROUP}/clusterroles", "", name))
            if obj is None:
                return [], f'clusterrole.{RBAC_GROUP} "{name}" not found'
            aggregation = obj.get("aggregationRule") or {}
            if isinstance(aggregation, dict) and aggregation.get("clusterRoleSelectors"):
                return self._aggregated(name, aggregation["clusterRoleSelectors"]), ""
        else:
            obj = self.store.peek((f"{RBAC_GROUP}/roles", namespace, name))
            if obj is None:
                return [], f'role.{RBAC_GROUP} "{name}" not found'
        return list(obj.get("rules") or []), ""

    def _aggregated(self, name: str, selectors: Any) -> list[Any]:
        """An aggregated ClusterRole's rules: those of every ClusterRole its selectors match, as the
        clusterrole-aggregation controller writes them (computed at evaluation instead)."""
        predicates = []
        for sel in selectors if isinstance(selectors, list) else []:
            try:
                predicates.append(label_selector_from_dict(sel if isinstance(sel, dict) else {}))
            except SelectorError:
                continue
        rules: list[Any] = []
        for _, role in self.store.items(f"{RBAC_GROUP}/clusterroles"):
            meta = role.get("metadata") or {}
            if meta.get("name") == name:
                continue
            if any(p(meta.get("labels") or {}) for p in predicates):
                rules += [r for r in role.get("rules") or [] if r not in rules]
        return rules

    def rules_for(self, user: UserInfo, namespace: str) -> dict[str, Any]:
        """SelfSubjectRulesReview status: the rules of every binding that applies (rbac.RulesFor)."""
        resource_rules: list[dict[str, Any]] = []
        nonresource_rules: list[dict[str, Any]] = []
        errors: list[str] = []
        bindings = [("", b) for _, b in self.store.items(f"{RBAC_GROUP}/clusterrolebindings")]
        if namespace:
            bindings += [(namespace, b) for _, b in self.store.items(f"{RBAC_GROUP}/rolebindings", namespace)]
        for bns, binding in bindings:
            if not any(_applies_to(user, s, bns) for s in binding.get("subjects") or []):
                continue
            rules, err = self._role_rules(binding.get("roleRef") or {}, bns)
            if err:
                errors.append(err)
            for rule in rules:
                if not isinstance(rule, dict):
                    continue
                if rule.get("nonResourceURLs"):
                    nonresource_rules.append({"verbs": list(rule.get("verbs") or []),
                                              "nonResourceURLs": list(rule["nonResourceURLs"])})
                else:
                    out = {k: list(rule.get(k) or []) for k in ("verbs", "apiGroups", "resources",
                                                                  "resourceNames") if rule.get(k)}
                    out.setdefault("verbs", [])
                    resource_rules.append(out)
        status: dict[str, Any] = {"resourceRules": resource_rules, "nonResourceRules": nonresource_rules,
                                  "incomplete": bool(errors)}
        if errors:
            status["evaluationError"] = errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"
        return status

    def authorize(self, attrs: Attributes) -> tuple[bool, str]:
        """(allowed, reason) as the union of the privileged-group and RBAC authorizers answers."""
        if MASTERS in attrs.user.groups:
            return True, ""
        errors: list[str] = []
        bindings: list[tuple[str, dict[str, Any]]] = [
            ("ClusterRoleBinding", b) for _, b in self.store.items(f"{RBAC_GROUP}/clusterrolebindings")
        ]
        if attrs.namespace:
            bindings += [
                ("RoleBinding", b) for _, b in self.store.items(f"{RBAC_GROUP}/rolebindings", attrs.namespace)
            ]
        for kind, binding in bindings:
            meta = binding.get("metadata") or {}
            bns = meta.get("namespace") or "" if kind == "RoleBinding" else ""
            subject = next(
                (s for s in binding.get("subjects") or [] if _applies_to(attrs.user, s, bns)), None
            )
            if subject is None:
                continue
            ref = binding.get("roleRef") or {}
            rules, err = self._role_rules(ref, bns)
            if err:
                errors.append(err)
                continue
            for rule in rules:
                if isinstance(rule, dict) and rule_allows(attrs, rule):
                    bname = meta.get("name", "") + (f"/{bns}" if kind == "RoleBinding" else "")
                    return True, (
                        f"RBAC: allowed by {kind} {json.dumps(bname)} of {ref.get('kind')} "
                        f"{json.dumps(ref.get('name', ''))} to {_describe_subject(subject, bns)}"
                    )
        if not errors:
            return False, ""
        agg = errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"
        return False, f"RBAC: {agg}"


def bootstrap_policy() -> list[tuple[str, dict[str, Any]]]:
    """The bootstrap ClusterRoles/ClusterRoleBindings secure mode relies on (plural, object)."""
    meta = {
        "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
        "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"},
    }
    api = f"{RBAC_GROUP}/v1"

    def role(name: str, rules: list[dict[str, Any]]) -> tuple[str, dict[str, Any]]:
        return "clusterroles", {
            "apiVersion": api,
            "kind": "ClusterRole",
            "metadata": dict(meta, name=name),
            "rules": rules,
        }

    def binding(name: str, groups: Iterable[str]) -> tuple[str, dict[str, Any]]:
        return "clusterrolebindings", {
            "apiVersion": api,
            "kind": "ClusterRoleBinding",
            "metadata": dict(meta, name=name),
            "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": name},
            "subjects": [{"apiGroup": RBAC_GROUP, "kind": "Group", "name": g} for g in groups],
        }

    info_urls = ["/healthz", "/livez", "/readyz", "/version", "/version/"]
    return [
        role(
            "cluster-admin",
            [
                {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
                {"nonResourceURLs": ["*"], "verbs": ["*"]},
            ],
        ),
        binding("cluster-admin", [MASTERS]),
        role(
            "system:discovery",
            [
                {
                    "nonResourceURLs": [
                        "/api",
                        "/api/*",
                        "/apis",
                        "/apis/*",
                        "/healthz",
                        "/livez",
                        "/openapi",
                        "/openapi/*",
                        "/readyz",
                        "/version",
                        "/version/",
                    ],
                    "verbs": ["get"],
                }
            ],
        ),
        binding("system:discovery", [AUTHENTICATED]),
        role(
            "system:basic-user",
            [
                {
                    "apiGroups": ["authentication.k8s.io"],
                    "resources": ["selfsubjectreviews"],
                    "verbs": ["create"],
                },
                {
                    "apiGroups": ["authorization.k8s.io"],
                    "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
                    "verbs": ["create"],
                },
            ],
        ),
        binding("system:basic-user", [AUTHENTICATED]),
        role("system:public-info-viewer", [{"nonResourceURLs": info_urls, "verbs": ["get"]}]),
        binding("system:public-info-viewer", [AUTHENTICATED, UNAUTHENTICATED]),
        *_user_facing_roles(meta, api),
    ]


# The user-facing roles of k8s.io/kubernetes/plugin/pkg/auth/authorizer/rbac/bootstrappolicy (policy.go):
# admin, edit and view aggregate the system:aggregate-to-* roles (and any ClusterRole a user labels
# rbac.authorization.k8s.io/aggregate-to-<role>: "true"), as on every real cluster.
_READ = ["get", "list", "watch"]
_WRITE = ["create", "delete", "deletecollection", "patch", "update"]
_VIEW_RESOURCES: list[tuple[str, list[str]]] = [
    ("", ["pods", "replicationcontrollers", "replicationcontrollers/scale", "serviceaccounts", "services",
          "services/status", "endpoints", "persistentvolumeclaims", "persistentvolumeclaims/status",
          "configmaps", "bindings", "events", "limitranges", "namespaces/status", "pods/log", "pods/status",
          "replicationcontrollers/status", "resourcequotas", "resourcequotas/status", "namespaces"]),
    ("discovery.k8s.io", ["endpointslices"]),
    ("apps", ["controllerrevisions", "daemonsets", "daemonsets/status", "deployments", "deployments/scale",
              "deployments/status", "replicasets", "replicasets/scale", "replicasets/status", "statefulsets",
              "statefulsets/scale", "statefulsets/status"]),
    ("autoscaling", ["horizontalpodautoscalers", "horizontalpodautoscalers/status"]),
    ("batch", ["cronjobs", "cronjobs/status", "jobs", "jobs/status"]),
    ("policy", ["poddisruptionbudgets", "poddisruptionbudgets/status"]),
    ("networking.k8s.io", ["ingresses", "ingresses/status", "networkpolicies"]),
]
_EDIT_RESOURCES: list[tuple[str, list[str]]] = [
    ("", ["pods", "pods/attach", "pods/exec", "pods/portforward", "pods/proxy", "configmaps", "events",
          "persistentvolumeclaims", "replicationcontrollers", "replicationcontrollers/scale", "secrets",
          "serviceaccounts", "services", "services/proxy"]),
    ("apps", ["daemonsets", "deployments", "deployments/rollback", "deployments/scale", "replicasets",
              "replicasets/scale", "statefulsets", "statefulsets/scale"]),
    ("autoscaling", ["horizontalpodautoscalers"]),
    ("batch", ["cronjobs", "jobs"]),
    ("policy", ["poddisruptionbudgets"]),
    ("networking.k8s.io", ["ingresses", "networkpolicies"]),
    ("discovery.k8s.io", ["endpointslices"]),
]


def _user_facing_roles(meta: dict[str, Any], api: str) -> list[tuple[str, dict[str, Any]]]:
    def role(name: str, labels: dict[str, str], **fields: Any) -> tuple[str, dict[str, Any]]:
        metadata = dict(meta, name=name, labels={**meta["labels"], **labels})
        return "clusterroles", {"apiVersion": api, "kind": "ClusterRole", "metadata": metadata, **fields}

    view_rules = [{"apiGroups": [g], "resources": r, "verbs": _READ} for g, r in _VIEW_RESOURCES]
    edit_rules = [
        {"apiGroups": [""], "resources": ["pods/attach", "pods/exec", "pods/portforward", "pods/proxy",
                                          "secrets", "services/proxy"], "verbs": _READ},
        {"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["impersonate"]},
        *({"apiGroups": [g], "resources": r, "verbs": _WRITE} for g, r in _EDIT_RESOURCES),
        {"apiGroups": [""], "resources": ["serviceaccounts/token"], "verbs": ["create"]},
    ]
    admin_rules = [
        {"apiGroups": ["authorization.k8s.io"], "resources": ["localsubjectaccessreviews"],
         "verbs": ["create"]},
        {"apiGroups": [RBAC_GROUP], "resources": ["rolebindings", "roles"], "verbs": [*_READ, *_WRITE]},
    ]
    out = []
    for name, parent, rules in (("view", "edit", view_rules), ("edit", "admin", edit_rules),
                                ("admin", "", admin_rules)):
        aggregate_to = f"rbac.authorization.k8s.io/aggregate-to-{name}"
        out.append(role(name, {}, rules=[],
                        aggregationRule={"clusterRoleSelectors": [{"matchLabels": {aggregate_to: "true"}}]}))
        labels = {aggregate_to: "true"}
        if parent:  # view's rules are also edit's, edit's also admin's
            labels[f"rbac.authorization.k8s.io/aggregate-to-{parent}"] = "true"
        out.append(role(f"system:aggregate-to-{name}", labels, rules=rules))
    return out


def impersonate(
    user: UserInfo, headers: Mapping[str, str], groups: list[str], authorizer: RBACAuthorizer
) -> UserInfo:
    """The identity a request asks to act as (k8s.io/apiserver/pkg/endpoints/filters/impersonation.go)."""
    name = headers.get("Impersonate-User", "")
    uid = headers.get("Impersonate-Uid", "")
    if not name:
        if groups or uid:
            raise ApiError(
                500,
                "InternalError",
                "Internal error occurred: requested impersonation is not "
                "supported: impersonating groups or uid requires impersonating a user",
            )
        return user
    checks: list[Attributes] = []
    if name.startswith(SA_PREFIX) and name.count(":") == 3:
        _, _, ns, sa = name.split(":")
        checks.append(
            Attributes(user, "impersonate", True, namespace=ns, resource="serviceaccounts", name=sa)
        )
        default_groups: tuple[str, ...] = ("system:serviceaccounts", f"system:serviceaccounts:{ns}")
    else:
        checks.append(Attributes(user, "impersonate", True, resource="users", name=name))
        default_groups = ()
    checks += [Attributes(user, "impersonate", True, resource="groups", name=g) for g in groups]
    if uid:
        checks.append(
            Attributes(
                user, "impersonate", True, api_group="authentication.k8s.io", resource="uids", name=uid
            )
        )
    for attrs in checks:
        allowed, reason = authorizer.authorize(attrs)
        if not allowed:
            raise forbidden(attrs, reason)
    final = tuple(groups) or default_groups
    if name != ANONYMOUS and AUTHENTICATED not in final:
        final += (AUTHENTICATED,)
    elif name == ANONYMOUS and UNAUTHENTICATED not in final:
        final += (UNAUTHENTICATED,)
    return UserInfo(name, final, uid)


# ---------------------------------------------------------------------------------------------------
# authentication, tokens and reviews


#: kinds a token can be bound to: (store resource, namespaced)
_BINDABLE = {"Pod": ("/pods", True), "Secret": ("/secrets", True), "Node": ("/nodes", False)}


class Authenticator:
    """Identifies requests; issues and reviews ServiceAccount tokens."""

    def __init__(self, pki: Pki, store: Any) -> None:
        self.pki = pki
        self.store = store

    # ---- requests ------------------------------------------------------------------------------
    def authenticate(self, authorization: str, peercert: Mapping[str, Any] | None,
                     peer_der: bytes | None = None) -> UserInfo:
        """The request's user; raises 401 for credentials that do not verify."""
        if authorization:
            scheme, _, value = authorization.partition(" ")
            if scheme.lower() != "bearer" or not value.strip():
                raise unauthorized()
            user, _ = self.review_token(value.strip(), API_AUDIENCES)
            if user is None:
                raise unauthorized()
            return user
        if peercert:  # the TLS layer verified it against the CA
            cn, orgs = "", []
            for rdn in peercert.get("subject") or ():
                for key, val in rdn:
                    if key == "commonName":
                        cn = val
                    elif key == "organizationName":
                        orgs.append(val)
            if cn:
                # kube-apiserver 1.32+ names the credential: the certificate's SHA-256
                extra = ({CREDENTIAL_ID: (f"X509SHA256={hashlib.sha256(peer_der).hexdigest()}",)}
                         if peer_der else {})
                return UserInfo(cn, tuple(orgs) + (AUTHENTICATED,), extra=extra)
        return ANONYMOUS_USER

    # ---- tokens --------------------------------------------------------------------------------
    def review_token(self, token: str, audiences: Iterable[str]) -> tuple[UserInfo | None, list[str]]:
        """(user, audiences it is good for) for a valid ServiceAccount token, (None, error list) otherwise."""
        claims = self.pki.verify_jwt(token)
        if claims is None or claims.get("iss") != ISSUER:
            return None, ["invalid bearer token"]
        now = time.time()
        if (
            not isinstance(claims.get("exp"), (int, float))
            or claims["exp"] < now
            or (isinstance(claims.get("nbf"), (int, float)) and claims["nbf"] > now + 60)
        ):
            return None, ["invalid bearer token, Token has expired."]
        aud = claims.get("aud") or []
        aud = [aud] if isinstance(aud, str) else list(aud)
        good = [a for a in audiences if a in aud]
        if not good:
            return None, [
                "invalid bearer token, token audiences " + json.dumps(aud) + " is invalid for the "
                "target audiences " + json.dumps(list(audiences))
            ]
        k8s = claims.get("kubernetes.io") or {}
        ns = str(k8s.get("namespace") or "")
        sa = k8s.get("serviceaccount") or {}
        sa_obj = self.store.peek(("/serviceaccounts", ns, str(sa.get("name") or "")))
        if sa_obj is None or (sa_obj.get("metadata") or {}).get("uid") != sa.get("uid"):
            return None, [f"invalid bearer token, service account {ns}/{sa.get('name')} has been deleted"]
        for kind, (plural, scoped) in _BINDABLE.items():
            ref = k8s.get(kind.lower())
            if isinstance(ref, dict):
                obj = self.store.peek((plural, ns if scoped else "", str(ref.get("name") or "")))
                if obj is None or (obj.get("metadata") or {}).get("uid") != ref.get("uid"):
                    return None, [f"invalid bearer token, {kind.lower()} {ref.get('name')} has been deleted"]
        extra: dict[str, tuple[str, ...]] = {}
        if claims.get("jti"):
            extra["authentication.kubernetes.io/credential-id"] = (f"JTI={claims['jti']}",)
        user = UserInfo(
            f"{SA_PREFIX}{ns}:{sa.get('name')}",
            ("system:serviceaccounts", f"system:serviceaccounts:{ns}", AUTHENTICATED),
            str(sa.get("uid") or ""),
            extra,
        )
        return user, good

    def token_request(self, namespace: str, name: str, body: Any) -> dict[str, Any]:
        """POST serviceaccounts/<name>/token: a TokenRequest answered with a signed token (201)."""
        if body is None:
            body = {}
        if not isinstance(body, dict):
            raise bad_request("TokenRequest body must be an object")
        sa = self.store.peek(("/serviceaccounts", namespace, name))
        if sa is None:
            raise ApiError(
                404,
                "NotFound",
                f'serviceaccounts "{name}" not found',
                {"name": name, "kind": "serviceaccounts"},
            )
        spec = dict(body.get("spec") or {})
        seconds = spec.get("expirationSeconds") or DEFAULT_TOKEN_SECONDS
        if not isinstance(seconds, int) or seconds < MIN_TOKEN_SECONDS or seconds > 2**32:
            msg = (
                f"spec.expirationSeconds: Invalid value: {seconds}: may not specify a duration less than 10 "
                "minutes"
                if isinstance(seconds, int) and seconds < MIN_TOKEN_SECONDS
                else f"spec.expirationSeconds: Invalid value: {seconds}: "
                "may not specify a duration larger than 2^32 "
                "seconds"
            )
            raise ApiError(
                422,
                "Invalid",
                f'TokenRequest.authentication.k8s.io "{name}" is invalid: {msg}',
                {
                    "name": name,
                    "group": "authentication.k8s.io",
                    "kind": "TokenRequest",
                    "causes": [
                        {
                            "reason": "FieldValueInvalid",
                            "message": msg.split(": ", 1)[1],
                            "field": "spec.expirationSeconds",
                        }
                    ],
                },
            )
        audiences = [a for a in spec.get("audiences") or [] if isinstance(a, str)] or list(API_AUDIENCES)
        now = int(time.time())
        sa_meta = sa.get("metadata") or {}
        k8s: dict[str, Any] = {
            "namespace": namespace,
            "serviceaccount": {"name": name, "uid": sa_meta.get("uid", "")},
        }
        bound = spec.get("boundObjectRef") or {}
        if bound:
            if not isinstance(bound, dict) or bound.get("kind") not in _BINDABLE or not bound.get("name"):
                raise bad_request("spec.boundObjectRef: must name a Pod, Secret or Node")
            plural, scoped = _BINDABLE[bound["kind"]]
            obj = self.store.peek((plural, namespace if scoped else "", str(bound["name"])))
            uid = (obj or {}).get("metadata", {}).get("uid")
            if obj is None or (bound.get("uid") and bound["uid"] != uid):
                raise ApiError(
                    404,
                    "NotFound",
                    f'{plural.lstrip("/")} "{bound["name"]}" not found',
                    {"name": bound["name"], "kind": plural.lstrip("/")},
                )
            k8s[bound["kind"].lower()] = {"name": bound["name"], "uid": uid}
            spec["boundObjectRef"] = dict(bound, uid=uid)
        claims = {
            "aud": audiences,
            "exp": now + seconds,
            "iat": now,
            "iss": ISSUER,
            "jti": str(uuid.uuid4()),
            "kubernetes.io": k8s,
            "nbf": now,
            "sub": f"{SA_PREFIX}{namespace}:{name}",
        }
        spec.update(audiences=audiences, expirationSeconds=seconds)
        spec.setdefault("boundObjectRef", None)
        return {
            "kind": "TokenRequest",
            "apiVersion": "authentication.k8s.io/v1",
            "metadata": {"name": name, "namespace": namespace, "creationTimestamp": _rfc3339(now)},
            "spec": spec,
            "status": {"token": self.pki.sign_jwt(claims), "expirationTimestamp": _rfc3339(now + seconds)},
        }

    def token_review(self, body: dict[str, Any]) -> dict[str, Any]:
        spec = body.get("spec") or {}
        token = spec.get("token") or ""
        audiences = [a for a in spec.get("audiences") or [] if isinstance(a, str)] or list(API_AUDIENCES)
        user, info = self.review_token(str(token), audiences) if token else (None, ["invalid bearer token"])
        if user is None:
            status: dict[str, Any] = {
                "user": {},
                "error": info[0] if len(info) == 1 else "[" + ", ".join(info) + "]",
            }
        else:
            status = {"authenticated": True, "user": user.to_json(), "audiences": info}
        return dict(body, status=status)


def _review_error(kind: str, msg: str) -> ApiError:
    return ApiError(
        422,
        "Invalid",
        f'{kind}.authorization.k8s.io "" is invalid: {msg}',
        {
            "group": "authorization.k8s.io",
            "kind": kind,
            "causes": [
                {
                    "reason": "FieldValueInvalid",
                    "message": msg.split(": ", 1)[-1],
                    "field": msg.split(":", 1)[0],
                }
            ],
        },
    )


def access_review(
    kind: str,
    body: dict[str, Any],
    requester: UserInfo,
    authorizer: RBACAuthorizer | None,
    namespace: str | None = None,
) -> dict[str, Any]:
    """Subject/LocalSubject/SelfSubjectAccessReview: the status the authorizer gives.

    ``authorizer`` None (the sandbox's default, non-secure mode) allows everything, as that mode does.
    """
    spec = dict(body.get("spec") or {})
    ra, nra = spec.get("resourceAttributes"), spec.get("nonResourceAttributes")
    if not isinstance(ra or {}, dict) or not isinstance(nra or {}, dict):
        raise bad_request(f"{kind}.spec: resourceAttributes and nonResourceAttributes must be objects")
    if bool(ra) == bool(nra):
        raise _review_error(
            kind,
            'spec.resourceAttributes: Invalid value: "null": exactly one of '
            "nonResourceAttributes or resourceAttributes must be specified",
        )
    if kind == "SelfSubjectAccessReview":
        user = requester
    else:
        if not spec.get("user") and not spec.get("groups"):
            raise _review_error(
                kind, 'spec.user: Invalid value: "": at least one of user or group must be specified'
            )
        extra = {k: tuple(v) for k, v in (spec.get("extra") or {}).items() if isinstance(v, list)}
        user = UserInfo(
            str(spec.get("user") or ""), tuple(spec.get("groups") or ()), str(spec.get("uid") or ""), extra
        )
    if ra:
        if namespace is not None and (ra.get("namespace") or "") != namespace:
            raise _review_error(
                kind,
                f"spec.resourceAttributes.namespace: Invalid value: "
                f"{json.dumps(ra.get('namespace') or '')}: must match metadata.namespace",
            )
        attrs = Attributes(
            user,
            str(ra.get("verb") or ""),
            True,
            namespace=str(ra.get("namespace") or ""),
            api_group=str(ra.get("group") or ""),
            api_version=str(ra.get("version") or ""),
            resource=str(ra.get("resource") or ""),
            subresource=str(ra.get("subresource") or ""),
            name=str(ra.get("name") or ""),
        )
    else:
        nra = nra or {}
        attrs = Attributes(user, str(nra.get("verb") or ""), False, path=str(nra.get("path") or ""))
    if authorizer is None:
        allowed, reason = True, "the sandbox does not enforce authorization (start it with --secure)"
    else:
        allowed, reason = authorizer.authorize(attrs)
    status: dict[str, Any] = {"allowed": allowed}
    if reason:
        status["reason"] = reason
    out = dict(body, spec=spec, status=status)
    out.setdefault("metadata", {})
    if namespace is not None:
        out["metadata"] = dict(out["metadata"] or {}, namespace=namespace)
    return out
