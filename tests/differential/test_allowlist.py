"""The allow-list is well-formed, every entry names a scenario that exists, and docs/reference/sandbox.md
prints it."""

from __future__ import annotations

from .allowlist import DOC, current_section, render
from .harness import load_allowlist
from .scenarios import SCENARIOS


def test_every_entry_has_a_reason_and_a_scenario() -> None:
    entries = load_allowlist()  # raises on a duplicate or a missing reason
    unknown = {scenario for scenario, _ in entries} - set(SCENARIOS)
    assert not unknown, f"allow-listed scenarios that do not exist: {sorted(unknown)}"


def test_docs_print_the_allowlist() -> None:
    section = current_section(DOC.read_text())
    assert section is not None, f"{DOC} has no allow-list section"
    assert section == render(), (
        "docs/reference/sandbox.md is stale: run `python -m tests.differential.allowlist`")


def test_readme_counts_the_allowlist() -> None:
    readme = (DOC.parents[2] / "README.md").read_text()
    count = len(load_allowlist())
    assert f"({count} listed\ndifferences)" in readme or f"({count} listed differences)" in readme, (
        f"README's 'What the sandbox does not emulate' must say ({count} listed differences)")
