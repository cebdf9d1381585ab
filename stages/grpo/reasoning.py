"""Reasoning RL: `python -m stages.grpo.reasoning --config run.json`, alone or under torchrun / deepspeed.

GRPO + IcePop (stages/common/icepop_loss.py) on prompts with a reference answer — chat@1 rows whose reply
states it, or prompt@1 rows that carry it — scored by verifier rewards; the loop is
stages/grpo/loop.py, shared with general RL.
"""

from __future__ import annotations

from stages.common.inputs import StageInputs, load_split
from stages.common.prompts import parse_prompts, prompt_contract
from stages.common.stage_main import stage_main
from stages.grpo.config import ReasoningRlConfig
from stages.grpo.loop import run_grpo


def train(config: ReasoningRlConfig, stage: StageInputs) -> str:
    tokenizer = stage.tokenizer()
    prompts = []
    for index, dataset in enumerate(stage.datasets):
        contract = prompt_contract(dataset)
        rows = load_split([dataset], "train", stage.workdir / f"prompts-{index}", contract)
        prompts += parse_prompts(rows, contract, tokenizer)
    return run_grpo(config, stage, prompts, tokenizer)


def main(argv: list[str] | None = None) -> None:
    stage_main(ReasoningRlConfig, train, __doc__.splitlines()[0], argv)


if __name__ == "__main__":
    main()
