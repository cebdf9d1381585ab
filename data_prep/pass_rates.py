"""How often a checkpoint's answers to each prompt pass: K answers sampled per prompt through a rollout engine,
each scored by a reward module as GRPO scores its samples, and counted as passing at or above a threshold."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rewards import RewardModule, score_batch
from rollout.fleet_client import FleetClient
from rollout.protocol import SamplingParams
from stages.common.prompts import RlPrompt
from stages.grpo.rewards import reward_sample


class UnscorablePrompt(ValueError):
    """A prompt whose answers the reward module cannot score (None): it has no pass rate."""


@dataclass(frozen=True)
class PassCount:
    id: str
    passes: int
    samples: int

    @property
    def rate(self) -> float:
        return self.passes / self.samples


# (prompts answered and scored, all prompts): (0, all) once the engine is ready, then after every batch.
Progress = Callable[[int, int], None]


def pass_counts(client: FleetClient, tokenizer, prompts: Sequence[RlPrompt], reward: RewardModule, *,
                samples: int, threshold: float, sampling: SamplingParams, seed: int, batch_prompts: int,
                timeout_s: float = 60.0, progress: Progress | None = None) -> list[PassCount]:
    """Each prompt's passing answers of `samples`, in prompt order.

    Each batch's request carries its own seed (`seed` plus the batch's first prompt), so the same settings draw
    the same answers on any engine. An answer the module cannot score stops the count naming its row: a prompt
    without what the module needs (a verifier's reference answer) has no pass rate, and counting it as failed
    would keep or drop it for the wrong reason.
    """
    counts: list[PassCount] = []
    for start in range(0, len(prompts), batch_prompts):
        batch = prompts[start : start + batch_prompts]
        generated = client.generate([prompt.prompt_ids for prompt in batch for _ in range(samples)],
                                    sampling.model_copy(update={"sampling_seed": seed + start}), return_logprob=False)
        texts = [tokenizer.decode(sample.output_ids, skip_special_tokens=False) for sample in generated]
        scores = score_batch(reward, [reward_sample(batch[i // samples], text) for i, text in enumerate(texts)],
                             timeout_s)
        for index, prompt in enumerate(batch):
            own = scores[index * samples : (index + 1) * samples]
            if None in own:
                raise UnscorablePrompt(
                    f"row {prompt.id}: reward module {reward.name!r} could not score its answers (it returned None); "
                    "a verifier needs the row's reference answer")
            counts.append(PassCount(prompt.id, sum(score >= threshold for score in own), samples))
        if progress is not None:
            progress(len(counts), len(prompts))
    return counts
