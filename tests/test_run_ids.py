"""A stage's run id names what determines its result: config, inputs and the trainer's code."""

from __future__ import annotations

import flows.pipeline as pipeline
from data_contracts.lineage import source_digest
from flows.params import PipelineParams

PREPARED = {"stages": {"sft": ["file:///s/datasets/arith-1", "file:///s/datasets/calc-1",
                               "file:///s/datasets/instruct-1", "file:///s/datasets/search-1"]},
            "init_checkpoint": "file:///s/checkpoints/init/glm5-tiny-1"}


def test_source_digest_is_stable_and_covers_what_it_names():
    assert source_digest("stages", "model") == source_digest("stages", "model")
    assert source_digest("stages") != source_digest("model")


def test_run_id_follows_config_inputs_and_code_but_not_the_store():
    _, spec, _ = PipelineParams(preset="smoke").load_spec()
    base = pipeline.sft_config(spec, PREPARED).run_id
    assert pipeline.sft_config(spec.model_copy(update={"store": "s3://elsewhere"}), PREPARED).run_id == base
    assert pipeline.sft_config(spec.model_copy(update={"seed": 1}), PREPARED).run_id != base
    other_init = dict(PREPARED, init_checkpoint="file:///s/checkpoints/init/glm5-tiny-2")
    assert pipeline.sft_config(spec, other_init).run_id != base
    assert pipeline.sft_config(spec, PREPARED, trainer_code=source_digest(*pipeline.TRAINER_CODE)).run_id == base
    assert "suites" in pipeline.TRAINER_CODE  # tool results and answer checks decide RL results too
    assert pipeline.sft_config(spec, PREPARED, trainer_code="an edited trainer").run_id != base
