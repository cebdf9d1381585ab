"""Agent task services validate what they are given (422, the episode kept), bound the work one turn can
ask for, and forget episodes nobody steps."""

from __future__ import annotations

import time

from fastapi.testclient import TestClient

from rollout.agents.envs.service import build_env_app
from rollout.agents.envs.tasks import MAX_TOOL_CALLS_PER_TURN, CalcTask, SearchTask

PROMPT = [{"role": "user", "content": "What is 2 + 2?"}]


def calls(*expressions: str) -> str:
    """A model turn calling the calculator once per expression."""
    return "plan</think>" + "".join(
        f"<tool_call>calculate<arg_key>expression</arg_key><arg_value>{e}</arg_value></tool_call>" for e in expressions
    ) + "<|observation|>"


def test_a_row_the_task_cannot_play_is_a_422_naming_the_field():
    search = TestClient(build_env_app(SearchTask()))
    response = search.post("/reset", json={"episode_id": "s", "messages": PROMPT, "reference": "Paris", "metadata": {}})
    assert response.status_code == 422 and "metadata.graph_seed" in response.text
    calc = TestClient(build_env_app(CalcTask()))
    response = calc.post("/reset", json={"episode_id": "c", "messages": PROMPT, "reference": "four"})
    assert response.status_code == 422 and "reference" in response.text
    assert calc.post("/reset", json={"episode_id": "c", "messages": PROMPT, "reference": "4"}).status_code == 200
    assert search.post("/step", json={"episode_id": "s", "text": calls("1+1")}).status_code == 404


def test_the_calculator_answers_integers_only_and_a_few_calls_per_turn():
    calc = TestClient(build_env_app(CalcTask()))
    calc.post("/reset", json={"episode_id": "c", "messages": PROMPT, "reference": "4"})
    results = calc.post("/step", json={"episode_id": "c", "text": calls("2**-1", *["1+1"] * 6)}).json()["tool_results"]
    assert results[0] == "Error: a negative exponent gives a fraction: integers only."
    assert results[1:MAX_TOOL_CALLS_PER_TURN] == ["2"] * (MAX_TOOL_CALLS_PER_TURN - 1)
    assert all(r.startswith(f"Error: at most {MAX_TOOL_CALLS_PER_TURN} tool calls per turn")
               for r in results[MAX_TOOL_CALLS_PER_TURN:])
    assert len(results) == 7


def test_idle_episodes_expire_and_are_named_as_such():
    calc = TestClient(build_env_app(CalcTask(), idle_ttl_s=0.2))
    calc.post("/reset", json={"episode_id": "left", "messages": PROMPT, "reference": "4"})
    time.sleep(0.3)
    calc.post("/reset", json={"episode_id": "next", "messages": PROMPT, "reference": "4"})
    assert calc.get("/health").json()["episodes"] == 1
    gone = calc.post("/step", json={"episode_id": "left", "text": calls("1+1")})
    assert gone.status_code == 404 and "idle past 0.2 s" in gone.text


def test_a_service_holds_a_bounded_number_of_episodes():
    calc = TestClient(build_env_app(CalcTask(), max_episodes=2))
    for name in ("a", "b"):
        assert calc.post("/reset", json={"episode_id": name, "messages": PROMPT, "reference": "4"}).status_code == 200
    full = calc.post("/reset", json={"episode_id": "c", "messages": PROMPT, "reference": "4"})
    assert full.status_code == 429 and "at most 2 at once (--max-episodes)" in full.text
    calc.post("/abandon", json={"episode_id": "a"})
    assert calc.post("/reset", json={"episode_id": "c", "messages": PROMPT, "reference": "4"}).status_code == 200


def play_calc(calc: TestClient, episode_id: str, turns: list[str]) -> dict:
    question = [{"role": "user", "content": "Use the calculator to compute ((5 + 3) * 2) - 4."}]
    calc.post("/reset", json={"episode_id": episode_id, "messages": question, "reference": "12"})
    for text in turns:
        calc.post("/step", json={"episode_id": episode_id, "text": text})
    return calc.post("/verify", json={"episode_id": episode_id}).json()


def test_calc_grades_the_worked_steps_its_calls_made_in_order_and_success_stays_the_answer():
    calc = TestClient(build_env_app(CalcTask()))
    answer = "8 * 2 = 16\n16 - 4 = 12</think>The answer is 12.<|user|>"
    wrong_answer = "done</think>The answer is 11.<|user|>"
    every_step = play_calc(calc, "all", [calls("5 + 3"), calls("8*2"), calls("16 - 4"), answer])
    assert (every_step["reward"], every_step["credit"]) == (1.0, 1.0)
    # Right calls, wrong answer: credit without success; the answer alone (no calls): success without credit.
    assert play_calc(calc, "miss", [calls("5 + 3", "8 * 2", "16 - 4"), wrong_answer])["credit"] == 1.0
    assert play_calc(calc, "miss", [calls("5 + 3", "8 * 2", "16 - 4"), wrong_answer])["reward"] == 0.0
    assert (play_calc(calc, "head", [answer])["reward"], play_calc(calc, "h2", [answer])["credit"]) == (1.0, 0.0)
    # Graded by parts (a, op, b) up to the first call that misses one: what comes after it earns nothing.
    assert play_calc(calc, "one", [calls("5 + 3", "16 - 4"), wrong_answer])["credit"] == 3 / 9
    assert play_calc(calc, "near", [calls("5 - 3", "8 * 2", "16 - 4"), wrong_answer])["credit"] == 2 / 9
    assert play_calc(calc, "two", [calls("5 + 3"), calls("8 * 2"), calls("9 - 4"), wrong_answer])["credit"] == 8 / 9
    assert play_calc(calc, "text", [calls("five plus three"), wrong_answer])["credit"] == 0.0
    calc.post("/reset", json={"episode_id": "other", "messages": PROMPT, "reference": "4"})  # not calc's question
    calc.post("/step", json={"episode_id": "other", "text": calls("2 + 2")})
    calc.post("/step", json={"episode_id": "other", "text": "x</think>The answer is 4.<|user|>"})
    assert calc.post("/verify", json={"episode_id": "other"}).json()["credit"] == 0.0
    # Calls past the last step, another tool's call, a malformed final turn: the made steps still count.
    assert play_calc(calc, "more", [calls("5 + 3", "8 * 2", "16 - 4", "12 + 0"), "garbage"])["credit"] == 1.0
    search = TestClient(build_env_app(SearchTask()))  # a task that does not grade progress: no credit at all
    search.post("/reset", json={"episode_id": "s", "messages": PROMPT, "reference": "Paris",
                                "metadata": {"graph_seed": 0}})
    search.post("/step", json={"episode_id": "s", "text": "x</think>The answer is Paris.<|user|>"})
    assert search.post("/verify", json={"episode_id": "s"}).json() == {"reward": 1.0, "credit": None, "turns": 1,
                                                                       "tool_calls": 0}
