"""What the swe and terminal task tests share: their task service as a real process over HTTP, with a temporary
folder of its own (so the test sees exactly its workspaces), and reference trajectories replayed through it."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import requests

from model import special_tokens as st
from model.renderer import tool_call_text
from rollout.auth import bearer_headers
from rollout.process import ServiceProcess


@dataclass(frozen=True)
class TaskService:
    url: str
    temp: Path  # the service's temporary folder, where its workspaces are

    def post(self, path: str, **body) -> requests.Response:
        return requests.post(f"{self.url}{path}", json=body, headers=bearer_headers(), timeout=120)

    def call(self, path: str, **body) -> dict:
        response = self.post(path, **body)
        assert response.status_code == 200, (path, response.status_code, response.text)
        return response.json()

    def workspaces(self) -> list[Path]:
        return sorted(self.temp.glob("posttrain-workspace-*"))


@contextmanager
def task_service(task: str, folder: Path, *args: str) -> Iterator[TaskService]:
    """`python -m rollout.agents.envs.service --task TASK` until the block ends (SIGTERM: a clean shutdown)."""
    temp = folder / "temp"
    temp.mkdir(parents=True)
    process = ServiceProcess("rollout.agents.envs.service", ["--task", task, *args], folder / "service.log",
                             startup_timeout_s=60.0, env={"TMPDIR": str(temp)})
    url = process.start()
    try:
        yield TaskService(url, temp)
    finally:
        process.stop()


def generated_text(message: Mapping) -> str:
    """An assistant message as a model following the format generates it after `<think>`."""
    calls = "".join(tool_call_text(call) for call in message.get("tool_calls") or [])
    stop = st.OBSERVATION if calls else st.USER
    return f"{message['reasoning_content']}{st.THINK_CLOSE}{message['content']}{calls}{stop}"


def replay(service: TaskService, episode_id: str, messages: Sequence[Mapping], reference: str,
           metadata: Mapping) -> tuple[list[str], dict]:
    """Play the trajectory's assistant turns through /reset, /step and /verify: the tool results the service
    answered, and its verdict."""
    service.call("/reset", episode_id=episode_id, messages=list(messages[:1]), reference=reference,
                 metadata=dict(metadata))
    results = []
    for message in messages[1:]:
        if message["role"] == "assistant":
            step = service.call("/step", episode_id=episode_id, text=generated_text(message))
            results += step["tool_results"]
    assert step["done"]
    return results, service.call("/verify", episode_id=episode_id)


def tool_turn(name: str, **arguments: str) -> str:
    """A model turn making one tool call."""
    return f"call{st.THINK_CLOSE}{tool_call_text({'name': name, 'arguments': arguments})}{st.OBSERVATION}"


FINAL_TURN = f"done{st.THINK_CLOSE}Done.{st.USER}"
