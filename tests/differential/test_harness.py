"""The normaliser on its own (no server): what legitimately differs between two clusters is replaced, the
same way whatever the random values happen to be."""

from __future__ import annotations

from .harness import Normaliser


def test_kubectl_diff_directories_whose_digits_look_like_a_generated_suffix() -> None:
    # /tmp/LIVE-<digits>: digits drawn only from the generated-name alphabet (2, 4-9) once made "<hash>"
    norm = Normaliser("ns-x")
    for digits in ("2456789245", "1034567"):
        text = f"diff -u -N /tmp/LIVE-{digits}/v1.ConfigMap.ns-x.ssa /tmp/MERGED-{digits}/cm.ns-x"
        assert norm.text(text) == "diff -u -N /tmp/LIVE-<n>/v1.ConfigMap.NS.ssa /tmp/MERGED-<n>/cm.NS"
    assert norm.text("pod/web-5d8f7b9c4-x7kq2") == "pod/web-<hash>-<hash>"
