"""watches.yaml → typed, fully resolved ``Watch`` objects.

The file format is Operator SDK's Ansible operator ``watches.yaml`` (same keys, same defaults, same role
lookup), with three deliberate differences, all in the direction of failing early and loudly:

* unknown keys are errors (the SDK silently ignores them, so a typo such as ``reconcilePeriod`` spelled
  ``reconcileperiod`` used to do nothing); the message suggests the closest valid key;
* values are type-checked (``maxRunnerArtifacts: "x"`` is an error, not a zero);
* ``markUnsafe`` defaults to ``true`` (CR-supplied strings are never evaluated as Jinja unless the
  operator author opts out with ``markUnsafe: false``).

Everything that depends on the environment (``${VAR}`` in paths, role search paths, per-kind
``MAX_CONCURRENT_RECONCILES_<KIND>_<GROUP>`` / ``ANSIBLE_VERBOSITY_<KIND>_<GROUP>``) is resolved here,
once, so the rest of the runner only sees absolute paths and final numbers.

Every problem is reported as one ``WatchesError`` whose text is a single line naming the file, the
entry (1-based, with its ``Kind.group`` when known) and the key.
"""

from __future__ import annotations

import difflib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal, Mapping, NoReturn, Sequence

import yaml
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr, ValidationError

from ansible_operator.durations import parse_duration
from ansible_operator.errors import OperatorError
from ansible_operator.labels import SelectorError, label_selector_from_dict

__all__ = [
    "WatchesError",
    "Finalizer",
    "Watch",
    "load_watches",
    "parse_duration",
    "env_var_name",
    "ANNOTATION_RECONCILE_PERIOD",
    "ANNOTATION_MAX_RUNNER_ARTIFACTS",
    "ANNOTATION_VERBOSITY",
    "annotation_overrides",
]

ANNOTATION_RECONCILE_PERIOD = "ansible.sdk.operatorframework.io/reconcile-period"
ANNOTATION_MAX_RUNNER_ARTIFACTS = "ansible.sdk.operatorframework.io/max-runner-artifacts"
ANNOTATION_VERBOSITY = "ansible.sdk.operatorframework.io/verbosity"

DEFAULT_ANSIBLE_VERBOSITY = 2
DEFAULT_MAX_ANNOTATION_VERBOSITY = 2
"""The verbosity annotation is a CR author's setting: it may lower the verbosity, but raise it only up to
this (``--max-annotation-verbosity``). At 3 and above the log shows whole task results."""
DEFAULT_MAX_RUNNER_ARTIFACTS = 20
SYSTEM_ROLES_DIR = Path("/opt/ansible/roles")


class WatchesError(OperatorError):
    """A watches.yaml problem; ``str(e)`` is one line naming file, entry and key."""


# ---- public model ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Finalizer:
    name: str
    role: str | None
    """Absolute role directory, or a collection FQCN; None when the finalizer runs a playbook or the main
    role/playbook with ``vars``."""
    playbook: Path | None
    vars: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Watch:
    group: str
    version: str
    kind: str
    role: str | None
    """Absolute role directory path, or a collection FQCN ``namespace.collection.role``."""
    playbook: Path | None
    """Absolute path."""
    vars: dict[str, Any]
    finalizer: Finalizer | None
    reconcile_period: float | None
    """Seconds between resyncs of an unchanged object; None means no periodic resync."""
    manage_status: bool = True
    watch_dependent_resources: bool = True
    watch_cluster_scoped_resources: bool = False
    watch_annotations_changes: bool = False
    snake_case_parameters: bool = True
    mark_unsafe: bool = True
    selector: dict[str, Any] | None = None
    """metav1.LabelSelector (``matchLabels`` / ``matchExpressions``); None means every object."""
    blacklist: tuple[dict[str, Any], ...] = ()
    """Dependent kinds never watched: ``{"group", "version", "kind"}`` dicts."""
    max_runner_artifacts: int = DEFAULT_MAX_RUNNER_ARTIFACTS
    max_concurrent_reconciles: int = 1
    ansible_verbosity: int = DEFAULT_ANSIBLE_VERBOSITY
    max_annotation_verbosity: int = DEFAULT_MAX_ANNOTATION_VERBOSITY
    """Highest verbosity the ``ansible.sdk.operatorframework.io/verbosity`` annotation may ask for."""
    collections_paths: tuple[Path, ...] = ()
    """Existing collection roots searched for FQCN roles (for the run's ANSIBLE_COLLECTIONS_PATH)."""
    roles_paths: tuple[Path, ...] = ()
    """Existing role directories searched for relative role names (for ANSIBLE_ROLES_PATH of the run)."""
    source: str = "watches.yaml"
    """The watches file this came from (for messages)."""
    index: int = 0
    """1-based position in the file (for messages)."""

    @property
    def key(self) -> str:
        """``Kind.group`` (``Kind`` for the core group): the name used in logs, metrics and env vars."""
        return f"{self.kind}.{self.group}" if self.group else self.kind

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def var_prefix(self) -> str:
        """Extra-var name holding the whole object: ``_<group>_<kind>`` with dots/dashes as ``_``."""
        return re.sub(r"[.\-]", "_", f"_{self.group}_{self.kind.lower()}")


def env_var_name(prefix: str, kind: str, group: str) -> str:
    """Operator SDK's per-kind variable name: ``<PREFIX>_<KIND>_<GROUP>`` upper-cased, dots → ``_``."""
    return f"{prefix}_{kind}_{group}".replace(".", "_").upper()


def annotation_overrides(watch: Watch, annotations: Mapping[str, str] | None) -> dict[str, Any]:
    """Per-CR overrides from Operator SDK's annotations; invalid values are ignored (as the SDK does) but
    reported in ``"invalid"`` so the caller can log them.

    Returns ``{"reconcile_period": float|None, "max_runner_artifacts": int, "ansible_verbosity": int,
    "invalid": [(annotation, value, reason), ...]}``.
    """
    annotations = annotations or {}
    out: dict[str, Any] = {
        "reconcile_period": watch.reconcile_period,
        "max_runner_artifacts": watch.max_runner_artifacts,
        "ansible_verbosity": watch.ansible_verbosity,
        "invalid": [],
    }
    raw = annotations.get(ANNOTATION_RECONCILE_PERIOD)
    if raw is not None:
        try:
            period = parse_duration(raw)
            out["reconcile_period"] = period or None
        except ValueError as exc:
            out["invalid"].append((ANNOTATION_RECONCILE_PERIOD, raw, str(exc)))
    for name, key, low, high in (
        (ANNOTATION_MAX_RUNNER_ARTIFACTS, "max_runner_artifacts", 0, None),
        (ANNOTATION_VERBOSITY, "ansible_verbosity", 0, 7),
    ):
        raw = annotations.get(name)
        if raw is None:
            continue
        try:
            value = int(str(raw).strip())
        except ValueError:
            out["invalid"].append((name, raw, "not an integer"))
            continue
        if value < low or (high is not None and value > high):
            bound = f"{low}..{high}" if high is not None else f">= {low}"
            out["invalid"].append((name, raw, f"must be {bound}"))
            continue
        if key == "ansible_verbosity" and value > watch.max_annotation_verbosity:
            # A CR author must not be able to make the operator log more than its administrator allows.
            cap = watch.max_annotation_verbosity
            out["invalid"].append((name, raw, f"above the operator's maximum {cap}"
                                              f" (--max-annotation-verbosity); using {cap}"))
            value = cap
        out[key] = value
    return out


# ---- raw file schema (pydantic) --------------------------------------------------------------------


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=False, frozen=True)


class _FinalizerModel(_Strict):
    name: StrictStr
    role: StrictStr | None = None
    playbook: StrictStr | None = None
    vars: dict[str, Any] | None = None


class _GVKModel(_Strict):
    group: StrictStr = ""
    version: StrictStr
    kind: StrictStr


class _SelectorRequirement(_Strict):
    key: StrictStr
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: list[StrictStr] | None = None


class _SelectorModel(_Strict):
    matchLabels: dict[StrictStr, StrictStr] | None = None
    matchExpressions: list[_SelectorRequirement] | None = None


class _WatchModel(_Strict):
    group: StrictStr
    version: StrictStr
    kind: StrictStr
    role: StrictStr | None = None
    playbook: StrictStr | None = None
    vars: dict[str, Any] | None = None
    finalizer: _FinalizerModel | None = None
    reconcilePeriod: Any = None  # validated by parse_duration (Go duration or seconds)
    manageStatus: StrictBool = True
    watchDependentResources: StrictBool = True
    watchClusterScopedResources: StrictBool = False
    watchAnnotationsChanges: StrictBool = False
    snakeCaseParameters: StrictBool = True
    markUnsafe: StrictBool = True
    selector: _SelectorModel | None = None
    blacklist: list[_GVKModel] | None = None
    maxRunnerArtifacts: StrictInt = Field(default=DEFAULT_MAX_RUNNER_ARTIFACTS, ge=0)
    maxConcurrentReconciles: StrictInt | None = Field(default=None, ge=1)


def _keys_at(loc: tuple[Any, ...]) -> list[str]:
    """Valid keys of the mapping at ``loc`` (a pydantic location without the offending key)."""
    if not loc:
        return list(_WatchModel.model_fields)
    head = loc[0]
    if head == "finalizer":
        return list(_FinalizerModel.model_fields)
    if head == "blacklist":
        return list(_GVKModel.model_fields)
    if head == "selector":
        if len(loc) >= 3 and loc[1] == "matchExpressions":
            return list(_SelectorRequirement.model_fields)
        return list(_SelectorModel.model_fields)
    return []


def _loc_text(loc: Sequence[Any]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def _clean_loc(loc: tuple[Any, ...]) -> tuple[Any, ...]:
    """Drop pydantic's union-branch markers (``str``, ``int``, ``function-after[...]``) from a location."""
    known = (set(_WatchModel.model_fields) | set(_FinalizerModel.model_fields)
             | set(_SelectorModel.model_fields))
    known |= set(_SelectorRequirement.model_fields) | set(_GVKModel.model_fields)
    cleaned: list[Any] = []
    for i, part in enumerate(loc):
        if isinstance(part, int) or part in known:
            cleaned.append(part)
        elif i > 0 and cleaned and cleaned[-1] in ("vars", "matchLabels"):
            cleaned.append(part)
    return tuple(cleaned)


def _describe(error: Any, raw: Mapping[str, Any]) -> str:
    loc = tuple(error["loc"])
    etype = error["type"]
    if etype == "extra_forbidden":
        bad = loc[-1]
        parent = _clean_loc(loc[:-1])
        where = _loc_text(parent)
        name = f"{where}.{bad}" if where else str(bad)
        hint = difflib.get_close_matches(str(bad), _keys_at(parent), n=1, cutoff=0.6)
        suffix = f" (did you mean '{hint[0]}'?)" if hint else f" (valid keys: {', '.join(_keys_at(parent))})"
        return f"unknown key '{name}'{suffix}"
    cleaned = _clean_loc(loc)
    key = _loc_text(cleaned) or "entry"
    if etype == "missing":
        return f"missing required key '{key}'"
    value: Any = raw
    for part in cleaned:
        try:
            value = value[part]
        except (KeyError, IndexError, TypeError):
            value = None
            break
    msg = error["msg"]
    if etype in ("bool_type", "int_type", "string_type", "dict_type", "list_type", "model_type",
                 "float_type", "model_attributes_type"):
        msg = {
            "bool_type": "must be true or false",
            "int_type": "must be an integer",
            "string_type": "must be a string",
            "float_type": "must be a number",
            "dict_type": "must be a mapping",
            "list_type": "must be a list",
            "model_type": "must be a mapping",
            "model_attributes_type": "must be a mapping",
        }[etype]
    return f"invalid value for '{key}': {value!r}: {msg}"


# ---- loading ---------------------------------------------------------------------------------------

_ENV_REF = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")


def _expand(value: str, env: Mapping[str, str], fail: Any) -> str:
    """``$VAR`` / ``${VAR}`` expansion (os.path.expandvars syntax), but an undefined variable is an error
    instead of being left in the path, where it would only surface as a confusing "not found"."""

    def repl(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2)
        if name not in env:
            fail(f"environment variable ${name} used in {value!r} is not set")
        return env[name]

    return _ENV_REF.sub(repl, value)


def _split_paths(value: str | None) -> list[Path]:
    if not value:
        return []
    return [Path(p).expanduser() for p in value.split(os.pathsep) if p]


def _collection_roots(env: Mapping[str, str], base: Path) -> list[Path]:
    roots: list[Path] = []
    configured = env.get("ANSIBLE_COLLECTIONS_PATH") or env.get("ANSIBLE_COLLECTIONS_PATHS")
    if configured:
        roots += _split_paths(configured)
    else:
        home = env.get("HOME")
        roots.append((Path(home) if home else Path.home()) / ".ansible" / "collections")
        roots.append(Path("/usr/share/ansible/collections"))
    roots.append(base / "collections")
    # Collections installed as Python packages (the `ansible` bundle: kubernetes.core etc.).
    try:
        import ansible_collections  # noqa: PLC0415 - namespace package; cheap

        roots += [Path(p).parent for p in getattr(ansible_collections, "__path__", [])]
    except ImportError:
        pass
    out: list[Path] = []
    for r in roots:
        if r not in out:
            out.append(r)
    return out


def _role_dirs(env: Mapping[str, str], base: Path, roles_search: Sequence[Path] | None) -> list[Path]:
    """Directories a relative role name is looked up in, in order (Operator SDK's order, plus ours)."""
    dirs: list[Path] = []
    for d in _split_paths(env.get("ANSIBLE_ROLES_PATH")):
        dirs += [d, d / "roles"]  # the SDK accepts the path with or without a trailing roles/
    dirs += [Path(p) for p in roles_search or ()]
    dirs += [base / "roles", Path.cwd() / "roles", SYSTEM_ROLES_DIR]
    return list(dict.fromkeys(dirs))


def _resolve_role(name: str, *, collections: list[Path], role_dirs: list[Path], fail: Any, key: str) -> str:
    """Operator SDK's lookup order: absolute path; FQCN in collection roots; ``$ANSIBLE_ROLES_PATH`` dirs
    (with and without ``roles/``); ``roles/`` next to watches.yaml and in the working directory;
    /opt/ansible/roles."""
    path = Path(name).expanduser()
    if path.is_absolute():
        if not path.is_dir():
            fail(f"'{key}': role directory {str(path)!r} does not exist")
        _check_role_dir(path, fail, key)
        return str(path)
    parts = name.split(".")
    if len(parts) == 3 and all(parts):
        for root in collections:
            if (root / "ansible_collections" / parts[0] / parts[1] / "roles" / parts[2]).is_dir():
                return name
    tried = [d / name for d in role_dirs]
    for candidate in tried:
        if candidate.is_dir():  # the first one found, as the SDK's lookup; then it must be a role
            _check_role_dir(candidate, fail, key)
            return str(candidate.resolve())
    where = ", ".join(str(t) for t in tried[:6])
    more = f" and {len(tried) - 6} more" if len(tried) > 6 else ""
    coll = " as a collection role or" if len(parts) == 3 else ""
    fail(f"'{key}': role {name!r} not found{coll} (looked in {where}{more})")
    raise AssertionError("unreachable")


def _check_role_dir(path: Path, fail: Any, key: str) -> None:
    if not any((path / sub).is_dir() for sub in ROLE_SUBDIRS):
        fail(f"'{key}': {str(path)!r} is not a role directory (it has none of "
             f"{', '.join(d + '/' for d in ROLE_SUBDIRS)})")


def _resolve_playbook(name: str, base: Path, fail: Any, key: str) -> Path:
    path = Path(name).expanduser()
    if not path.is_absolute():
        path = base / path
    path = path.resolve()
    if not path.is_file():
        fail(f"'{key}': playbook {str(path)!r} does not exist")
    try:
        plays = yaml.load(path.read_text(encoding="utf-8"), Loader=_PlaybookLoader)  # noqa: S506 - safe
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        fail(f"'{key}': {str(path)!r} is not a playbook: {' '.join(str(exc).split())[:200]}")
    if not isinstance(plays, list) or not all(isinstance(play, dict) for play in plays):
        fail(f"'{key}': {str(path)!r} is not a playbook (a YAML list of plays)")
    return path


#: the subdirectories Ansible looks for in a role; a directory with none of them is not one
ROLE_SUBDIRS = ("tasks", "handlers", "defaults", "vars", "meta", "files", "templates", "library",
                "module_utils", "lookup_plugins", "filter_plugins")


class _PlaybookLoader(yaml.SafeLoader):
    """Safe YAML, with Ansible's own tags (``!unsafe``, ``!vault``) read as plain values."""


_PlaybookLoader.add_multi_constructor("!", lambda loader, suffix, node: None)


def _int_env(env: Mapping[str, str], names: Sequence[str], fail: Any) -> tuple[str, int] | None:
    for name in names:
        raw = env.get(name)
        if raw is None or raw.strip() == "":
            continue
        try:
            return name, int(raw.strip())
        except ValueError:
            fail(f"environment variable {name}={raw!r} is not an integer")
    return None


def _env_names(prefix: str, kind: str, group: str) -> list[str]:
    exact = env_var_name(prefix, kind, group)
    # Groups may contain '-', which no shell can put in a variable name: also accept it as '_'.
    names = [exact, exact.replace("-", "_")]
    return list(dict.fromkeys(names))


def _validate_selector(sel: _SelectorModel, fail: Any) -> dict[str, Any] | None:
    out: dict[str, Any] = {}
    if sel.matchLabels:
        out["matchLabels"] = dict(sel.matchLabels)
    if sel.matchExpressions:
        exprs = []
        for i, req in enumerate(sel.matchExpressions):
            values = list(req.values or [])
            if req.operator in ("In", "NotIn") and not values:
                fail(f"invalid value for 'selector.matchExpressions[{i}]': operator {req.operator} needs"
                     " a non-empty 'values' list")
            if req.operator in ("Exists", "DoesNotExist") and values:
                fail(f"invalid value for 'selector.matchExpressions[{i}]': operator {req.operator} must"
                     " not have 'values'")
            expr: dict[str, Any] = {"key": req.key, "operator": req.operator}
            if values:
                expr["values"] = values
            exprs.append(expr)
        out["matchExpressions"] = exprs
    if out:  # keys and values as the API server checks them (the selector goes into every list and watch)
        try:
            label_selector_from_dict(out)
        except SelectorError as exc:
            fail(f"invalid value for 'selector': {exc}")
    return out or None


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, except that a key repeated in one mapping is an error (YAML 1.2 says keys are
    unique; PyYAML silently keeps the last one, so ``role`` twice would run the second role unnoticed)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, yaml.Node] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            try:
                first = seen.get(key)
            except TypeError:  # an unhashable key: the base class reports it
                break
            if first is not None:
                raise yaml.constructor.ConstructorError(
                    None, None,
                    f"duplicate key {key!r} (first at line {first.start_mark.line + 1}); each key may appear"
                    " only once per entry", key_node.start_mark)
            seen[key] = key_node
        mapping: dict[Any, Any] = super().construct_mapping(node, deep=deep)
        return mapping


def load_yaml_unique(text: str) -> Any:
    """``yaml.safe_load`` that rejects duplicate mapping keys."""
    return yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader subclass: safe


_Fail = Callable[[str], NoReturn]
"""Raises a WatchesError with this message (prefixed with the file, and the entry)."""


def load_watches(
    path: str | Path,
    *,
    max_concurrent_reconciles: int | None = None,
    ansible_verbosity: int | None = None,
    reconcile_period: float | None = None,
    max_annotation_verbosity: int | None = None,
    env: Mapping[str, str] | None = None,
    roles_search: Sequence[Path] | None = None,
) -> list[Watch]:
    """Load, validate and resolve a watches file.

    ``max_concurrent_reconciles`` / ``ansible_verbosity`` / ``reconcile_period`` are the command-line
    defaults (None: CPU count / 2 / no resync). Per-kind environment variables win over them, as in
    Operator SDK. ``env`` defaults to ``os.environ``; ``roles_search`` adds role directories searched after
    ``$ANSIBLE_ROLES_PATH``.
    """
    env = os.environ if env is None else env
    shown = str(path)
    path = Path(path)

    def file_fail(msg: str) -> NoReturn:
        raise WatchesError(f"{shown}: {msg}")

    entries = _read_entries(path, file_fail)
    base = path.resolve().parent
    collections = _collection_roots(env, base)
    role_dirs = _role_dirs(env, base, roles_search)
    _check_defaults(max_concurrent_reconciles, ansible_verbosity, max_annotation_verbosity, file_fail)
    loader = _EntryLoader(
        shown=shown, env=env, base=base, collections=collections, role_dirs=role_dirs,
        reconcile_period=reconcile_period,
        workers=max_concurrent_reconciles or os.cpu_count() or 1,
        verbosity=DEFAULT_ANSIBLE_VERBOSITY if ansible_verbosity is None else ansible_verbosity,
        max_annotation_verbosity=(DEFAULT_MAX_ANNOTATION_VERBOSITY if max_annotation_verbosity is None
                                  else max_annotation_verbosity),
    )
    return [loader.load(index, raw) for index, raw in enumerate(entries, start=1)]


def _read_entries(path: Path, fail: _Fail) -> list[Any]:
    """The file's entries: readable, YAML (no key twice in a mapping), a non-empty list."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        fail("file not found")
    except IsADirectoryError:
        fail("is a directory, not a file")
    except (OSError, UnicodeDecodeError) as exc:
        fail(f"cannot read: {exc}")
    try:
        data = load_yaml_unique(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        fail(f"YAML syntax error: {where}{problem}")
    if data is None:
        fail("is empty; expected a list of watches (group, version, kind, role or playbook)")
    if not isinstance(data, list):
        fail(f"expected a list of watches at the top level, got a {type(data).__name__}")
    if not data:
        fail("the list of watches is empty")
    return data


def _check_defaults(max_concurrent_reconciles: int | None, ansible_verbosity: int | None,
                    max_annotation_verbosity: int | None, fail: _Fail) -> None:
    """The command-line defaults given to :func:`load_watches`, in range."""
    if max_concurrent_reconciles is not None and max_concurrent_reconciles < 1:
        fail(f"max concurrent reconciles must be >= 1, got {max_concurrent_reconciles}")
    if ansible_verbosity is not None and not 0 <= ansible_verbosity <= 7:
        fail(f"ansible verbosity must be 0..7, got {ansible_verbosity}")
    if max_annotation_verbosity is not None and not 0 <= max_annotation_verbosity <= 7:
        fail(f"max annotation verbosity must be 0..7, got {max_annotation_verbosity}")


@dataclass
class _EntryLoader:
    """Turns one entry of a watches file into a :class:`Watch`: schema, uniqueness, role or playbook,
    finalizer, reconcile period, selector, then the per-kind environment variables, in that order (the
    first problem found is the one reported)."""

    shown: str
    """The file as given (for messages)."""
    env: Mapping[str, str]
    base: Path
    """The watches file's directory: relative playbooks are found from it."""
    collections: list[Path]
    role_dirs: list[Path]
    reconcile_period: float | None
    workers: int
    verbosity: int
    max_annotation_verbosity: int
    seen: dict[tuple[str, str, str], int] = field(default_factory=dict)
    """(group, version, kind) → entry index: a kind watched twice is an error."""

    def load(self, index: int, raw: Any) -> Watch:
        fail = self._fail_for(index, raw)
        m = self._validate(index, raw, fail)
        role, playbook = self._role_or_playbook(m, fail)
        finalizer = self._finalizer(m, fail)
        period = self._period(m, fail)
        selector = _validate_selector(m.selector, fail) if m.selector is not None else None
        workers = self._workers(m, fail)
        verbosity = self._verbosity(m, fail)
        return Watch(
            group=m.group, version=m.version, kind=m.kind,
            role=role, playbook=playbook, vars=dict(m.vars or {}), finalizer=finalizer,
            reconcile_period=period,
            manage_status=m.manageStatus,
            watch_dependent_resources=m.watchDependentResources,
            watch_cluster_scoped_resources=m.watchClusterScopedResources,
            watch_annotations_changes=m.watchAnnotationsChanges,
            snake_case_parameters=m.snakeCaseParameters,
            mark_unsafe=m.markUnsafe,
            selector=selector,
            blacklist=tuple({"group": b.group, "version": b.version, "kind": b.kind}
                            for b in m.blacklist or ()),
            # 0 means "default" in Operator SDK (Go zero value), not "keep everything".
            max_runner_artifacts=m.maxRunnerArtifacts or DEFAULT_MAX_RUNNER_ARTIFACTS,
            max_concurrent_reconciles=workers,
            ansible_verbosity=verbosity,
            max_annotation_verbosity=self.max_annotation_verbosity,
            collections_paths=tuple(c for c in self.collections if c.is_dir()),
            roles_paths=tuple(d for d in self.role_dirs if d.is_dir()),
            source=self.shown,
            index=index,
        )

    def _fail_for(self, index: int, raw: Any) -> _Fail:
        """Raises a WatchesError naming the file and the entry (``entry 2 (Kind.group)``)."""
        label = f"entry {index}"
        if isinstance(raw, dict) and isinstance(raw.get("kind"), str):
            g = raw.get("group")
            label += f" ({raw['kind']}.{g})" if isinstance(g, str) and g else f" ({raw['kind']})"

        def fail(msg: str) -> NoReturn:
            raise WatchesError(f"{self.shown}: {label}: {msg}")

        return fail

    def _validate(self, index: int, raw: Any, fail: _Fail) -> _WatchModel:
        """The entry against the schema; its kind not watched by an earlier entry."""
        if not isinstance(raw, dict):
            fail(f"expected a mapping with group, version, kind and role or playbook, got {raw!r}")
        try:
            m = _WatchModel.model_validate(raw)
        except ValidationError as exc:
            errors = exc.errors()
            # A misspelt key usually also causes a "missing" error for the real key: report the typo.
            errors.sort(key=lambda e: e["type"] != "extra_forbidden")
            fail(_describe(errors[0], raw))
        if not m.version:
            fail("'version' must not be empty")
        if not m.kind:
            fail("'kind' must not be empty")
        gvk = (m.group, m.version, m.kind)
        if gvk in self.seen:
            fail(f"duplicate watch for {m.group}/{m.version} {m.kind}"
                 f" (first defined in entry {self.seen[gvk]})")
        self.seen[gvk] = index
        return m

    def _role_or_playbook(self, m: _WatchModel, fail: _Fail) -> tuple[str | None, Path | None]:
        if bool(m.role) == bool(m.playbook):
            fail("exactly one of 'role' or 'playbook' is required" if not m.role
                 else "'role' and 'playbook' are mutually exclusive")
        role = playbook = None
        if m.role:
            role = self._role(m.role, fail, "role")
        if m.playbook:
            playbook = self._playbook(m.playbook, fail, "playbook")
        return role, playbook

    def _finalizer(self, m: _WatchModel, fail: _Fail) -> Finalizer | None:
        f = m.finalizer
        if f is None:
            return None
        if not f.name:
            fail("'finalizer.name' must not be empty")
        if f.role and f.playbook:
            fail("'finalizer.role' and 'finalizer.playbook' are mutually exclusive")
        if not (f.role or f.playbook or f.vars):
            fail("'finalizer' needs a 'role', a 'playbook' or 'vars'")
        role = self._role(f.role, fail, "finalizer.role") if f.role else None
        playbook = self._playbook(f.playbook, fail, "finalizer.playbook") if f.playbook else None
        return Finalizer(name=f.name, role=role, playbook=playbook, vars=dict(f.vars or {}))

    def _role(self, name: str, fail: _Fail, key: str) -> str:
        return _resolve_role(_expand(name, self.env, fail), collections=self.collections,
                             role_dirs=self.role_dirs, fail=fail, key=key)

    def _playbook(self, name: str, fail: _Fail, key: str) -> Path:
        return _resolve_playbook(_expand(name, self.env, fail), self.base, fail, key)

    def _period(self, m: _WatchModel, fail: _Fail) -> float | None:
        """``reconcilePeriod``, else the command line's; 0 (or less) means no periodic resync."""
        period: float | None = self.reconcile_period
        if m.reconcilePeriod is not None:
            try:
                period = parse_duration(m.reconcilePeriod)
            except ValueError as exc:
                fail(f"'reconcilePeriod': {exc}")
        if period is not None and period <= 0:
            period = None
        return period

    def _workers(self, m: _WatchModel, fail: _Fail) -> int:
        """``$MAX_CONCURRENT_RECONCILES_<KIND>_<GROUP>`` (or ``$WORKER_...``), else
        ``maxConcurrentReconciles``, else the command line's."""
        workers = m.maxConcurrentReconciles or self.workers
        found = _int_env(self.env, _env_names("MAX_CONCURRENT_RECONCILES", m.kind, m.group)
                         + _env_names("WORKER", m.kind, m.group), fail)
        if found is not None:
            name, workers = found
            if workers < 1:
                fail(f"environment variable {name}={workers} must be >= 1")
        return workers

    def _verbosity(self, m: _WatchModel, fail: _Fail) -> int:
        """``$ANSIBLE_VERBOSITY_<KIND>_<GROUP>``, else the command line's."""
        verbosity = self.verbosity
        found = _int_env(self.env, _env_names("ANSIBLE_VERBOSITY", m.kind, m.group), fail)
        if found is not None:
            name, verbosity = found
            if not 0 <= verbosity <= 7:
                fail(f"environment variable {name}={verbosity} must be 0..7")
        return verbosity
