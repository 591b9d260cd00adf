#!/usr/bin/env python3
"""Regenerate the sandbox's built-in schemas from the upstream OpenAPI v2 spec.

    python scripts/gen_k8s_openapi.py --swagger /tmp/k8sopenapi/swagger-v1.32.json

The input is Kubernetes' published ``api/openapi-spec/swagger.json`` for the release the sandbox reports
(1.32). Rather than clone kubernetes/kubernetes for one file, take the copy kubernetes-client/python keeps
unprocessed at its release tag for 1.32 (v32.0.1), e.g.::

    git clone -q --filter=blob:none https://github.com/kubernetes-client/python /tmp/kcp
    git -C /tmp/kcp show v32.0.1:kubernetes/swagger.json.unprocessed > /tmp/k8sopenapi/swagger-v1.32.json

It writes ``sandbox/ansible_operator_sandbox/k8s_openapi.json.gz``: the ``definitions`` of every kind in the
group versions below and everything they reference (ObjectMeta, PodSpec, Quantity, ...), unchanged
(descriptions included: ``kubectl explain`` prints them), gzip-compressed reproducibly. Paths are not kept:
the sandbox builds them from its registry, so they list what it really serves.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parent.parent / "sandbox" / "ansible_operator_sandbox" / "k8s_openapi.json.gz"

# group/versions whose kinds are kept ("" is core): what the sandbox serves, plus authentication/v1
# (TokenRequest, TokenReview), autoscaling/v1 (Scale) and policy/v1 (Eviction)
GROUP_VERSIONS = {
    ("", "v1"), ("admissionregistration.k8s.io", "v1"), ("apiextensions.k8s.io", "v1"),
    ("apiregistration.k8s.io", "v1"), ("apps", "v1"), ("authentication.k8s.io", "v1"),
    ("authorization.k8s.io", "v1"), ("autoscaling", "v1"), ("autoscaling", "v2"), ("batch", "v1"),
    ("certificates.k8s.io", "v1"), ("coordination.k8s.io", "v1"), ("discovery.k8s.io", "v1"),
    ("events.k8s.io", "v1"), ("flowcontrol.apiserver.k8s.io", "v1"), ("networking.k8s.io", "v1"),
    ("node.k8s.io", "v1"), ("policy", "v1"),
    ("rbac.authorization.k8s.io", "v1"), ("scheduling.k8s.io", "v1"), ("storage.k8s.io", "v1"),
}
# request/response bodies every API path shares (the published paths refer to them)
SHARED = [
    "io.k8s.apimachinery.pkg.apis.meta.v1." + n for n in ("DeleteOptions", "Patch", "Status", "WatchEvent")
]
REF = "#/definitions/"


def _refs(node: Any) -> set[str]:
    out: set[str] = set()
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            ref = item.get("$ref")
            if isinstance(ref, str) and ref.startswith(REF):
                out.add(ref[len(REF):])
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--swagger", required=True, type=Path)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    spec = json.loads(args.swagger.read_text())
    definitions: dict[str, Any] = spec["definitions"]
    roots = [name for name, d in definitions.items()
             if any((g.get("group", ""), g.get("version")) in GROUP_VERSIONS
                    for g in d.get("x-kubernetes-group-version-kind") or [])]
    keep: set[str] = set()
    todo = roots + SHARED
    while todo:
        name = todo.pop()
        if name in keep:
            continue
        if name not in definitions:
            print(f"dangling reference {name}", file=sys.stderr)
            return 1
        keep.add(name)
        todo.extend(_refs(definitions[name]) - keep)
    doc = {"info": spec.get("info", {}), "definitions": {n: definitions[n] for n in sorted(keep)}}
    data = json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()
    args.out.write_bytes(gzip.compress(data, compresslevel=9, mtime=0))
    print(f"wrote {args.out}: {len(keep)} definitions ({len(roots)} with a group/version/kind), "
          f"{len(data)} bytes, {args.out.stat().st_size} compressed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
