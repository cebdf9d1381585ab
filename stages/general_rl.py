"""General RL: `python -m stages.general_rl --config run.json`, alone or under torchrun / deepspeed.

GRPO + IcePop (the loop of stages/grpo_stage.py) on prompt@1 datasets — instructions with
rule-checkable constraints, open chat prompts with human anchor replies — scored by the configured
reward modules, by default SPEC's mix (rewards/mix.py). Each prompt's domain and metadata reach the
reward modules with the sample.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from data_contracts import PROMPT_V1
from data_contracts.conversation import messages_from_records
from rollout.trajectory import prompt_ids
from stages.general_rl_config import GeneralRlConfig
from stages.grpo_stage import run_grpo
from stages.rl_rollouts import RlPrompt
from stages.sft_data import load_split
from stages.stage_inputs import stage_main, start_stage


def general_prompts(rows: Sequence[Mapping], tokenizer) -> list[RlPrompt]:
    """prompt@1 rows as RL prompts, rendered with thinking on; metadata carries the domain and the rules."""
    prompts = []
    for row in rows:
        messages = tuple(messages_from_records(row["messages"]))
        metadata = {"domain": row["domain"], **json.loads(row["metadata_json"] or "{}")}
        prompts.append(RlPrompt(row["id"], messages, row["reference_answer"],
                                prompt_ids(tokenizer, list(messages), None), metadata))
    return prompts


def run(config: GeneralRlConfig) -> str:
    stage = start_stage(config)
    if isinstance(stage, str):  # a previous run committed the output
        return stage
    tokenizer = stage.tokenizer()
    rows = load_split(stage.datasets, "train", stage.workdir, PROMPT_V1)
    return run_grpo(config, stage, general_prompts(rows, tokenizer), tokenizer,
                    anchor_min_weight=config.anchor_min_weight if config.anchor_members else None)


def main(argv: list[str] | None = None) -> None:
    stage_main(GeneralRlConfig, run, __doc__.splitlines()[0], argv)


if __name__ == "__main__":
    main()
