"""docs/reference/sandbox.md's section "Known differences from the real API server", generated from
allowlist.yaml.

``python -m tests.differential.allowlist`` rewrites the section between its markers;
tests/differential/test_allowlist.py fails while it is stale.
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

HERE = Path(__file__).parent
ALLOWLIST = HERE / "allowlist.yaml"
DOC = HERE.parents[1] / "docs" / "reference" / "sandbox.md"
BEGIN = "<!-- allowlist: generated from tests/differential/allowlist.yaml -->"
END = "<!-- end of allowlist -->"


def render() -> str:
    entries = yaml.safe_load(ALLOWLIST.read_text()) or []
    lines = [BEGIN, "", "| scenario | step | why it differs |", "| --- | --- | --- |"]
    for entry in entries:
        step = str(entry["step"]).replace("|", "\\|")
        reason = " ".join(str(entry["reason"]).split()).replace("|", "\\|")
        lines.append(f"| `{entry['scenario']}` | `{step}` | {reason} |")
    lines += ["", f"{len(entries)} listed differences.", END]
    return "\n".join(lines)


def current_section(text: str) -> str | None:
    if BEGIN not in text or END not in text:
        return None
    start = text.index(BEGIN)
    return text[start:text.index(END, start) + len(END)]


def write() -> None:
    text = DOC.read_text()
    section = current_section(text)
    if section is None:
        raise SystemExit(f"{DOC}: no {BEGIN!r} ... {END!r} markers")
    DOC.write_text(text.replace(section, render()))


if __name__ == "__main__":
    write()
    sys.exit(0)
