"""Rule-verified rewards for the suites whose answers can be checked exactly: by rule, or by running the code."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from model.turns import score_turn
from rewards.protocol import RewardSample
from rollout.agents.envs.case_runs import passed_calls
from rollout.agents.envs.code_sandbox import SandboxLimits
from suites.answers import final_python_block, stated_answer, stated_integer
from suites.arith import worked_steps
from suites.code_cases import FunctionCases


def stated_matches(samples: Sequence[RewardSample], read: Callable[[str], object | None],
                   same: Callable[[object, str], bool]) -> list[float | None]:
    """1 where the reply states (`read`: "The answer is X." → X) what `same` finds equal to the reference,
    else 0. A malformed turn (no closed reasoning, no stop token) scores 0: a reply the parser cannot
    read has not stated anything. Samples without a reference cannot be scored: None."""
    scores: list[float | None] = []
    for sample in samples:
        if sample.reference is None:
            scores.append(None)
            continue
        turn = score_turn(sample.response, thinking=bool(sample.metadata.get("thinking", True)))
        stated = read(turn.parsed.reply) if turn.format_valid else None
        scores.append(float(stated is not None and same(stated, sample.reference)))
    return scores


class ArithExactMatch:
    """1 when the reply states exactly the reference integer ("The answer is N."), else 0 (stated_matches)."""

    name = "arith_exact_match"
    version = "1"

    def __call__(self, samples: Sequence[RewardSample]) -> list[float | None]:
        return stated_matches(samples, stated_integer, lambda stated, reference: stated == int(reference))


class AnswerMatch:
    """1 when the reply states the reference answer ("The answer is X."), compared without regard to case
    or surrounding space, else 0 (stated_matches): exact match for a person's own prompts with answers."""

    name = "answer_match"
    version = "1"

    def __call__(self, samples: Sequence[RewardSample]) -> list[float | None]:
        return stated_matches(samples, stated_answer,
                              lambda stated, reference: stated.casefold() == reference.strip().casefold())


class FormatValid:
    """1 when the turn parses (closed reasoning when thinking, well-formed tool calls, a stop token), else 0."""

    name = "format_valid"
    version = "1"

    def __call__(self, samples: Sequence[RewardSample]) -> list[float | None]:
        return [float(score_turn(s.response, thinking=bool(s.metadata.get("thinking", True))).format_valid)
                for s in samples]


ARITH_QUESTION = re.compile(r"Compute (.+)\.")


class ArithStepPrefix:
    """The fraction of the problem's steps the reasoning gets right before its first mistake.

    A process reward checked by rule: the reasoning's lines are compared, in order, with the worked
    steps of the question's expression; the score is the length of the matching prefix over the
    number of steps. Partial credit separates the samples of a group that all miss the final answer,
    so hard prompts still carry signal. Skipping or reordering steps earns nothing past the first
    mismatch. A malformed turn scores 0; a prompt that is not an arith question cannot be scored: None.
    """

    name = "arith_step_prefix"
    version = "1"

    def __call__(self, samples: Sequence[RewardSample]) -> list[float | None]:
        scores: list[float | None] = []
        for sample in samples:
            question = ARITH_QUESTION.fullmatch(sample.prompt[-1]["content"]) if sample.prompt else None
            if question is None:
                scores.append(None)
                continue
            expected = worked_steps(question.group(1))
            turn = score_turn(sample.response, thinking=True)
            written = turn.parsed.reasoning.strip().split("\n") if turn.format_valid and turn.parsed.reasoning else []
            matched = 0
            for line, step in zip(written, expected, strict=False):
                if line.strip() != step:
                    break
                matched += 1
            scores.append(matched / len(expected))
        return scores


def completion_code(sample: RewardSample) -> str | None:
    """The code of the reply's final ```python block; None for a malformed turn or a reply without one (code in
    the reasoning does not count: the answer is what follows it)."""
    turn = score_turn(sample.response, thinking=bool(sample.metadata.get("thinking", True)))
    return final_python_block(turn.parsed.reply) if turn.format_valid else None


# Small: a test of a short function needs well under a second and a few MB; a hostile one is stopped soon.
CODE_TEST_LIMITS = SandboxLimits(cpu_s=5, wall_s=5.0, memory_mb=512, processes=16, file_mb=1, output_bytes=4096,
                                 tmp_mb=16)


class CodeTests:
    """1 when the reply's final ```python block passes every hidden test call its reference carries, else 0.

    The calls run in a fresh code sandbox per completion (rollout/agents/envs/case_runs.py, within CODE_TEST_LIMITS:
    5 s wall and CPU, 512 MB, 16 processes, no network), and only their return values leave it; the expected
    values never enter.
    With `partial_credit` the score is the fraction of calls passed instead (a group that all fail some calls
    still carries signal). A malformed turn or a reply without a python block scores 0 without starting a
    sandbox. A sample whose reference carries no test calls (suites/code_cases.py) is not this module's to
    score: None. Completions run `workers` at a time; identical ones of a batch run once.
    """

    name = "code_tests"
    version = "1"

    def __init__(self, partial_credit: bool = False, workers: int = 4):
        self.check_params(partial_credit, workers)
        self.partial_credit = partial_credit
        self.workers = workers

    @staticmethod
    def check_params(partial_credit: bool = False, workers: int = 4) -> None:
        if not isinstance(workers, int) or workers < 1:
            raise ValueError(f"workers must be a positive integer, got {workers!r}")

    def __call__(self, samples: Sequence[RewardSample]) -> list[float | None]:
        scores: list[float | None] = [None] * len(samples)
        runs: dict[tuple[str, str], tuple[FunctionCases, list[int]]] = {}
        for index, sample in enumerate(samples):
            cases = FunctionCases.from_reference(sample.reference)
            if cases is None:
                continue
            code = completion_code(sample)
            if code is None:
                scores[index] = 0.0
                continue
            runs.setdefault((code, sample.reference), (cases, []))[1].append(index)
        if not runs:
            return scores
        with ThreadPoolExecutor(self.workers, thread_name_prefix="code-tests") as pool:
            passed = {key: pool.submit(passed_calls, key[0], cases, CODE_TEST_LIMITS) for key, (cases, _) in runs.items()}
        for key, (cases, indices) in runs.items():
            count, total = passed[key].result(), len(cases.cases)
            for index in indices:
                scores[index] = count / total if self.partial_credit else float(count == total)
        return scores
