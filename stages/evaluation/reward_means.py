"""Mean reward of a checkpoint's replies to held-out prompts, generated through a rollout engine."""

from __future__ import annotations

from collections.abc import Sequence

from rewards import RewardModule, RewardSample, score_batch
from rollout.fleet_client import FleetClient
from rollout.protocol import SamplingParams
from stages.common.prompts import RlPrompt


def reward_means(client: FleetClient, tokenizer, prompts: Sequence[RlPrompt], modules: Sequence[RewardModule],
                 params: SamplingParams, *, repeats: int = 1, seed: int = 0, batch_size: int = 256,
                 timeout_s: float = 60.0) -> dict[str, float]:
    """{module name: mean score over the samples it scored} for `repeats` replies per prompt.

    Sampled requests are seeded per chunk, so the same settings give the same numbers on any engine.
    A module that scores no sample at all has no mean: NaN, never 0.
    """
    scores: dict[str, list[float]] = {module.name: [] for module in modules}
    for start in range(0, len(prompts), batch_size):
        chunk = prompts[start : start + batch_size]
        chunk_params = params.model_copy(update={"sampling_seed": seed + start}) if params.temperature else params
        samples = client.generate([p.prompt_ids for p in chunk for _ in range(repeats)], chunk_params,
                                  return_logprob=False)
        batch = [
            RewardSample(chunk[i // repeats].messages, tokenizer.decode(s.output_ids, skip_special_tokens=False),
                         chunk[i // repeats].reference, {**chunk[i // repeats].metadata, "thinking": True})
            for i, s in enumerate(samples)
        ]
        for module in modules:
            scores[module.name] += [s for s in score_batch(module, batch, timeout_s) if s is not None]
    return {name: sum(values) / len(values) if values else float("nan") for name, values in scores.items()}
