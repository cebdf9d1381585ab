"""The reward contract, checked on a fixture batch: what `posttrain rewards check` and the contract test run.

A module passes when it loads by dotted path, names itself, scores every sample of the batch with a
finite float or None within the timeout, accepts an empty batch, and gives the same scores twice.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rewards.loading import RewardModuleError, load_reward_module, reward_module_ref, score_batch
from rewards.protocol import RewardSample
from suites import arith, chat, code, instruct
from suites.answers import fenced_python


@dataclass(frozen=True)
class FixtureSample:
    label: str  # what the sample is, for the report
    sample: RewardSample


def _turn(reasoning: str, reply: str, *, finished: bool = True) -> str:
    """A generated turn as the engine decodes it with thinking on: reasoning, </think>, reply, stop token."""
    return f"{reasoning}</think>{reply}" + ("<|user|>" if finished else "")


def fixture_batch() -> list[FixtureSample]:
    """One sample of each kind a stage sends: right, wrong and unfinished arith, instruct, chat, code, empty."""
    problem = arith.generate(1, seed=0, levels=(3,))[0]
    question = tuple(problem.messages()[:1])
    reasoning = "\n".join(problem.steps)
    item = instruct.generate(1, seed=0, split="train")[0]
    item_prompt = tuple(item.messages()[:1])
    constraints = {"thinking": True, "domain": "instruct", "constraints": list(item.constraints)}
    topic = chat.generate(1, seed=0, split="train")[0]
    answer = str(problem.answer)
    task = code.generate(1, seed=0)[0]
    task_prompt = tuple(task.messages()[:1])
    wrong_code = fenced_python(f"def {task.drawn.function}({task.drawn.parameters}):\n    return None\n")
    return [
        FixtureSample("arith, right answer", RewardSample(
            question, _turn(reasoning, f"The answer is {answer}."), answer, {"thinking": True, "domain": "arith"})),
        FixtureSample("arith, wrong answer", RewardSample(
            question, _turn(reasoning, f"The answer is {problem.answer + 1}."), answer, {"thinking": True, "domain": "arith"})),
        FixtureSample("arith, unfinished turn", RewardSample(
            question, _turn(reasoning, "The answer is", finished=False), answer, {"thinking": True, "domain": "arith"})),
        FixtureSample("instruct, meets its constraints", RewardSample(
            item_prompt, _turn(item.reasoning, item.reference), None, constraints)),
        FixtureSample("instruct, breaks its constraints", RewardSample(
            item_prompt, _turn(item.reasoning, item.violating_reply), None, constraints)),
        FixtureSample("chat, the anchor reply", RewardSample(
            tuple(topic.prompt_messages()), _turn("Answer the question.", topic.anchor), topic.anchor,
            {"thinking": True, "domain": "chat"})),
        FixtureSample("code, passes its tests", RewardSample(
            task_prompt, _turn(task.drawn.plan, task.reply), task.reference, {"thinking": True, "domain": "code"})),
        FixtureSample("code, fails its tests", RewardSample(
            task_prompt, _turn(task.drawn.plan, wrong_code), task.reference, {"thinking": True, "domain": "code"})),
        FixtureSample("empty response", RewardSample(question, "", answer, {"thinking": True, "domain": "arith"})),
    ]


@dataclass
class ContractResult:
    path: str
    name: str | None = None
    version: str | None = None
    source_sha256: str | None = None
    labels: list[str] = field(default_factory=list)
    scores: list[float | None] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.problems


def check_contract(path: str, params: dict | None = None, timeout_s: float = 30.0) -> ContractResult:
    result = ContractResult(path)
    try:
        module = load_reward_module(path, params)
    except (RewardModuleError, TypeError) as error:
        result.problems.append(str(error))
        return result
    result.name, result.version = module.name, module.version
    for attribute in ("name", "version"):
        if not str(getattr(module, attribute)).strip():
            result.problems.append(f"{path}: `{attribute}` is empty; lineage records it")
    result.source_sha256 = reward_module_ref(path, module, params).source_sha256
    batch = fixture_batch()
    result.labels = [fixture.label for fixture in batch]
    samples = [fixture.sample for fixture in batch]
    try:
        result.scores = score_batch(module, samples, timeout_s)
        if score_batch(module, samples, timeout_s) != result.scores:
            result.problems.append(f"{path}: two calls on the same batch gave different scores")
        score_batch(module, [], timeout_s)
        if all(score is None for score in result.scores):
            result.problems.append(f"{path}: scored none of the {len(samples)} fixture samples (every score None)")
    except RewardModuleError as error:
        result.problems.append(str(error))
    return result
