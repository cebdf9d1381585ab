"""Finite or nothing: configs refuse non-finite and out-of-range numbers naming the field, a trainer stops
on non-finite losses with a named error, and no checkpoint with a non-finite parameter is committed."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from infra.launch import StageFailed
from infra.store import open_store
from stages.grpo.config import ReasoningRlConfig
from stages.sft.config import SftConfig
from tests.sft_fixtures import run_sft, small_config

IO = dict(run_id="r", init_checkpoint="checkpoints/init", datasets=["datasets/d"])


@pytest.mark.parametrize("fields, named", [
    ({"optimizer": {"lr": float("inf")}}, "optimizer.lr"),
    ({"optimizer": {"lr": 1e30}}, "optimizer.lr"),
    ({"optimizer": {"weight_decay": float("inf")}}, "optimizer.weight_decay"),
    ({"optimizer": {"grad_clip": float("inf")}}, "optimizer.grad_clip"),
    ({"dsa": {"indexer_loss_weight": float("inf")}}, "dsa.indexer_loss_weight"),
    ({"optimizer": {"warmup_steps": 700}}, "warmup_steps 700 exceeds max_steps 600"),
])
def test_sft_configs_refuse_non_finite_and_out_of_range_numbers_naming_the_field(fields, named):
    with pytest.raises(ValidationError, match=named.replace(".", r"\.")):
        SftConfig(**IO, **fields)


def test_a_run_json_with_infinity_is_refused_before_any_job_starts():
    text = json.dumps({**IO, "optimizer": {"lr": "Infinity"}})
    with pytest.raises(ValidationError, match="optimizer.lr"):
        SftConfig.model_validate_json(text)
    with pytest.raises(ValidationError, match="sampling.temperature"):
        ReasoningRlConfig(**IO, sampling={"temperature": float("nan")})
    with pytest.raises(ValidationError, match="weight"):
        ReasoningRlConfig(**IO, rewards=[{"path": "rewards.verifiers.ArithExactMatch", "weight": float("inf")}])


@pytest.mark.parametrize("skips, says", [
    # Two NaN steps against a budget of one: the second stops the stage.
    (1, "sft step 2: non-finite loss nan (2 such step(s); optimizer.nonfinite_skips allows 1)"),
    # Every step skipped within the budget: the final commit finds the NaN weights and refuses them.
    (100, "parameter model.norm.weight is not finite; refusing to commit it"),
])
def test_non_finite_steps_stop_the_stage_and_nothing_non_finite_is_committed(small_store, nan_init, tmp_path,
                                                                               monkeypatch, skips, says):
    monkeypatch.chdir(tmp_path)
    config = small_config(small_store, f"nan-{skips}", init_checkpoint=nan_init,
                          optimizer={"lr": 3e-3, "warmup_steps": 2, "nonfinite_skips": skips})
    with pytest.raises(StageFailed) as failure:
        run_sft(config, tmp_path)
    assert says in str(failure.value)
    assert not open_store(small_store["root"]).is_committed(config.output_name)
