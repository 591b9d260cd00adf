"""Jinja templates compiled once per zygote, not once per run: a code store shared by the warm runs.

Ansible compiles every template string it renders (a task's arguments, ``when``, ``set_fact`` values...)
with ``Environment.from_string``: Jinja parses it, generates Python source and compiles that, and Ansible
keeps nothing between tasks, let alone between runs (each run is a fresh fork of the zygote). py-spy on a
burst of warm Memcached runs put ~15 % of a run's CPU in ``jinja2.Environment.compile`` (~37 ms per run).

This module keeps the compiled code objects (``marshal``) in a store under the zygote's temporary
directory, so it lives exactly as long as the zygote, and wraps ``jinja2.Environment.compile``:

* an entry is keyed by the template source, its name/filename, and everything of the environment that
  Jinja's lexer, parser and code generator read: the environment and code generator classes, extensions,
  delimiters and whitespace options, ``finalize``, ``autoescape``, ``undefined``, sandbox and async flags,
  and the versions of Python, Jinja and ansible-core (ansible-core 2.19+ also: its compile-time backslash
  escaping and embedded-template settings);
* the generated code also depends on each filter and test the template uses (Jinja passes the context,
  the eval context or the environment as a first argument when the function asks for it): an entry
  records the names it uses with how each was to be called when it was compiled, and is used only if
  every one of them is still called the same way in this environment (else it is compiled again and
  replaced);
* a template that does not compile raises as before and is never stored; entries are written to a
  temporary name and renamed, so a concurrent run sees a whole entry or none.

Off with Ansible's own template debugging (2.19's ``_debuggable_template_source``), which rewrites the
generated source. Everything else (rendering, variables, errors at render time) is Jinja's and Ansible's,
unchanged.
"""

from __future__ import annotations

import hashlib
import marshal
import os
import sys
import tempfile
from types import CodeType
from typing import Any, Callable

STORE_DIRNAME = "jinja-code"
_FORMAT = 1

Used = tuple[tuple[str, str, str], ...]
"""(``filter``/``test``, name, how Jinja calls it: ``context``, ``eval_context``, ``environment``, ``plain``
or ``missing``) for each filter and test in a template."""


def _qualname(obj: Any) -> str:
    if obj is None:
        return "None"
    kind = obj if isinstance(obj, type) else type(obj)
    name = getattr(obj, "__qualname__", None) or kind.__qualname__
    return f"{getattr(obj, '__module__', kind.__module__)}.{name}"


def _pass_arg(func: Any) -> str:
    if func is None:
        return "missing"
    from jinja2.utils import _PassArg

    found = _PassArg.from_obj(func)
    return found.name if found is not None else "plain"


def _environment_key(env: Any) -> tuple[Any, ...]:
    autoescape = env.autoescape
    return (
        _qualname(type(env)), _qualname(env.code_generator_class), _qualname(env.context_class),
        tuple(sorted(env.extensions)),
        env.block_start_string, env.block_end_string, env.variable_start_string, env.variable_end_string,
        env.comment_start_string, env.comment_end_string, env.line_statement_prefix, env.line_comment_prefix,
        env.trim_blocks, env.lstrip_blocks, env.newline_sequence, env.keep_trailing_newline,
        env.optimized, env.is_async, env.sandboxed,
        tuple(sorted(getattr(env, "intercepted_binops", ()))),
        tuple(sorted(getattr(env, "intercepted_unops", ()))),
        _qualname(autoescape) if callable(autoescape) else bool(autoescape),
        _qualname(env.finalize), _pass_arg(env.finalize) if env.finalize is not None else "none",
        _qualname(env.undefined),
    )


def _versions() -> tuple[str, ...]:
    import jinja2
    from ansible.release import __version__ as ansible_version

    return (_FORMAT, sys.version, jinja2.__version__, ansible_version)  # type: ignore[return-value]


def _used_names(ast: Any) -> set[tuple[str, str]]:
    from jinja2 import nodes

    used = {("filter", node.name) for node in ast.find_all(nodes.Filter)}
    used |= {("test", node.name) for node in ast.find_all(nodes.Test)}
    return used


def _calls(env: Any, names: set[tuple[str, str]] | Used) -> Used:
    result = []
    for kind, name, *_ in sorted(names):
        table = env.filters if kind == "filter" else env.tests
        try:
            func = table.get(name)
        except Exception:  # a plugin that fails to load: Jinja fails the same way at render time
            func = None
        result.append((kind, name, _pass_arg(func)))
    return tuple(result)


class TemplateCodeStore:
    """The store directory plus this process's own memo (a run compiles the same string many times)."""

    def __init__(self, root: str, context_key: Callable[[], tuple[Any, ...] | None]) -> None:
        self.root = root
        self._context_key = context_key
        self._memo: dict[str, tuple[CodeType, Used]] = {}
        self._versions = _versions()
        self.hits = 0
        self.misses = 0

    def _path(self, digest: str) -> str:
        return os.path.join(self.root, digest[:2], digest[2:])

    def key(self, env: Any, source: str, name: str | None, filename: str | None,
            defer_init: bool) -> str | None:
        context = self._context_key()
        if context is None:
            return None
        digest = hashlib.sha256(repr((self._versions, _environment_key(env), context, defer_init)).encode())
        for text in (name, filename, source):  # str subclasses (2.19's tagged strings): their characters only
            digest.update(b"\0" if text is None else b"\1" + text.encode("utf-8", "surrogatepass"))
        return digest.hexdigest()

    def get(self, env: Any, digest: str) -> CodeType | None:
        entry = self._memo.get(digest) or self._read(digest)
        if entry is None:
            return None
        code, used = entry
        if _calls(env, used) != used:
            return None
        self._memo[digest] = entry
        return code

    def _read(self, digest: str) -> tuple[CodeType, Used] | None:
        try:
            with open(self._path(digest), "rb") as fh:
                used, code = marshal.load(fh), marshal.load(fh)
        except (OSError, EOFError, ValueError, TypeError):
            return None
        if not isinstance(code, CodeType):
            return None
        return code, tuple(tuple(item) for item in used)

    def put(self, digest: str, code: CodeType, used: Used) -> None:
        self._memo[digest] = (code, used)
        path = self._path(digest)
        try:
            os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".part-", dir=os.path.dirname(path))
            try:
                with os.fdopen(fd, "wb") as fh:
                    marshal.dump([list(item) for item in used], fh)
                    marshal.dump(code, fh)
                os.rename(tmp, path)
            except BaseException:
                os.unlink(tmp)
                raise
        except OSError:
            pass  # a full or vanished store costs a compile, never the run


def _ansible_context_key() -> Callable[[], tuple[Any, ...] | None]:
    """What ansible-core itself feeds into compilation, or None while a template cannot be cached."""
    from ansible_operator.executors import ansible_compat

    key: Callable[[], tuple[Any, ...] | None] = ansible_compat.template_compile_key()
    return key


def cached(compile_: Callable[..., Any], store: TemplateCodeStore) -> Callable[..., Any]:
    """``jinja2.Environment.compile`` with ``store`` in front of it (template strings only)."""
    from jinja2 import TemplateSyntaxError

    def compile(self: Any, source: Any, name: str | None = None, filename: str | None = None,
                raw: bool = False, defer_init: bool = False) -> Any:
        if raw or not isinstance(source, str):
            return compile_(self, source, name, filename, raw, defer_init)
        digest = store.key(self, source, name, filename, defer_init)
        if digest is None:
            return compile_(self, source, name, filename, raw, defer_init)
        code = store.get(self, digest)
        if code is not None:
            store.hits += 1
            return code
        store.misses += 1
        try:
            ast = self._parse(source, name, filename)  # what compile_ does first
            code = compile_(self, ast, name, filename, raw, defer_init)
        except TemplateSyntaxError:  # Jinja's own error handling (source in the message), nothing stored
            return compile_(self, source, name, filename, raw, defer_init)
        store.put(digest, code, _calls(self, _used_names(ast)))
        return code

    return compile


def install(store_root: str) -> TemplateCodeStore:
    """Put the store at ``store_root`` in front of ``jinja2.Environment.compile`` (module docstring)."""
    from jinja2 import Environment

    store = TemplateCodeStore(store_root, _ansible_context_key())
    Environment.compile = cached(Environment.compile, store)  # type: ignore[method-assign]
    return store
