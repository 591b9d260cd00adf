#!/usr/bin/env python3
"""Regenerate the sandbox's Kubernetes protobuf descriptors from the upstream sources.

    python scripts/gen_k8s_proto.py --src /tmp/k8ssrc [--release v0.32.9]

``--src`` holds the sources of four Go modules at the same release: ``api`` (k8s.io/api), ``apimachinery``,
``apiextensions-apiserver`` and ``kube-aggregator``, plus ``gnostic-models`` (the OpenAPI v2 protobuf that
client-go's ``OpenAPISchema()`` asks ``/openapi/v2`` for). No clones are needed: the Go module proxy has
them, and ``go mod download -json`` prints the directory it unpacked each into, e.g.::

    mkdir /tmp/k8ssrc && cd /tmp/k8ssrc && export GOFLAGS=-mod=mod
    for m in api apimachinery apiextensions-apiserver kube-aggregator; do
      ln -s "$(go mod download -json k8s.io/$m@v0.32.9 | jq -r .Dir)" $m; done
    ln -s "$(go mod download -json github.com/google/gnostic-models@v0.6.9 | jq -r .Dir)" gnostic-models

(checkouts of the GitHub repositories at those tags work as well).

Needs ``grpcio-tools`` (it ships protoc):
``python -m venv /tmp/gen && /tmp/gen/bin/pip install grpcio-tools``, then run this script with that
interpreter. It writes two files into ``sandbox/ansible_operator_sandbox/``:

``k8s.binpb``
    a FileDescriptorSet of the ``generated.proto`` files of every group/version the sandbox serves (and what
    they import) and of gnostic's ``openapiv2/OpenAPIv2.proto``, without source info or comments, and with
    each field's ``json_name`` set to the Go type's ``json:"..."`` tag (the Kubernetes JSON name; protoc's
    default camel-casing differs for ``$ref``, ``x-kubernetes-*`` and others).
``k8s_fields.json``
    what the ``.proto`` files cannot say and the Go types do (read from the ``types.go`` struct tags):
    ``inline``: fields whose message is embedded inline in JSON (``json:",inline"``, such as
    ``Volume.volumeSource``);
    ``keep``: scalar fields whose zero value survives a Go JSON round trip (pointers such as
    ``Deployment.spec.replicas``, or fields without ``omitempty``). gogo-protobuf always encodes non-pointer
    scalars, so a decoder must know which zero values are real.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

OUT_DIR = Path(__file__).resolve().parent.parent / "sandbox" / "ansible_operator_sandbox"

# (repository dir, path inside it, import path prefix) of every generated.proto the sandbox needs:
# the group/versions it serves (resources.py/kinds.py) plus authentication/v1 (TokenRequest, TokenReview),
# autoscaling/v1 (Scale) and policy/v1 (Eviction).
API_GROUP_VERSIONS = [
    "core/v1",
    "admissionregistration/v1",
    "apps/v1",
    "authentication/v1",
    "authorization/v1",
    "autoscaling/v1",
    "autoscaling/v2",
    "batch/v1",
    "certificates/v1",
    "coordination/v1",
    "discovery/v1",
    "events/v1",
    "flowcontrol/v1",
    "networking/v1",
    "node/v1",
    "policy/v1",
    "rbac/v1",
    "scheduling/v1",
    "storage/v1",
]
SOURCES = (
    [("api", gv, f"k8s.io/api/{gv}") for gv in API_GROUP_VERSIONS]
    + [
        ("apimachinery", p, f"k8s.io/apimachinery/{p}")
        for p in (
            "pkg/apis/meta/v1",
            "pkg/runtime",
            "pkg/runtime/schema",
            "pkg/api/resource",
            "pkg/util/intstr",
        )
    ]
    + [
        (
            "apiextensions-apiserver",
            "pkg/apis/apiextensions/v1",
            "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1",
        ),
        (
            "kube-aggregator",
            "pkg/apis/apiregistration/v1",
            "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1",
        ),
    ]
)

_TYPE = re.compile(r"^type (\w+) struct \{")
_FIELD = re.compile(r"^\t(\w+)(?:\s+([^\s`]+))?\s+`([^`]*)`")
_TAG = re.compile(r'(\w+):"([^"]*)"')


def go_fields(pkg_dir: Path) -> dict[str, dict[str, tuple[str, bool, bool]]]:
    """struct name -> proto field name -> (json name, is pointer, omitempty), from the package's Go files."""
    out: dict[str, dict[str, tuple[str, bool, bool]]] = {}
    for go in sorted(pkg_dir.glob("*.go")):
        if go.name.endswith("_test.go") or go.name.startswith("zz_generated") or go.name == "generated.pb.go":
            continue
        struct: str | None = None
        for line in go.read_text().splitlines():
            m = _TYPE.match(line)
            if m:
                struct = m.group(1)
                continue
            if line.startswith("}"):
                struct = None
                continue
            if struct is None:
                continue
            m = _FIELD.match(line)
            if not m:
                continue
            tags = dict(_TAG.findall(m.group(3)))
            if "protobuf" not in tags or "json" not in tags:
                continue
            proto_name = next((p[5:] for p in tags["protobuf"].split(",") if p.startswith("name=")), None)
            if proto_name is None:
                continue
            json_name, _, opts = tags["json"].partition(",")
            go_type = m.group(2) or m.group(1)  # embedded fields have no separate type
            inline = "inline" in opts.split(",")
            out.setdefault(struct, {})[proto_name] = ("" if inline else json_name, go_type.startswith("*"),
                                                       "omitempty" in opts.split(","))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--src", required=True, type=Path, help="dir with api/, apimachinery/, ... checkouts")
    ap.add_argument("--out", type=Path, default=OUT_DIR)
    args = ap.parse_args()
    from google.protobuf import descriptor_pb2
    from grpc_tools import protoc

    tree = Path(tempfile.mkdtemp(prefix="k8sproto-"))
    try:
        go: dict[str, dict[str, dict[str, tuple[str, bool, bool]]]] = {}  # proto package -> struct -> fields
        protos = []
        for repo, rel, import_path in SOURCES:
            src = args.src / repo / rel / "generated.proto"
            if not src.is_file():
                print(f"missing {src}", file=sys.stderr)
                return 1
            dest = tree / import_path / "generated.proto"
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(src, dest)
            protos.append(f"{import_path}/generated.proto")
            package = re.search(r"^package ([\w.]+);", src.read_text(), re.M)
            assert package is not None, src
            go[package.group(1)] = go_fields(src.parent)
        gnostic = args.src / "gnostic-models" / "openapiv2" / "OpenAPIv2.proto"
        if not gnostic.is_file():
            print(f"missing {gnostic}", file=sys.stderr)
            return 1
        (tree / "openapiv2").mkdir()
        shutil.copy(gnostic, tree / "openapiv2" / "OpenAPIv2.proto")
        protos.append("openapiv2/OpenAPIv2.proto")
        well_known = Path(protoc.__file__).parent / "_proto"  # google/protobuf/any.proto
        out_set = tree / "set.binpb"
        # (protoc warns about imports the .proto files do not use; harmless)
        rc = protoc.main(["protoc", f"-I{tree}", f"-I{well_known}", "--include_imports",
                          f"--descriptor_set_out={out_set}", *protos])
        if rc != 0:
            print(f"protoc failed ({rc})", file=sys.stderr)
            return 1
        fds = descriptor_pb2.FileDescriptorSet.FromString(out_set.read_bytes())
    finally:
        shutil.rmtree(tree, ignore_errors=True)

    inline: dict[str, list[str]] = {}  # message full name -> field names
    keep: dict[str, list[str]] = {}
    scalar_types = {t for n, t in descriptor_pb2.FieldDescriptorProto.Type.items()
                    if n not in ("TYPE_MESSAGE", "TYPE_GROUP")}
    for f in fds.file:
        f.ClearField("source_code_info")
        f.options.Clear()
        f.ClearField("options")
        if f.package not in go:
            continue  # gnostic's OpenAPI v2 and google.protobuf: proto3 names, no Go JSON tags to apply
        structs = go[f.package]
        for msg in f.message_type:
            fields = structs.get(msg.name, {})
            for field in msg.field:
                json_name, pointer, omitempty = fields.get(field.name, (field.name, False, True))
                full = f"{f.package}.{msg.name}"
                if json_name == "":
                    inline.setdefault(full, []).append(field.name)
                    json_name = field.name
                field.json_name = json_name
                if (
                    field.type in scalar_types
                    and field.label != field.LABEL_REPEATED
                    and (pointer or not omitempty)
                ):
                    keep.setdefault(full, []).append(field.name)
    args.out.mkdir(parents=True, exist_ok=True)
    data = fds.SerializeToString(deterministic=True)
    (args.out / "k8s.binpb").write_bytes(data)
    field_notes: dict[str, Any] = {"inline": dict(sorted(inline.items())), "keep": dict(sorted(keep.items()))}
    (args.out / "k8s_fields.json").write_text(json.dumps(field_notes, separators=(",", ":")) + "\n")
    print(f"wrote {args.out / 'k8s.binpb'} ({len(data)} bytes, {len(fds.file)} files), "
          f"{sum(map(len, inline.values()))} inline and {sum(map(len, keep.values()))} keep-zero fields")
    return 0


if __name__ == "__main__":
    sys.exit(main())
