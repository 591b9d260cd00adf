"""``ansible-operator-sandbox`` (also ``ansible-operator sandbox``, ``python -m ansible_operator_sandbox``):
serve the sandbox API until SIGINT/SIGTERM, printing URL and kubeconfig.

The two stdout lines (``sandbox: serving URL`` and ``kubeconfig: PATH``) are flushed immediately so a
parent process (tests, scripts) can read them and connect.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
import tempfile
from pathlib import Path


def _default_kubeconfig(port: int) -> Path:
    base = Path(os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir())
    return base / f"ansible-operator-sandbox-{port}.kubeconfig"


async def _serve(args: argparse.Namespace) -> int:
    from ansible_operator_sandbox import Sandbox
    from ansible_operator_sandbox.errors import ApiError

    sb = Sandbox(host=args.host, port=args.port, data_dir=args.data_dir, crds=args.crds or (),
                 simulate=args.simulate, secure=getattr(args, "secure", False))
    try:
        await sb.start()
    except (OSError, ValueError) as e:
        print(f"sandbox: cannot start: {e}", file=sys.stderr, flush=True)
        return 1
    except ApiError as e:  # a --crds file the API server rejects
        print(f"sandbox: cannot install CRDs: {e.message}", file=sys.stderr, flush=True)
        return 1
    path = Path(args.kubeconfig) if args.kubeconfig else _default_kubeconfig(sb.port)
    sb.write_kubeconfig(path)
    print(f"sandbox: serving {sb.url}", flush=True)
    print(f"kubeconfig: {path}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await sb.stop()
    print("sandbox: stopped", flush=True)
    return 0


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid port {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"port must be 0..65535 (got {value})")
    return value


def _log_level(text: str) -> str:
    value = str(text).strip().upper()
    if value.isdigit() or value in ("DEBUG", "INFO", "WARNING", "WARN", "ERROR", "CRITICAL"):
        return "WARNING" if value == "WARN" else value
    raise argparse.ArgumentTypeError(
        f"unknown log level {text!r}: expected DEBUG, INFO, WARNING, ERROR or CRITICAL")


def build_parser(prog: str = "ansible-operator-sandbox") -> argparse.ArgumentParser:
    sb = argparse.ArgumentParser(
        prog=prog, description="Serve a sandbox Kubernetes API on loopback (demo, quick looks, tests on"
                               " machines without the real control plane).")
    sb.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    sb.add_argument("--port", type=_port, default=0, help="port to listen on; 0 picks a free port (default)")
    sb.add_argument("--kubeconfig", default=None, help="write a kubeconfig here (default: a file it prints)")
    sb.add_argument("--crds", action="append", default=[], metavar="DIR_OR_FILE",
                    help="CustomResourceDefinition YAML files or directories to install at start"
                         " (repeatable)")
    sb.add_argument("--data-dir", default=None, help="persist objects here (SQLite) across restarts")
    sb.add_argument("--no-simulate", dest="simulate", action="store_false",
                    help="turn off the simulated controllers (Deployment/StatefulSet/Job/PVC/CronJob status)")
    sb.add_argument("--secure", action="store_true",
                    help="HTTPS with a generated CA, client-certificate and ServiceAccount-token"
                         " authentication, enforced RBAC; the kubeconfig written holds the CA and an admin"
                         " (system:masters) client certificate")
    sb.add_argument("--log-level", type=_log_level, default="INFO",
                    help="DEBUG, INFO (default), WARNING, ERROR or CRITICAL")
    return sb


def main(argv: list[str] | None = None, prog: str = "ansible-operator-sandbox") -> int:
    args = build_parser(prog).parse_args(argv)
    logging.basicConfig(level=getattr(logging, str(args.log_level).upper(), logging.INFO),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    return asyncio.run(_serve(args))


if __name__ == "__main__":
    sys.exit(main())
