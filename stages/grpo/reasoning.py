"""Reasoning RL: `python -m stages.grpo.reasoning --config run.json`, alone or under torchrun / deepspeed.

GRPO + IcePop (stages/grpo/loss.py) on the arith prompts of chat@1 datasets, scored by verifier
rewards; the loop is stages/grpo/loop.py, shared with general RL.
"""

from __future__ import annotations

from stages.common.inputs import StageInputs, load_split, stage_main
from stages.common.prompts import rl_prompts
from stages.grpo.config import ReasoningRlConfig
from stages.grpo.loop import run_grpo


def train(config: ReasoningRlConfig, stage: StageInputs) -> str:
    tokenizer = stage.tokenizer()
    return run_grpo(config, stage, rl_prompts(load_split(stage.datasets, "train", stage.workdir), tokenizer), tokenizer)


def main(argv: list[str] | None = None) -> None:
    stage_main(ReasoningRlConfig, train, __doc__.splitlines()[0], argv)


if __name__ == "__main__":
    main()
