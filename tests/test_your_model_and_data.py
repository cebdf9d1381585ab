"""A person's own data through the README's commands, and the pipeline spec's checks.

The README's "Run it on your model and data" commands run exactly as written, from a folder holding
the repository's examples and nothing else (a fresh store), and must all succeed."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from flows.params import PipelineParams
from flows.spec import SpecError, load_spec, parse_spec, preset_path, spec_schema
from posttrain.cli import app

REPO = Path(__file__).resolve().parent.parent
VENV_BIN = Path(sys.executable).parent


def readme_commands(block: str) -> list[str]:
    readme = (REPO / "README.md").read_text()
    found = re.search(rf"<!-- readme-commands: {block} -->\n```bash\n(.*?)```\n<!-- /readme-commands -->", readme, re.S)
    assert found, f"README has no readme-commands block {block!r}"
    return [line for line in found.group(1).splitlines() if line.strip()]


@pytest.mark.slow
def test_the_readme_commands_run_the_example_spec_end_to_end(tmp_path):
    shutil.copytree(REPO / "examples", tmp_path / "examples")
    (tmp_path / ".venv").mkdir()
    (tmp_path / ".venv" / "bin").symlink_to(VENV_BIN)
    env = {k: v for k, v in os.environ.items() if k != "POSTTRAIN_STORE"}  # the default store: ./artifacts, fresh
    outputs = []
    for command in readme_commands("your-model-and-data"):
        done = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=900)
        assert done.returncode == 0, f"{command}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        outputs.append(done.stdout + done.stderr)
    assert "spec ok" in outputs[0]
    report_dir = tmp_path / "artifacts" / "runs"
    summary = json.loads((report_dir / (report_dir / "LATEST").read_text().strip() / "summary.json").read_text())
    assert [stage["stage"] for stage in summary["stages"]] == ["sft", "reasoning_rl", "distill"]
    rl = summary["stages"][1]
    assert set(rl["metrics_after"]) == {"answer/accuracy_greedy", "answer/accuracy_sampled"}
    assert summary["stages"][2]["retention"].keys() == {"sft", "reasoning_rl"}  # GLM-5's teachers include SFT's
    # The SFT checkpoint's ancestry reaches the imported file, by its sha256.
    sft = json.loads(Path(summary["stages"][0]["checkpoint"].removeprefix("file://"), "lineage.json").read_text())
    chats = json.loads(Path(sft["inputs"][0]["uri"].removeprefix("file://"), "lineage.json").read_text())
    assert chats["config"]["source_sha256"] == __import__("hashlib").sha256(
        (REPO / "examples" / "chat.jsonl").read_bytes()).hexdigest()
    assert "verify: all files" in outputs[2]


def test_every_preset_is_a_spec_file_that_validates():
    for name in ("smoke", "tiny", "small"):
        spec, _ = load_spec(preset_path(name))
        assert spec.stages.sft is not None
    with pytest.raises(SpecError, match="unknown pipeline preset 'huge'"):
        preset_path("huge")


@pytest.mark.parametrize("edit, named", [
    (lambda d: d["stages"]["reasoning_rl"].update(lrr=1e-4), r"stages\.reasoning_rl\.lrr: Extra inputs"),
    (lambda d: d["stages"]["sft"].update(max_steps=0), r"stages\.sft\.max_steps: Input should be greater"),
    (lambda d: d["stages"]["reasoning_rl"]["rewards"][0].update(path="rewards.verifiers.NoSuch"),
     r"stages\.reasoning_rl\.rewards: rewards\[0\]\.path: .*cannot be imported"),
    (lambda d: d["data"]["imports"]["my-chats"].update({"as": "poem"}), r"data\.imports\.my-chats\.as"),
    (lambda d: d["model"].update(checkpoint="sft:latest"), r"model: .*exactly one of path, preset or checkpoint"),
    (lambda d: d["stages"]["sft"].update(datasets=[]), r"stages\.sft\.datasets: List should have at least 1"),
    (lambda d: d["stages"].pop("reasoning_rl"), r"stages\.distill: distillation needs a teacher"),
    (lambda d: d.update(stages={**d["stages"], "dpo": {}}), r"stages\.dpo: Extra inputs"),
])
def test_a_bad_spec_is_refused_naming_the_field(edit, named):
    document = yaml.safe_load((REPO / "examples" / "spec.yaml").read_text())
    edit(document)
    with pytest.raises(SpecError, match=named):
        parse_spec(document, "spec.yaml")


def test_spec_check_names_each_reference_that_resolves_to_nothing(tmp_path):
    document = yaml.safe_load((REPO / "examples" / "spec.yaml").read_text())
    document["model"] = {"checkpoint": "sft:latest"}
    document["stages"]["reasoning_rl"]["datasets"] = ["my-prompts", "gsm8k:latest"]
    document["data"]["imports"]["my-chats"]["path"] = str(REPO / "examples" / "missing.jsonl")
    document["data"]["imports"]["my-prompts"]["path"] = str(REPO / "examples" / "prompts.jsonl")
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text(yaml.safe_dump(document))
    done = CliRunner().invoke(app, ["spec", "check", str(spec_file), "--store", str(tmp_path / "store")])
    assert done.exit_code == 1, done.output
    assert "data.imports.my-chats.path: " in done.stderr and "no such file" in done.stderr
    assert "model.checkpoint: sft:latest: no committed checkpoint named 'sft'" in done.stderr
    assert "it holds no checkpoint yet" in done.stderr
    assert "stages.reasoning_rl.datasets[1]: gsm8k:latest: no committed dataset named 'gsm8k'" in done.stderr


def test_spec_schema_is_the_pipeline_specs():
    schema = spec_schema()
    assert {"model", "data", "stages", "seed", "store"} <= set(schema["properties"])
    assert schema == json.loads(CliRunner().invoke(app, ["spec", "schema"]).stdout)


def test_the_pipeline_takes_a_spec_inline_or_by_path():
    text = (REPO / "examples" / "spec.yaml").read_text()
    name, inline, _ = PipelineParams(spec=text, seed=3).load_spec()
    assert name == "inline" and inline.seed == 3 and inline.stages.sft.datasets == ["my-chats"]
    name, by_path, base = PipelineParams(spec=str(REPO / "examples" / "spec.yaml")).load_spec()
    assert name == "spec" and base == REPO / "examples" and by_path.model_copy(update={"seed": 3}) == inline
    assert PipelineParams(spec=json.dumps(yaml.safe_load(text))).load_spec()[1] == by_path
    with pytest.raises(SpecError, match=r"inline spec: stages\.sft\.max_stepz: Extra inputs"):
        PipelineParams(spec=text.replace("max_steps: 4", "max_stepz: 4")).load_spec()
