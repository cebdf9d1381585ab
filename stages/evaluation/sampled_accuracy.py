"""Held-out accuracy through a rollout engine: greedy, and the mean over k samples at a temperature.

Reasoning RL is judged on both: sampled accuracy is what its policy-gradient improves, greedy is
what must not fall. Prompts are asked with thinking on, as the suites pose them. The embedded arith
suite's chat@1 rows are scored by integer exact match (`arith/…`); the embedded code suite's prompt@1 rows
by their hidden tests in the code sandbox (`code/…`); a person's prompt@1 rows with reference answers by
answer match (`answer/…`).
"""

from __future__ import annotations

from collections.abc import Sequence

from rewards.protocol import RewardModule
from rewards.verifiers import AnswerMatch, ArithExactMatch, CodeTests
from rollout.fleet_client import FleetClient
from rollout.protocol import SamplingParams
from stages.common.prompts import RlPrompt
from stages.evaluation.reward_means import reward_means

# What a dataset's prompts are scored by, by the contract they are read as, and the metrics' prefix.
VERIFIERS: dict[str, tuple[str, type]] = {"chat": ("arith", ArithExactMatch), "prompt": ("answer", AnswerMatch)}
# Embedded suites whose prompt rows another verifier scores, by suite name.
SUITE_VERIFIERS: dict[str, tuple[str, type]] = {"code": ("code", CodeTests)}


def verifier_for(contract_name: str, suite: str | None) -> tuple[str, type]:
    """(metrics prefix, verifier) of a dataset read as `contract_name` and generated from `suite` (None: imported)."""
    return SUITE_VERIFIERS.get(suite) or VERIFIERS[contract_name]


def sampled_accuracy(
    client: FleetClient, tokenizer, prompts: Sequence[RlPrompt], verifier: RewardModule, domain: str, *,
    samples_per_prompt: int, temperature: float, max_new_tokens: int, seed: int, batch_size: int = 256,
) -> dict[str, float]:
    """{"<domain>/accuracy_greedy", "<domain>/accuracy_sampled"} over `prompts`."""
    greedy = reward_means(client, tokenizer, prompts, [verifier],
                          SamplingParams(temperature=0.0, max_new_tokens=max_new_tokens), seed=seed, batch_size=batch_size)
    sampled = reward_means(client, tokenizer, prompts, [verifier],
                           SamplingParams(temperature=temperature, max_new_tokens=max_new_tokens),
                           repeats=samples_per_prompt, seed=seed, batch_size=batch_size)
    return {f"{domain}/accuracy_greedy": greedy[verifier.name], f"{domain}/accuracy_sampled": sampled[verifier.name]}
