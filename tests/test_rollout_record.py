"""The rollout record on a real store, without a trainer: whole groups kept at a sampling rate, one shard per
step named by its content, and a resumed record that lists each step once."""

from data_contracts.lineage import Lineage
from infra.rollouts import recorded_shards
from infra.store import open_store
from stages.common.config import RolloutRecordSettings
from stages.common.distributed import Dist
from stages.common.events import EventLog
from stages.common.rollout_record import RolloutRecord, recorded


def rows(step: int, groups: int, size: int = 2) -> list[dict]:
    return [{"sample_id": f"s{step}-g{g}-{i}", "group_id": f"step-{step}/group-{g}", "session_id": f"s{step}-g{g}-{i}",
             "prompt_id": f"p{g}", "task": "arith", "prompt_ids": [1, 2], "response_ids": [3, 4 + i], "loss_mask": [1, 1],
             "rollout_logprobs": [-0.5, -1.0], "weight_versions": [step - 1], "reward": float(i), "status": "ok",
             "advantage": i - 0.5} for g in range(groups) for i in range(size)]


def record(store, tmp_path, sample_rate: float) -> RolloutRecord:
    return RolloutRecord(store, RolloutRecordSettings(sample_rate=sample_rate, show_every=0), stage="reasoning_rl",
                         prefix="checkpoints/reasoning_rl/r-rollouts/", template=Lineage(kind="checkpoint", name="r"),
                         dist=Dist(0, 1, 0), scratch=tmp_path / "scratch", events=EventLog(False), tokenizer=None)


def test_a_sampling_rate_keeps_whole_groups_the_same_whichever_run_draws_them(tmp_path):
    store = open_store(str(tmp_path / "store"))
    half = record(store, tmp_path, 0.5)
    metrics = half.write(1, rows(1, groups=40))
    kept = [r["group_id"] for r in rows(1, groups=40) if recorded(r["group_id"], 0.5)]
    assert 10 < len(kept) / 2 < 30 and metrics["recorded_samples"] == len(kept) and metrics["recorded_bytes"] > 0
    assert record(store, tmp_path, 0.0).write(2, rows(2, groups=40))["recorded_samples"] == 0
    half.write(3, rows(3, groups=4))
    half.close()
    checkpoint = store.begin("checkpoints/reasoning_rl/r")
    checkpoint.put_bytes("weights.bin", b"w")
    checkpoint = checkpoint.commit(Lineage(kind="checkpoint", name="r", inputs=half.inputs(3)).to_bytes())
    (shard, *later) = recorded_shards(checkpoint)
    table = shard.table().to_pylist()
    assert [row["group_id"] for row in table] == kept and {row["step"] for row in table} == {1}
    assert all(s.step == 3 for s in later)  # step 2 kept nothing, so it has no shard


def test_a_resumed_record_lists_each_step_once_and_a_step_trained_again_alike_dedupes(tmp_path):
    store = open_store(str(tmp_path / "store"))
    first = record(store, tmp_path, 1.0)
    for step in (1, 2, 3):
        first.write(step, rows(step, groups=2))
    first.drain()
    state = {step: names for step, names in first.state().items() if int(step) <= 2}  # resumed from step 2

    again = record(store, tmp_path, 1.0)
    again.restore(state)
    again.write(3, rows(3, groups=2))  # the same samples: the same content, the same shard
    again.write(4, rows(4, groups=3))
    inputs = again.inputs(4)
    again.close()
    assert [i.rows for i in inputs] == [4, 4, 4, 6] and len({i.uri for i in inputs}) == 4
    assert inputs[2].uri == store.open(first.shards[3][0]).uri
    assert len(store.list_committed("checkpoints/reasoning_rl/r-rollouts/")) == 4
