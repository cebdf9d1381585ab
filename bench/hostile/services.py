"""The task services."""

from __future__ import annotations

from fastapi.testclient import TestClient

from bench.hostile.cases import Case


def service_cases() -> list[Case]:
    from rollout.agents.envs.service import build_env_app
    from rollout.agents.envs.tasks import CalcTask, SearchTask

    prompt = [{"role": "user", "content": "What is 2 + 2?"}]
    calc, search = TestClient(build_env_app(CalcTask(), max_episodes=3)), TestClient(build_env_app(SearchTask()))
    calc.post("/reset", json={"episode_id": "open", "messages": prompt, "reference": "4"})

    def reset(client, **fields):
        return lambda: client.post("/reset", json={"episode_id": "e", "messages": prompt, **fields})

    def fill():
        for name in ("f1", "f2"):
            calc.post("/reset", json={"episode_id": name, "messages": prompt, "reference": "4"})
        return calc.post("/reset", json={"episode_id": "f3", "messages": prompt, "reference": "4"})

    cases = [
        ("calc reference not an integer", reset(calc, reference="four"), "reference"),
        ("search without graph_seed", reset(search, reference="Paris", metadata={}), "graph_seed"),
        ("step an unknown episode", lambda: calc.post("/step", json={"episode_id": "ghost", "text": "hi"}), "ghost"),
        ("verify an unfinished episode", lambda: calc.post("/verify", json={"episode_id": "open"}), "not finished"),
        ("reset a running episode", lambda: calc.post("/reset", json={"episode_id": "open", "messages": prompt,
                                                                         "reference": "4"}), "already running"),
        ("reset without messages", lambda: calc.post("/reset", json={"episode_id": "x", "reference": "4"}), "messages"),
        ("a body that is not JSON", lambda: calc.post("/step", content=b"{nope", headers={"content-type": "application/json"}),
         "json"),
        ("more episodes than the service holds", fill, "--max-episodes"),
    ]
    return [Case("task services", what, attempt, names) for what, attempt, names in cases]
