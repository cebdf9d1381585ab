"""`posttrain data filter` and a spec's `difficulty_filter`: a real engine samples a real checkpoint, a reward module
of this file fixes every prompt's pass rate (whatever the model writes), and the filtered dataset's rows, test split,
lineage and pass rates are what that pass rate and the band say; every bad input is named, exits 2 and commits
nothing."""

from __future__ import annotations

import hashlib
import os
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from data_contracts import CHAT_V1, read_parquet
from data_contracts.lineage import Lineage
from data_prep.import_data import import_dataset
from data_prep.prepare import prepare
from flows.spec import SpecError, parse_spec
from flows.spec_plan import plan_spec
from flows.stage_inputs import PipelineRun, flow_inputs, stage_evals
from flows.stage_table import BY_NAME
from infra.lineage import load_ancestry, located, verify_ancestry
from infra.publish import published_contract
from infra.references import resolve_dataset
from infra.store import open_artifact, open_store
from posttrain.cli import app
from suites.prepare import SuiteSizes
from tests.prefect_servers import own_prefect_server

SAMPLES = 4
QUOTA_PASS = "tests.test_difficulty_filter.QuotaPass"


def question(messages) -> str:
    return next(message["content"] for message in messages if message["role"] == "user")


def quota(messages) -> int:
    """How many of a prompt's SAMPLES answers pass: fixed by its question, whatever the model writes."""
    return int(hashlib.sha256(question(messages).encode()).hexdigest(), 16) % (SAMPLES + 1)


class QuotaPass:
    """0.6 for the first quota(prompt) of each SAMPLES answers to a question it scores, 0.4 for the others: with a
    pass threshold of 0.5 (and not at the default 1.0) a prompt's pass rate is quota / SAMPLES, as long as each
    answer is scored once and a prompt's answers together (two rows may ask the same question)."""

    name, version = "quota_pass", "1"

    def __init__(self):
        self.scored = Counter()

    def __call__(self, samples):
        scores = []
        for sample in samples:
            key = question(sample.prompt)
            scores.append(0.6 if self.scored[key] % SAMPLES < quota(sample.prompt) else 0.4)
            self.scored[key] += 1
        return scores


class NeverPass:
    """Every answer fails."""

    name, version = "never_pass", "1"

    def __call__(self, samples):
        return [0.0] * len(samples)


@pytest.fixture(scope="module")
def arith_store(tmp_path_factory):
    """A store with an arith chat@1 dataset (24 train, 8 test rows) and an initial checkpoint."""
    root = str(tmp_path_factory.mktemp("filter") / "store")
    prepared = prepare(open_store(root), suites=["arith"], sizes=SuiteSizes(24, 8), preset="glm5-tiny", seed=0,
                       triggered_by="tests")
    return {"root": root, "dataset": prepared.datasets["arith"].uri, "init": prepared.init_checkpoint.uri}


def filter_cli(store: dict, *arguments: str):
    return CliRunner().invoke(app, ["data", "filter", *arguments, "--store", store["root"]], env={"COLUMNS": "200"})


def rows_of(uri: str, split: str, tmp_path: Path) -> list[dict]:
    local = open_artifact(uri).download(tmp_path / uri.rsplit("/", 1)[-1])
    return read_parquet(CHAT_V1, local / f"{split}.parquet").to_pylist()


def committed(store: dict) -> list[str]:
    return open_store(store["root"]).list_committed()


def engines_left() -> list[str]:
    """Rollout engines this process started that still run (the CLI runs in this process)."""
    left = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            command = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, IndexError, ValueError):  # a process that ended meanwhile
            continue
        if parent == os.getpid() and "rollout.engine.server" in command:
            left.append(command)
    return left


MIDDLE = ["--samples", str(SAMPLES), "--pass-rate", "0.25..0.75", "--reward", QUOTA_PASS, "--pass-threshold", "0.5",
          "--max-new-tokens", "2"]


def test_the_filter_keeps_the_train_rows_whose_pass_rate_lies_in_the_band(arith_store, tmp_path):
    result = filter_cli(arith_store, "arith:latest", "--checkpoint", "init:latest", *MIDDLE)
    assert result.exit_code == 0, result.output
    uri = result.stdout.strip().splitlines()[-1]
    source_train = rows_of(arith_store["dataset"], "train", tmp_path)
    rates = {row["id"]: quota(row["messages"]) / SAMPLES for row in source_train}
    expected = [row["id"] for row in source_train if 0.25 <= rates[row["id"]] <= 0.75]
    assert 0 < len(expected) < len(source_train)  # the band keeps some rows and drops others
    assert f"kept {len(expected)} of {len(source_train)} train rows" in result.stdout
    assert "answered 24/24 prompts" in result.stderr  # progress, a line per batch
    assert engines_left() == []

    assert [row["id"] for row in rows_of(uri, "train", tmp_path)] == expected
    assert rows_of(uri, "test", tmp_path) == rows_of(arith_store["dataset"], "test", tmp_path)
    dataset, source = open_artifact(uri), open_artifact(arith_store["dataset"])
    assert dataset.manifest.files["test.parquet"].sha256 == source.manifest.files["test.parquet"].sha256
    assert published_contract(dataset) == "chat@1"

    lineage = Lineage.model_validate(dataset.lineage())
    assert [(p.role, p.uri) for p in lineage.parents] == [("source", arith_store["dataset"]),
                                                          ("evaluated", arith_store["init"])]
    assert {k: lineage.config[k] for k in ("samples", "pass_rate", "reward", "pass_threshold")} == {
        "samples": SAMPLES, "pass_rate": [0.25, 0.75], "reward": QUOTA_PASS, "pass_threshold": 0.5}
    assert lineage.seed == 0 and [ref.path for ref in lineage.reward_modules] == [QUOTA_PASS]
    pass_rates = pq.read_table(dataset.download(tmp_path / "audit") / "pass_rates.parquet").to_pylist()
    assert pass_rates == [{"id": row["id"], "passes": quota(row["messages"]), "samples": SAMPLES,
                           "pass_rate": rates[row["id"]], "kept": row["id"] in expected} for row in source_train]
    store = open_store(arith_store["root"])
    assert resolve_dataset(store, "arith-filtered:latest", "DATASET") == uri  # a name stages and specs can use
    assert verify_ancestry(load_ancestry(*located(uri, store))) == []  # `posttrain lineage --verify` passes on it

    again = filter_cli(arith_store, "arith:latest", "--checkpoint", "init:latest", *MIDDLE)
    assert again.exit_code == 0 and again.stdout.strip().splitlines()[-1] == uri
    assert "nothing sampled" in again.stdout and "answered" not in again.stderr


def test_a_band_that_keeps_no_prompt_is_named_and_commits_nothing(arith_store):
    before = committed(arith_store)
    result = filter_cli(arith_store, "arith:latest", "--checkpoint", "init:latest", "--samples", "1",
                        "--pass-rate", "0.5..1", "--reward", "tests.test_difficulty_filter.NeverPass",
                        "--max-new-tokens", "1")
    assert result.exit_code == 2
    assert "no prompt's pass rate in 0.5..1; pass rates seen: 0 (24 prompts)" in result.stderr
    assert committed(arith_store) == before and engines_left() == []


@pytest.mark.parametrize(("override", "named"), [
    ({"--pass-rate": "0.9..0.1"}, "--pass-rate: '0.9..0.1': LOW 0.9 is above HIGH 0.1"),
    ({"--pass-rate": "0.1-0.9"}, "--pass-rate: '0.1-0.9': give LOW..HIGH"),
    ({"--pass-rate": "low..0.9"}, "--pass-rate: 'low..0.9': LOW and HIGH must be numbers"),
    ({"--pass-rate": "0..1.5"}, "--pass-rate: '0..1.5': pass rates lie between 0 and 1"),
    ({"--pass-rate": "nan..1"}, "--pass-rate: 'nan..1': pass rates lie between 0 and 1"),
    ({"--samples": "0"}, "'--samples': Input should be greater than or equal to 1"),
    ({"--reward": "os.system"}, "--reward: reward module 'os.system' is not from an allowed origin"),
    ({"--checkpoint": "sft:latest"}, "--checkpoint: sft:latest: no committed checkpoint named 'sft'"),
    ({"--checkpoint": "checkpoints/sft/never-trained"}, "--checkpoint: checkpoints/sft/never-trained: not a committed"),
    ({"DATASET": "nosuch:latest"}, "DATASET: nosuch:latest: no committed dataset named 'nosuch'"),
    ({"DATASET": "nosuch:latest"}, "; it holds arith:latest"),  # what the store holds, to pick from
    ({"--checkpoint": "sft:latest"}, "; it holds init:latest"),
    ({"--name": "../../tmp/x"}, "dataset name '../../tmp/x': not allowed"),  # refused, not rewritten
])
def test_a_bad_input_is_named_exits_2_and_commits_nothing(arith_store, override, named):
    options = {"DATASET": "arith:latest", "--checkpoint": "init:latest", "--samples": "4", "--pass-rate": "0..1",
               **override}
    flags = [part for option, value in options.items() if option != "DATASET" for part in (option, value)]
    before = committed(arith_store)
    result = filter_cli(arith_store, options["DATASET"], *flags)
    assert result.exit_code == 2, result.output
    assert named in " ".join(result.output.split()), result.output
    assert committed(arith_store) == before


def test_a_row_without_a_reference_answer_is_named_before_any_engine_starts(arith_store, tmp_path):
    rows = tmp_path / "chats.jsonl"
    rows.write_text('{"id": "stated", "prompt": "What is 2+2?", "completion": "The answer is 4."}\n'
                    '{"id": "unstated", "prompt": "Say hello.", "completion": "Hello!"}\n')
    imported = import_dataset(open_store(arith_store["root"]), rows, "chat", name="unstated", test_fraction=0)
    before = committed(arith_store)
    result = filter_cli(arith_store, imported.dataset.uri, "--checkpoint", "init:latest", "--samples", "2",
                        "--pass-rate", "0..1")
    assert result.exit_code == 2
    assert "row unstated: no reference reply of the form 'The answer is X.'" in result.stderr
    assert "engine" not in result.stderr and committed(arith_store) == before


FILTERED_RL = {"datasets": ["arith"], "sampling": {"max_new_tokens": 2},
               "difficulty_filter": {"samples": SAMPLES, "pass_rate": [0.25, 0.75], "reward": QUOTA_PASS,
                                     "pass_threshold": 0.5}}


def test_spec_check_shows_the_filter_and_a_bad_band_is_named_by_its_path(arith_store, tmp_path):
    spec = parse_spec({"model": {"checkpoint": arith_store["init"]}, "data": {"suites": {"arith": {}}},
                       "stages": {"reasoning_rl": FILTERED_RL}, "store": arith_store["root"]}, "spec.yaml")
    (rl,) = [stage for stage in plan_spec(spec, tmp_path).stages if stage.runs]
    assert rl.inputs[-1].startswith("each filtered by difficulty first: train prompts whose pass rate under the "
                                    "initial model lies in 0.25..0.75 (4 answers each, ")
    with pytest.raises(SpecError, match=r"stages\.reasoning_rl\.difficulty_filter\.pass_rate: '0\.8\.\.0\.2': LOW 0\.8 "
                                        r"is above HIGH 0\.2"):
        parse_spec({"model": {"preset": "glm5-tiny"}, "stages": {"reasoning_rl": {
            **FILTERED_RL, "difficulty_filter": {"samples": 2, "pass_rate": "0.8..0.2"}}}}, "spec.yaml")
    with pytest.raises(SpecError, match=r"stages\.agentic_rl\.difficulty_filter: Extra inputs are not permitted"):
        parse_spec({"model": {"preset": "glm5-tiny"}, "stages": {"agentic_rl": {
            "datasets": ["calc"], "difficulty_filter": {"samples": 2, "pass_rate": "0..1"}}}}, "spec.yaml")


def test_a_spec_difficulty_filter_makes_reasoning_rl_read_the_filtered_dataset(arith_store, tmp_path):
    spec = parse_spec({"model": {"checkpoint": arith_store["init"]}, "data": {"suites": {"arith": {}}},
                       "stages": {"reasoning_rl": FILTERED_RL}, "store": arith_store["root"]}, "spec.yaml")
    prepared = {"stages": {"reasoning_rl": [arith_store["dataset"]]}, "init_checkpoint": arith_store["init"]}
    run = PipelineRun(spec, prepared, {"init": arith_store["init"]}, stage_evals(spec))
    with own_prefect_server(tmp_path / "prefect"):
        config, _ = flow_inputs(BY_NAME["reasoning_rl"], run)
    (filtered,) = config.datasets
    assert run.prepared["stages"]["reasoning_rl"] == [filtered]  # what distillation's reasoning teacher reads too
    lineage = Lineage.model_validate(open_artifact(filtered).lineage())
    assert [(p.role, p.uri) for p in lineage.parents] == [("source", arith_store["dataset"]),
                                                          ("evaluated", config.init_checkpoint)]
    assert config.init_checkpoint == arith_store["init"]  # the stage's input checkpoint chose the rows
    source_train = rows_of(arith_store["dataset"], "train", tmp_path)
    assert [row["id"] for row in rows_of(filtered, "train", tmp_path)] == [
        row["id"] for row in source_train if 0.25 <= quota(row["messages"]) / SAMPLES <= 0.75]
    assert rows_of(filtered, "test", tmp_path) == rows_of(arith_store["dataset"], "test", tmp_path)
