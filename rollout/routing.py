"""Which engine replica serves a rollout: consistent hashing of the rollout id, with bounded loads.

Every turn of one rollout goes to the same replica, so the replica's prefix cache holds the episode
so far (SPEC "DP-aware routing"). Plain consistent hashing can pile many long rollouts onto one
replica; bounding each replica's share of the in-flight rollouts to `load_factor` times the mean
(consistent hashing with bounded loads, Mirrokni et al. 2018) keeps them even while moving as few
rollouts as possible: a new rollout whose home replica is full walks on around the ring.
"""

from __future__ import annotations

import bisect
import hashlib
import math
from collections import Counter


def ring_hash(key: str) -> int:
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big")


class ConsistentHashRouter:
    def __init__(self, replicas=(), *, virtual_nodes: int = 64, load_factor: float = 1.25):
        if load_factor < 1:
            raise ValueError(f"load_factor must be at least 1, got {load_factor}")
        self.virtual_nodes, self.load_factor = virtual_nodes, load_factor
        self._ring: list[tuple[int, str]] = []
        self._assigned: dict[str, str] = {}  # in-flight rollout id → replica
        self.load: Counter[str] = Counter()
        for replica in replicas:
            self.add(replica)

    @property
    def replicas(self) -> list[str]:
        return sorted({replica for _, replica in self._ring})

    def add(self, replica: str) -> None:
        if replica in self.replicas:
            return
        for i in range(self.virtual_nodes):
            bisect.insort(self._ring, (ring_hash(f"{replica}#{i}"), replica))
        self.load.setdefault(replica, 0)

    def remove(self, replica: str) -> list[str]:
        """Take a replica out; returns the in-flight rollouts it held (they route anew on their next turn)."""
        self._ring = [(point, r) for point, r in self._ring if r != replica]
        orphans = [rollout for rollout, r in self._assigned.items() if r == replica]
        for rollout in orphans:
            del self._assigned[rollout]
        self.load.pop(replica, None)
        return orphans

    def capacity(self) -> int:
        """The most in-flight rollouts one replica may hold now (counting the one being placed)."""
        return math.ceil(self.load_factor * (sum(self.load.values()) + 1) / len(self.replicas))

    def route(self, rollout_id: str) -> str:
        """The replica for this rollout's next request: where it already runs, else the first one
        clockwise from its hash that is under capacity."""
        if rollout_id in self._assigned:
            return self._assigned[rollout_id]
        if not self._ring:
            raise LookupError("no engine replica is available")
        limit = self.capacity()
        start = bisect.bisect(self._ring, (ring_hash(rollout_id), ""))
        for offset in range(len(self._ring)):
            replica = self._ring[(start + offset) % len(self._ring)][1]
            if self.load[replica] < limit:
                break
        self._assigned[rollout_id] = replica
        self.load[replica] += 1
        return replica

    def release(self, rollout_id: str) -> None:
        """The rollout finished: its replica's slot frees up."""
        replica = self._assigned.pop(rollout_id, None)
        if replica is not None:
            self.load[replica] -= 1

    def home(self, rollout_id: str) -> str:
        """Where plain consistent hashing (no load bound) puts this id: what stays stable as replicas come and go."""
        start = bisect.bisect(self._ring, (ring_hash(rollout_id), ""))
        return self._ring[start % len(self._ring)][1]
