"""Held-out arith accuracy through a rollout engine: greedy, and the mean over k samples at a temperature.

Reasoning RL is judged on both: sampled accuracy is what its policy-gradient improves, greedy is
what must not fall. Prompts are asked with thinking on, as the suite is posed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rewards import RewardSample, score_batch
from rewards.verifiers import ArithExactMatch
from rollout.client import EngineClient
from rollout.protocol import SamplingParams
from stages.rl_rollouts import rl_prompts


def sampled_arith_accuracy(
    client: EngineClient, tokenizer, rows: Sequence[Mapping], *, samples_per_prompt: int, temperature: float,
    max_new_tokens: int, seed: int, batch_size: int = 256,
) -> dict[str, float]:
    """{"arith/accuracy_greedy", "arith/accuracy_sampled"} over `rows` (chat@1 arith rows)."""
    prompts = rl_prompts(rows, tokenizer)
    verifier = ArithExactMatch()

    def accuracy(params: SamplingParams, repeats: int) -> float:
        scores = []
        for start in range(0, len(prompts), batch_size):
            chunk = prompts[start : start + batch_size]
            batch_params = params.model_copy(update={"sampling_seed": seed + start}) if params.temperature else params
            samples = client.generate([p.prompt_ids for p in chunk for _ in range(repeats)], batch_params, return_logprob=False)
            texts = [tokenizer.decode(s.output_ids, skip_special_tokens=False) for s in samples]
            scores += score_batch(verifier, [
                RewardSample(chunk[i // repeats].messages, text, chunk[i // repeats].reference, {"thinking": True})
                for i, text in enumerate(texts)
            ])
        return sum(scores) / len(scores)

    return {
        "arith/accuracy_greedy": accuracy(SamplingParams(temperature=0.0, max_new_tokens=max_new_tokens), 1),
        "arith/accuracy_sampled": accuracy(
            SamplingParams(temperature=temperature, max_new_tokens=max_new_tokens), samples_per_prompt
        ),
    }
