"""``ansible-operator generate rbac``: a ClusterRole for the operator, derived from watches.yaml and from what
its roles and playbooks touch.

Why static scanning: an operator's permissions are decided by its Ansible content, which nobody wants to
mirror by hand in a ClusterRole (and forgetting one resource only shows up as a 403 at run time). We
read the task files of every role/playbook a watch runs (following ``include_role``/``import_role``,
``roles:`` and role ``meta`` dependencies, ``include_tasks``/``import_tasks``) and collect the
``kind``/``api_version`` of each ``kubernetes.core`` k8s task, including inline ``definition``\\s and
manifests loaded from ``src`` or ``template`` files.

It is best effort by design: a kind computed by Jinja at run time cannot be known statically. Everything
not resolved is listed in a comment at the top of the output so the author can add it by hand, rather
than silently producing a role that is too small.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

import yaml

__all__ = ["RbacScan", "scan_watches", "render_cluster_role", "KNOWN_KINDS", "plural_of", "main"]

ALL_VERBS = ("get", "list", "watch", "create", "update", "patch", "delete")
READ_VERBS = ("get", "list", "watch")

KNOWN_KINDS: dict[str, tuple[str, str]] = {
    # kind: (API group, plural). The built-in kinds roles commonly manage; others get a guessed plural.
    "Pod": ("", "pods"),
    "Service": ("", "services"),
    "ConfigMap": ("", "configmaps"),
    "Secret": ("", "secrets"),
    "ServiceAccount": ("", "serviceaccounts"),
    "PersistentVolumeClaim": ("", "persistentvolumeclaims"),
    "PersistentVolume": ("", "persistentvolumes"),
    "Namespace": ("", "namespaces"),
    "Node": ("", "nodes"),
    "Endpoints": ("", "endpoints"),
    "Event": ("", "events"),
    "ReplicationController": ("", "replicationcontrollers"),
    "ResourceQuota": ("", "resourcequotas"),
    "LimitRange": ("", "limitranges"),
    "Deployment": ("apps", "deployments"),
    "StatefulSet": ("apps", "statefulsets"),
    "DaemonSet": ("apps", "daemonsets"),
    "ReplicaSet": ("apps", "replicasets"),
    "ControllerRevision": ("apps", "controllerrevisions"),
    "Job": ("batch", "jobs"),
    "CronJob": ("batch", "cronjobs"),
    "Ingress": ("networking.k8s.io", "ingresses"),
    "IngressClass": ("networking.k8s.io", "ingressclasses"),
    "NetworkPolicy": ("networking.k8s.io", "networkpolicies"),
    "Role": ("rbac.authorization.k8s.io", "roles"),
    "RoleBinding": ("rbac.authorization.k8s.io", "rolebindings"),
    "ClusterRole": ("rbac.authorization.k8s.io", "clusterroles"),
    "ClusterRoleBinding": ("rbac.authorization.k8s.io", "clusterrolebindings"),
    "PodDisruptionBudget": ("policy", "poddisruptionbudgets"),
    "HorizontalPodAutoscaler": ("autoscaling", "horizontalpodautoscalers"),
    "Lease": ("coordination.k8s.io", "leases"),
    "CustomResourceDefinition": ("apiextensions.k8s.io", "customresourcedefinitions"),
    "StorageClass": ("storage.k8s.io", "storageclasses"),
    "PriorityClass": ("scheduling.k8s.io", "priorityclasses"),
    "Route": ("route.openshift.io", "routes"),
    "ServiceMonitor": ("monitoring.coreos.com", "servicemonitors"),
    "PodMonitor": ("monitoring.coreos.com", "podmonitors"),
    "PrometheusRule": ("monitoring.coreos.com", "prometheusrules"),
    "Certificate": ("cert-manager.io", "certificates"),
}

# module short name → (verbs on the named resource, extra (group, resource, verbs) it always needs)
_K8S_MODULES: dict[str, tuple[tuple[str, ...], tuple[tuple[str, str, tuple[str, ...]], ...]]] = {
    "k8s": (ALL_VERBS, ()),  # narrowed by `state` below
    "k8s_info": (READ_VERBS, ()),
    "k8s_json_patch": (READ_VERBS + ("patch",), ()),
    "k8s_scale": (READ_VERBS + ("patch", "update"), ()),  # + <plural>/scale, added below
    "k8s_rollback": (READ_VERBS + ("patch", "update"), (("apps", "replicasets", READ_VERBS),)),
    "k8s_exec": ((), (("", "pods", ("get",)), ("", "pods/exec", ("create", "get")))),
    "k8s_log": ((), (("", "pods", READ_VERBS), ("", "pods/log", ("get",)))),
    "k8s_cp": ((), (("", "pods", ("get",)), ("", "pods/exec", ("create", "get")))),
    "k8s_drain": ((), (("", "nodes", ("get", "patch")), ("", "pods", READ_VERBS),
                       ("", "pods/eviction", ("create",)))),
    "k8s_service": (ALL_VERBS, (("", "services", ALL_VERBS),)),
    "k8s_event": ((), (("", "events", ("create", "patch")),)),  # ansible_operator.util.k8s_event
}
_COLLECTION_PREFIXES = (
    "kubernetes.core.",
    "community.kubernetes.",
    "community.okd.",
    "ansible_operator.util.",
    "operator_sdk.util.",
)
_INCLUDE_ROLE = ("include_role", "import_role", "ansible.builtin.include_role", "ansible.builtin.import_role")
_INCLUDE_TASKS = ("include_tasks", "import_tasks", "include", "ansible.builtin.include_tasks",
                  "ansible.builtin.import_tasks")
_JINJA = re.compile(r"{{.*?}}|{%.*?%}", re.S)
_PLACEHOLDER = "__jinja__"
"""What Jinja expressions are replaced by before a template is parsed as YAML (so they read as dynamic)."""
_LOOKUP = re.compile(r"""lookup\(\s*['"](template|file)['"]\s*,\s*['"]([^'"{}]+)['"]""")


def plural_of(kind: str) -> str:
    """Kubernetes' default plural (what kubebuilder/flect produce for simple English nouns)."""
    k = kind.lower()
    if k.endswith(("s", "x", "z", "ch", "sh")):
        return k + "es"
    if k.endswith("y") and len(k) > 1 and k[-2] not in "aeiou":
        return k[:-1] + "ies"
    return k + "s"


@dataclass
class RbacScan:
    """What the scan found: rules as ``{(group, resource): verbs}`` plus what it could not resolve."""

    rules: dict[tuple[str, str], set[str]] = field(default_factory=dict)
    unresolved: list[str] = field(default_factory=list)
    guessed: list[str] = field(default_factory=list)
    scanned: list[Path] = field(default_factory=list)

    def add(self, group: str, resource: str, verbs: Iterable[str]) -> None:
        self.rules.setdefault((group, resource), set()).update(verbs)


# ---- file discovery -----------------------------------------------------------------------------------


@dataclass
class _Context:
    role_dirs: list[Path]
    collection_roots: list[Path]
    crd_plurals: dict[tuple[str, str], str]
    scan: RbacScan
    seen_files: set[Path] = field(default_factory=set)
    seen_roles: set[Path] = field(default_factory=set)
    current: tuple[Path, Path | None] | None = None
    """(task file, role) of the task being scanned, for resolving lookup('template', ...) paths."""


def _load_yaml_docs(path: Path, ctx: _Context) -> list[Any]:
    try:
        return [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d is not None]
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        ctx.scan.unresolved.append(f"{path}: not readable as YAML ({type(exc).__name__})")
        return []


def _find_role(name: str, ctx: _Context, near: Path | None) -> Path | None:
    path = Path(name).expanduser()
    if path.is_absolute():
        return path if path.is_dir() else None
    parts = name.split(".")
    if len(parts) == 3 and all(parts):
        for root in ctx.collection_roots:
            candidate = root / "ansible_collections" / parts[0] / parts[1] / "roles" / parts[2]
            if candidate.is_dir():
                return candidate
    dirs = ([near / "roles", near] if near else []) + ctx.role_dirs
    for d in dirs:
        if (d / name).is_dir():
            return (d / name).resolve()
    return None


def _scan_role(role: Path, ctx: _Context) -> None:
    role = role.resolve()
    if role in ctx.seen_roles:
        return
    ctx.seen_roles.add(role)
    for sub in ("tasks", "handlers"):
        for f in sorted((role / sub).rglob("*")) if (role / sub).is_dir() else []:
            if f.suffix in (".yml", ".yaml"):
                _scan_task_file(f, ctx, role)
    meta = role / "meta" / "main.yml"
    if not meta.is_file():
        meta = role / "meta" / "main.yaml"
    if meta.is_file():
        for doc in _load_yaml_docs(meta, ctx):
            deps = doc.get("dependencies") if isinstance(doc, dict) else None
            for dep in deps or []:
                _scan_role_ref(dep, ctx, role.parent, str(meta))


def _scan_role_ref(ref: Any, ctx: _Context, near: Path | None, where: str) -> None:
    name = ref.get("role") or ref.get("name") if isinstance(ref, dict) else ref
    if not isinstance(name, str) or _JINJA.search(name):
        ctx.scan.unresolved.append(f"{where}: role reference {name!r} is dynamic")
        return
    found = _find_role(name, ctx, near)
    if found is None:
        ctx.scan.unresolved.append(f"{where}: role {name!r} not found")
        return
    _scan_role(found, ctx)


def _scan_playbook(path: Path, ctx: _Context) -> None:
    for play in _flatten(_load_yaml_docs(path, ctx)):
        if not isinstance(play, dict):
            continue
        for key in ("import_playbook", "ansible.builtin.import_playbook"):
            if isinstance(play.get(key), str):
                target = (path.parent / play[key])
                if target.is_file() and target.resolve() not in ctx.seen_files:
                    ctx.seen_files.add(target.resolve())
                    _scan_playbook(target, ctx)
        for ref in play.get("roles") or []:
            _scan_role_ref(ref, ctx, path.parent, str(path))
        for section in ("pre_tasks", "tasks", "post_tasks", "handlers"):
            _scan_tasks(play.get(section) or [], ctx, path, None)
    ctx.scan.scanned.append(path)


def _scan_task_file(path: Path, ctx: _Context, role: Path | None) -> None:
    path = path.resolve()
    if path in ctx.seen_files:
        return
    ctx.seen_files.add(path)
    ctx.scan.scanned.append(path)
    for doc in _load_yaml_docs(path, ctx):
        _scan_tasks(doc if isinstance(doc, list) else [doc], ctx, path, role)


def _flatten(docs: list[Any]) -> Iterator[Any]:
    for d in docs:
        if isinstance(d, list):
            yield from d
        else:
            yield d


# ---- tasks --------------------------------------------------------------------------------------------


def _module_of(task: Mapping[str, Any]) -> tuple[str, str, Any] | None:
    """(full key, short k8s module name, args) for a k8s task, else None."""
    for key, args in task.items():
        if not isinstance(key, str):
            continue
        short = key
        for prefix in _COLLECTION_PREFIXES:
            if key.startswith(prefix):
                short = key[len(prefix):]
        if short == "k8s_status":
            return None  # the watched resource's /status: already granted
        if short in _K8S_MODULES and (short == key or key.startswith(_COLLECTION_PREFIXES)):
            return key, short, args
    return None


def _scan_tasks(tasks: list[Any], ctx: _Context, source: Path, role: Path | None) -> None:
    for task in tasks:
        if not isinstance(task, dict):
            continue
        for block_key in ("block", "rescue", "always"):
            if isinstance(task.get(block_key), list):
                _scan_tasks(task[block_key], ctx, source, role)
        for key in _INCLUDE_ROLE:
            if key in task:
                args = task[key]
                _scan_role_ref(args if isinstance(args, (dict, str)) else None, ctx,
                               role.parent if role else source.parent, f"{source}")
        for key in _INCLUDE_TASKS:
            if key in task:
                ref = task[key]
                ref = ref.get("file") if isinstance(ref, dict) else ref
                if not isinstance(ref, str) or _JINJA.search(ref):
                    ctx.scan.unresolved.append(f"{source}: {key} of a dynamic file {ref!r}")
                    continue
                base = [source.parent] + ([role / "tasks"] if role else [])
                target = next((b / ref for b in base if (b / ref).is_file()), None)
                if target is None:
                    ctx.scan.unresolved.append(f"{source}: {key} file {ref!r} not found")
                else:
                    _scan_task_file(target, ctx, role)
        found = _module_of(task)
        if found is not None:
            _scan_k8s_task(task, found, ctx, source, role)


def _parse_kv(text: str) -> dict[str, str]:
    """``k8s: kind=Deployment name=x`` free-form args."""
    out = {}
    for part in text.split():
        k, sep, v = part.partition("=")
        if sep:
            out[k] = v.strip("'\"")
    return out


def _scan_k8s_task(task: Mapping[str, Any], found: tuple[str, str, Any], ctx: _Context, source: Path,
                   role: Path | None) -> None:
    key, short, args = found
    ctx.current = (source, role)
    label = f"{source}: task {task.get('name') or key!r}"
    if isinstance(args, str):
        args = _parse_kv(args)
    if not isinstance(args, dict):
        args = {}
    verbs, extras = _K8S_MODULES[short]
    for group, resource, extra_verbs in extras:
        ctx.scan.add(group, resource, extra_verbs)
    if not verbs:
        return
    if short == "k8s":
        state = args.get("state", "present")
        if state == "absent":
            verbs = READ_VERBS + ("delete",)
        elif state == "patched":
            verbs = READ_VERBS + ("patch", "update")
        elif isinstance(state, str) and _JINJA.search(state):
            verbs = ALL_VERBS
        else:
            verbs = READ_VERBS + ("create", "update", "patch")
    objects: list[tuple[Any, Any]] = []
    if args.get("kind") is not None:
        objects.append((args.get("api_version", args.get("apiVersion")), args["kind"]))
    for defkey in ("definition", "resource_definition"):
        if defkey in args:
            objects += _objects_from_definition(args[defkey], label, ctx)
    if "src" in args:
        objects += _objects_from_file(args["src"], "files", label, ctx, source, role)
    if "template" in args:
        templates = args["template"] if isinstance(args["template"], list) else [args["template"]]
        for t in templates:
            path = t.get("path") if isinstance(t, dict) else t
            objects += _objects_from_file(path, "templates", label, ctx, source, role, jinja=True)
    if not objects and not any(u.startswith(label) for u in ctx.scan.unresolved):
        ctx.scan.unresolved.append(f"{label}: no kind found")
    for api_version, kind in objects:
        _grant(api_version, kind, verbs, label, ctx, scale=(short == "k8s_scale"))


def _objects_from_definition(value: Any, label: str, ctx: _Context) -> list[tuple[Any, Any]]:
    if isinstance(value, str):
        lookups = _LOOKUP.findall(value)
        if lookups and ctx.current is not None:
            out: list[tuple[Any, Any]] = []
            source, role = ctx.current
            for plugin, ref in lookups:
                subdir = "templates" if plugin == "template" else "files"
                out += _objects_from_file(ref, subdir, label, ctx, source, role, jinja=plugin == "template")
            return out
        if _JINJA.fullmatch(value.strip()):
            ctx.scan.unresolved.append(f"{label}: definition is a Jinja expression {value.strip()!r}")
            return []
        try:
            docs = [d for d in yaml.safe_load_all(_JINJA.sub(_PLACEHOLDER, value)) if d is not None]
        except yaml.YAMLError:
            ctx.scan.unresolved.append(f"{label}: definition is not YAML")
            return []
    else:
        docs = value if isinstance(value, list) else [value]
    out = []
    for doc in _flatten(docs):
        if isinstance(doc, dict) and doc.get("kind") == "List" and isinstance(doc.get("items"), list):
            out += _objects_from_definition(doc["items"], label, ctx)
        elif isinstance(doc, dict) and "kind" in doc:
            out.append((doc.get("apiVersion"), doc["kind"]))
        else:
            ctx.scan.unresolved.append(f"{label}: definition without a kind")
    return out


def _objects_from_file(ref: Any, subdir: str, label: str, ctx: _Context, source: Path, role: Path | None,
                       jinja: bool = False) -> list[tuple[Any, Any]]:
    if isinstance(ref, str) and role is not None:
        ref = re.sub(r"{{\s*role_path\s*}}", str(role), ref)
    if not isinstance(ref, str) or _JINJA.search(ref):
        ctx.scan.unresolved.append(f"{label}: {subdir[:-1]} path {ref!r} is dynamic")
        return []
    bases = ([role / subdir, role] if role else []) + [source.parent / subdir, source.parent]
    path = (
        Path(ref) if Path(ref).is_absolute() else next((b / ref for b in bases if (b / ref).is_file()), None)
    )
    if path is None or not path.is_file():
        ctx.scan.unresolved.append(f"{label}: {subdir[:-1]} {ref!r} not found")
        return []
    text = path.read_text(encoding="utf-8", errors="replace")
    if jinja:
        # Drop control lines, replace expressions by a scalar: enough to read kind/apiVersion literals.
        text = "\n".join(line for line in text.splitlines() if not re.match(r"\s*{%.*%}\s*$", line))
        text = _JINJA.sub(_PLACEHOLDER, text)
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError:
        ctx.scan.unresolved.append(f"{label}: {path} is not YAML after removing Jinja")
        return []
    return _objects_from_definition(docs, f"{label} ({path.name})", ctx)


def _grant(api_version: Any, kind: Any, verbs: Iterable[str], label: str, ctx: _Context,
           scale: bool = False) -> None:
    """Add a rule for ``kind``; ``api_version`` None means the task did not say (then a known kind's group
    from the table is used rather than the module's ``v1`` default, which only fits core kinds)."""
    dynamic_kind = not isinstance(kind, str) or bool(_JINJA.search(kind)) or kind == _PLACEHOLDER
    dynamic_version = api_version is not None and (
        not isinstance(api_version, str) or bool(_JINJA.search(api_version)) or api_version == _PLACEHOLDER)
    known = KNOWN_KINDS.get(kind) if isinstance(kind, str) else None
    candidates = sorted({g for (g, k) in ctx.crd_plurals if k == kind} | ({known[0]} if known else set()))
    if dynamic_kind or (dynamic_version and len(candidates) != 1):
        ctx.scan.unresolved.append(f"{label}: kind {kind!r} / api_version {api_version!r} is dynamic")
        return
    if dynamic_version:
        # e.g. `api_version: "{{ sampledb_api_version }}"` with a literal kind only one known group has.
        group = candidates[0]
        note = f"{kind} (api_version {api_version!r}) → assumed group {group or 'core'} [{label}]"
        ctx.scan.guessed.append(note)
    elif api_version is None:
        group = known[0] if known else ""
    else:
        group = api_version.rpartition("/")[0]
    if (group, kind) in ctx.crd_plurals:
        plural = ctx.crd_plurals[(group, kind)]
    elif known and known[0] == group:
        plural = known[1]
    else:
        plural = plural_of(kind)
        note = f"{kind} ({api_version or 'no api_version'}) → {group or 'core'}/{plural}"
        if note not in ctx.scan.guessed:
            ctx.scan.guessed.append(note)
    ctx.scan.add(group, plural, verbs)
    if scale:
        ctx.scan.add(group, f"{plural}/scale", ("get", "patch", "update"))


# ---- watches ------------------------------------------------------------------------------------------


def _crd_plurals(dirs: Iterable[Path]) -> dict[tuple[str, str], str]:
    out: dict[tuple[str, str], str] = {}
    for d in dirs:
        if not d.is_dir():
            continue
        for f in sorted(d.rglob("*")):
            if f.suffix not in (".yml", ".yaml"):
                continue
            try:
                docs = list(yaml.safe_load_all(f.read_text(encoding="utf-8")))
            except (OSError, UnicodeDecodeError, yaml.YAMLError):
                continue
            for doc in docs:
                if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
                    spec = doc.get("spec") or {}
                    names = spec.get("names") or {}
                    if spec.get("group") and names.get("kind") and names.get("plural"):
                        out[(spec["group"], names["kind"])] = names["plural"]
    return out


def scan_watches(watches_file: Path, roles_dirs: Iterable[Path] = ()) -> tuple[RbacScan, list[Any]]:
    """Load watches.yaml (validated by ``watches.load_watches``) and scan everything it runs."""
    from ansible_operator.watches import load_watches

    extra = [Path(d).resolve() for d in roles_dirs]
    watches = load_watches(watches_file, roles_search=extra)
    base = watches_file.resolve().parent
    crd_plurals = _crd_plurals([base / "crds", base / "config" / "crd", base / "deploy" / "crds"])
    scan = RbacScan()
    for w in watches:
        plural = crd_plurals.get((w.group, w.kind))
        if plural is None:
            plural = plural_of(w.kind)
            scan.guessed.append(f"{w.kind} ({w.api_version}) → {w.group or 'core'}/{plural}"
                                " (no CRD found in crds/ or config/crd/)")
        crd_plurals.setdefault((w.group, w.kind), plural)
        for resource in (plural, f"{plural}/status", f"{plural}/finalizers"):
            scan.add(w.group, resource, ALL_VERBS)
    for w in watches:
        ctx = _Context(role_dirs=list(w.roles_paths) + extra + [base / "roles"],
                       collection_roots=list(w.collections_paths), crd_plurals=crd_plurals, scan=scan)
        targets: list[tuple[str | None, Path | None]] = [(w.role, w.playbook)]
        if w.finalizer is not None:
            targets.append((w.finalizer.role, w.finalizer.playbook))
        for role, playbook in targets:
            if playbook is not None:
                _scan_playbook(playbook, ctx)
            if role is not None:
                found = _find_role(role, ctx, None)
                if found is None:
                    scan.unresolved.append(
                        f"{w.key}: role {role!r} not found on disk (collection not installed?)"
                    )
                else:
                    _scan_role(found, ctx)
    # What the operator itself needs: Events for status reporting, Leases (and ConfigMaps, as Operator SDK's
    # leader election used) for --leader-elect.
    prefix = f"{base}/"  # report paths relative to the project, so the output is the same on every machine
    scan.unresolved = [u.replace(prefix, "") for u in scan.unresolved]
    scan.guessed = [g.replace(prefix, "") for g in scan.guessed]
    scan.add("", "events", ("create", "patch"))
    scan.add("events.k8s.io", "events", ("create", "patch"))
    scan.add("coordination.k8s.io", "leases", ALL_VERBS)
    scan.add("", "configmaps", ALL_VERBS)
    # The watch streams (kopf) discover served kinds from CRDs and follow namespaces as they come and go;
    # without these read-only rules they fall back to a one-off discovery at start-up.
    scan.add("apiextensions.k8s.io", "customresourcedefinitions", ("get", "list", "watch"))
    scan.add("", "namespaces", ("get", "list", "watch"))
    return scan, watches


def render_cluster_role(scan: RbacScan, name: str, *, watches_file: str = "watches.yaml") -> str:
    """ClusterRole YAML; resources with the same group and verbs share a rule; deterministic order."""
    merged: dict[tuple[str, tuple[str, ...]], list[str]] = {}
    for (group, resource), verbs in scan.rules.items():
        ordered = tuple(v for v in ALL_VERBS if v in verbs) + tuple(sorted(set(verbs) - set(ALL_VERBS)))
        merged.setdefault((group, ordered), []).append(resource)
    rules = [
        {"apiGroups": [group], "resources": sorted(resources), "verbs": list(verbs)}
        for (group, verbs), resources in sorted(merged.items(), key=lambda kv: (kv[0][0], kv[1][0]))
    ]
    doc = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
           "metadata": {"name": name}, "rules": rules}
    header = [f"# Generated by `ansible-operator generate rbac` from {watches_file}."]
    if scan.guessed:
        header.append("# Guessed (check them; a CRD in crds/ or config/crd/ makes plurals exact):")
        header += [f"#   {g}" for g in scan.guessed]
    if scan.unresolved:
        header.append("# Could not resolve (add rules for these by hand):")
        header += [f"#   {u}" for u in dict.fromkeys(scan.unresolved)]
    return "\n".join(header) + "\n" + yaml.safe_dump(doc, sort_keys=False, default_flow_style=False)


def main(args: Any) -> int:
    """``ansible-operator generate rbac --watches-file W [--roles-dir D ...] [--name N]``."""
    from ansible_operator.watches import WatchesError

    if getattr(args, "what", "rbac") != "rbac":
        print(f"ansible-operator generate: unknown target {args.what!r}", file=sys.stderr)
        return 2
    watches_file = Path(args.watches_file)
    try:
        scan, _ = scan_watches(watches_file, [Path(d) for d in (args.roles_dir or [])])
    except WatchesError as exc:
        print(f"ansible-operator generate rbac: {exc}", file=sys.stderr)
        return 1
    sys.stdout.write(render_cluster_role(scan, args.name, watches_file=str(args.watches_file)))
    return 0
