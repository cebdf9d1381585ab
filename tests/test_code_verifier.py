"""The code suite and its verifier under real bubblewrap: every reference solution passes its hidden tests, wrong
code fails them, a reply without code starts no sandbox, hostile code is contained and scores 0 promptly, and the
suite and its scores are the same every time."""

from __future__ import annotations

import json
import socket
import time

import pytest

from rewards.contract import check_contract
from rewards.loading import RewardModuleError, check_reward_params
from rewards.protocol import RewardSample
from rewards.verifiers import CODE_TEST_LIMITS, CodeTests
from rollout.agents.envs.code_sandbox import SandboxUnavailable
from suites import code
from suites.answers import fenced_python
from suites.code_cases import FunctionCases
from suites.prepare import SUITES, SuiteSizes, prompt_splits, suite_splits

pytestmark = pytest.mark.usefixtures("bubblewrap")


def turn(reply: str, reasoning: str = "Plan the function.") -> str:
    """A completion as the engine decodes it with thinking on: reasoning, </think>, reply, stop token."""
    return f"{reasoning}</think>{reply}<|user|>"


def sample(problem: code.CodeProblem, reply: str) -> RewardSample:
    return RewardSample(tuple(problem.messages()[:1]), turn(reply), problem.reference, {"thinking": True, "domain": "code"})


def problem_of(template: str, seed: int = 5) -> code.CodeProblem:
    return next(p for p in code.generate(len(code.TEMPLATES), seed) if p.template == template)


def test_every_reference_solution_of_the_suite_passes_its_hidden_tests():
    # The RL path: prompt@1 rows carry the tests as the reference; the SFT rows answer with the solution.
    count = len(code.TEMPLATES)
    prompts = prompt_splits("code", SuiteSizes(train=count, test=1), seed=3)["train"]
    chats = {row["id"]: row for row in suite_splits("code", SuiteSizes(train=count, test=1), seed=3)["train"]}
    samples = []
    for row in prompts:
        reply = next(m for m in chats[row["id"]]["messages"] if m["role"] == "assistant")
        metadata = {"domain": row["domain"], **json.loads(row["metadata_json"]), "thinking": True}
        samples.append(RewardSample(tuple(row["messages"]), turn(reply["content"], reply["reasoning_content"]),
                                    row["reference_answer"], metadata))
    assert {json.loads(row["metadata_json"])["template"] for row in prompts} == {t.__name__ for t in code.TEMPLATES}
    scores = CodeTests()(samples)
    assert scores == [1.0] * count, [(row["id"], s) for row, s in zip(prompts, scores, strict=True) if s != 1.0]
    assert check_contract("rewards.verifiers.CodeTests").passed
    with pytest.raises(RewardModuleError, match="workers must be a positive integer"):
        check_reward_params("rewards.verifiers.CodeTests", {"workers": 0})  # refused when a spec is checked


def test_wrong_code_scores_zero_and_partial_credit_counts_the_calls_passed():
    clamp = problem_of("clamp")
    low = clamp.drawn.calls[4][1]  # the cases end with the two bounds themselves, which an identity passes
    identity = fenced_python("def clamp(x):\n    return x\n")
    off_by_one = fenced_python(clamp.drawn.solution.replace(f"max({low}", f"max({low + 1}"))
    wrong_name = fenced_python(clamp.drawn.solution.replace("def clamp", "def clip"))
    raises = fenced_python("def clamp(x):\n    raise ValueError(x)\n")
    boolean = fenced_python("def clamp(x):\n    return True\n")  # JSON true is not 1: types count
    batch = [sample(clamp, reply) for reply in (identity, off_by_one, wrong_name, raises, boolean)]
    assert CodeTests()(batch) == [0.0] * 5
    partial = CodeTests(partial_credit=True)(batch)
    passed_by_identity = sum(max(min(x, clamp.drawn.calls[5][1]), low) == x for (x,), _ in clamp.drawn.calls)
    assert partial[0] == passed_by_identity / len(clamp.drawn.calls) and 0 < partial[0] < 1
    assert partial[2:] == [0.0, 0.0, 0.0]


def test_a_reply_without_code_scores_zero_and_starts_no_sandbox(monkeypatch):
    problem = problem_of("reverse_words")
    solution = fenced_python(problem.drawn.solution)
    without_code = [
        turn("The answer is 5."),
        turn("Here it is.", reasoning=f"Draft:\n{solution}"),  # code in the reasoning is not the answer
        turn(f"```python\n{problem.drawn.solution}"),  # never closed
        turn("```python\n   \n```"),  # blank
        turn(f"```\n{problem.drawn.solution}```"),  # not marked python
        f"Plan.</think>{solution}",  # cut off before its stop token
        f"{solution}<|user|>",  # thinking on, but the reasoning never closed
        "",
    ]
    # With no bubblewrap on PATH, a sandbox that started would raise SandboxUnavailable.
    monkeypatch.setenv("PATH", "/nonexistent")
    batch = [RewardSample(tuple(problem.messages()[:1]), text, problem.reference, {"thinking": True})
             for text in without_code]
    no_tests = [RewardSample(tuple(problem.messages()[:1]), turn(solution), reference, {"thinking": True})
                for reference in (None, "42", "The anchor reply.", '{"function": "f", "cases": []}')]
    assert CodeTests()(batch + no_tests) == [0.0] * len(batch) + [None] * len(no_tests)
    with pytest.raises(SandboxUnavailable, match="bwrap"):
        CodeTests()([sample(problem, solution)])


def test_hostile_code_is_contained_scores_zero_and_returns_promptly(tmp_path):
    problem = problem_of("clamp")
    solution = problem.drawn.solution
    # The expected values, where the host could read them: hostile code that got at them would pass.
    answers = tmp_path / "answers.json"
    answers.write_text(json.dumps({repr(args): returns for args, returns in problem.drawn.calls}))
    with socket.create_server(("127.0.0.1", 0)) as server:
        server.settimeout(0.2)
        port = server.getsockname()[1]
        # Each would pass its tests if what it tries worked: the solution follows the hostile part.
        hostile = {
            "endless loop": f"while True:\n    pass\n{solution}",
            "sleeps past the wall time": f"import time\ntime.sleep(1000)\n{solution}",
            "fork bomb": f"import os, signal\nfor _ in range(100):\n    if os.fork() == 0:\n        signal.pause()\n"
                         f"{solution}",
            "memory hog": f"hog = bytearray(2 * 1024**3)\n{solution}",
            "reads the answers on the host": f"import json\nANSWERS = json.load(open({str(answers)!r}))\n"
                                             "def clamp(x):\n    return ANSWERS[repr((x,))]\n",
            "reads a root-only file": f"open('/etc/shadow').read()\n{solution}",
            "host network": f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=1).close()\n{solution}",
            "outside network": f"import socket\nsocket.create_connection(('1.1.1.1', 53), timeout=1).close()\n{solution}",
            "exits early": "import os\nos._exit(0)\n",
            "claims to equal anything": "class Anything:\n    def __eq__(self, other):\n        return True\n\n"
                                        "def clamp(x):\n    return Anything()\n",
            "huge output and file": f"import sys\nsys.stdout.write('x' * 10**7)\nopen('big', 'w').write('x' * 10**7)\n"
                                    f"{solution}",
        }
        started = time.monotonic()
        scores = CodeTests(workers=4)([sample(problem, fenced_python(code)) for code in hostile.values()])
        elapsed = time.monotonic() - started
        with pytest.raises(TimeoutError):
            server.accept()  # the sandbox's loopback is its own
    assert dict(zip(hostile, scores, strict=True)) == dict.fromkeys(hostile, 0.0)
    # The slow ones (the loop, the sleep) run side by side, each stopped at its limit.
    assert elapsed < 3 * CODE_TEST_LIMITS.wall_s, elapsed
    assert CodeTests()([sample(problem, fenced_python(solution))]) == [1.0]  # the solution alone passes


def test_the_suite_and_its_scores_are_deterministic():
    assert code.generate(80, seed=9) == code.generate(80, seed=9)
    assert code.generate(40, seed=9) == code.generate(80, seed=9)[:40]  # a longer run starts with a shorter one
    assert code.generate(80, seed=9) != code.generate(80, seed=10)
    assert SUITES["code"]("test", 30, 4) == SUITES["code"]("test", 30, 4)
    problem = problem_of("clamp")
    cases = FunctionCases.from_reference(problem.reference)
    assert cases == problem.cases() and len(cases.cases) == 6
    # Which calls pass depends on the string hash seed and on random draws: the runner pins both, so every run
    # passes the same calls.
    chancy = fenced_python(f"import random\n{problem.drawn.solution}\n_solution = clamp\n\n"
                           "def clamp(x):\n    lucky = (hash(str(x)) + int(random.random() * 2)) % 2 == 0\n"
                           "    return _solution(x) if lucky else None\n")
    verifier = CodeTests(partial_credit=True)
    assert len({verifier([sample(problem, chancy)])[0] for _ in range(5)}) == 1
