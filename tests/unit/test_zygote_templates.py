"""The warm executor's compiled-template store (``warm.templates``): reuse across runs, never stale code.

Each "run" is a fresh :class:`TemplateCodeStore` on the same directory (what a new fork of the zygote
gets), in front of a real ``jinja2.Environment.compile``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jinja2
import pytest
from jinja2 import pass_context

from ansible_operator.executors.warm import templates
from ansible_operator.executors.warm.templates import TemplateCodeStore


@pytest.fixture
def new_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    real = jinja2.Environment.compile

    def start() -> TemplateCodeStore:
        store = TemplateCodeStore(str(tmp_path / "store"), lambda: ())
        monkeypatch.setattr(jinja2.Environment, "compile", templates.cached(real, store))
        return store

    return start


def test_a_later_run_reuses_the_code_and_renders_the_same(new_run: Any) -> None:
    first = new_run()
    env = jinja2.Environment()
    assert env.from_string("{{ who | upper }} x{{ n + 1 }}").render(who="a", n=1) == "A x2"
    assert (first.hits, first.misses) == (0, 1)
    env.from_string("{{ who | upper }} x{{ n + 1 }}")  # the same string again in the run: its memo
    assert (first.hits, first.misses) == (1, 1)

    second = new_run()
    assert jinja2.Environment().from_string("{{ who | upper }} x{{ n + 1 }}").render(who="b", n=2) == "B x3"
    assert (second.hits, second.misses) == (1, 0)


def test_other_delimiters_are_another_entry(new_run: Any) -> None:
    store = new_run()
    plain = jinja2.Environment()
    brackets = plain.overlay(variable_start_string="[[", variable_end_string="]]")
    source = "[[ a ]] {{ a }}"
    assert plain.from_string(source).render(a=1) == "[[ a ]] 1"
    assert brackets.from_string(source).render(a=1) == "1 {{ a }}"
    assert store.misses == 2


def test_code_is_not_reused_when_a_filter_is_called_another_way(new_run: Any) -> None:
    # a filter of the same name that now wants the context (e.g. another collection's plugin): the code
    # compiled for the plain one would call it without the context
    new_run()
    plain = jinja2.Environment()
    plain.filters["tag"] = lambda value: f"plain {value}"
    assert plain.from_string("{{ 'x' | tag }}").render() == "plain x"

    second = new_run()
    contextual = jinja2.Environment()
    contextual.filters["tag"] = pass_context(lambda ctx, value: f"{ctx['who']} {value}")
    assert contextual.from_string("{{ 'x' | tag }}").render(who="ctx") == "ctx x"
    assert (second.hits, second.misses) == (0, 1)


def test_a_syntax_error_raises_as_jinja_does_and_is_not_stored(new_run: Any, tmp_path: Path) -> None:
    store = new_run()
    with pytest.raises(jinja2.TemplateSyntaxError) as cached_error:
        jinja2.Environment().from_string("{{ a + }}")
    with pytest.raises(jinja2.TemplateSyntaxError) as plain_error:
        jinja2.Template("{{ a + }}")
    assert str(cached_error.value) == str(plain_error.value)
    assert cached_error.value.source == "{{ a + }}"
    assert not [p for p in (tmp_path / "store").rglob("*") if p.is_file()]
    assert store.misses == 2  # both compiles went through the store; neither was stored


def test_a_damaged_entry_is_compiled_again(new_run: Any, tmp_path: Path) -> None:
    new_run()
    jinja2.Environment().from_string("{{ 1 + 1 }}")
    (entry,) = [p for p in (tmp_path / "store").rglob("*") if p.is_file()]
    entry.write_bytes(b"not marshal data")
    second = new_run()
    assert jinja2.Environment().from_string("{{ 1 + 1 }}").render() == "2"
    assert (second.hits, second.misses) == (0, 1)
