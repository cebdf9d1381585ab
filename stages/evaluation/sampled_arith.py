"""Held-out arith accuracy through a rollout engine: greedy, and the mean over k samples at a temperature.

Reasoning RL is judged on both: sampled accuracy is what its policy-gradient improves, greedy is
what must not fall. Prompts are asked with thinking on, as the suite is posed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rewards.verifiers import ArithExactMatch
from rollout.client import EngineClient
from rollout.protocol import SamplingParams
from stages.common.prompts import rl_prompts
from stages.evaluation.reward_means import reward_means


def sampled_arith_accuracy(
    client: EngineClient, tokenizer, rows: Sequence[Mapping], *, samples_per_prompt: int, temperature: float,
    max_new_tokens: int, seed: int, batch_size: int = 256,
) -> dict[str, float]:
    """{"arith/accuracy_greedy", "arith/accuracy_sampled"} over `rows` (chat@1 arith rows)."""
    prompts = rl_prompts(rows, tokenizer)
    verifier = [ArithExactMatch()]
    greedy = reward_means(client, tokenizer, prompts, verifier, SamplingParams(temperature=0.0, max_new_tokens=max_new_tokens),
                          seed=seed, batch_size=batch_size)
    sampled = reward_means(client, tokenizer, prompts, verifier,
                           SamplingParams(temperature=temperature, max_new_tokens=max_new_tokens),
                           repeats=samples_per_prompt, seed=seed, batch_size=batch_size)
    return {"arith/accuracy_greedy": greedy[ArithExactMatch.name], "arith/accuracy_sampled": sampled[ArithExactMatch.name]}
