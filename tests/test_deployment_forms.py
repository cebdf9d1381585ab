"""What the UI's Run form shows for each deployment: a description for the flow, for each of its parameters and
for every field of every settings model in it (Prefect builds the form from these schemas)."""

import pytest
from prefect.utilities.callables import parameter_schema

from flows.serve import FLOWS


@pytest.mark.parametrize("name", sorted(FLOWS))
def test_every_field_of_the_form_says_what_it_sets(name):
    flow = FLOWS[name]
    assert flow.description and flow.description != "None"
    schema = parameter_schema(flow.fn).model_dump()
    undescribed = [f"{name}.{parameter}" for parameter, field in schema["properties"].items()
                   if not field.get("description")]
    undescribed += [f"{model}.{field_name}" for model, definition in schema.get("definitions", {}).items()
                    for field_name, field in definition.get("properties", {}).items() if not field.get("description")]
    assert undescribed == []
