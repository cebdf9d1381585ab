"""Consistent-hash routing of rollouts to engine replicas: sticky, stable, and evenly loaded."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rollout.routing import ConsistentHashRouter

REPLICAS = [f"http://127.0.0.1:{9000 + i}" for i in range(4)]


def test_every_turn_of_a_rollout_goes_to_the_same_replica():
    router = ConsistentHashRouter(REPLICAS)
    first = {f"r{i}": router.route(f"r{i}") for i in range(40)}
    assert all(router.route(rollout) == replica for rollout, replica in first.items())
    assert sum(router.load.values()) == 40  # a repeated turn is not a new rollout


def test_removing_a_replica_moves_only_the_rollouts_it_held():
    router = ConsistentHashRouter(REPLICAS)
    homes = {f"r{i}": router.home(f"r{i}") for i in range(2000)}
    router.remove(REPLICAS[0])
    moved = {rollout for rollout, home in homes.items() if router.home(rollout) != home}
    assert moved == {rollout for rollout, home in homes.items() if home == REPLICAS[0]}
    router.add(REPLICAS[0])  # re-admitted: the same ids come home again
    assert all(router.home(rollout) == home for rollout, home in homes.items())


def test_a_removed_replica_gives_back_its_rollouts_and_no_new_ones_reach_it():
    router = ConsistentHashRouter(REPLICAS)
    held = [f"r{i}" for i in range(60) if router.route(f"r{i}") == REPLICAS[1]]
    assert held and sorted(router.remove(REPLICAS[1])) == sorted(held)
    assert all(router.route(rollout) != REPLICAS[1] for rollout in held)
    with pytest.raises(LookupError, match="no engine replica"):
        ConsistentHashRouter().route("r0")


@settings(max_examples=50, deadline=None)
@given(count=st.integers(1, 400), replicas=st.integers(1, 6), factor=st.sampled_from([1.0, 1.25, 1.5]))
def test_no_replica_holds_more_than_its_bounded_share(count, replicas, factor):
    router = ConsistentHashRouter([f"e{i}" for i in range(replicas)], load_factor=factor)
    for i in range(count):
        router.route(f"rollout-{i}")
        assert max(router.load.values()) <= router.capacity()
    # Bounded load: within ceil(c · mean) of the mean, whatever the hash does.
    assert max(router.load.values()) <= -(-factor * count // replicas) + 1


def test_finished_rollouts_free_their_slot():
    router = ConsistentHashRouter(REPLICAS[:2], load_factor=1.0)
    for i in range(10):
        router.route(f"r{i}")
    assert sorted(router.load.values()) == [5, 5]
    for i in range(10):
        router.release(f"r{i}")
    assert sum(router.load.values()) == 0
