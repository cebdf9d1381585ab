"""The orchestrator's registry of agent task services, their share of rollouts and their concurrency.

Task services register themselves over HTTP (`POST /register`); `GET /tasks` lists them and
`PUT /tasks/{task}` changes a task's share or concurrency while rollouts run. New groups are drawn
from the tasks by smooth weighted round robin, so over any window each task gets its share of groups
as exactly as integers allow, deterministically.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import asdict, dataclass

from fastapi import FastAPI, HTTPException
from pydantic import BaseModel, Field

from rollout.auth import api_key, require_api_key
from rollout.http_errors import install_validation_errors


@dataclass
class TaskEntry:
    task: str
    url: str | None = None  # None until the service registers
    share: float = 1.0
    concurrency: int = 64
    running: int = 0
    credit: float = 0.0  # smooth weighted round robin state


class RegisterRequest(BaseModel):
    task: str
    url: str


class TaskUpdate(BaseModel):
    share: float | None = Field(None, ge=0)
    concurrency: int | None = Field(None, ge=1)


class TaskRegistry:
    def __init__(self, shares: dict[str, float], concurrency: dict[str, int] | None = None):
        self._lock = threading.Lock()
        self._changed: asyncio.Condition | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.entries = {task: TaskEntry(task, share=share, concurrency=(concurrency or {}).get(task, 64))
                        for task, share in shares.items()}

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """Attach to the event loop the rollouts run on (changes from other threads wake it)."""
        self._loop, self._changed = loop, asyncio.Condition()

    def register(self, task: str, url: str) -> None:
        with self._lock:
            if task not in self.entries:
                raise KeyError(f"task {task!r} is not configured; configured: {', '.join(sorted(self.entries))}")
            self.entries[task].url = url
        self._notify()

    def update(self, task: str, share: float | None = None, concurrency: int | None = None) -> None:
        with self._lock:
            entry = self.entries[task]
            if share is not None:
                entry.share = share
            if concurrency is not None:
                entry.concurrency = concurrency
        self._notify()

    def url(self, task: str) -> str:
        url = self.entries[task].url
        if url is None:
            raise LookupError(f"task {task!r} has no registered service")
        return url

    def next_task(self) -> str:
        """The task of the next group: the registered task furthest behind its share."""
        with self._lock:
            live = [e for e in self.entries.values() if e.url is not None and e.share > 0]
            if not live:
                raise LookupError("no task service with a share above 0 is registered")
            total = sum(e.share for e in live)
            for entry in live:
                entry.credit += entry.share
            chosen = max(live, key=lambda e: (e.credit, e.task))
            chosen.credit -= total
            return chosen.task

    async def wait_registered(self, tasks: list[str], timeout_s: float) -> None:
        async with self._changed:
            await asyncio.wait_for(self._changed.wait_for(
                lambda: all(self.entries[t].url is not None for t in tasks)), timeout_s)

    async def acquire(self, task: str) -> None:
        """Wait for a free slot under the task's concurrency limit (which may change meanwhile)."""
        async with self._changed:
            await self._changed.wait_for(lambda: self.entries[task].running < self.entries[task].concurrency)
            self.entries[task].running += 1

    async def release(self, task: str) -> None:
        async with self._changed:
            self.entries[task].running -= 1
            self._changed.notify_all()

    def snapshot(self) -> list[dict]:
        with self._lock:
            return [{k: v for k, v in asdict(e).items() if k != "credit"} for e in self.entries.values()]

    def _notify(self) -> None:
        if self._loop is None:
            return

        async def wake():
            async with self._changed:
                self._changed.notify_all()

        if self._loop.is_running():
            asyncio.run_coroutine_threadsafe(wake(), self._loop)


def registry_app(registry: TaskRegistry) -> FastAPI:
    app = require_api_key(install_validation_errors(FastAPI(title="posttrain rollout orchestrator")), api_key())

    @app.post("/register")
    def register(request: RegisterRequest) -> dict:
        try:
            registry.register(request.task, request.url)
        except KeyError as error:
            raise HTTPException(status_code=404, detail=str(error)) from error
        return {"registered": request.task}

    @app.get("/tasks")
    def tasks() -> list[dict]:
        return registry.snapshot()

    @app.put("/tasks/{task}")
    def update(task: str, change: TaskUpdate) -> dict:
        if task not in registry.entries:
            raise HTTPException(status_code=404, detail=f"no task {task!r}")
        registry.update(task, change.share, change.concurrency)
        return next(e for e in registry.snapshot() if e["task"] == task)

    @app.get("/health")
    def health() -> dict:
        return {"status": "ok"}

    return app
