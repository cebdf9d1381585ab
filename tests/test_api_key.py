"""With $POSTTRAIN_API_KEY set, every route of every fleet service (engine, SGLang's router, task services,
orchestrator registry) but the health probe wants `Authorization: Bearer <key>`, and every client of ours
sends it: SGLang's --api-key."""

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
        for method, path in [("GET", "/get_model_info"), ("POST", "/generate"), ("POST", "/update_weights"),
                             ("POST", "/init_weights_update_group"), ("POST", "/update_weights_from_distributed")]:
            assert requests.request(method, engine + path, json={}, timeout=10).status_code == 401, path
        generate = {"input_ids": [5, 6], "sampling_params": {"max_new_tokens": 1}}
        assert requests.post(engine + "/generate", json=generate, headers={"Authorization": "Bearer nope"},
                             timeout=10).status_code == 401
        assert requests.post(engine + "/generate", json=generate, headers={"Authorization": "Bearer s3cret"},
                             timeout=10).status_code == 200
        # As on SGLang's server, the health probe is open: SGLang's router probes it without credentials.
        assert requests.get(engine + "/health", timeout=10).status_code == 200
        assert requests.get(stack.router_url + "/workers", timeout=10).status_code == 401  # the router wants it too
        for service in stack.services.values():
            assert requests.post(service.url + "/reset", json={}, timeout=10).status_code == 401
        assert requests.get(stack.tasks.url + "/tasks", timeout=10).status_code == 401
    finally:
        stack.close()
