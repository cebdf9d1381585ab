"""The general RL job end to end on the tiny model: prompt@1 instruct prompts, the mixed reward, lineage."""

import tempfile
from pathlib import Path

import pytest

from data_contracts import PROMPT_V1
from infra.launch import LocalLauncher
from infra.store import open_store
from model.tokenizer import load_tokenizer
from stages.events import parse_event
from stages.general_rl import general_prompts
from stages.general_rl_config import GeneralRlConfig
from stages.prepare import publish_prompts
from stages.sft_data import load_split
from suites.prepare import SuiteSizes


@pytest.fixture(scope="module")
def instruct_prompts(small_store):
    store = open_store(small_store["root"])
    with tempfile.TemporaryDirectory() as workdir:
        dataset, _ = publish_prompts(store, "instruct", SuiteSizes(40, 8), 0, Path(workdir), "tests")
    return dataset


def test_prompt_rows_carry_their_domain_and_rules_to_the_reward(small_store, instruct_prompts, tmp_path):
    tokenizer = load_tokenizer(open_store(small_store["root"]).open(small_store["init"]).download(tmp_path / "init"))
    prompts = general_prompts(load_split([instruct_prompts], "train", tmp_path, PROMPT_V1), tokenizer)
    assert len(prompts) == 40
    first = prompts[0]
    assert first.metadata["domain"] == "instruct" and first.metadata["constraints"]
    assert first.reference is None and first.messages[-1]["role"] == "user"
    assert tokenizer.decode(first.prompt_ids).endswith("<|assistant|><think>")


def test_general_rl_trains_on_prompts_and_records_every_mixed_module_in_lineage(small_store, instruct_prompts, tmp_path,
                                                                                 monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = GeneralRlConfig(run_id="general-steps", store=small_store["root"], init_checkpoint=small_store["init"],
                             datasets=[instruct_prompts.uri], group_size=2, prompts_per_step=2, max_steps=2,
                             max_new_tokens=12, warmup_steps=1)
    path = tmp_path / "run.json"
    path.write_text(config.model_dump_json())
    events = []
    LocalLauncher(nproc=1, threads_per_proc=1).run("stages.general_rl", path,
                                                   lambda line: (e := parse_event(line)) and events.append(e))

    steps = [e for e in events if e["event"] == "step"]
    assert [s["step"] for s in steps] == [1, 2]
    assert all("reward/mixed" in s and s["dropped_groups"] == 0 for s in steps)  # every instruct sample scored
    lineage = open_store(small_store["root"]).open(config.output_name).lineage()
    refs = {ref["path"]: ref for ref in lineage["reward_modules"]}
    assert set(refs) == {"rewards.mix.MixedReward", "rewards.rules.InstructGate", "rewards.rules.InstructSoft"}
    assert all(len(ref["source_sha256"]) == 64 for ref in refs.values())
    assert [i["contract"] for i in lineage["inputs"]] == [PROMPT_V1.id]
