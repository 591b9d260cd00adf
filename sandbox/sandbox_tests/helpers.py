"""Shared bits of the sandbox tests: a small CRD with a schema (and the polling helper they all use)."""

from __future__ import annotations

from typing import Any

import kubernetes

from ansible_operator_sandbox.testing import wait_for

__all__ = ["CRD", "install_crd", "wait_for", "widget"]

CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.test.example.com"},
    "spec": {
        "group": "test.example.com",
        "scope": "Namespaced",
        "names": {"kind": "Widget", "plural": "widgets", "singular": "widget", "shortNames": ["wd"]},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "additionalPrinterColumns": [
                    {"name": "Size", "type": "integer", "jsonPath": ".spec.size"},
                    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
                ],
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "required": ["size"],
                                "properties": {
                                    "size": {"type": "integer", "minimum": 1},
                                    "color": {"type": "string", "default": "blue"},
                                },
                            },
                            "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                        },
                    }
                },
            }
        ],
    },
}


def install_crd(api: kubernetes.client.ApiClient, crd: dict[str, Any] = CRD) -> None:
    ext = kubernetes.client.ApiextensionsV1Api(api)
    ext.create_custom_resource_definition(crd)
    wait_for(
        lambda: any(
            c.type == "Established" and c.status == "True"
            for c in (ext.read_custom_resource_definition(crd["metadata"]["name"]).status.conditions or [])
        )
    )


def widget(name: str, size: int = 1, **meta: Any) -> dict[str, Any]:
    return {"apiVersion": "test.example.com/v1", "kind": "Widget", "metadata": {"name": name, **meta},
            "spec": {"size": size}}
