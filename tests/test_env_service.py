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
