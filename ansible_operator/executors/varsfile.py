"""The extra-vars file of a run: ``Unsafe`` strings and the YAML that marks them ``!unsafe``.

The contract between the runner (``extravars`` builds the values) and the executors (``datadir`` writes
``env/extravars``): it lives here, in the executors layer, so executors import nothing above them
(docs/explanation/architecture.md, "Layer contracts"). ``ansible_operator.extravars`` re-exports both names.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

import yaml
from yaml.nodes import ScalarNode
from yaml.resolver import Resolver

__all__ = ["Unsafe", "dump"]


class Unsafe(str):
    """A string Ansible must never template (it came from a custom resource)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"Unsafe({str.__repr__(self)})"


# ---- YAML for env/extravars -----------------------------------------------------------------------

_RESOLVER = Resolver()
# types-PyYAML leaves Resolver.resolve unannotated: (node kind, scalar text, (implicit, quoted)) -> tag.
_resolve_tag: Callable[[type[ScalarNode], str, tuple[bool, bool]], str] = _RESOLVER.resolve
_STR_TAG = "tag:yaml.org,2002:str"


class _Dumper(yaml.SafeDumper):
    """SafeDumper that writes ``Unsafe`` strings with Ansible's ``!unsafe`` tag."""


def _represent_unsafe(dumper: _Dumper, data: Unsafe) -> ScalarNode:
    text = str(data)
    # Ansible's !unsafe constructor re-runs implicit resolution on the scalar, so `!unsafe "yes"` would load
    # as True and `!unsafe ''` as None. Strings that resolve to a non-string type cannot contain a template
    # (those YAML patterns have no braces), so they are written as ordinary quoted strings instead.
    if _resolve_tag(ScalarNode, text, (True, False)) != _STR_TAG:
        return dumper.represent_str(text)
    # The emitter falls back to a quoted style by itself where a block or single quotes cannot represent
    # the text exactly (keys, trailing spaces, control characters).
    style = "|" if "\n" in text else "'"
    return dumper.represent_scalar("!unsafe", text, style=style)


_Dumper.add_representer(Unsafe, _represent_unsafe)
_Dumper.add_representer(tuple, yaml.SafeDumper.represent_list)


def dump(extra_vars: Mapping[str, Any]) -> str:
    """YAML text for ``env/extravars`` (the caller writes it 0600). ``Unsafe`` strings get ``!unsafe``."""
    return str(yaml.dump(
        dict(extra_vars),
        Dumper=_Dumper,
        default_flow_style=False,
        sort_keys=False,
        allow_unicode=True,
        width=float("inf"),
    ))
