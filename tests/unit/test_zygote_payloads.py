"""AnsiballZ payloads shared between warm runs (warm.payloads): reused while valid, rebuilt when not."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any, AsyncIterator

import pytest
import pytest_asyncio
from executor_helpers import started

from ansible_operator.executors import ansible_compat
from ansible_operator.executors.base import RunRequest
from ansible_operator.executors.datadir import new_run_id
from ansible_operator.executors.warm.executor import WarmExecutor
from ansible_operator.executors.warm.payloads import PayloadStore, decode_entry, encode_entry, is_fresh

pytestmark = pytest.mark.ansible_versions  # also run on the lowest ansible-core (dev.sh test-ansible-low)
# The zygote is the module's (one per xdist worker: its start-up costs ~1.5 CPU s), and so is its payload
# store, as in an operator: each test's collections are its own (under its tmp_path). Its async tests run in
# the module's event loop.
shared_loop = pytest.mark.asyncio(loop_scope="module")

MODULE = '''
from ansible.module_utils.basic import AnsibleModule
from ansible_collections.testns.pay.plugins.module_utils.answer import ANSWER


def main():
    module = AnsibleModule(argument_spec={}, supports_check_mode=True)
    module.exit_json(changed=False, module_says="{says}", util_says=ANSWER)


if __name__ == "__main__":
    main()
'''

PLAYBOOK = "- hosts: localhost\n  gather_facts: false\n  tasks:\n    - testns.pay.speak: {}\n"


def _collection(root: Path, says: str, answer: str) -> Path:
    base = root / "ansible_collections" / "testns" / "pay" / "plugins"
    (base / "modules").mkdir(parents=True, exist_ok=True)
    (base / "module_utils").mkdir(parents=True, exist_ok=True)
    (base / "modules" / "speak.py").write_text(MODULE.replace("{says}", says))
    (base / "module_utils" / "answer.py").write_text(f"ANSWER = {answer!r}\n")
    return root


def _bump_mtime(path: Path) -> None:
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def warm() -> AsyncIterator[WarmExecutor]:
    # Modules run in a fresh interpreter from their payload here: on the fast path (warm.fast_modules) the
    # worker's collection loader would import them from disk and hide a stale payload.
    async with started(WarmExecutor(max_workers=2, fast_modules=())) as ex:
        yield ex


async def _speak(ex: WarmExecutor, tmp_path: Path, collections: Path) -> dict[str, Any]:
    rid = new_run_id()
    playbook = tmp_path / f"{rid}.yml"
    playbook.write_text(PLAYBOOK)
    events: list[dict[str, Any]] = []
    outcome = await ex.run(RunRequest(run_id=rid, private_data_dir=tmp_path / "runs" / rid, extra_vars={},
                                      playbook=playbook, collections_path=(collections,),
                                      envvars={"ANSIBLE_GATHERING": "explicit"}), events.append)
    assert outcome.status == "successful", [e.get("stdout") for e in events][-5:]
    (res,) = [e["event_data"]["res"] for e in events if e["event"] == "runner_on_ok"]
    return {"module": res["module_says"], "util": res["util_says"]}


def _store_entries(ex: WarmExecutor) -> list[str]:
    """Entries in the zygote's store (under its Ansible local temp dir, ansible-local-<pid>...)."""
    bases = [Path.home() / ".ansible" / "tmp", Path(tempfile.gettempdir())]
    pattern = f"ansible-local-{ex.zygote_pid}*/ansiballz-store/*"
    return [p.name for base in bases for p in base.glob(pattern) if not p.name.startswith(".part-")]


@shared_loop
async def test_a_payload_is_built_once_and_rebuilt_when_a_source_changes(
    warm: WarmExecutor, tmp_path: Path
) -> None:
    collections = _collection(tmp_path / "c", "v1", "one")
    before = set(_store_entries(warm))  # the shared zygote's store may hold other tests' payloads
    assert await _speak(warm, tmp_path, collections) == {"module": "v1", "util": "one"}
    # the store hooks ansible-core 2.19's payload builder; 2.16 - 2.18 runs build their own, as before
    stored = any("testns.pay.plugins.modules.speak" in name for name in set(_store_entries(warm)) - before)
    assert stored is ansible_compat.payload_store_supported()
    assert await _speak(warm, tmp_path, collections) == {"module": "v1", "util": "one"}

    # an edited module_utils file (same size: only the mtime tells) must not be served stale
    util = collections / "ansible_collections/testns/pay/plugins/module_utils/answer.py"
    util.write_text("ANSWER = 'two'\n")
    _bump_mtime(util)
    assert await _speak(warm, tmp_path, collections) == {"module": "v1", "util": "two"}

    # neither must an edited module
    module = collections / "ansible_collections/testns/pay/plugins/modules/speak.py"
    module.write_text(MODULE.replace("{says}", "v2"))
    _bump_mtime(module)
    assert await _speak(warm, tmp_path, collections) == {"module": "v2", "util": "two"}


@shared_loop
async def test_the_same_name_in_another_collection_path_gets_its_own_payload(
        warm: WarmExecutor, tmp_path: Path) -> None:
    first = _collection(tmp_path / "a", "from-a", "a")
    second = _collection(tmp_path / "b", "from-b", "b")
    assert await _speak(warm, tmp_path, first) == {"module": "from-a", "util": "a"}
    assert await _speak(warm, tmp_path, second) == {"module": "from-b", "util": "b"}
    assert await _speak(warm, tmp_path, first) == {"module": "from-a", "util": "a"}


def test_store_hands_out_only_fresh_entries_for_the_same_module_file(tmp_path: Path) -> None:
    store = PayloadStore(str(tmp_path / "store"))
    module, util = tmp_path / "m.py", tmp_path / "u.py"
    module.write_text("m")
    util.write_text("u")
    sources = [(str(p), p.stat().st_mtime_ns, p.stat().st_size) for p in (module, util)]
    built = tmp_path / "run1" / "ansiballz_cache" / "ns.c.m-ZIP_DEFLATED-none"
    built.parent.mkdir(parents=True)
    built.write_bytes(b"PAYLOAD")
    store.publish(str(module), str(built), sources)

    run2 = tmp_path / "run2" / "ansiballz_cache"
    assert store.hand_out(str(module), str(run2)) == 1
    assert (run2 / built.name).read_bytes() == b"PAYLOAD"
    assert store.hand_out(str(tmp_path / "other.py"), str(tmp_path / "run3")) == 0

    util.write_text("changed")
    assert store.hand_out(str(module), str(tmp_path / "run4")) == 0
    assert not (tmp_path / "run4").exists()


def test_entry_encoding_round_trips_and_rejects_garbage() -> None:
    sources = [("/a.py", 1, 2)]
    assert decode_entry(encode_entry(sources, b"xyz")) == (sources, b"xyz")
    assert decode_entry(b"\x00") is None
    assert decode_entry(b"\x00\x00\x00\x05nope!rest") is None
    assert not is_fresh([])
    assert not is_fresh([("/nonexistent/file.py", 1, 1)])
