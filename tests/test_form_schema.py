"""The deployments' forms draw each optional field as its one type: no 'Property is type "None"' buttons, a wrong
value refused by the field's own rule, and a field left empty is left out and takes the config's default."""

import json

import jsonschema
import pytest
from prefect.utilities.callables import parameter_schema

from flows.form_schema import for_the_form
from flows.params import PipelineParams
from flows.serve import FLOWS
from stages.evaluation.settings import SampledEvalSettings, with_run_seed
from stages.grpo.config import ReasoningRlConfig


@pytest.mark.parametrize("name", sorted(FLOWS))
def test_no_field_of_any_form_offers_none_nor_defaults_to_it(name):
    raw = parameter_schema(FLOWS[name]).model_dump()
    assert '{"type": "null"}' in json.dumps(raw)  # what pydantic writes, and the form drew as a None button
    shaped = json.dumps(for_the_form(raw))
    assert '"type": "null"' not in shaped and "null" not in shaped


def test_an_optional_field_is_its_type_and_a_wrong_value_is_refused_by_its_own_rule():
    schema = for_the_form(parameter_schema(FLOWS["reasoning_rl"]).model_dump())
    fields = schema["definitions"]["ComputeSettings"]["properties"]
    assert {key: fields["micro_batch_size"][key] for key in ("type", "minimum")} == {"type": "integer", "minimum": 1}
    assert "default" not in fields["micro_batch_size"] and fields["micro_batch_size"]["title"] == "Micro Batch Size"
    # A union of real types keeps its buttons: the four launch targets.
    assert len(schema["definitions"]["ReasoningRlConfig"]["properties"]["launch"]["anyOf"]) == 4
    # An optional settings object is the object; its default (what the form fills in) has no Nones.
    assert schema["properties"]["eval_settings"]["$ref"] == "#/definitions/SampledEvalSettings"
    assert "router_url" not in schema["definitions"]["ReasoningRlConfig"]["properties"]["engines"]["default"]

    config = {"init_checkpoint": "sft:latest", "datasets": ["arith:latest"]}
    validator = jsonschema.Draft202012Validator(schema | {"$defs": schema["definitions"]})
    wrong = {"config": config | {"compute": {"micro_batch_size": -2}}}
    (error,) = validator.iter_errors(wrong)
    assert list(error.absolute_path) == ["config", "compute", "micro_batch_size"]
    assert error.message == "-2 is less than the minimum of 1"
    # Left empty, a field is left out: the schema accepts it and the config takes its default.
    assert not list(validator.iter_errors({"config": config}))
    assert ReasoningRlConfig.model_validate(config).compute.micro_batch_size is None


def test_the_pipeline_spec_is_a_multi_line_editor():
    schema = for_the_form(parameter_schema(FLOWS["pipeline"]).model_dump())
    spec = schema["definitions"]["PipelineParams"]["properties"]["spec"]
    assert spec["type"] == "string" and spec["format"] == "json-string"  # the form's code editor
    text = "name: mine\nseed: 3\n"
    assert PipelineParams(spec=text).spec == text


def test_evaluation_settings_left_without_a_seed_take_the_run_s():
    assert SampledEvalSettings().seed is None
    assert with_run_seed(SampledEvalSettings(), 7).seed == 7
    assert with_run_seed(SampledEvalSettings(seed=3), 7).seed == 3
