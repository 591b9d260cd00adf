#!/usr/bin/env python3
"""Sum up ``TEST_CPU_REPORT=FILE`` (tests/conftest.py): CPU seconds per test, per module and in all.

    TEST_CPU_REPORT=/tmp/cpu ./dev.sh test -q
    python scripts/cpu_report.py /tmp/cpu [--top 40]
"""

from __future__ import annotations

import argparse
import glob
import json
from collections import defaultdict


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("file", help="the TEST_CPU_REPORT path (its .<worker> files are read)")
    p.add_argument("--top", type=int, default=40)
    args = p.parse_args()
    rows = []
    for name in sorted(glob.glob(f"{args.file}.*")):
        with open(name) as f:
            rows += [json.loads(line) for line in f if line.strip()]
    if not rows:
        raise SystemExit(f"no {args.file}.<worker> files with results")
    total = sum(r["own"] + r["children"] for r in rows)
    by_module: dict[str, float] = defaultdict(float)
    for r in rows:
        by_module[r["test"].split("::")[0]] += r["own"] + r["children"]
    print(f"{len(rows)} tests, {total:.0f} CPU s ({total / 60:.1f} CPU min)")
    print(f"\nmodules by CPU s (top {args.top}):")
    for module, cpu in sorted(by_module.items(), key=lambda kv: -kv[1])[:args.top]:
        print(f"  {cpu:8.1f}  {100 * cpu / total:5.1f} %  {module}")
    print(f"\ntests by CPU s (top {args.top}):")
    for r in sorted(rows, key=lambda r: -(r["own"] + r["children"]))[:args.top]:
        print(f"  {r['own'] + r['children']:8.1f}  (own {r['own']:.1f})  {r['test']}")


if __name__ == "__main__":
    main()
