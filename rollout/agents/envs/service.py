"""An agent task as its own HTTP service: `python -m rollout.agents.envs.service --task search --port N`.

Endpoints: `POST /reset` poses a task row as a new episode, `POST /step` applies one model turn and
returns the tool results, `POST /verify` scores the finished episode, with the task's partial credit
where it grades progress (and forgets it), `POST /abandon` forgets one given up on, `GET /health`.
An episode that ends (verified, abandoned, idle past `--idle-ttl-s`, or running when the service stops) releases
what its task held for it (`EndsEpisodes`: the code tasks' sandboxed workspace).
With `--orchestrator URL` the service registers itself there once it is up. `--latency-median-s`
adds a seeded lognormal delay to every step, the heavy tail of real tools (bench/async_vs_sync.py).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import math
import random
import threading
import time
from contextlib import asynccontextmanager

import requests
import uvicorn
from fastapi import FastAPI, HTTPException
from pydantic import BaseModel, Field

from infra.lifetime import exit_with_owner
from rollout.agents.envs.catalog import load_task
from rollout.agents.envs.tasks import AgentTask, EndsEpisodes, Episode, PartialCredit, take_turn
from rollout.auth import api_key, bearer_headers, require_api_key
from rollout.http_errors import install_validation_errors

log = logging.getLogger("rollout.agents.envs")


class ResetRequest(BaseModel):
    episode_id: str
    messages: list[dict] = Field(..., min_length=1, description="the task's prompt: the conversation so far")
    reference: str
    metadata: dict = Field(default_factory=dict)


class ResetResponse(BaseModel):
    messages: list[dict]
    tools: list[dict]


class StepRequest(BaseModel):
    episode_id: str
    text: str = Field(..., description="the model's turn: everything it generated after the generation prompt")


class StepResponse(BaseModel):
    tool_results: list[str]
    done: bool


class EpisodeRequest(BaseModel):
    episode_id: str


class VerifyResponse(BaseModel):
    reward: float = Field(..., description="1 when the episode succeeded, else 0")
    credit: float | None = Field(None, description="how far it got towards success, in [0, 1], from a task that "
                                                   "grades progress (PartialCredit); null from one that does not")
    turns: int
    tool_calls: int


class Latency(BaseModel):
    """Lognormal step delay: median `median_s`, shape `sigma` (sigma 1.5 puts 1 step in 20 past 12× the median)."""

    median_s: float = Field(..., gt=0)
    sigma: float = Field(1.0, ge=0)

    def delay(self, episode_id: str, turn: int) -> float:
        return random.Random(f"{episode_id}:{turn}").lognormvariate(math.log(self.median_s), self.sigma)


def build_env_app(task: AgentTask, latency: Latency | None = None, idle_ttl_s: float = 900.0,
                  max_episodes: int = 4096) -> FastAPI:
    episodes: dict[str, Episode] = {}

    @asynccontextmanager
    async def lifespan(_: FastAPI):
        yield
        for episode_id in list(episodes):  # shutting down ends every running episode
            release(forget(episode_id))

    app = FastAPI(title=f"posttrain {task.name} environment", lifespan=lifespan)
    app = require_api_key(install_validation_errors(app), api_key())
    touched: dict[str, float] = {}  # when each episode was last reset or stepped

    def episode(episode_id: str) -> Episode:
        if episode_id not in episodes:
            raise HTTPException(status_code=404, detail=f"no episode {episode_id!r} on the {task.name} service "
                                                        f"(never started, verified, or idle past {idle_ttl_s:g} s)")
        touched[episode_id] = time.monotonic()
        return episodes[episode_id]

    def forget(episode_id: str) -> Episode | None:
        touched.pop(episode_id, None)
        return episodes.pop(episode_id, None)

    def release(ended: Episode | None) -> None:
        """Free what the task held for an episode that is over: verified, abandoned, idle, or the service stopping."""
        if ended is not None and isinstance(task, EndsEpisodes):
            task.end_episode(ended)

    def expire_idle() -> None:
        """Forget episodes nobody stepped for `idle_ttl_s`: an orchestrator that died leaves them behind."""
        cutoff = time.monotonic() - idle_ttl_s
        for episode_id in [e for e, at in touched.items() if at < cutoff]:
            release(forget(episode_id))

    @app.get("/health")
    async def health() -> dict:
        return {"status": "ok", "task": task.name, "episodes": len(episodes)}

    @app.post("/reset")
    async def reset(request: ResetRequest) -> ResetResponse:
        expire_idle()
        if request.episode_id in episodes:
            raise HTTPException(status_code=409, detail=f"episode {request.episode_id!r} is already running")
        if len(episodes) >= max_episodes:
            raise HTTPException(status_code=429, detail=f"{len(episodes)} episodes running; the {task.name} service "
                                                        f"holds at most {max_episodes} at once (--max-episodes)")
        try:
            task.check_row(request.reference, request.metadata)
        except ValueError as error:
            raise HTTPException(status_code=422, detail=f"episode {request.episode_id!r}: {error}") from error
        episodes[request.episode_id] = Episode(request.reference, request.metadata, request.messages)
        touched[request.episode_id] = time.monotonic()
        return ResetResponse(messages=request.messages, tools=task.tools)

    @app.post("/step")
    async def step(request: StepRequest) -> StepResponse:
        current = episode(request.episode_id)
        if latency is not None:
            await asyncio.sleep(latency.delay(request.episode_id, current.turns))
        try:  # tools may block (the calculator is a child process): keep the event loop free
            result = await asyncio.to_thread(take_turn, task, current, request.text)
        except ValueError as error:
            raise HTTPException(status_code=409, detail=f"episode {request.episode_id!r}: {error}") from error
        return StepResponse(tool_results=result.tool_results, done=result.done)

    @app.post("/verify")
    async def verify(request: EpisodeRequest) -> VerifyResponse:
        current = episode(request.episode_id)
        if not current.finished:
            raise HTTPException(status_code=409, detail=f"episode {request.episode_id!r} has not finished")
        forget(request.episode_id)
        try:  # a verdict may run commands (the code tasks check in their sandbox): keep the event loop free
            credit = await asyncio.to_thread(task.partial_credit, current) if isinstance(task, PartialCredit) else None
            reward = float(await asyncio.to_thread(task.succeeded, current))
        finally:
            release(current)
        return VerifyResponse(reward=reward, credit=credit, turns=current.turns, tool_calls=current.tool_calls)

    @app.post("/abandon")
    async def abandon(request: EpisodeRequest) -> dict:
        """Forget an episode the orchestrator gave up on (its engine or its own time ran out)."""
        release(forget(request.episode_id))
        return {"abandoned": request.episode_id}

    return app


def register(orchestrator_url: str, task: str, url: str, timeout_s: float = 60.0) -> None:
    """Announce this service to the orchestrator, retrying while the orchestrator starts."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            requests.post(f"{orchestrator_url}/register", json={"task": task, "url": url}, timeout=5,
                          headers=bearer_headers()).raise_for_status()
            log.info("registered %s at %s with %s", task, url, orchestrator_url)
            return
        except requests.RequestException as error:
            if time.monotonic() > deadline:
                raise RuntimeError(f"could not register {task} with the orchestrator at {orchestrator_url}: {error}") from error
            time.sleep(0.5)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", required=True, help="a task name (posttrain.tasks entry point) or dotted path")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--orchestrator", default=None, help="the orchestrator's URL to register with")
    parser.add_argument("--latency-median-s", type=float, default=None)
    parser.add_argument("--latency-sigma", type=float, default=1.0)
    parser.add_argument("--max-episodes", type=int, default=4096, help="episodes running at once; past it, a 429")
    parser.add_argument("--idle-ttl-s", type=float, default=900.0, help="an episode nobody steps for this long ends")
    args = parser.parse_args(argv)
    exit_with_owner()
    task = load_task(args.task)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    latency = Latency(median_s=args.latency_median_s, sigma=args.latency_sigma) if args.latency_median_s else None
    url = f"http://{args.host}:{args.port}"
    server = uvicorn.Server(uvicorn.Config(build_env_app(task, latency, args.idle_ttl_s, args.max_episodes), host=args.host,
                                           port=args.port, log_level="warning"))
    if args.orchestrator:
        def register_once_up():
            while not server.started:
                time.sleep(0.05)
            register(args.orchestrator, args.task, url)
        threading.Thread(target=register_once_up, daemon=True).start()
    server.run()


if __name__ == "__main__":
    main()
