"""General RL: `python -m stages.grpo.general --config run.json`, alone or under torchrun / deepspeed.

GRPO + IcePop (the loop of stages/grpo/loop.py) on prompt@1 datasets — instructions with
rule-checkable constraints, open chat prompts with human anchor replies — scored by the configured
reward modules, by default SPEC's mix (rewards/mix.py). Each prompt's domain and metadata reach the
reward modules with the sample.
"""

from __future__ import annotations

from data_contracts import PROMPT_V1
from stages.common.inputs import StageInputs, load_split
from stages.common.prompts import general_prompts
from stages.common.stage_main import stage_main
from stages.grpo.config import GeneralRlConfig
from stages.grpo.loop import run_grpo


def train(config: GeneralRlConfig, stage: StageInputs) -> str:
    tokenizer = stage.tokenizer()
    rows = load_split(stage.datasets, "train", stage.workdir, PROMPT_V1)
    return run_grpo(config, stage, general_prompts(rows, tokenizer), tokenizer, anchors=config.anchors)


def main(argv: list[str] | None = None) -> None:
    stage_main(GeneralRlConfig, train, __doc__.splitlines()[0], argv)


if __name__ == "__main__":
    main()
