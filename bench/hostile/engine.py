"""The rollout engine: its HTTP surface, and a watch on its /health while every case runs."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import requests

from bench.hostile.cases import Case


def engine_cases(store: dict, scratch: Path) -> list[Case]:
    from rollout.process import EngineProcess

    engine = EngineProcess(store["init"], scratch / "engine.log", weights_dirs=[scratch / "allowed"])
    # A master nobody listens on is named after the join timeout: a few seconds here, a minute by default.
    engine.service.args += ["--weight-group-join-timeout-s", "5"]
    client = engine.start()
    url = client.base_url
    allowed = scratch / "allowed"
    from infra.store import open_store

    local = open_store(store["root"]).open(store["init"]).download(allowed / "vocab", skip=("deepspeed/",))
    config = json.loads((local / "config.json").read_text())
    (local / "config.json").write_text(json.dumps({**config, "vocab_size": 2_000_000}))
    outside = open_store(store["root"]).open(store["init"]).download(scratch / "outside", skip=("deepspeed/",))

    def generate(body):
        return lambda: requests.post(f"{url}/generate", json=body, timeout=60)

    def raw(text):
        return lambda: requests.post(f"{url}/generate", data=text, timeout=60, headers={"content-type": "application/json"})

    def update(path):
        return lambda: requests.post(f"{url}/update_weights", json={"model_path": str(path)}, timeout=120)

    def join(**fields):
        body = {"master_address": "127.0.0.1", "master_port": 29500, "rank_offset": 1, "world_size": 2,
                "backend": "gloo", **fields}
        return lambda: requests.post(f"{url}/init_weights_update_group", json=body, timeout=120)

    cases = [
        ("temperature NaN", raw('{"input_ids": [5, 6], "sampling_params": {"temperature": NaN}}'), "temperature"),
        ("top_p Infinity", raw('{"input_ids": [5, 6], "sampling_params": {"top_p": Infinity}}'), "top_p"),
        ("temperature negative", generate({"input_ids": [5, 6], "sampling_params": {"temperature": -1}}), "temperature"),
        ("5,000 prompts", generate({"input_ids": [[5]] * 5000, "sampling_params": {"max_new_tokens": 1}}), "4096"),
        ("600,000 new tokens", generate({"input_ids": [5], "sampling_params": {"max_new_tokens": 600_000}}), "524288"),
        ("a token id outside the vocabulary", generate({"input_ids": [5, 10**9]}), "vocabulary"),
        ("a prompt longer than the context", generate({"input_ids": [5] * 100_000, "sampling_params": {"max_new_tokens": 1}}),
         "context"),
        ("no input_ids", generate({"sampling_params": {}}), "input_ids"),
        ("max_new_tokens -1", generate({"input_ids": [5], "sampling_params": {"max_new_tokens": -1}}), "max_new_tokens"),
        ("update from a folder not allowed", update(outside), "--weights-dir"),
        ("update with vocab_size 2e6", update(allowed / "vocab"), "vocab_size"),
        ("update from a missing URI", update(Path(store["root"]).as_uri() + "/checkpoints/none"), "not a committed"),
        ("update with no model_path", lambda: requests.post(f"{url}/update_weights", json={}, timeout=30), "model_path"),
        ("a 50 MB /generate body", raw('{"input_ids": [' + "5," * 25_000_000 + '5]}'), "at most 25165824 bytes"),
        ("a 26 MB body sent without a length", lambda: requests.post(f"{url}/generate", data=iter(
            [b'{"input_ids": [' + b"5," * 13_000_000 + b"5]}"]), timeout=60), "at most 25165824 bytes"),
        ("8 million ids in 16 MB", raw('{"input_ids": [' + "5," * 8_000_000 + '5]}'), "786432 JSON values"),
        ("input_ids nested 100,000 deep", raw('{"input_ids": ' + "[" * 100_000 + "]" * 100_000 + "}"),
         "lists and objects"),
        ("master_address with shell words", join(master_address="a b;c"), "master_address"),
        ("a master nobody listens on", join(master_port=1), "127.0.0.1:1"),
        ("rank_offset past world_size", join(rank_offset=2), "rank_offset"),
        ("backend mpi", join(backend="mpi"), "backend"),
    ]
    return [Case("engine", what, attempt, names) for what, attempt, names in cases], engine


class HealthWatch:
    """Probes the engine's /health four times a second while the cases run: a body parsed on its event loop
    shows as a slow answer (a router would take the replica out after a few)."""

    def __init__(self, url: str):
        self.url, self.latencies = url, []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._probe, name="health-watch", daemon=True)

    def __enter__(self) -> HealthWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _probe(self) -> None:
        while not self._stop.wait(0.25):
            started = time.monotonic()
            try:
                requests.get(f"{self.url}/health", timeout=10).raise_for_status()
            except requests.RequestException:
                pass  # counted as its wait, up to the 10 s timeout
            self.latencies.append(time.monotonic() - started)
