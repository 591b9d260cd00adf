"""The API server's JSON decoded with a bound on nesting (issue 20, defect 1): pure logic, and kopf's client
decoding through it once installed; and kopf's watch requests restarted when an outage ends (defect 2)."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from ansible_operator import apijson, kopfcompat


def nested(levels: int, leaf: str = "1") -> str:
    return '{"a":' * levels + leaf + "}" * levels


def unwrap(value: Any) -> tuple[int, Any]:
    levels = 0
    while isinstance(value, dict):
        value, levels = value["a"], levels + 1
    return levels, value


@pytest.mark.parametrize("text,depth", [("1", 0), ('"{[{["', 0), ("[]", 1), ('{"a":[{}]}', 3),
                                        ('{"k\\"{":"\\\\[", "b":[[["]"]]]}', 4)])
def test_depth_counts_brackets_outside_strings(text: str, depth: int) -> None:
    assert apijson.depth(text.encode()) == depth


def _random_value(rng: random.Random, level: int) -> Any:
    if level > 12 or rng.random() < 0.3:
        text = "".join(rng.choice('ab[]{}"\\/\u00e9\n') for _ in range(rng.randrange(8)))
        return rng.choice([1, None, True, text])
    if rng.random() < 0.5:
        return [_random_value(rng, level + 1) for _ in range(rng.randrange(4))]
    return {rng.choice(['k', '"[', '\\{', 'x}']) + str(i): _random_value(rng, level + 1)
            for i in range(rng.randrange(4))}


def _nesting(value: Any) -> int:
    children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else None
    return 0 if children is None else 1 + max(map(_nesting, children), default=0)


def test_depth_agrees_with_the_decoded_document_for_strings_full_of_brackets_quotes_and_escapes() -> None:
    rng = random.Random(20)
    for _ in range(500):
        value = _random_value(rng, 0)
        for text in (json.dumps(value), json.dumps(value, ensure_ascii=False)):
            assert apijson.depth(text.encode()) == _nesting(value), text


@pytest.mark.parametrize("levels", [1, apijson.MAX_DEPTH - 1, apijson.MAX_DEPTH])
def test_documents_within_the_bound_decode_as_json_does(levels: int) -> None:
    text = nested(levels)
    assert apijson.loads(text) == json.loads(text)


@pytest.mark.parametrize("levels", [apijson.MAX_DEPTH + 1, 1_000, 10_000])
def test_deeper_containers_are_cut_and_the_rest_is_kept(levels: int) -> None:
    doc = ('{"metadata":{"name":"deep","uid":"u1"},"spec":' + nested(levels - 1) + ',"after":["x"]}').encode()
    decoded = apijson.loads(doc)
    assert decoded["metadata"] == {"name": "deep", "uid": "u1"} and decoded["after"] == ["x"]
    depth, leaf = unwrap(decoded["spec"])
    assert leaf == apijson.TRUNCATED
    assert depth == apijson.MAX_DEPTH - 1  # the spec sits at 2; the container at MAX_DEPTH + 1 was cut


def test_every_deep_branch_is_cut_and_strings_are_never_mistaken_for_brackets() -> None:
    deep = nested(apijson.MAX_DEPTH + 5)
    doc = f'{{"x":[{deep},"{{[[not a bracket",{deep}],"y":"]]}}"}}'
    decoded = apijson.loads(doc)
    assert decoded["x"][1] == "{[[not a bracket" and decoded["y"] == "]]}"
    assert unwrap(decoded["x"][0])[1] == apijson.TRUNCATED and unwrap(decoded["x"][2])[1] == apijson.TRUNCATED


def test_bytes_str_and_bytearray_decode_alike() -> None:
    assert apijson.loads('{"a":"é"}') == apijson.loads('{"a":"é"}'.encode()) == \
        apijson.loads(bytearray('{"a":"é"}'.encode())) == {"a": "é"}


async def test_kopfs_client_decodes_answers_and_watch_lines_through_the_bound(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from kopf._cogs.clients import api

    class Response:
        async def json(self, *, loads: Any = json.loads) -> Any:
            return loads(nested(5_000))

    async def request(*_: Any, **__: Any) -> Response:
        return Response()

    monkeypatch.setattr(api, "request", request)
    monkeypatch.setattr(api, "json", json)
    kopfcompat.install_bounded_decoding()
    kopfcompat.install_bounded_decoding()  # idempotent
    response = await api.request("get", "/x", settings=None, logger=None)  # type: ignore[arg-type]
    assert unwrap(await response.json())[1] == apijson.TRUNCATED
    module_json: Any = api.json  # type: ignore[attr-defined]  # what api.stream decodes each line with
    assert unwrap(module_json.loads(nested(5_000)))[1] == apijson.TRUNCATED
    assert module_json.dumps({"a": 1}) == '{"a": 1}'


def test_check_passes_on_the_installed_kopf() -> None:
    kopfcompat.check()


async def test_restart_watches_ends_a_hung_watch_request_and_kopf_resumes_from_its_version(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """kopf's own continuous_watch over a scripted watch request that hangs (a connection that died
    silently): restart_watches ends it, and kopf watches again from the last resourceVersion it saw."""
    import asyncio

    import kopf
    from kopf._cogs.clients import fetching, watching

    since: list[str | None] = []

    async def fetch_objs(**_: Any) -> Any:
        yield [], "10"

    async def watch_objs(**kwargs: Any) -> Any:
        since.append(kwargs.get("since"))
        name = "a" if len(since) == 1 else "b"
        version = str(10 + len(since))
        yield {"type": "ADDED", "object": {"metadata": {"name": name, "resourceVersion": version}}}
        await asyncio.Event().wait()  # nothing more, ever

    monkeypatch.setattr(fetching, "fetch_objs", fetch_objs)
    monkeypatch.setattr(watching, "watch_objs", watch_objs)
    kopfcompat.install_watch_restarts()
    seen: list[str] = []
    arrived = asyncio.Event()

    async def consume() -> None:
        async for item in kopfcompat.infinite_watch(kopf.OperatorSettings(), group="x.io", version="v1",
                                                    plural="things", kind="Thing", namespaced=True,
                                                    namespace="ns"):
            if isinstance(item, dict):
                seen.append(item["object"]["metadata"]["name"])
                arrived.set()

    task = asyncio.create_task(consume())
    try:
        await asyncio.wait_for(arrived.wait(), 10)
        assert seen == ["a"]
        assert kopfcompat.restart_watches() == 1
        while len(seen) < 2:
            await asyncio.sleep(0.01)
        assert not task.done()  # the consumer's task was not cancelled: only the request ended
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert seen == ["a", "b"] and since == ["10", "11"]
