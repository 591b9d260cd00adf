"""The differential suite's machinery: one scenario, two API servers, what a client sees compared.

A *scenario* is a function that drives one server through a :class:`Client` (kubectl, the ``kubernetes``
client's typed and dynamic APIs, raw HTTP) and records *steps*: each step is what a client saw (exit code,
stdout, stderr; status code and body), normalised for what legitimately differs between two clusters
(names' random suffixes, uids, resourceVersions, timestamps, ages, IPs, column widths). The same scenario
runs against the real control plane (the oracle) and against the sandbox; every step whose normalised
observation differs is a difference.

A difference is either fixed or listed in ``allowlist.yaml`` (scenario, step, reason). A listed step that
no longer differs fails too, so the list only shrinks: remove the entry. docs/reference/sandbox.md prints the
list (``python -m tests.differential.allowlist`` rewrites that section; a test checks it is current).
"""

from __future__ import annotations

import difflib
import json
import os
import re
import shutil
import subprocess
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import yaml

HERE = Path(__file__).parent
ALLOWLIST = HERE / "allowlist.yaml"


# ---- normalisation -------------------------------------------------------------------------------------

UID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b")
TIMESTAMP = re.compile(r"\b\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})")
# kubectl's ages and durations: 5s, 3m2s, 10m, 2d3h, 4h5m, <invalid>, also "5s ago" in describe
AGE = re.compile(r"(?<![\w.:/-])(\d+[smhdy]){1,2}(?![\w.:/-])|<invalid>")
IPV4 = re.compile(r"\b(?:10|172|192|127)\.\d{1,3}\.\d{1,3}\.\d{1,3}\b")
# What controllers and generateName make (apimachinery's rand.SafeEncodeString alphabet): a pod-template
# hash (a hash of the Go struct's printed form, which only Go reproduces) and 5-character name suffixes
SAFE_ENCODED = re.compile(r"(?<=-)[bcdfghjklmnpqrstvwxz2456789]{5}(?:[bcdfghjklmnpqrstvwxz2456789]{3,5})?\b")
TEMPLATE_HASH = re.compile(r"(pod-template-hash[=:]\s*\"?)[bcdfghjklmnpqrstvwxz2456789]{8,10}")
# each server's own certificate (kubectl auth whoami's credential id)
FINGERPRINT = re.compile(r"X509SHA256=[0-9a-f]{64}")
# kubectl diff's temporary directories and file times
DIFF_DIR = re.compile(r"/tmp/(LIVE|MERGED)-\d+")
FILE_TIME = re.compile(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\.\d+ [+-]\d{4}")
RESOURCE_VERSION = re.compile(r'("resourceVersion":\s*")\d+(")')
# Event names: <object>.<unix nanoseconds in hex>
EVENT_SUFFIX = re.compile(r"(?<=[a-z0-9])\.[0-9a-f]{15,16}\b")
SPACES = re.compile(r"[ \t]+")


@dataclass
class Normaliser:
    """Replaces what legitimately differs between two clusters; ``namespace`` (random per run, the same on
    both servers) becomes ``NS``."""

    namespace: str
    extra: list[tuple[re.Pattern[str], str]] = field(default_factory=list)

    def text(self, text: str) -> str:
        text = text.replace(self.namespace, "NS")
        # before SAFE_ENCODED: kubectl diff's /tmp/LIVE-<digits> is sometimes all of its alphabet's digits
        text = DIFF_DIR.sub(r"/tmp/\1-<n>", text)
        text = UID.sub("<uid>", text)
        text = TIMESTAMP.sub("<time>", text)
        text = IPV4.sub("<ip>", text)
        text = RESOURCE_VERSION.sub(r"\1<rv>\2", text)
        text = TEMPLATE_HASH.sub(r"\1<hash>", text)
        text = SAFE_ENCODED.sub("<hash>", text)
        text = FINGERPRINT.sub("X509SHA256=<fingerprint>", text)
        text = FILE_TIME.sub("<time>", text)
        text = EVENT_SUFFIX.sub(".<hex>", text)
        for pattern, replacement in self.extra:
            text = pattern.sub(replacement, text)
        lines = []
        for line in text.splitlines():
            line = AGE.sub("<age>", line)
            lines.append(SPACES.sub(" ", line).rstrip())  # column widths follow the widest value
        return "\n".join(lines)

    def obj(self, value: Any) -> Any:
        """A JSON value with volatile metadata dropped and the rest normalised as text."""
        if isinstance(value, dict):
            out = {}
            for key, item in value.items():
                if key in ("resourceVersion", "uid", "creationTimestamp", "managedFields", "selfLink"):
                    out[key] = "<volatile>"
                    continue
                out[key] = self.obj(item)
            return out
        if isinstance(value, list):
            items = [self.obj(item) for item in value]
            if items and all(isinstance(i, dict) and "type" in i and "lastTransitionTime" in i
                             for i in items):
                # conditions: their order follows the history of transitions (a controller appends the
                # one that changed last), which timing decides
                items.sort(key=lambda i: str(i["type"]))
            return items
        if isinstance(value, str):
            return self.text(value)
        return value


# ---- one server, as a client sees it -------------------------------------------------------------------

@dataclass
class Step:
    """One observation: what a client saw, normalised (a JSON-able value)."""

    key: str
    seen: Any

    def render(self) -> str:
        if isinstance(self.seen, str):
            return self.seen
        return json.dumps(self.seen, indent=1, sort_keys=True, default=str)


class Client:
    """One server: kubectl with a kubeconfig whose context namespace is the scenario's, the ``kubernetes``
    client, raw HTTP. Every call records a :class:`Step` under a key that names it (the command line by
    default), so the two servers' steps line up."""

    def __init__(self, name: str, kubeconfig: Path, namespace: str, workdir: Path) -> None:
        self.name = name
        self.namespace = namespace
        workdir.mkdir(parents=True, exist_ok=True)
        self.kubeconfig = workdir / "kubeconfig"
        shutil.copy(kubeconfig, self.kubeconfig)
        self.env = {**os.environ, "KUBECONFIG": str(self.kubeconfig), "HOME": str(workdir),
                    "KUBECACHEDIR": str(workdir / "cache"), "KUBECTL_COMMAND_HEADERS": "false"}
        self.env.pop("KUBERNETES_SERVICE_HOST", None)
        self.run_kubectl("config", "set-context", "--current", f"--namespace={namespace}")
        self.norm = Normaliser(namespace)
        self.steps: list[Step] = []
        self.workdir = workdir
        self.compact: Callable[[], int] | None = None
        """Drop the server's watch history now (scenarios in ``COMPACTING`` only): etcd compaction on a
        private real control plane without a watch cache, ``Store.compact()`` on the sandbox."""

    # -- raw, not recorded
    def run_kubectl(self, *args: str, input: str | None = None, timeout: float = 120
                    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["kubectl", *args], env=self.env, capture_output=True, text=True, input=input,
                              timeout=timeout)

    def api_client(self) -> Any:
        import kubernetes

        cfg = kubernetes.client.Configuration()
        kubernetes.config.load_kube_config(config_file=str(self.kubeconfig), client_configuration=cfg)
        return kubernetes.client.ApiClient(cfg)

    # -- recorded
    def record(self, key: str, seen: Any) -> Any:
        key = key.replace(self.namespace, "NS")
        if any(step.key == key for step in self.steps):
            raise ValueError(f"step {key!r} recorded twice: give it a key of its own")
        self.steps.append(Step(key, seen))
        return seen

    def rollout_status(self, target: str, key: str | None = None) -> None:
        """``kubectl rollout status`` until done; only its exit code and last line are compared (the
        progress lines before it follow the controllers' timing)."""
        done = self.run_kubectl("rollout", "status", target, "--timeout=150s")
        last = (done.stdout.strip().splitlines() or [""])[-1]
        self.record(key or f"kubectl rollout status {target}",
                    {"rc": done.returncode, "last line": self.norm.text(last),
                     "stderr": self.norm.text(done.stderr)})

    def kubectl(self, *args: str, input: str | None = None, key: str | None = None, json_out: bool = False,
                check: bool = False) -> subprocess.CompletedProcess[str]:
        """Run kubectl and record exit code, stdout and stderr (stdout parsed and normalised as an object
        with ``json_out``)."""
        done = self.run_kubectl(*args, input=input)
        if check and done.returncode != 0:
            raise AssertionError(f"[{self.name}] kubectl {' '.join(args)}: {done.stderr}")
        out: Any = self.norm.text(done.stdout)
        if json_out and done.returncode == 0:
            out = self.norm.obj(json.loads(done.stdout))
        self.record(key or "kubectl " + " ".join(args),
                    {"rc": done.returncode, "stdout": out, "stderr": self.norm.text(done.stderr)})
        return done

    def http(self, method: str, path: str, body: Any = None, key: str | None = None,
             content_type: str | None = "application/json", fields: tuple[str, ...] | None = None) -> Any:
        """A raw request with the kubeconfig's credentials; records the status code and the body (JSON
        normalised; only ``fields`` of it when given)."""
        status, payload = self.request(method, path, body, content_type)
        try:
            parsed: Any = json.loads(payload)
        except ValueError:
            parsed = payload.decode(errors="replace")
        seen = parsed
        if fields is not None and isinstance(parsed, dict):
            seen = {k: parsed.get(k) for k in fields}
        self.record(key or f"{method} {path}", {"status": status, "body": self.norm.obj(seen)})
        return parsed

    def watch(self, path: str) -> tuple[int, list[dict[str, Any]]]:
        """A raw watch request (``path`` with ``watch=1`` and a ``timeoutSeconds``), read to its end: the
        status code and the events (an error response as its one Status)."""
        status, payload = self.request("GET", path)
        events = []
        for line in payload.splitlines():
            if line.strip():
                events.append(json.loads(line))
        return status, events

    def request(self, method: str, path: str, body: Any = None, content_type: str | None = "application/json"
                ) -> tuple[int, bytes]:
        api = self.api_client()
        try:
            cfg = api.configuration
            import ssl

            ctx = ssl.create_default_context(cafile=cfg.ssl_ca_cert) if cfg.ssl_ca_cert else None
            if ctx is not None and cfg.cert_file:
                ctx.load_cert_chain(cfg.cert_file, cfg.key_file)
            data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
            headers = {"Accept": "application/json"}
            if content_type:
                headers["Content-Type"] = content_type
            headers.update({k: v for k, v in (cfg.api_key or {}).items() if k == "authorization"})
            req = urllib.request.Request(cfg.host + path, data=data, method=method, headers=headers)
            try:
                with urllib.request.urlopen(req, context=ctx, timeout=60) as resp:
                    return resp.status, resp.read()
            except urllib.error.HTTPError as e:
                return e.code, e.read()
        finally:
            api.close()


# ---- comparing -----------------------------------------------------------------------------------------

def load_allowlist() -> dict[tuple[str, str], str]:
    entries = yaml.safe_load(ALLOWLIST.read_text()) or []
    out: dict[tuple[str, str], str] = {}
    for entry in entries:
        key = (entry["scenario"], entry["step"])
        if key in out:
            raise ValueError(f"{ALLOWLIST.name}: {key} listed twice")
        if not str(entry.get("reason") or "").strip():
            raise ValueError(f"{ALLOWLIST.name}: {key} has no reason")
        out[key] = entry["reason"]
    return out


@dataclass
class Outcome:
    scenario: str
    unexpected: list[str] = field(default_factory=list)  # differences not in the allow-list (with diffs)
    stale: list[str] = field(default_factory=list)  # allow-listed steps that no longer differ
    listed: list[str] = field(default_factory=list)  # allow-listed differences still there

    def failure(self) -> str | None:
        parts = []
        if self.unexpected:
            parts.append("the sandbox differs from the real API server (fix the sandbox, or list the step in"
                         " tests/differential/allowlist.yaml with a reason):\n\n"
                         + "\n\n".join(self.unexpected))
        if self.stale:
            parts.append("allow-listed steps that no longer differ: remove them from"
                         " tests/differential/allowlist.yaml (the list only shrinks):\n  "
                         + "\n  ".join(self.stale))
        return "\n\n".join(parts) or None


def compare(scenario: str, real: Client, sandbox: Client,
            allowlist: dict[tuple[str, str], str]) -> Outcome:
    outcome = Outcome(scenario)
    real_steps = {s.key: s for s in real.steps}
    sandbox_steps = {s.key: s for s in sandbox.steps}
    for key in list(real_steps) + [k for k in sandbox_steps if k not in real_steps]:
        a, b = real_steps.get(key), sandbox_steps.get(key)
        same = a is not None and b is not None and a.seen == b.seen
        listed = (scenario, key) in allowlist
        if same and listed:
            outcome.stale.append(key)
        elif not same and listed:
            outcome.listed.append(key)
        elif not same:
            left = a.render().splitlines() if a else ["<step not reached>"]
            right = b.render().splitlines() if b else ["<step not reached>"]
            diff = "\n".join(difflib.unified_diff(left, right, "real", "sandbox", lineterm="", n=2))
            outcome.unexpected.append(f"--- step: {key}\n{diff}")
    return outcome


Scenario = Callable[[Client], None]
