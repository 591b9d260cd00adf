"""Bursts of 100 spec edits while runs are in progress (issue 11, defect 2).

Pass: each CR ends ``Successful`` with ``observedGeneration`` equal to its final generation and the role
saw the final spec; every ``Successful=True`` the operator ever wrote (recorded from a watch during the
burst) names a generation that a successful run really used (``run.json``); runs of one CR never overlap."""

from __future__ import annotations

import itertools
import threading
from datetime import datetime
from typing import Self

import kubernetes
import pytest
import urllib3
from kubernetes.client.rest import ApiException

from tests.faults.conftest import GROUP, PLURAL, VERSION, Cluster, wait_for, widget_watch

NS = "burst"  # a prefix: each test has a namespace of its own
EDITS = 100
CRS = ("burst-a", "burst-b")


class StatusRecorder:
    """Every (name, observedGeneration) a Successful=True condition showed, from one watch stream."""

    def __init__(self, cluster: Cluster, ns: str) -> None:
        self.cluster = cluster
        self.ns = ns
        self.claims: set[tuple[str, int]] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="status-recorder")
        self.ready = threading.Event()

    def _loop(self) -> None:
        rv = ""
        while not self._stop.is_set():
            w = kubernetes.watch.Watch()
            try:
                if not rv:
                    listing = self.cluster.custom.list_namespaced_custom_object(
                        GROUP, VERSION, self.ns, PLURAL)
                    for obj in listing["items"]:
                        self._record(obj)
                    rv = listing["metadata"]["resourceVersion"]
                    self.ready.set()
                for ev in w.stream(
                    self.cluster.custom.list_namespaced_custom_object,
                    GROUP,
                    VERSION,
                    self.ns,
                    PLURAL,
                    resource_version=rv,
                    timeout_seconds=2,
                ):
                    obj = ev["object"]
                    rv = obj["metadata"]["resourceVersion"]
                    self._record(obj)
                    if self._stop.is_set():
                        break
            except (
                ApiException,
                urllib3.exceptions.HTTPError,
                OSError,
                ValueError,
            ):  # dropped/expired: list again
                rv = ""

    def _record(self, obj: dict) -> None:
        for cond in (obj.get("status") or {}).get("conditions") or []:
            if cond.get("type") == "Successful" and cond.get("status") == "True":
                self.claims.add((obj["metadata"]["name"], int(cond["observedGeneration"])))

    def __enter__(self) -> Self:
        self._thread.start()
        self.ready.wait(30)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)


@pytest.mark.parametrize("executor", ["warm"])
def test_bursts_of_edits_end_with_status_naming_the_applied_generation(
        cluster: Cluster, operators, executor: str, figures: dict) -> None:
    ns = cluster.namespace(f"{NS}-{executor}")
    op = operators(cluster.kubeconfig, [widget_watch()], namespace=ns, executor=executor, name="burst")
    for name in CRS:
        cluster.create(ns, name, {"size": 0})
    cluster.wait_converged(ns, list(CRS))
    with StatusRecorder(cluster, ns) as recorder:
        for i in range(1, EDITS + 1):
            for name in CRS:
                cluster.patch(ns, name, {"spec": {"size": i}})
        objs = cluster.wait_converged(ns, list(CRS), timeout=300)
        claims = set(recorder.claims)
    for obj in objs:
        name = obj["metadata"]["name"]
        assert obj["metadata"]["generation"] == EDITS + 1
        out = f"{name}-out"

        def shows_last_edit(out: str = out) -> bool:
            return (cluster.configmap(ns, out) or {}).get("size") == str(EDITS)

        wait_for(shows_last_edit, 30, what=f"{out} shows the last edit")
        runs = op.runs(ns, name)
        applied = {r["generation"] for r in runs if r["result"] == "successful"}
        claimed = {g for n, g in claims if n == name}
        assert claimed <= applied | _pruned_below(runs), (
            f"{name}: status claimed generations no successful run used: {sorted(claimed - applied)}")
        assert EDITS + 1 in applied
        spans = sorted((_ts(r["started"]), _ts(r["finished"])) for r in runs if r.get("finished"))
        overlaps = sum(1 for (_, end), (start, _) in itertools.pairwise(spans) if start < end)
        assert overlaps == 0
    figures.update(executor=executor, crs=len(CRS), edits_per_cr=EDITS, final_generation=EDITS + 1,
                   runs=sum(len(op.runs(ns, n)) for n in CRS), false_status_claims=0,
                   overlapping_side_effects=0, stuck_crs=0)


def _pruned_below(runs: list[dict]) -> set[int]:
    """Generations older than the oldest kept run.json (pruned by maxRunnerArtifacts): not checkable."""
    if not runs:
        return set()
    return set(range(1, min(r["generation"] for r in runs)))


def _ts(text: str) -> datetime:
    return datetime.fromisoformat(text)
