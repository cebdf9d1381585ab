"""Global batches: every sample once per epoch, rank shares that partition a batch, length buckets."""

from __future__ import annotations

import random
import statistics

import pytest

from stages.common.batches import GlobalBatches, TokenizedSample, collate

BATCH = 16


def sample(length: int, tag: int) -> TokenizedSample:
    # The first id tags the sample, so batches can be traced back to it.
    return TokenizedSample([tag] + [1] * (length - 1), [0] + [1] * (length - 1))


@pytest.fixture
def mixed_samples() -> list[TokenizedSample]:
    """Many short samples (20-60 tokens, like arith) and a few long ones (200-300, like search)."""
    rng = random.Random(3)
    lengths = [rng.randint(20, 60) for _ in range(960)] + [rng.randint(200, 300) for _ in range(160)]
    rng.shuffle(lengths)
    return [sample(length, tag) for tag, length in enumerate(lengths)]


def epoch_batches(batches: GlobalBatches, epoch: int) -> list[list[TokenizedSample]]:
    return [batches.for_step(epoch * batches.per_epoch + step, 0, 1) for step in range(batches.per_epoch)]


def test_an_epoch_uses_each_sample_at_most_once_in_full_batches(mixed_samples):
    batches = GlobalBatches(mixed_samples, BATCH, seed=0)
    tags = [s.input_ids[0] for batch in epoch_batches(batches, 0) for s in batch]
    assert all(len(batch) == BATCH for batch in epoch_batches(batches, 0))
    assert len(tags) == len(set(tags)) >= len(mixed_samples) - BATCH * batches.group_factor


def test_rank_shares_partition_the_global_batch(mixed_samples):
    batches = GlobalBatches(mixed_samples, BATCH, seed=0)
    whole = [s.input_ids[0] for s in batches.for_step(5, 0, 1)]
    shares = [s.input_ids[0] for rank in range(4) for s in batches.for_step(5, rank, 4)]
    assert shares == whole


def test_same_seed_same_batches_other_seed_other_batches(mixed_samples):
    def tags(seed):
        return [[s.input_ids[0] for s in batch] for batch in epoch_batches(GlobalBatches(mixed_samples, BATCH, seed), 1)]

    assert tags(0) == tags(0)
    assert tags(0) != tags(1)


def test_short_and_long_samples_are_not_padded_together(mixed_samples):
    batches = GlobalBatches(mixed_samples, BATCH, seed=0)
    mixed = [b for b in epoch_batches(batches, 0) if len({len(s.input_ids) >= 200 for s in b}) > 1]
    # At most the one batch straddling the boundary in each window of group_factor batches.
    windows = -(-batches.per_epoch // batches.group_factor)
    assert len(mixed) <= windows
    padded = sum(collate(b, 0).input_ids.numel() for b in epoch_batches(batches, 0))
    real = sum(len(s.input_ids) for b in epoch_batches(batches, 0) for s in b)
    assert padded < 1.6 * real


def test_lengths_inside_a_bucket_stay_shuffled(mixed_samples):
    """Sorting by exact length would give each batch near-identical samples, which trained far worse."""
    batches = GlobalBatches(mixed_samples, BATCH, seed=0)
    short = [b for b in epoch_batches(batches, 0) if all(len(s.input_ids) <= 60 for s in b)]
    spreads = [max(len(s.input_ids) for s in b) - min(len(s.input_ids) for s in b) for b in short]
    assert statistics.mean(spreads) > 20  # exact-length sorting gives about 1 here
