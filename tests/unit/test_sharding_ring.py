"""The consistent-hash ring (the hash, balance, minimal movement, hash ranges, versions) and the flags."""

from __future__ import annotations

import random
import re
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from ansible_operator.sharding.ring import SPACE, HashRing, fnv1a64, ring_version, shard_selector


def uids(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [str(uuid.UUID(int=rng.getrandbits(128), version=4)) for _ in range(n)]


def test_fnv1a64_is_the_standard_64_bit_fnv1a() -> None:
    # Go's hash/fnv New64a (what the API server's shardRange uses)
    assert fnv1a64("") == 0xCBF29CE484222325
    assert fnv1a64("a") == 0xAF63DC4C8601EC8C
    assert fnv1a64("foobar") == 0x85944171F73967E8


@pytest.mark.parametrize("seed", range(5))
def test_three_members_share_300_objects_within_30_percent(seed: int) -> None:
    ring = HashRing(["replica-a", "replica-b", "replica-c"])
    counts = Counter(ring.owner(u) for u in uids(300, seed))
    assert set(counts) == {"replica-a", "replica-b", "replica-c"}
    assert all(70 <= c <= 130 for c in counts.values()), counts


def test_a_member_joining_takes_objects_only_from_the_others_and_about_its_share() -> None:
    objects = uids(3000, 7)
    before = HashRing(["a", "b", "c"])
    after = HashRing(["a", "b", "c", "d"])
    moved = [u for u in objects if before.owner(u) != after.owner(u)]
    assert all(after.owner(u) == "d" for u in moved), "objects moved between members that stayed"
    assert 0.15 <= len(moved) / len(objects) <= 0.35  # about 1/4


def test_a_member_leaving_gives_away_only_its_own_objects() -> None:
    objects = uids(3000, 8)
    before = HashRing(["a", "b", "c"])
    after = HashRing(["a", "c"])
    for u in objects:
        if before.owner(u) != "b":
            assert after.owner(u) == before.owner(u)
        else:
            assert after.owner(u) in {"a", "c"}


def test_ranges_partition_the_hash_space_and_agree_with_owner() -> None:
    ring = HashRing(["a", "b", "c"], vnodes=20)
    spans = sorted((lo, hi, m) for m in ring.members for lo, hi in ring.ranges(m))
    assert spans[0][0] == 0 and spans[-1][1] == SPACE
    for (_, hi, _), (lo, _, _) in zip(spans, spans[1:]):
        assert hi == lo, "gap or overlap between ranges"
    rng = random.Random(3)
    for h in [0, SPACE - 1, *(rng.getrandbits(64) for _ in range(500))]:
        owner = ring.owner_of_hash(h)
        assert any(lo <= h < hi for lo, hi in ring.ranges(owner or "")), hex(h)


def test_ring_version_names_the_membership_whatever_the_order() -> None:
    assert ring_version(["b", "a"]) == ring_version(["a", "b"]) == HashRing(["a", "b", "a"]).version
    assert ring_version(["a", "b"]) != ring_version(["a", "b", "c"])
    # replicas that place objects differently never agree on a version (no run starts until they do)
    assert HashRing(["a", "b"], vnodes=100).version != HashRing(["a", "b"]).version
    assert HashRing([]).owner("x") is None
    with pytest.raises(ValueError):
        HashRing(["a"], vnodes=0)


def test_alike_names_spread_over_the_members_with_the_mixed_hash() -> None:
    from ansible_operator.sharding.ring import spread_hash

    ring = HashRing(["a", "b", "c"])
    names = [f"team-{i}" for i in range(60)]
    assert len({ring.owner(n) for n in names}) < 3  # plain FNV-1a: alike names share an arc
    counts = Counter(ring.owner_of_hash(spread_hash(n)) for n in names)
    assert set(counts) == {"a", "b", "c"} and all(c >= 10 for c in counts.values()), counts


def test_sharding_flags() -> None:
    import argparse

    from ansible_operator.cli import build_parser, finish_run_args

    def parse(*argv: str) -> argparse.Namespace:
        args = build_parser().parse_args(["run", *argv])
        finish_run_args(args.run_parser, args)
        return args

    assert parse().sharding is False
    args = parse("--sharding", "--shard-by=namespace", "--leader-elect-lease-duration=6s",
                 "--leader-elect-renew-deadline=4s", "--leader-elect-retry-period=1s")
    assert args.sharding is True and args.shard_by == "namespace" and args.leader_elect is False
    assert parse("--sharding", "--shard-selector").shard_selector is True
    assert parse("--sharding", "--shard-label", "--shard-by=namespace").shard_label is True
    for bad in (["--sharding", "--leader-elect"],
                ["--sharding", "--leader-elect-lease-duration=5s", "--leader-elect-renew-deadline=5s"],
                ["--sharding", "--leader-elect-renew-deadline=2s", "--leader-elect-retry-period=2s"],
                ["--shard-selector"], ["--sharding", "--shard-selector", "--shard-by=namespace"],
                ["--shard-label"], ["--sharding", "--shard-label", "--shard-selector"]):
        with pytest.raises(SystemExit):
            parse(*bad)


def test_sharding_needs_the_lease_namespace_out_of_a_cluster(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from ansible_operator.cli import main

    role = tmp_path / "roles" / "noop" / "tasks"
    role.mkdir(parents=True)
    (role / "main.yml").write_text("- debug: msg=hi\n")
    watches = tmp_path / "watches.yaml"
    watches.write_text(f"- {{group: x.example.com, version: v1, kind: X, role: {role.parent}}}\n")
    monkeypatch.setenv("ANSIBLE_OPERATOR_SERVICE_ACCOUNT_DIR", str(tmp_path / "serviceaccount"))
    assert main(["run", "--watches-file", str(watches), "--sharding"]) == 2
    err = capsys.readouterr().err
    assert "--sharding: unable to find the leader election namespace" in err and "Traceback" not in err


_SHARD_RANGE = re.compile(r"shardRange\(object\.metadata\.uid, '(0x[0-9a-f]+)', '(0x[0-9a-f]+)'\)")


def _parse_bound(text: str) -> int:
    """The API server's rule (k8s.io/apiserver/pkg/sharding/parser.go): exactly 16 hex digits after 0x,
    or 0x10000000000000000 (2^64, the exclusive end of the space)."""
    digits = text[2:]
    assert len(digits) == 16 or text == "0x10000000000000000", text
    return int(digits, 16)


def test_shard_selectors_of_all_members_cover_the_space_once_and_match_owner() -> None:
    ring = HashRing(["a", "b", "c"])
    spans = []
    for member in ring.members:
        selector = shard_selector(ring.ranges(member))
        assert selector is not None
        terms = selector.split(" || ")
        assert all(_SHARD_RANGE.fullmatch(t) for t in terms), terms[:2]
        mine = [(_parse_bound(lo), _parse_bound(hi)) for lo, hi in _SHARD_RANGE.findall(selector)]
        assert mine == ring.ranges(member)
        spans += mine
    spans.sort()
    assert spans[0][0] == 0 and spans[-1][1] == SPACE
    assert all(prev[1] == nxt[0] for prev, nxt in zip(spans, spans[1:]))


def test_shard_selector_of_one_member_is_the_whole_space_and_of_none_is_none() -> None:
    ring = HashRing(["only"])
    assert shard_selector(ring.ranges("only")) == (
        "shardRange(object.metadata.uid, '0x0000000000000000', '0x10000000000000000')")
    assert shard_selector(ring.ranges("not-a-member")) is None


def owns_by_uid(identity: str):  # type: ignore[no-untyped-def]
    def owns(cache, key, ring) -> bool:  # type: ignore[no-untyped-def]
        uid = cache.uid(key)
        return uid is not None and ring.owner(uid) == identity
    return owns


def test_server_side_shards_follow_the_rings_we_are_in() -> None:
    from ansible_operator.intake import ObjectCache
    from ansible_operator.queue import ObjectKey
    from ansible_operator.sharding.serverside import ServerSideShards

    cache = ObjectCache()
    calls: list[tuple[str, str]] = []
    shards = ServerSideShards("a", ["w"], lambda w, sel: calls.append((w, sel)), owns=owns_by_uid("a"))
    shards.start()  # before the first ring: (in practice) nothing, not every object
    assert calls == [("w", "shardRange(object.metadata.uid, '0x0000000000000000', '0x0000000000000001')")]
    calls.clear()
    both = HashRing(["a", "b"])
    shards.on_ring(both)
    assert calls == [("w", shard_selector(both.ranges("a")))]
    shards.on_ring(HashRing(["b", "a"]))  # the same ring: nothing to do
    shards.on_ring(HashRing(["b"]))  # not ours (our Lease lapsed): keep the last selector
    assert len(calls) == 1 and shards.selector == shard_selector(both.ranges("a"))
    uids = [str(uuid.UUID(int=random.Random(7).getrandbits(128) + i)) for i in range(40)]
    for i, uid in enumerate(uids):
        cache.store(ObjectKey("ns", f"o{i}"), {"metadata": {"name": f"o{i}", "uid": uid}}, ("fp",))  # type: ignore[arg-type]
    selector = shards.selector
    assert selector is not None
    for i, uid in enumerate(uids):
        assert shards.outside(cache, ObjectKey("ns", f"o{i}"), selector) == (both.owner(uid) != "a")
    # a selector not remembered: whatever is missing from its listing is only dropped, never "deleted"
    assert shards.outside(cache, ObjectKey("ns", "o0"), "shardRange(...)")


# ---- --shard-label: buckets ---------------------------------------------------------------------------


def test_buckets_partition_and_balance_and_agree_with_bucketed_positions() -> None:
    """Every bucket has one owner; with 3 members each owns 85 ± 30 %; an object's bucketed position
    has the owner of its bucket, named by its label value; a new member takes buckets only from others."""
    from ansible_operator.sharding.ring import BUCKETS, bucket_label, bucket_selector, position

    ring = HashRing(["a", "b", "c"])
    owned = {m: ring.buckets(m) for m in ring.members}
    assert sorted(b for bs in owned.values() for b in bs) == list(range(BUCKETS))
    assert all(0.7 * BUCKETS / 3 <= len(bs) <= 1.3 * BUCKETS / 3 for bs in owned.values()), owned
    for uid in uids(300, 3):
        owner = ring.owner_of_hash(position(uid, "uid", bucketed=True))
        assert owner is not None and int(bucket_label(uid, "uid"), 16) in owned[owner]
        assert bucket_label(uid, "uid") == f"{fnv1a64(uid) >> 56:02x}"
    bigger = HashRing(["a", "b", "c", "d"])
    for m in ring.members:
        assert set(bigger.buckets(m)) <= set(owned[m])
    assert bucket_selector("k", [3, 1]) == "k in (01,03)"
    assert bucket_selector("k", range(BUCKETS)) == "k"
    assert bucket_selector("k", []) is None


def test_label_shards_select_buckets_and_tell_moves_from_deletions() -> None:
    """--shard-label: the selector names our buckets; a cached object missing from a listing is outside
    (moved) when another replica owns it or when it did not carry its bucket label (it comes back labelled);
    a DELETED event is checked by the labeller; a wrong bucket label is relabelled."""
    from ansible_operator.intake import ObjectCache
    from ansible_operator.queue import ObjectKey
    from ansible_operator.sharding.ring import position
    from ansible_operator.sharding.serverside import SHARD_LABEL, BucketLabels, ServerSideShards

    labels = BucketLabels("uid")

    def owns(cache, key, ring) -> bool:  # type: ignore[no-untyped-def]
        return ring.owner_of_hash(position(cache.uid(key), "uid", bucketed=True)) == "a"

    narrowed: list[str] = []
    relabelled: list[str] = []
    verified: list[str] = []

    class Labeller:
        def request(self, obj) -> None:  # type: ignore[no-untyped-def]
            relabelled.append(obj["metadata"]["name"])

        def verify(self, obj, gone) -> None:  # type: ignore[no-untyped-def]
            verified.append(obj["metadata"]["name"])

    shards = ServerSideShards("a", ["w"], lambda w, sel: narrowed.append(sel), owns=owns, labels=labels,
                              labellers={"w": Labeller()})
    ring = HashRing(["a", "b"])
    unlabelled: Any = {"metadata": {"name": "x", "uid": uids(1, 9)[0]}}
    assert not shards.left("w", unlabelled, lambda: None)  # not narrowed yet: every DELETED is a deletion
    shards.start()
    assert narrowed == [f"{SHARD_LABEL} in (none)"]
    narrowed.clear()
    shards.on_ring(ring)
    mine = {f"{b:02x}" for b in ring.buckets("a")}
    assert narrowed == [f"{SHARD_LABEL} in ({','.join(sorted(mine))})"]
    cache = ObjectCache()
    objs = []
    for i, uid in enumerate(uids(40, 11)):
        obj = {"metadata": {"name": f"o{i}", "uid": uid,
                            "labels": {SHARD_LABEL: labels.expected({"metadata": {"uid": uid}})}}}
        if i % 2:
            del obj["metadata"]["labels"]  # type: ignore[attr-defined]
        cache.store(ObjectKey("ns", f"o{i}"), obj, ("fp",))  # type: ignore[arg-type]
        objs.append(obj)
    for i, obj in enumerate(objs):
        key = ObjectKey("ns", f"o{i}")
        ours = labels.owner(ring, obj) == "a"  # type: ignore[arg-type]
        assert shards.outside(cache, key, narrowed[0]) == (not ours or bool(i % 2)), (i, ours)
    # a DELETED event may be a label change (the watch sends the object as it was): the labeller asks;
    # one with a deletionTimestamp is a deletion
    assert shards.left("w", objs[0], lambda: None) and verified == ["o0"]  # type: ignore[arg-type]
    deleting = {"metadata": {**objs[0]["metadata"], "deletionTimestamp": "2026-11-28T00:00:00Z"}}  # type: ignore[dict-item]
    assert not shards.left("w", deleting, lambda: None) and verified == ["o0"]  # type: ignore[arg-type]
    wrong = {"metadata": {"name": "w", "uid": uids(1, 5)[0], "labels": {SHARD_LABEL: "zz"}}}
    shards.seen("w", wrong)  # type: ignore[arg-type]
    assert relabelled == []  # not a bucket: the labeller's listing (notin every bucket) finds it
    expected = labels.expected(wrong)  # type: ignore[arg-type]
    other = f"{(int(expected or '0', 16) + 1) % 256:02x}"
    relabel: Any = {"metadata": {**wrong["metadata"], "labels": {SHARD_LABEL: other}}}
    shards.seen("w", relabel)
    assert relabelled == ["w"]
    assert labels.unlabelled_selector().startswith(f"{SHARD_LABEL} notin (00,01,")


def test_bucket_labels_by_namespace_follow_the_coordinators_placement() -> None:
    """--shard-label --shard-by namespace: a namespaced object's bucket is its namespace's (mixed hash);
    a cluster-scoped one goes by its uid, as the coordinator places it."""
    from ansible_operator.sharding.ring import position, spread_hash
    from ansible_operator.sharding.serverside import BucketLabels

    labels = BucketLabels("namespace")
    ring = HashRing(["a", "b", "c"])
    for i, uid in enumerate(uids(50, 21)):
        namespaced: Any = {"metadata": {"name": "x", "namespace": f"team-{i}", "uid": uid}}
        cluster_scoped: Any = {"metadata": {"name": "x", "uid": uid}}
        assert labels.expected(namespaced) == f"{spread_hash(f'team-{i}') >> 56:02x}"
        assert labels.owner(ring, namespaced) == ring.owner_of_hash(position(f"team-{i}", "namespace", True))
        assert labels.expected(cluster_scoped) == f"{spread_hash(uid) >> 56:02x}"
        assert labels.owner(ring, cluster_scoped) == ring.owner_of_hash(position(uid, "namespace", True))
