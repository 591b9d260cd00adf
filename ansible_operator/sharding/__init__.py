"""Active/active sharding across replicas (``run --sharding``): every replica runs the objects a
consistent-hash ring gives it, and hands them over without two replicas ever running one object.

* :mod:`.ring`: the hash ring (FNV-1a of the uid, virtual nodes), pure;
* :mod:`.membership`: members from their Leases, the drained-version hand-over protocol, pure;
* :mod:`.leases`: a replica's own Lease and the listing of the ring's, through the runner's client;
* :mod:`.coordinator`: the loop tying them to the work queues;
* :mod:`.serverside`: with ``--shard-selector``, the API server's sharded list and watch narrowed to our
  shard on every ring.

The how-to is docs/how-to/run-replicas-with-sharding.md.
"""
