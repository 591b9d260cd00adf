"""Load: 2,000 objects written while 20 watchers stream; every watcher sees every event, in order."""

from __future__ import annotations

import asyncio
import json
from collections import defaultdict
from pathlib import Path

import aiohttp

from ansible_operator_sandbox.testing import start_process

OBJECTS = 2000
WATCHERS = 20
WRITERS = 16


async def _watch(session: aiohttp.ClientSession, url: str, rv: str, expected: int,
                 ready: asyncio.Event, counter: list[int]) -> list[tuple[str, str, int]]:
    events: list[tuple[str, str, int]] = []
    async with session.get(
        # long enough for the writes on a loaded 2-core machine: the server ends a watch at its timeout
        url, params={"watch": "true", "resourceVersion": rv, "timeoutSeconds": "900"}
    ) as resp:
        assert resp.status == 200
        counter[0] += 1
        if counter[0] == WATCHERS:
            ready.set()
        async for line in resp.content:
            if not line.strip():
                continue
            ev = json.loads(line)
            meta = ev["object"]["metadata"]
            events.append((ev["type"], meta["name"], int(meta["resourceVersion"])))
            if len(events) >= expected:
                break
    return events


async def _run(url: str) -> None:
    base = f"{url}/api/v1/namespaces/default/configmaps"
    timeout = aiohttp.ClientTimeout(total=900)
    async with aiohttp.ClientSession(timeout=timeout,
                                     connector=aiohttp.TCPConnector(limit=WATCHERS + WRITERS + 4)) as session:
        async with session.get(base) as resp:
            rv = (await resp.json())["metadata"]["resourceVersion"]
        deleted = set(range(0, OBJECTS, 4))
        modified = set(range(1, OBJECTS, 2))
        expected_total = OBJECTS + len(modified) + len(deleted)
        ready = asyncio.Event()
        counter = [0]
        watchers = [asyncio.create_task(_watch(session, base, rv, expected_total, ready, counter))
                    for _ in range(WATCHERS)]
        await asyncio.wait_for(ready.wait(), 30)

        async def writer(ids: list[int]) -> None:
            for i in ids:
                name = f"cm-{i:05d}"
                async with session.post(base, json={"metadata": {"name": name}, "data": {"v": "0"}}) as r:
                    assert r.status == 201, await r.text()
                if i in modified:
                    async with session.patch(f"{base}/{name}", data=json.dumps({"data": {"v": "1"}}),
                                             headers={"Content-Type": "application/merge-patch+json"}) as r:
                        assert r.status == 200, await r.text()
                if i in deleted:
                    async with session.delete(f"{base}/{name}") as r:
                        assert r.status == 200, await r.text()

        await asyncio.gather(*(writer(list(range(w, OBJECTS, WRITERS))) for w in range(WRITERS)))
        results = await asyncio.wait_for(asyncio.gather(*watchers), 600)

    for events in results:
        assert len(events) == expected_total
        rvs = [rv for _, _, rv in events]
        assert rvs == sorted(rvs) and len(set(rvs)) == len(rvs)  # global order, no duplicates
        per_object: dict[str, list[str]] = defaultdict(list)
        for type_, name, _ in events:
            per_object[name].append(type_)
        assert len(per_object) == OBJECTS
        for name, types in per_object.items():
            i = int(name.split("-")[1])
            want = ["ADDED"] + (["MODIFIED"] if i in modified else []) + (["DELETED"] if i in deleted else [])
            assert types == want, (name, types)


def test_many_objects_many_watchers(tmp_path: Path):
    proc = start_process(tmp_path / "kc", simulate=False)
    try:
        asyncio.run(_run(proc.url))
    finally:
        assert proc.stop() == 0
