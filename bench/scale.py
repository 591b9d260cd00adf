#!/usr/bin/env python3
"""Scale benchmark (issue 24): N CRs against the real control plane, each executor side by side in one run.

    python bench/scale.py --crs 100 --executors warm,runner --json /tmp/scale.json
    python bench/scale.py --crs 10000 --executors warm --role light --startup-resync background,spread

Per executor (the operators run one after the other, each in a namespace of its own, on one control plane):

  storm    N CRs created as fast as the API server takes them (a thread pool): the creation rate, the time
           until all are Successful (one watch), the operator's peak RSS (its process and every descendant,
           sampled) and settled RSS (after --settle seconds with nothing to do), CPU seconds per CR and API
           requests per CR; meanwhile two probes each create one new CR and edit one converged CR every
           --probe-interval seconds: a user in the storm's namespace and one in a namespace of their own
           (the operator watches both; namespaces take turns in its queue): their create/edit ->
           Successful latencies, p50/p99.
  resync   the operator restarted over the N converged CRs with --startup-resync background: every one is
           queued for a re-run at once, behind user changes, as a periodic resync of CRs that converged
           together queues them (see docs/explanation/benchmark.md#scale); the probes run again until all N
           re-ran: the user CRs' p50/p99 during it, the time, CPU and requests of the N re-runs. The
           probes' interval is stretched for an executor whose storm ran too few runs per second for the
           probes to take at most a fifth of them (probe_interval): user changes go first, so faster
           probes would keep the resync from ever ending.
  restart  per --startup-resync mode: SIGTERM, a new CR created, the operator started again; seconds from
           the start to /readyz and to the new CR Successful, and how many converged CRs were re-run in the
           first --restart-window seconds (the restarted operator's ansible_operator_runs_total, less the
           new CR's run).

API requests are counted by the API server itself: the control plane this script starts writes an audit log
of the requests made by the operator's identity (a ServiceAccount of its own, whose token is the operator's
kubeconfig) and nothing else; every request the operator process makes is in it - kopf's lists and watches,
the runner's status and finalizer writes, and the roles' calls forwarded by its API proxy.

Everything started is stopped on exit, errors, Ctrl-C and SIGTERM.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

import psutil

from ansible_operator.status import converged as status_converged

sys.path.insert(0, str(Path(__file__).resolve().parent))

import report  # noqa: E402
from harness import (  # noqa: E402
    BENCH,
    MEMCACHED,
    PYTHON,
    REPO,
    BenchError,
    ConditionWatcher,
    Kind,
    Kube,
    MemorySampler,
    OperatorProcess,
    Reaper,
    cpu_seconds,
    free_port,
    ready_with_free_ports,
    run_guarded,
    stop_process,
)

LIGHT = Kind("bench.ansible-operator.dev", "v1", "Light", "lights")
ROLES = {"light": LIGHT, "memcached": MEMCACHED}
SPEC = {"light": {"revision": 0}, "memcached": {"size": 1}}
EXECUTORS = ("warm", "runner")
MODES = ("background", "spread", "immediate")
OPERATOR_NS, OPERATOR_SA = "scale-system", "operator"
OPERATOR_USER = f"system:serviceaccount:{OPERATOR_NS}:{OPERATOR_SA}"
CRDS = [REPO / "crds" / "cache.example.com_memcacheds.yaml", BENCH / "crds" / "light.yaml"]
# the SDK's default: a periodic resync every 10 h; spread uses it as the window re-checks are spread over
RECONCILE_PERIOD = "10h"


def say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------ the control plane


AUDIT_POLICY = f"""apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Metadata
    users: ["{OPERATOR_USER}"]
  - level: None
"""


def serve_plane(directory: Path, kubeconfig: Path) -> int:
    """The control plane of ``ansible-operator cluster up`` plus an audit log of the operator's requests,
    less its volume provisioner (``python bench/scale.py serve-plane DIR KUBECONFIG``, run by
    :class:`AuditedPlane`)."""
    from ansible_operator.controlplane import binaries
    from ansible_operator.controlplane.launcher import ControlPlane
    from ansible_operator.controlplane.objects import install_crds

    directory.mkdir(parents=True, exist_ok=True)
    policy = directory / "audit-policy.yaml"
    policy.write_text(AUDIT_POLICY)
    plane = ControlPlane(directory, binaries.find(progress=say), progress=say,
                         apiserver_args=[f"--audit-policy-file={policy}",
                                         f"--audit-log-path={directory / 'audit.log'}",
                                         # one file however long the run: the default rotates at 100 MB
                                         # (~8,000 light runs), and the counter reads one file
                                         "--audit-log-maxsize=1000000"],
                         # neither role asks for volumes: the provisioner would only poll claims and
                         # volumes twice a second (the admin's requests, not in the audit log), for hours
                         # at N = 10,000
                         volumes=False)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        plane.start()
        install_crds(plane, CRDS)
        shutil.copyfile(plane.kubeconfig, kubeconfig)
        print(f"kubeconfig: {kubeconfig}", flush=True)
        while not stop.wait(1):
            for name, part in plane.parts.items():
                if not part.running():
                    say(f"{name} exited ({part.log}):\n{part.tail()}")
                    return 1
    finally:
        plane.stop()
    return 0


@dataclass
class AuditedPlane:
    proc: subprocess.Popen[bytes]
    directory: Path
    kubeconfig: Path
    server: str = ""

    @property
    def audit_log(self) -> Path:
        return self.directory / "audit.log"

    @classmethod
    def start(cls, workdir: Path, reaper: Reaper, timeout: float = 300.0) -> AuditedPlane:
        directory, kubeconfig, log_path = workdir / "cluster", workdir / "kubeconfig", workdir / "cluster.log"
        with open(log_path, "wb") as log:
            proc = subprocess.Popen([PYTHON, __file__, "serve-plane", str(directory), str(kubeconfig)],
                                    stdout=log, stderr=subprocess.STDOUT, cwd=workdir, start_new_session=True,
                                    env={**os.environ, "PYTHONUNBUFFERED": "1"})
        plane = cls(proc, directory, kubeconfig)
        reaper.add(lambda: stop_process(proc, timeout=60.0))
        deadline = time.monotonic() + timeout
        while "\nkubeconfig: " not in "\n" + log_path.read_text(errors="replace"):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise BenchError(f"the control plane did not come up: {log_path.read_text()[-2000:]}")
            time.sleep(0.2)
        import yaml

        plane.server = yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
        return plane


def operator_kubeconfig(kube: Kube, admin: Path, out: Path) -> Path:
    """A ServiceAccount bound to cluster-admin and a kubeconfig with its token: the audit policy logs every
    request of that user, so the audit log holds exactly the operator's requests."""
    import yaml
    from kubernetes.client import RbacAuthorizationV1Api

    kube.namespace(OPERATOR_NS)
    kube.core.create_namespaced_service_account(OPERATOR_NS, {"metadata": {"name": OPERATOR_SA}})
    RbacAuthorizationV1Api(kube.api).create_cluster_role_binding({
        "metadata": {"name": "scale-operator"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"kind": "ServiceAccount", "name": OPERATOR_SA, "namespace": OPERATOR_NS}]})
    token = kube.core.create_namespaced_service_account_token(
        OPERATOR_SA, OPERATOR_NS, {"spec": {"expirationSeconds": 48 * 3600}}).status.token
    doc = yaml.safe_load(admin.read_text())
    doc["users"] = [{"name": "operator", "user": {"token": token}}]
    for ctx in doc["contexts"]:
        ctx["context"]["user"] = "operator"
    out.write_text(yaml.safe_dump(doc))
    out.chmod(0o600)
    return out


class AuditCounter:
    """Requests in the audit log (one ``auditID`` each, whatever stages it logged), read incrementally."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self._ids: set[str] = set()
        self.by_verb: dict[str, int] = {}

    def count(self) -> int:
        try:
            with open(self.path, "rb") as f:
                if os.fstat(f.fileno()).st_size < self._offset:
                    raise BenchError(f"the audit log {self.path} was rotated: requests cannot be counted")
                f.seek(self._offset)
                data = f.read()
        except FileNotFoundError:
            return 0
        end = data.rfind(b"\n") + 1
        self._offset += end
        for line in data[:end].splitlines():
            event = json.loads(line)
            if event["auditID"] not in self._ids:
                self._ids.add(event["auditID"])
                self.by_verb[event["verb"]] = self.by_verb.get(event["verb"], 0) + 1
        return len(self._ids)


# -------------------------------------------------------------------------------------------- the operator


def write_watches(path: Path) -> Path:
    import yaml

    path.write_text(yaml.safe_dump([
        {"version": LIGHT.version, "group": LIGHT.group, "kind": LIGHT.kind,
         "role": str(BENCH / "roles" / "light")},
        {"version": MEMCACHED.version, "group": MEMCACHED.group, "kind": MEMCACHED.kind,
         "role": str(REPO / "roles" / "memcached")},
    ], sort_keys=False))
    return path


def spawn_operator(executor: str, workdir: Path, kubeconfig: Path, namespaces: list[str], reaper: Reaper,
                   extra: list[str]) -> OperatorProcess:
    """``python -m ansible_operator run`` as a user starts it (not waited for: see
    :func:`harness.ready_with_free_ports`)."""
    workdir.mkdir(parents=True, exist_ok=True)
    metrics_port, health_port = free_port(), free_port()
    log_path = workdir / "operator.log"
    args = [PYTHON, "-m", "ansible_operator", "run",
            "--watches-file", str(write_watches(workdir / "watches.yaml")), "--kubeconfig", str(kubeconfig),
            "--executor", executor, "--artifacts-dir", str(workdir / "artifacts"),
            "--metrics-bind-address", f"127.0.0.1:{metrics_port}",
            "--health-probe-bind-address", f"127.0.0.1:{health_port}", "--log-level", "WARNING",
            *(arg for ns in namespaces for arg in ("--namespace", ns)), *extra]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "ANSIBLE_GATHERING": "explicit"}
    env.pop("KUBECONFIG", None)
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, cwd=workdir, env=env,
                                start_new_session=True)
    op = OperatorProcess(executor, proc, workdir / "artifacts", log_path, metrics_port, health_port, reaper)
    reaper.add(op.stop)
    return op


def runs_finished(op: OperatorProcess) -> float:
    return op.metrics().get("ansible_operator_runs_total", 0.0)


# ------------------------------------------------------------------------------------------- observation


class StreamWatcher(ConditionWatcher):  # type: ignore[misc]  # harness: a bare import, Any to mypy
    """The harness's condition watcher, with the first time each object was Successful and a wait for
    thousands of names."""

    def __init__(self, kube: Kube, kind: Kind, namespace: str) -> None:
        super().__init__(kube, kind, namespace)
        self.first: dict[str, float] = {}
        """When each object was first Successful (``done`` moves on with the probe's edits)."""

    def _record(self, obj: dict[str, Any], now: float) -> None:
        super()._record(obj, now)
        name = obj["metadata"]["name"]
        with self._cv:
            if name in self.done and name not in self.first:
                self.first[name] = self.done[name].at

    def converged(self) -> list[str]:
        with self._cv:
            return list(self.done)

    def wait_many(self, names: list[str], timeout: float, alive: Callable[[], None]) -> dict[str, float]:
        """Like ``wait(names, 1)``, for thousands of names: it checks twice a second only the names still
        missing, instead of every name on every event (the harness's wait, fine for a few hundred)."""
        missing = set(names)
        deadline = time.monotonic() + timeout
        while True:
            with self._cv:
                missing = {n for n in missing if n not in self.first}
            if not missing:
                break
            if time.monotonic() > deadline:
                raise BenchError(f"{len(missing)} of {len(names)} {self.kind.kind}s in {self.namespace} not"
                                 f" Successful after {timeout}s (e.g. {sorted(missing)[:3]}); last watch"
                                 f" error: {self._error!r}")
            alive()
            time.sleep(0.5)
        with self._cv:
            return {n: self.first[n] for n in names}


class RunRecords:
    """Which of ``names`` finished a run under one operator, from its run records (``run.json`` in the
    artifacts tree: ``result`` is ``running`` until the run ends). Each operator of a phase has an artifacts
    directory of its own, so a record there is a run of that phase. Only names not seen finished yet are
    read again."""

    def __init__(self, op: OperatorProcess, kind: Kind, namespace: str, names: list[str]) -> None:
        self.base = op.artifacts / kind.group / kind.version / kind.kind / namespace
        self.waiting = set(names)
        self.finished: dict[str, float] = {}

    def poll(self) -> int:
        """Names whose run finished so far."""
        try:
            started = self.waiting.intersection(os.listdir(self.base))
        except FileNotFoundError:
            started = set()
        now = time.monotonic()
        for name in started:
            for record in (self.base / name).glob("*/run.json"):
                try:
                    result = json.loads(record.read_text()).get("result")
                except (OSError, ValueError):
                    continue  # being written
                if result not in ("running", "unknown"):
                    self.finished[name] = now
                    self.waiting.discard(name)
                    break
        return len(self.finished)


@dataclass
class Probe:
    """A user's changes during a phase: at once and then every ``interval`` s one new CR and one edit of a
    converged CR (never the same one twice); each is timed from just before its API call to Successful at
    its generation on the watch."""

    kube: Kube
    watcher: StreamWatcher
    kind: Kind
    namespace: str
    prefix: str
    interval: float
    candidates: Callable[[], list[str]]
    spec: dict[str, Any]
    max_pending: int = 4
    """A tick is skipped while this many probed changes are not Successful yet: the probe measures a
    user's latency, it must not become the load (a slow executor would fall ever further behind)."""
    pending: list[tuple[str, str, int, float]] = field(default_factory=list)
    skipped: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _edited: set[str] = field(default_factory=set)

    def start(self) -> Probe:
        self._thread = threading.Thread(target=self._loop, name=f"probe-{self.prefix}", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        k = 0
        first = True  # the first change at once: every phase has one, however short it is
        while first or not self._stop.wait(self.interval):
            first = False
            if self._outstanding() >= self.max_pending:
                self.skipped += 1
                continue
            name = f"{self.prefix}-{k}"
            t = time.monotonic()
            self.kube.create(self.kind, self.namespace, name, self.spec)
            self.pending.append(("create", name, 1, t))
            targets = [n for n in self.candidates() if n not in self._edited]
            if targets:
                target = random.choice(targets)
                self._edited.add(target)
                t = time.monotonic()
                obj = self.kube.patch_spec(self.kind, self.namespace, target, {"probe": k})
                self.pending.append(("edit", target, int(obj["metadata"]["generation"]), t))
            k += 1

    def _outstanding(self) -> int:
        with self.watcher._cv:  # noqa: SLF001 - the watcher's lock guards ``done``
            done = dict(self.watcher.done)
        return sum(1 for _w, name, gen, _t in self.pending if name not in done or done[name].generation < gen)

    def finish(self, timeout: float, alive: Callable[[], None]) -> dict[str, Any]:
        """Stop probing, wait for every probed CR, return the latencies."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
        wanted: dict[str, int] = {}
        for _what, name, gen, _t in self.pending:  # a CR this probe created and later edited: both
            wanted[name] = max(gen, wanted.get(name, 0))
        done = self.watcher.wait(list(wanted), wanted, timeout=timeout, alive=alive) if wanted else {}
        with self.watcher._cv:  # noqa: SLF001 - the watcher's lock guards ``reached``
            reached = dict(self.watcher.reached)

        def latency(name: str, gen: int, t: float) -> float:
            """To Successful at the generation this change made (not a later change's)."""
            return reached.get((name, gen), done[name]) - t

        out: dict[str, Any] = {}
        for what in ("create", "edit"):
            lat = sorted(latency(name, gen, t) for w, name, gen, t in self.pending if w == what)
            out[what] = {"n": len(lat), "p50_s": _pct(lat, 50), "p99_s": _pct(lat, 99),
                         "max_s": round(lat[-1], 3) if lat else None}
        both = sorted(latency(name, gen, t) for _w, name, gen, t in self.pending)
        out["all"] = {"n": len(both), "p50_s": _pct(both, 50), "p99_s": _pct(both, 99)}
        out["skipped_ticks"] = self.skipped
        return out


PROBE_SHARE = 0.2
"""At most this share of an executor's runs goes to the probes' changes during the resync."""
PROBE_CHANGES_PER_TICK = 4
"""Two probes, each creating one CR and editing one per tick."""


def probe_interval(args: argparse.Namespace, storm: dict[str, Any]) -> float:
    """The resync's probe interval: --probe-interval, or longer for an executor whose storm ran fewer runs
    per second than the probes would then take a fair share of. User changes go ahead of the resync's
    background runs, so probes as fast as the executor itself would take every run and the resync would
    never end (the runner column at 0.36 runs/s, before this)."""
    rate = storm["runs"] / storm["all_successful_s"] if storm.get("all_successful_s") else 0.0
    needed = PROBE_CHANGES_PER_TICK / (PROBE_SHARE * rate) if rate > 0 else args.probe_interval
    return max(args.probe_interval, needed)


def _pct(values: list[float], p: int) -> float | None:
    if not values:
        return None
    if len(values) == 1:
        return round(values[0], 3)
    return round(statistics.quantiles(values, n=100, method="inclusive")[p - 1], 3)


class Family:
    """CPU seconds and API requests of the operator since :meth:`mark`, and its memory sampler."""

    def __init__(self, op: OperatorProcess, audit: AuditCounter, interval: float) -> None:
        self.op = op
        self.audit = audit
        self.sampler = MemorySampler(op.proc.pid, interval).start()
        self.mark()

    def mark(self) -> None:
        self._cpu, self._requests = cpu_seconds(self.op.family()), self.audit.count()
        self.sampler.reset()

    def since(self, crs: int, runs: int) -> dict[str, Any]:
        """Figures since :meth:`mark`, per CR of the phase (N) and per run (N plus the probe's, and any
        second run a role asks for)."""
        # the live processes and every descendant they reaped (harness.cpu_seconds)
        cpu = cpu_seconds(self.op.family()) - self._cpu
        requests = self.audit.count() - self._requests
        peak = self.sampler.reset()
        return {"cpu_s": round(cpu, 1), "cpu_s_per_cr": round(cpu / crs, 3),
                "cpu_s_per_run": round(cpu / max(runs, 1), 3), "api_requests": requests,
                "api_requests_per_cr": round(requests / crs, 2),
                "api_requests_per_run": round(requests / max(runs, 1), 2),
                "peak_rss_mb": round(peak.rss_mb, 1), "peak_pss_mb": round(peak.pss_mb, 1),
                "peak_processes": peak.processes}

    def settled_rss(self, settle: float) -> float:
        time.sleep(settle)
        return round(self.sampler.sample()[0], 1)

    def operator_rss_mb(self) -> float:
        """The operator's own process alone (its object cache, queues and kopf's per-object state; not the
        zygote nor the runs)."""
        return float(psutil.Process(self.op.proc.pid).memory_info().rss) / 2**20

    def stop(self) -> None:
        self.sampler.stop()


# ------------------------------------------------------------------------------------------------ phases


@dataclass
class Run:
    args: argparse.Namespace
    kube: Kube
    kubeconfig: Path
    audit: AuditCounter
    workdir: Path
    reaper: Reaper
    user_watcher: StreamWatcher | None = None
    """The current executor's watcher of the users' own namespace (``scale-<executor>-user``)."""

    @property
    def kind(self) -> Kind:
        return ROLES[self.args.role]

    @property
    def spec(self) -> dict[str, Any]:
        return SPEC[self.args.role]

    def executor(self, ex: str) -> dict[str, Any]:
        ns, user_ns = f"scale-{ex}", f"scale-{ex}-user"
        for namespace in (ns, user_ns):
            self.kube.namespace(namespace)
            self.kube.wait_served(self.kind, namespace)
        watcher = StreamWatcher(self.kube, self.kind, ns).start()
        user = self.user_watcher = StreamWatcher(self.kube, self.kind, user_ns).start()
        names = [f"cr-{i:05d}" for i in range(crs_of(self.args, ex))]
        result: dict[str, Any] = {}
        try:
            # each phase's figures are printed as soon as it ends: a long run stopped later keeps them
            result["storm"] = self.storm(ex, ns, watcher, names)
            say(f"{ex} storm: {json.dumps(result['storm'])}")
            result["resync"] = self.resync(ex, ns, watcher, names, probe_interval(self.args, result["storm"]))
            say(f"{ex} resync: {json.dumps(result['resync'])}")
            result["restart"] = {mode: self.restart(ex, ns, watcher, mode)
                                 for mode in self.args.startup_resync}
        finally:
            watcher.stop()
            user.stop()
        return result

    def _operator(self, ex: str, name: str, extra: list[str]) -> OperatorProcess:
        """An operator started and ready (``/readyz``)."""
        return ready_with_free_ports(lambda: spawn_operator(
            ex, self.workdir / f"operator-{ex}-{name}", self.kubeconfig, [f"scale-{ex}", f"scale-{ex}-user"],
            self.reaper, ["--reconcile-period", RECONCILE_PERIOD, *extra]))

    def _probes(self, phase: str, ns: str, watcher: StreamWatcher,
                candidates: Callable[[], list[str]], interval: float) -> tuple[Probe, Probe]:
        """A user in the storm's namespace (``candidates``: the CRs it may edit) and one in a namespace of
        their own (editing their own earlier CRs)."""
        user = self.user_watcher
        assert user is not None
        return (Probe(self.kube, watcher, self.kind, ns, f"{phase}-probe", interval, candidates,
                      self.spec).start(),
                Probe(self.kube, user, self.kind, user.namespace, f"{phase}-user", interval,
                      lambda: [n for n in user.converged() if n.startswith(f"{phase}-user-")],
                      self.spec).start())

    def _finish(self, probes: tuple[Probe, Probe], op: OperatorProcess) -> dict[str, Any]:
        same, other = (p.finish(self.args.timeout, op.check_alive) for p in probes)
        return {"probe": same, "probe_other_ns": other}

    def storm(self, ex: str, ns: str, watcher: StreamWatcher, names: list[str]) -> dict[str, Any]:
        op = self._operator(ex, "storm", [])
        family = Family(op, self.audit, self.args.sample_interval)
        try:
            say(f"storm [{ex}]: {len(names)} {self.kind.kind} CRs, probe every {self.args.probe_interval:g}s")
            own_before = family.operator_rss_mb()
            probes = self._probes("storm", ns, watcher,
                                  lambda: [n for n in watcher.converged() if n.startswith("cr-")],
                                  self.args.probe_interval)
            t0 = time.monotonic()
            with ThreadPoolExecutor(self.args.create_workers, thread_name_prefix="create") as pool:
                list(pool.map(lambda n: self.kube.create(self.kind, ns, n, self.spec), names))
            create_s = time.monotonic() - t0
            say(f"storm [{ex}]: created in {create_s:.1f}s; waiting for all Successful")
            done = watcher.wait_many(names, self.args.timeout, op.check_alive)
            all_s = max(done.values()) - t0
            probed = self._finish(probes, op)
            runs = runs_finished(op)
            figures = family.since(len(names), int(runs))
            say(f"storm [{ex}]: all Successful in {all_s:.1f}s; settling {self.args.settle:g}s")
            settled = family.settled_rss(self.args.settle)
            # the sampler's peak ends where the figures were taken; the settled sample, later, is part of the
            # phase too (a smoke test at 2aaf1fd: peak 200.0 MB, then settled 200.3 MB)
            figures["peak_rss_mb"] = max(figures["peak_rss_mb"], settled)
            own_settled = family.operator_rss_mb()
        finally:
            family.stop()
            op.stop()
        return {"crs": len(names), "create_s": round(create_s, 2),
                "create_per_s": round(len(names) / create_s, 1), "all_successful_s": round(all_s, 2),
                "crs_per_s": round(len(names) / all_s, 2), **figures, "settled_rss_mb": settled,
                "operator_rss_before_mb": round(own_before, 1),
                "operator_rss_settled_mb": round(own_settled, 1),
                # what each CR the operator knows costs it: cache, queue and kopf's state, the probes' CRs too
                "operator_kb_per_cr": round(max(own_settled - own_before, 0.0) * 1024 / len(names), 1),
                "runs": int(runs), **probed}

    def resync(self, ex: str, ns: str, watcher: StreamWatcher, names: list[str],
               interval: float) -> dict[str, Any]:
        """The N converged CRs re-run at once as background keys (see the module docstring); the probes
        every ``interval`` s (:func:`probe_interval`)."""
        t0 = time.monotonic()
        op = self._operator(ex, "resync", ["--startup-resync", "background"])
        family = Family(op, self.audit, self.args.sample_interval)
        try:
            say(f"resync [{ex}]: {len(names)} converged CRs re-run, probe every {interval:g}s")
            probes = self._probes("resync", ns, watcher, lambda: names, interval)
            deadline = t0 + self.args.timeout
            records = RunRecords(op, self.kind, ns, names)
            while records.poll() < len(names):  # each converged CR re-ran (or ran for a probe's edit)
                op.check_alive()
                if time.monotonic() > deadline:
                    raise BenchError(f"resync [{ex}]: {len(records.finished)} of {len(names)} re-ran after"
                                     f" {self.args.timeout}s")
                time.sleep(0.5)
            resync_s = time.monotonic() - t0
            probed = self._finish(probes, op)
            runs = runs_finished(op)
            figures = family.since(len(names), int(runs))
        finally:
            family.stop()
            op.stop()
        return {"crs": len(names), "resync_s": round(resync_s, 2), **figures, "runs": int(runs), **probed,
                "probe_interval_s": round(interval, 1)}

    def restart(self, ex: str, ns: str, watcher: StreamWatcher, mode: str) -> dict[str, Any]:
        k = self.kind
        # Only what a restart finds converged: a run the previous phase's operator was still doing when it
        # stopped (a probe's edit, say) left its CR "Running", and such a CR rightly runs at once.
        listed = self.kube.custom.list_namespaced_custom_object(k.group, k.version, ns, k.plural)["items"]
        converged = [o["metadata"]["name"] for o in listed if status_converged(o)]
        if len(converged) < len(listed):
            say(f"restart [{ex}, {mode}]: {len(listed) - len(converged)} of {len(listed)} CRs not converged"
                " (runs in flight at the last stop): not counted as re-runs")
        new = f"restart-{mode}"
        self.kube.create(self.kind, ns, new, self.spec)
        t0 = time.monotonic()
        op = self._operator(ex, f"restart-{mode}", ["--startup-resync", mode])
        ready_s = time.monotonic() - t0
        try:
            done = watcher.wait([new], 1, timeout=self.args.timeout, alive=op.check_alive)
            served_s = done[new] - t0
            say(f"restart [{ex}, {mode}]: new CR Successful {served_s:.1f}s after the start;"
                f" counting re-runs for {self.args.restart_window:g}s")
            time.sleep(max(0.0, t0 + self.args.restart_window - time.monotonic()))
            reruns = RunRecords(op, self.kind, ns, converged).poll()
        finally:
            op.stop()
        return {"mode": mode, "ready_s": round(ready_s, 2), "new_cr_successful_s": round(served_s, 2),
                "window_s": self.args.restart_window, "converged_rerun_in_window": reruns,
                "converged_crs": len(converged)}


# ----------------------------------------------------------------------------------------------- report


def _row(label: str, values: dict[str, Any], executors: list[str]) -> str:
    cells = [("-" if values.get(ex) is None else f"{values[ex]:g}") for ex in executors]
    ratio = ""
    if "runner" in executors and "warm" in executors:
        r = report._ratio(values.get("warm"), values.get("runner"))  # noqa: SLF001 - same ratio rule
        ratio = "-" if r is None else f"{r:g}"
    return f"| {label} | " + " | ".join(cells) + (f" | {ratio} |" if ratio else " |")


def _get(doc: dict[str, Any], path: str) -> Any:
    for part in path.split("."):
        if not isinstance(doc, dict):
            return None
        doc = doc.get(part)  # type: ignore[assignment]
    return doc


STORM_ROWS = (("N CRs", "crs"), ("create rate (CRs/s)", "create_per_s"),
              ("all Successful (s)", "all_successful_s"),
              ("CRs Successful per s", "crs_per_s"), ("peak RSS, operator + children (MB)", "peak_rss_mb"),
              ("peak PSS (MB)", "peak_pss_mb"), ("settled RSS (MB)", "settled_rss_mb"),
              ("operator process alone: RSS before the storm (MB)", "operator_rss_before_mb"),
              ("operator process alone: settled RSS (MB)", "operator_rss_settled_mb"),
              ("operator process alone: KB per CR it knows", "operator_kb_per_cr"),
              ("CPU s per CR", "cpu_s_per_cr"), ("CPU s per run", "cpu_s_per_run"),
              ("API requests per CR", "api_requests_per_cr"),
              ("API requests per run", "api_requests_per_run"), ("runs", "runs"))
PROBE_ROWS = tuple(
    (f"{where}: {label}", f"{probe}.{key}")
    for where, probe in (("user, same namespace", "probe"), ("user, own namespace", "probe_other_ns"))
    for label, key in (("create -> Successful p50 (s)", "create.p50_s"),
                       ("create -> Successful p99 (s)", "create.p99_s"),
                       ("edit -> Successful p50 (s)", "edit.p50_s"),
                       ("edit -> Successful p99 (s)", "edit.p99_s"),
                       ("probed changes", "all.n"), ("probe ticks skipped (4 pending)", "skipped_ticks")))
RESYNC_ROWS = (("N", "crs"), ("N converged CRs re-run (s)", "resync_s"), ("peak RSS (MB)", "peak_rss_mb"),
               ("CPU s per CR", "cpu_s_per_cr"), ("API requests per CR", "api_requests_per_cr"),
               ("runs", "runs"), ("probe interval (s)", "probe_interval_s"))
RESTART_ROWS = (("start -> /readyz (s)", "ready_s"),
                ("start -> new CR Successful (s)", "new_cr_successful_s"),
                ("converged CRs re-run in the window", "converged_rerun_in_window"))


def tables(raw: dict[str, dict[str, Any]], executors: list[str], modes: list[str]) -> str:
    both = "runner" in executors and "warm" in executors
    head = "| | " + " | ".join(executors) + (" | warm/runner |" if both else " |")
    sep = "| --- |" + " ---: |" * (len(executors) + (1 if both else 0))
    out = []

    def table(title: str, rows: tuple[tuple[str, str], ...], prefix: str) -> None:
        out.extend([f"\n**{title}**\n", head, sep])
        for label, key in rows:
            out.append(_row(label, {ex: _get(raw[ex], f"{prefix}.{key}") for ex in executors}, executors))

    table("storm: N CRs created at once", STORM_ROWS + PROBE_ROWS, "storm")
    table("resync: N converged CRs re-run (background)", RESYNC_ROWS + PROBE_ROWS, "resync")
    for mode in modes:
        table(f"restart, --startup-resync {mode}", RESTART_ROWS, f"restart.{mode}")
    return "\n".join(out)


# ------------------------------------------------------------------------------------------------- main


def crs_of(args: argparse.Namespace, executor: str) -> int:
    """N for one executor's column."""
    return int(args.runner_crs) if executor == "runner" and args.runner_crs is not None else int(args.crs)


def _csv(choices: tuple[str, ...]) -> Callable[[str], list[str]]:
    def parse(text: str) -> list[str]:
        items = [x.strip() for x in text.split(",") if x.strip()]
        if not items or any(x not in choices for x in items):
            raise argparse.ArgumentTypeError(f"choose from {', '.join(choices)} (got {text!r})")
        return items
    return parse


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--crs", type=int, default=10_000, help="N, CRs of the storm (default 10000)")
    p.add_argument("--runner-crs", type=int, default=None, metavar="N",
                   help="N for the runner column only (default: --crs): at ~1 s of CPU per run, 10,000 runner"
                        " runs take hours; per-CR figures stay comparable")
    p.add_argument("--executors", type=_csv(EXECUTORS), default=["warm", "runner"])
    p.add_argument("--role", choices=tuple(ROLES), default="light")
    p.add_argument("--probe-interval", type=float, default=3.0, metavar="S",
                   help="a user's new CR and edit every S seconds, storm and resync (default 3)")
    p.add_argument("--startup-resync", type=_csv(MODES), default=["background"],
                   help="restart phase: modes measured, comma-separated (default background)")
    p.add_argument("--restart-window", type=float, default=60.0, metavar="S",
                   help="restart: converged CRs re-run within S s of the start are counted (default 60)")
    p.add_argument("--settle", type=float, default=10.0, metavar="S",
                   help="seconds after the storm before the settled RSS is read (default 10)")
    p.add_argument("--create-workers", type=int, default=16, help="creating threads (default 16)")
    p.add_argument("--sample-interval", type=float, default=0.25, help="memory sampling period, s")
    p.add_argument("--timeout", type=float, default=3 * 3600.0, help="per phase, seconds")
    p.add_argument("--json", type=Path, default=None, metavar="OUT")
    p.add_argument("--workdir", type=Path, default=None, help="keep logs, audit log and artifacts here")
    args = p.parse_args(argv)
    if args.runner_crs is not None and args.runner_crs < 1:
        p.error("--runner-crs must be >= 1")
    if args.crs < 1:
        p.error("--crs must be >= 1")
    return args


def measure(args: argparse.Namespace, workdir: Path, reaper: Reaper) -> tuple[dict[str, dict[str, Any]], str]:
    """Every executor's phases on one audited control plane; the raw figures and the API server's URL."""
    say("starting the real control plane (audit log of the operator's requests)")
    plane = AuditedPlane.start(workdir, reaper)
    kube = Kube(plane.kubeconfig)
    reaper.add(kube.close)
    run = Run(args, kube, operator_kubeconfig(kube, plane.kubeconfig, workdir / "operator.kubeconfig"),
              AuditCounter(plane.audit_log), workdir, reaper)
    raw: dict[str, dict[str, Any]] = {}
    for ex in args.executors:
        raw[ex] = run.executor(ex)
        say(f"{ex}: {json.dumps(raw[ex])}")
    return raw, plane.server


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["serve-plane"]:
        return serve_plane(Path(argv[1]), Path(argv[2]))
    args = parse_args(argv)
    started = time.monotonic()
    date = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    machine = report.machine()
    measured, rc = run_guarded("scale", args.workdir, lambda workdir, reaper: measure(args, workdir, reaper))
    if measured is None:
        return rc
    raw, server = measured

    elapsed = round(time.monotonic() - started, 1)
    machine["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    sizes = ", ".join(f"{crs_of(args, ex)} ({ex})" for ex in args.executors)
    print(f"\nansible-operator scale benchmark, {date}, {machine['nproc']} CPUs ({machine['cpu_model']}),"
          f" {machine['mem_total_mb']} MB, N={sizes} {ROLES[args.role].kind} CRs ({args.role} role),"
          f" probe every {args.probe_interval:g}s, run in {elapsed}s, load average"
          f" {machine['loadavg_at_start']} at start, {machine['loadavg_at_end']} at end")
    print(f"Kubernetes API: real control plane ({server}); API requests: the audit log of the"
          " operator's ServiceAccount")
    print(tables(raw, args.executors, args.startup_resync))
    if args.json is not None:
        doc = {"date": date, "machine": machine, "crs": args.crs, "runner_crs": crs_of(args, "runner"),
               "role": args.role,
               "executors": args.executors,
               "probe_interval_s": args.probe_interval, "startup_resync": args.startup_resync,
               "restart_window_s": args.restart_window, "elapsed_s": elapsed, "api_server": server,
               "phases": {ex: sorted(raw[ex]) for ex in raw}, "raw": raw}
        args.json.write_text(json.dumps(doc, indent=2) + "\n")
        print(f"\nJSON written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
