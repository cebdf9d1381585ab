"""Stage configs composed of shared settings: a partial nested value keeps the stage's own defaults,
the form's schema shows them, and presets are built from the same typed recipes."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from flows.params import PipelineParams
from flows.spec import SPEC_DIR, load_spec, recipe_fields
from stages.agentic.config import AgenticRlConfig
from stages.distill.config import DistillConfig
from stages.grpo.config import GeneralRlConfig, ReasoningRlConfig
from stages.orm.config import TrainOrmConfig
from stages.sft.config import SftConfig

IO = dict(run_id="r", init_checkpoint="checkpoints/init", datasets=["datasets/d"])


def test_a_partial_nested_value_keeps_the_stages_own_defaults():
    sft = SftConfig(**IO, optimizer={"warmup_steps": 2}, heldout={"every": 50})
    assert (sft.optimizer.lr, sft.optimizer.warmup_steps) == (3e-3, 2)  # SFT's lr, not OptimizerSettings'
    assert (sft.heldout.every, sft.heldout.samples) == (50, 128)
    assert TrainOrmConfig(**IO, heldout={"every": 10}).heldout.batch_size == 64
    agentic = AgenticRlConfig(**IO, episode={"max_turns": 2}, optimizer={"lr": 1e-3})
    assert (agentic.episode.max_turns, agentic.episode.max_context, agentic.optimizer.warmup_steps) == (2, 1024, 2)


STAGE_CONFIGS = (SftConfig, TrainOrmConfig, ReasoningRlConfig, GeneralRlConfig, AgenticRlConfig, DistillConfig)
TEACHER = {"teachers": [{"source": "reasoning_rl", "checkpoint": "c", "datasets": ["datasets/d"]}]}


@pytest.mark.parametrize("config_type", STAGE_CONFIGS, ids=lambda c: c.__name__)
def test_every_stage_fills_a_partial_nested_value_from_its_own_defaults(config_type):
    """Every nested settings model of every stage, given one of its fields only, keeps the stage's values for
    the rest, and a launch without `kind` keeps the default local one (a subclass validator that shadowed the
    recipe's filler made RL stages refuse `launch: {nproc: 2}` and take class defaults)."""
    io = IO | (TEACHER if config_type is DistillConfig else {})
    default = config_type(**io)
    assert config_type(**io, launch={"nproc": 2}).launch.nproc == 2
    for name in config_type.model_fields:
        value = getattr(default, name)
        if name in ("launch", "provenance") or not hasattr(value, "model_fields"):
            continue
        first = next(iter(type(value).model_fields))
        partial = config_type(**io, **{name: {first: getattr(value, first)}})
        assert getattr(partial, name) == value, f"{config_type.__name__}.{name}"


def test_the_forms_schema_shows_each_stages_defaults():
    assert SftConfig.model_json_schema()["properties"]["optimizer"]["default"]["lr"] == 3e-3
    assert TrainOrmConfig.model_json_schema()["properties"]["optimizer"]["default"]["lr"] == 3e-4
    assert list(SftConfig.model_fields)[:4] == ["run_id", "store", "init_checkpoint", "datasets"]


def test_nested_settings_are_validated_and_anchors_belong_to_general_rl():
    with pytest.raises(ValidationError, match="optimizer.lr"):
        SftConfig(**IO, optimizer={"lr": -1})
    with pytest.raises(ValidationError, match="episode.max_turns"):
        AgenticRlConfig(**IO, episode={"max_turns": 0})
    assert GeneralRlConfig(**IO, anchors={"enabled": True}).anchors.min_weight == 0.05
    with pytest.raises(ValidationError, match="anchors"):
        ReasoningRlConfig(**IO, anchors={"enabled": True})


def test_each_stage_names_its_default_rewards_when_the_config_names_none():
    assert [r.path for r in ReasoningRlConfig(**IO).rewards] == ["rewards.verifiers.ArithExactMatch"]
    assert [r.path for r in GeneralRlConfig(**IO).rewards] == ["rewards.mix.MixedReward"]


def test_every_preset_recipe_makes_a_valid_stage_config():
    configs = {"sft": SftConfig, "reasoning_rl": ReasoningRlConfig, "agentic_rl": AgenticRlConfig,
               "orm": TrainOrmConfig, "general_rl": GeneralRlConfig}
    presets = sorted(SPEC_DIR.glob("*.yaml"))
    assert {path.stem for path in presets} >= {"smoke", "tiny", "small"}
    for path in presets:
        spec, _ = load_spec(path)
        for stage, config_type in configs.items():
            section = getattr(spec.stages, stage)
            if section is not None:
                assert config_type(**IO, **recipe_fields(section)).max_steps == section.max_steps


@pytest.mark.parametrize("path, reason", [
    ("subprocess.Popen", "not from an allowed origin"),
    ("builtins.eval", "not from an allowed origin"),
    ("rewards.verifiers.NoSuchThing", "cannot be imported"),
    ("rewards.loading.RewardModuleError", "does not declare itself a reward module"),
])
def test_a_config_naming_anything_but_a_reward_module_is_refused_as_it_is_read(path, reason, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    spec = {"path": path, "params": {"args": ["touch", "pwned"]}}
    with pytest.raises(ValidationError, match=rf"rewards\[0\]\.path: [\s\S]*{reason}"):
        GeneralRlConfig(**IO, rewards=[spec])
    assert not (tmp_path / "pwned").exists()


def test_the_forms_hide_internal_fields_and_their_descriptions_render_whole():
    """Prefect's UI renders descriptions as markup (text in angle brackets vanished) and shows every
    schema property as a form field (provenance is the flow's to fill)."""
    for model in (SftConfig, ReasoningRlConfig, GeneralRlConfig, AgenticRlConfig, TrainOrmConfig, DistillConfig,
                  PipelineParams):
        schema = model.model_json_schema()
        assert "provenance" not in schema["properties"], model.__name__
        descriptions = [value for key, value in _walk(schema) if key == "description"]
        assert descriptions and not [d for d in descriptions if "<" in d or ">" in d], (model.__name__, descriptions)
    # Out of the form, not out of run.json: the job still reads the flow's provenance back.
    written = SftConfig(**IO, provenance={"flow_run_id": "f"}).model_dump_json()
    assert SftConfig.model_validate_json(written).provenance.flow_run_id == "f"


def _walk(node):
    if isinstance(node, dict):
        for key, value in node.items():
            yield key, value
            yield from _walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from _walk(value)


def test_the_form_shows_choices_and_code_defaults_as_values():
    schema = SftConfig.model_json_schema()
    mix = schema["properties"]["thinking_mix"]  # one number field per thinking mode, filled with the default
    assert set(mix["properties"]) == {"interleaved", "preserved", "off"}
    assert mix["default"] == {"interleaved": 0.6, "preserved": 0.2, "off": 0.2}
    zero = schema["$defs"]["OptimizerSettings"]["properties"]["zero_stage"]
    assert zero["enum"] == ["0", "1", "2", "3"] and zero["default"] == "0"  # a choice the form shows, 0 included
    assert SftConfig(**IO, optimizer={"zero_stage": "2"}).optimizer.zero_stage == 2
    assert SftConfig(**IO, optimizer={"zero_stage": 1}).optimizer.zero_stage == 1
    with pytest.raises(ValidationError, match="zero_stage"):
        SftConfig(**IO, optimizer={"zero_stage": "4"})
    compute = schema["$defs"]["ComputeSettings"]["properties"]  # every stage's form has the same section
    assert compute["precision"]["enum"] == ["auto", "fp32", "bf16"] and compute["precision"]["default"] == "auto"
    assert all("compute" in config.model_json_schema()["properties"]
               for config in (ReasoningRlConfig, GeneralRlConfig, AgenticRlConfig, TrainOrmConfig, DistillConfig))
    with pytest.raises(ValidationError, match="thinking_mix.interleaved"):
        SftConfig(**IO, thinking_mix={"interleaved": 1.5, "off": -0.5})
    rewards = ReasoningRlConfig.model_json_schema()["properties"]["rewards"]["default"]
    assert [r["path"] for r in rewards] == ["rewards.verifiers.ArithExactMatch"]
    assert GeneralRlConfig.model_json_schema()["properties"]["rewards"]["default"][0]["path"] == "rewards.mix.MixedReward"
    assert {"smoke", "tiny", "small"} <= set(PipelineParams.model_json_schema()["properties"]["preset"]["enum"])
    assert SftConfig(**{**IO, "run_id": ""}).run_id.startswith("sft-")  # left empty: a fresh id
