"""With $POSTTRAIN_API_KEY set, every route of every fleet service (engine, task services, orchestrator
registry) wants `Authorization: Bearer <key>`, and every client of ours sends it: SGLang's --api-key."""

from __future__ import annotations

import asyncio

import requests

from rollout.auth import API_KEY_ENV
from tests.test_agent_rollouts import Stack, checkpoint, play_all, specs  # noqa: F401 (checkpoint: a fixture)


def test_with_a_key_every_service_wants_it_and_every_client_sends_it(checkpoint, tokenizer, tmp_path,  # noqa: F811
                                                                     monkeypatch):
    monkeypatch.setenv(API_KEY_ENV, "s3cret")  # the engines and services started below inherit it
    stack = Stack(checkpoint, tmp_path, replicas=1)
    try:
        results, _ = asyncio.run(play_all(stack, tokenizer, specs(2)))  # registry, router, orchestrator, services
        assert {r.status for r in results} <= {"ok", "truncated"}
        engine = stack.engines[0].url
        for method, path in [("GET", "/health"), ("GET", "/get_model_info"), ("POST", "/generate"),
                             ("POST", "/update_weights")]:
            assert requests.request(method, engine + path, json={}, timeout=10).status_code == 401, path
        assert requests.get(engine + "/health", headers={"Authorization": "Bearer nope"}, timeout=10).status_code == 401
        assert requests.get(engine + "/health", headers={"Authorization": "Bearer s3cret"}, timeout=10).status_code == 200
        for service in stack.services.values():
            assert requests.post(service.url + "/reset", json={}, timeout=10).status_code == 401
        assert requests.get(stack.tasks.url + "/tasks", timeout=10).status_code == 401
    finally:
        stack.close()
