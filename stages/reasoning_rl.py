"""Reasoning RL: `python -m stages.reasoning_rl --config run.json`, alone or under torchrun / deepspeed.

GRPO + IcePop (stages/grpo_loss.py) on the arith prompts of chat@1 datasets, scored by verifier
rewards; the loop is stages/grpo_stage.py, shared with general RL.
"""

from __future__ import annotations

from stages.grpo_stage import run_grpo
from stages.reasoning_rl_config import ReasoningRlConfig
from stages.rl_rollouts import rl_prompts
from stages.sft_data import load_split
from stages.stage_inputs import stage_main, start_stage


def run(config: ReasoningRlConfig) -> str:
    stage = start_stage(config)
    if isinstance(stage, str):  # a previous run committed the output
        return stage
    tokenizer = stage.tokenizer()
    return run_grpo(config, stage, rl_prompts(load_split(stage.datasets, "train", stage.workdir), tokenizer), tokenizer)


def main(argv: list[str] | None = None) -> None:
    stage_main(ReasoningRlConfig, run, __doc__.splitlines()[0], argv)


if __name__ == "__main__":
    main()
