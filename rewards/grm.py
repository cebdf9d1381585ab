"""The generative reward model (GRM): a judge served by a rollout engine grades each reply against its anchor.

The judge is any checkpoint — SFT teaches the format from the `judge` suite — asked exactly as that
suite asks (`suites.judge.REQUEST`: the question, the human anchor reply as reference, the reply),
greedily and with thinking on. The score is read from its verdict's "Score: N" line (1-10). A verdict
without a well-formed score line is None and counted in `unparsable`: never a made-up number. Samples
without an anchor reply are not the GRM's to score: None.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path

from infra.store import open_store
from model.tokenizer import load_tokenizer
from model.turns import score_turn
from rewards.protocol import RewardSample
from rewards.replies import visible_reply
from rollout.agents.trajectory import prompt_ids
from rollout.client import EngineClient
from rollout.protocol import SamplingParams
from suites.judge import REQUEST, parse_score


def judge_request(sample: RewardSample) -> list[dict]:
    """The grading conversation for one sample: its question, its anchor as reference, its reply."""
    question = "\n".join(m["content"] for m in sample.prompt if m["role"] == "user")
    return [{"role": "user", "content": REQUEST.format(question=question, reference=sample.reference,
                                                       reply=visible_reply(sample))}]


def verdict_score(generated: str) -> int | None:
    """The 1-10 score of a generated verdict turn (reasoning, then the verdict), or None."""
    turn = score_turn(generated, thinking=True)
    return parse_score(turn.parsed.reply) if turn.format_valid else None


class GenerativeJudge:
    """The judge checkpoint's 1-10 grade of each reply against its anchor, from the engine at `engine_url`."""

    name = "grm"
    version = "1"

    def __init__(self, checkpoint: str, engine_url: str, max_new_tokens: int = 64, store: str | None = None):
        # The judge's own tokenizer renders its requests: token ids in, token ids out (TITO).
        with tempfile.TemporaryDirectory(prefix="posttrain-grm-") as tmp:
            self.tokenizer = load_tokenizer(open_store(store).open(checkpoint).download(Path(tmp) / "judge"))
        self.client = EngineClient(engine_url)
        self.sampling = SamplingParams(temperature=0.0, max_new_tokens=max_new_tokens)
        self.judged = self.unparsable = 0

    def __call__(self, samples: Sequence[RewardSample]) -> list[float | None]:
        graded = [i for i, sample in enumerate(samples) if sample.reference]
        scores: list[float | None] = [None] * len(samples)
        if not graded:
            return scores
        requests = [prompt_ids(self.tokenizer, judge_request(samples[i]), None) for i in graded]
        verdicts = self.client.generate(requests, self.sampling, return_logprob=False)
        for index, verdict in zip(graded, verdicts, strict=True):
            score = verdict_score(self.tokenizer.decode(verdict.output_ids, skip_special_tokens=False))
            self.judged += 1
            self.unparsable += score is None
            scores[index] = None if score is None else float(score)
        return scores
