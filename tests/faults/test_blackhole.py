"""A blackhole between the operator and the API server (issue 20, defect 2): a TCP proxy that, for a while,
answers nothing: open connections stay open but carry nothing ever again (a lost NAT entry, a dead load
balancer), new ones are accepted and never answered. A run may be in flight; a CR is edited and one created
during it, others after it heals.

Before the fix the runner's own requests had no deadline: the reachability probe and a status write waited
for ever on a swallowed connection, so ``/readyz`` never recovered and edits were not reconciled.

Pass: ``/readyz`` fails during the blackhole while ``/healthz`` stays 200 (the process is not wedged); once
healed, the operator watches again within 30 s (it restarts its watch requests when the API server answers
again, instead of waiting out a dead connection); every CR converges with its latest spec; ``/readyz``
recovers; the outage is logged as two lines, without tracebacks. 45 s always; 5 minutes with
``FAULTS_LONG=1``."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests.faults.conftest import Cluster, operator_via_proxy, probe, wait_for

pytestmark = pytest.mark.slow  # over ~20 s each: started first (tests/conftest.py)

NS = "blackhole"  # a prefix: the test's namespace is blackhole-<random>
DURATIONS = [45] + ([300] if os.environ.get("FAULTS_LONG") else [])


# The fault lasts `seconds`, then every CR may take up to 300 s to converge on a loaded machine: the
# default 300 s test timeout would end the test before its own wait does.
@pytest.mark.parametrize("seconds", [pytest.param(s, marks=pytest.mark.timeout(s + 600)) for s in DURATIONS])
def test_blackhole_then_heal(cluster: Cluster, operators, tmp_path: Path, figures: dict,
                            seconds: int) -> None:
    ns = cluster.namespace(NS)
    via = operator_via_proxy(cluster, operators, tmp_path, ns, f"blackhole-{seconds}",
                             unreachable_timeout="5s")
    op, proxy, health = via.op, via.proxy, via.health
    try:
        cluster.create(ns, "steady", {"color": "one"})
        cluster.wait_converged(ns, ["steady"])
        wait_for(lambda: probe(health, "/readyz") == 200, 60, what="/readyz 200 before the blackhole")

        cluster.create(ns, "inflight", {"color": "two"})
        wait_for(lambda: op.runs(ns, "inflight"), 60, what="a run of 'inflight' started")
        proxy.blackhole()
        started = time.monotonic()
        cluster.patch(ns, "steady", {"spec": {"color": "during"}})
        cluster.create(ns, "during", {"color": "three"})
        wait_for(lambda: probe(health, "/readyz") not in (0, 200), 60,
                 what="/readyz failing in the blackhole")
        assert probe(health, "/healthz") == 200
        time.sleep(max(0.0, seconds - (time.monotonic() - started)))  # the fault lasts this long
        assert probe(health, "/healthz") == 200 and op.alive()

        proxy.heal()
        healed = time.monotonic()
        cluster.patch(ns, "steady", {"spec": {"color": "after"}})
        cluster.create(ns, "after", {"color": "four"})
        rewatched = wait_for(lambda: next((t - healed for t in proxy.watch_times if t > healed), None), 60,
                             what="a watch request after the heal")
        assert rewatched <= 30, f"the operator watched again only {rewatched:.0f}s after the heal"
        cluster.wait_converged(ns, ["steady", "inflight", "during", "after"], timeout=300)
        wait_for(lambda: (cluster.configmap(ns, "steady-out") or {}).get("color") == "after", 120,
                 what="steady-out shows the edit made after the heal")
        converged = time.monotonic() - healed
        wait_for(lambda: probe(health, "/readyz") == 200, 60, what="/readyz 200 after the heal")
        assert probe(health, "/healthz") == 200 and op.alive()
        logs = op.logs()
        assert "API server not answering" in logs and "API server answers again" in logs, logs[-3000:]
        assert "Traceback" not in logs, logs[-5000:]
        figures.update(blackhole_s=seconds, swallowed_connections=proxy.swallowed,
                       rewatched_after_heal_s=round(rewatched, 1), converged_after_heal_s=round(converged, 1),
                       stuck_crs=0, crs=4)
    except BaseException:  # the timeout's exception too: what the operator did is the diagnosis
        print(f"--- operator log (tail) ---\n{op.logs()[-12000:]}")
        raise
    finally:
        proxy.close()
