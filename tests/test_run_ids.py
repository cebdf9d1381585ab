"""A stage's run id names what determines its result: config, inputs and the trainer's code."""

from __future__ import annotations

from data_contracts.lineage import source_digest
from flows.params import PipelineParams
from flows.stage_configs import TRAINER_CODE, stage_config

PREPARED = {"stages": {"sft": ["file:///s/datasets/arith-1", "file:///s/datasets/calc-1",
                               "file:///s/datasets/instruct-1", "file:///s/datasets/search-1"]},
            "init_checkpoint": "file:///s/checkpoints/init/glm5-tiny-1"}


def sft_config(spec, prepared: dict, trainer_code: str | None = None):
    return stage_config(spec, "sft", prepared, prepared["init_checkpoint"], trainer_code)


def test_source_digest_is_stable_and_covers_what_it_names():
    assert source_digest("stages", "model") == source_digest("stages", "model")
    assert source_digest("stages") != source_digest("model")


def test_run_id_follows_config_inputs_and_code_but_not_the_store():
    _, spec, _ = PipelineParams(preset="smoke").load_spec()
    base = sft_config(spec, PREPARED).run_id
    assert sft_config(spec.model_copy(update={"store": "s3://elsewhere"}), PREPARED).run_id == base
    assert sft_config(spec.model_copy(update={"seed": 1}), PREPARED).run_id != base
    other_init = dict(PREPARED, init_checkpoint="file:///s/checkpoints/init/glm5-tiny-2")
    assert sft_config(spec, other_init).run_id != base
    assert sft_config(spec, PREPARED, trainer_code=source_digest(*TRAINER_CODE)).run_id == base
    # Tool results and answer checks decide RL results too: the suites' code is part of the digest.
    assert source_digest(*TRAINER_CODE) != source_digest(*(part for part in TRAINER_CODE if part != "suites"))
    assert sft_config(spec, PREPARED, trainer_code="an edited trainer").run_id != base
