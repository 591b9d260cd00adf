"""Store internals: watch fan-out with a slow watcher, history compaction, SQLite reload."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from ansible_operator_sandbox import store as store_mod
from ansible_operator_sandbox.store import Store, TooOldResourceVersion


def _obj(name: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "ns", "uid": name},
    }


async def test_slow_watcher_is_closed_without_blocking_others(monkeypatch):
    monkeypatch.setattr(store_mod, "WATCH_QUEUE_LIMIT", 10)
    st = Store()
    slow, _ = st.watch("/configmaps", None, None)
    fast, _ = st.watch("/configmaps", None, None)
    received = []

    async def consume() -> None:
        while True:
            ev = await fast.queue.get()
            if ev is None:
                return
            received.append(ev.obj["metadata"]["name"])
            if len(received) == 50:
                return

    task = asyncio.create_task(consume())
    for i in range(50):
        st.put(("/configmaps", "ns", f"c{i}"), _obj(f"c{i}"))
        await asyncio.sleep(0)  # the fast consumer keeps up; the slow one never reads
    await asyncio.wait_for(task, 5)
    assert received == [f"c{i}" for i in range(50)]
    assert slow.overflowed and slow.queue.get_nowait() is None  # its stream is ended: the client re-lists
    assert st.watcher_count == 1


def test_history_compaction_gives_too_old():
    st = Store()
    st.set_history_limit(3)
    for i in range(5):
        st.put(("/configmaps", "ns", f"c{i}"), _obj(f"c{i}"))
    with pytest.raises(TooOldResourceVersion):
        st.watch("/configmaps", None, 1)
    w, replay = st.watch("/configmaps", None, 3)
    assert [e.rv for e in replay] == [4, 5]
    st.close_watcher(w)


def test_sqlite_reload(tmp_path: Path):
    st = Store(tmp_path)
    st.put(("/configmaps", "ns", "a"), _obj("a"))
    st.put(("/configmaps", "ns", "b"), _obj("b"))
    st.remove(("/configmaps", "ns", "a"))
    st.close()
    again = Store(tmp_path)
    assert again.resource_version == 3
    assert again.get(("/configmaps", "ns", "a")) is None
    b = again.get(("/configmaps", "ns", "b"))
    assert b is not None and b["metadata"]["resourceVersion"] == "2"
    with pytest.raises(TooOldResourceVersion):
        again.watch("/configmaps", None, 2)  # history does not survive a restart
    again.close()
