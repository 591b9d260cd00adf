"""``ansible-operator sandbox``: serve the sandbox API until SIGINT/SIGTERM, printing URL and kubeconfig.

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
    from ansible_operator.sandbox import Sandbox
    from ansible_operator.sandbox.errors import ApiError

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


def main(args: argparse.Namespace) -> int:
    logging.basicConfig(level=getattr(logging, str(args.log_level).upper(), logging.INFO),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    return asyncio.run(_serve(args))
