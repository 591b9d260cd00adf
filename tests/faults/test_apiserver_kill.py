"""API server SIGKILL and restart on the same data directory and port, under a running operator.

The sandbox runs as its own process with ``--data-dir`` (SQLite); it is killed with SIGKILL while a CR
was just created (its run may be in flight) and started again on the same port and data directory. Its
watch history starts empty after a restart: a watch resuming from an older resourceVersion than the
last persisted one gets 410 and re-lists, one that had seen everything just resumes.

Pass: the operator survives; objects written before the kill are still there; the CR created just
before the kill, an edit and a new CR made after the restart all converge at their current generation."""

from __future__ import annotations

from pathlib import Path

import kubernetes

from ansible_operator.sandbox.testing import start_process
from tests.faults.conftest import E2E, GROUP, PLURAL, VERSION, CutProxy, wait_for, widget_watch

NS = "apikill"


def test_api_server_sigkill_and_restart_on_same_data_dir(operators, tmp_path: Path, figures: dict) -> None:
    data_dir = tmp_path / "data"
    sandbox = start_process(tmp_path / "sandbox.kubeconfig", data_dir=data_dir, crds=[E2E / "crds"])
    proxy = CutProxy(sandbox.port).start()
    restarted = None
    try:
        def client() -> tuple[kubernetes.client.ApiClient, kubernetes.client.CustomObjectsApi]:
            api = sandbox.api_client()
            return api, kubernetes.client.CustomObjectsApi(api)

        api, custom = client()
        kubernetes.client.CoreV1Api(api).create_namespace({"metadata": {"name": NS}})

        def create(name: str, spec: dict) -> None:
            custom.create_namespaced_custom_object(
                GROUP,
                VERSION,
                NS,
                PLURAL,
                {
                    "apiVersion": f"{GROUP}/{VERSION}",
                    "kind": "Widget",
                    "metadata": {"name": name},
                    "spec": spec,
                },
            )

        def converged(names: list[str]) -> bool:
            for n in names:
                obj = custom.get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, n)
                conds = (obj.get("status") or {}).get("conditions") or []
                if not any(c["type"] == "Successful" and c["status"] == "True"
                           and c.get("observedGeneration") == obj["metadata"]["generation"] for c in conds):
                    return False
            return True

        op = operators(proxy.write_kubeconfig(tmp_path / "via-proxy.kubeconfig"), [widget_watch()],
                       "--namespace", NS, name="apikill")
        create("before", {"color": "one"})
        wait_for(lambda: converged(["before"]), 120, what="before converged")
        lists_before, expired_before = proxy.relists(), proxy.expired

        create("inflight", {"color": "two"})
        sandbox.proc.kill()
        sandbox.proc.wait(30)
        api.close()
        restarted = start_process(tmp_path / "sandbox2.kubeconfig", port=sandbox.port, data_dir=data_dir,
                                  crds=[E2E / "crds"])
        sandbox = restarted
        api, custom = client()
        assert custom.get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "before")["spec"] == {
            "color": "one"
        }
        custom.patch_namespaced_custom_object(
            GROUP, VERSION, NS, PLURAL, "before", {"spec": {"color": "three"}}
        )
        create("after", {"color": "four"})
        wait_for(lambda: converged(["before", "inflight", "after"]), 240, 0.3,
                 what="every CR converged after the API server restart")
        cm = kubernetes.client.CoreV1Api(api).read_namespaced_config_map("before-out", NS).data
        assert cm["color"] == "three"
        assert op.alive(), op.logs()[-3000:]
        figures.update(api_server_kills=1, api_server_restarts=1, relists=proxy.relists() - lists_before,
                       expired_410=proxy.expired - expired_before, stuck_crs=0, crs=3)
        api.close()
    finally:
        proxy.close()
        sandbox.stop()
