"""The one table of stages (flows/stage_table.py): each row is a stage the pipeline can run, serve and teach with,
and the lists the rest of the project keeps are the table's."""

import inspect
import typing

from flows.params import PipelineParams
from flows.serve import FLOWS
from flows.spec import SPEC_DIR, StagesSpec, load_spec
from flows.stage_table import STAGES, STEPS, TEACHERS
from flows.teacher_domains import HEADLINE, DistillEvalSettings


def test_each_row_names_a_flow_that_runs_its_config_and_is_served():
    for stage in STAGES:
        flow = stage.load_flow()
        config = next(iter(inspect.signature(flow.fn).parameters.values()))
        assert typing.get_type_hints(flow.fn)[config.name] is stage.config, stage.name
        assert FLOWS[flow.name] is flow
    assert set(FLOWS) == {stage.load_flow().name for stage in STAGES} | {"pipeline"}


def test_the_spec_the_options_and_distillation_follow_the_table():
    assert list(StagesSpec.model_fields) == [stage.name for stage in STAGES]
    assert typing.get_args(PipelineParams.model_fields["from_stage"].annotation)[0] == typing.Literal[STEPS]
    assert "orm" not in STEPS and "sft" in TEACHERS  # the ORM runs in general RL's step; SFT teaches (GLM-5)
    # Every teacher's domain can be measured and judged: its stage's evaluation settings, and a headline.
    domains = {name: typing.get_args(field.type)[0] for name, field in DistillEvalSettings.__dataclass_fields__.items()
               if name in TEACHERS}  # Annotated[settings, its description in the form]
    assert domains == {stage.name: stage.evaluation for stage in STAGES if stage.teaches}
    assert all(evaluation in HEADLINE for evaluation in domains.values())


def test_sft_teaches_where_a_spec_gives_it_a_share():
    tiny, smoke = (load_spec(SPEC_DIR / f"{name}.yaml")[0] for name in ("tiny", "smoke"))
    assert tiny.teacher_stages() == ["reasoning_rl", "agentic_rl", "general_rl"]  # the table's share for SFT is 0
    assert smoke.teacher_stages() == ["sft", "reasoning_rl", "agentic_rl", "general_rl"]  # shares: {sft: 1}
    assert (tiny.teacher_share("reasoning_rl"), smoke.teacher_share("sft")) == (8, 1)
