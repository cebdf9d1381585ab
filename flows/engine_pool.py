"""One pipeline run's rollout engines, kept across its stages instead of started per stage.

Without it a run started about ten engines, several on a checkpoint another engine of the run had just served:
reasoning RL's engine served its final checkpoint for its evaluation after, then stopped, and agentic RL's
evaluation before started one on that checkpoint again; distillation's teachers loaded the three RL checkpoints
once more. On a GPU cluster every start is minutes of loading. The pool keeps each engine it starts until the run
ends and hands it out again:

- a *shared* lease (an evaluation, a distillation teacher: nothing writes into its weights) gets an engine that
  serves the checkpoint already, or an idle one made to serve it by a weight update from the store, or a new one;
- an *exclusive* lease (a stage's policy engine: its trainer pushes weights into it) gets an idle engine made to
  serve the stage's starting checkpoint the same way; once released, what it serves is unknown to the pool (the
  trainer's last push), so it is loaded from the store before anyone reads it again.

Between stages the pipeline says which checkpoints later stages read (`keep_only`): an idle engine serving one of
them is kept for it, one spare idle engine is kept for whatever comes next, and the others stop. Every engine a
run starts is on its ledger (rollout/engine_starts.py), counted in the report.

Only engines the stage code would start one at a time on this machine are pooled: a job on other machines, or with
several ranks, starts its own, and so do agentic RL's replicas (each started with its share of the cores).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from model.device import resolved_precision
from rollout.client import EngineClient
from rollout.engine_settings import EngineSettings
from rollout.engines import launch_engines

# Idle engines kept beyond those serving a checkpoint a later stage reads: the next stage's policy engine
# or evaluation takes one by a weight update instead of a start.
SPARE_ENGINES = 1


@dataclass
class PooledEngine:
    stack: ExitStack  # stops it (rollout/engines.py started it)
    url: str
    precision: str
    decoding: dict  # EngineSettings.decoding(): how it decodes
    serving: str | None  # the committed checkpoint it serves; None once a trainer pushed weights into it
    leases: int = 0
    exclusive: bool = False
    last_used: int = 0


@dataclass
class EnginePool:
    """`lease(checkpoint, exclusive=…)` → an engine URL serving `checkpoint`; `release(url)` when done."""

    workdir: Path
    seed: int
    engines: list[PooledEngine] = field(default_factory=list)
    now: set[str] = field(default_factory=set)  # the checkpoints the running stage reads
    later: set[str] = field(default_factory=set)  # those a stage after it reads
    _uses: int = 0

    def lease(self, checkpoint: str, *, exclusive: bool, precision: str = "auto", decoding: dict | None = None) -> str:
        decoding = EngineSettings(**(decoding or {})).decoding()  # a partial one matches as its defaults fill it
        self._uses += 1
        # By the dtype served (`auto` and `bf16` are one engine on a GPU) and how it decodes.
        mine = [engine for engine in self.engines if resolved_precision(engine.precision) == resolved_precision(precision)
                and engine.decoding == decoding]
        if not exclusive:
            for engine in mine:
                if engine.serving == checkpoint and not engine.exclusive:
                    return self._leased(engine, exclusive)
        idle = [engine for engine in mine if engine.leases == 0]
        # No lease takes an engine serving another checkpoint that this stage or a later one reads, and an
        # exclusive one not the engine a later stage would read as it is.
        keep = (self.now | self.later) - {checkpoint} | ({checkpoint} & self.later if exclusive else set())
        reusable = sorted((engine for engine in idle if engine.serving not in keep),
                          key=lambda engine: (engine.serving != checkpoint, engine.serving is not None, -engine.last_used))
        if reusable:
            engine = reusable[0]
            if engine.serving != checkpoint:
                # Unknown until the engine says it loaded: a request that fails may have loaded it all the same.
                engine.serving = None
                EngineClient(engine.url).update_weights(checkpoint)  # from the store: its digests checked
                engine.serving = checkpoint
            return self._leased(engine, exclusive)
        return self._leased(self._started(checkpoint, precision, decoding), exclusive)

    def release(self, url: str) -> None:
        engine = next(engine for engine in self.engines if engine.url == url)
        engine.leases -= 1
        if engine.exclusive:
            engine.exclusive, engine.serving = False, None

    def keep_only(self, now: set[str], later: set[str]) -> None:
        """The coming stage reads the checkpoints `now`, stages after it `later`: idle engines serving one of them
        stay for it, and `SPARE_ENGINES` others; the rest stop."""
        self.now, self.later = set(now), set(later)
        idle = sorted((engine for engine in self.engines if engine.leases == 0 and engine.serving not in now | later),
                      key=lambda engine: -engine.last_used)
        for engine in idle[SPARE_ENGINES:]:
            self._stop(engine)

    def close(self) -> None:
        for engine in list(self.engines):
            self._stop(engine)

    def _leased(self, engine: PooledEngine, exclusive: bool) -> str:
        engine.leases += 1
        engine.exclusive = exclusive
        engine.last_used = self._uses
        return engine.url

    def _started(self, checkpoint: str, precision: str, decoding: dict) -> PooledEngine:
        index = len(self.engines)
        # Any stage of the run may push weights through the disk: they write under the run's scratch folders.
        stack = ExitStack()
        try:
            fleet = launch_engines(stack, EngineSettings(precision=precision, **decoding),
                                   checkpoint,
                                   self.workdir / f"pooled-{index}", seed=self.seed + index,
                                   weights_dirs=[scratch_root()])()
        except BaseException:
            stack.close()
            raise
        engine = PooledEngine(stack, fleet.url, precision, decoding, checkpoint)
        self.engines.append(engine)
        return engine

    def _stop(self, engine: PooledEngine) -> None:
        engine.stack.close()
        self.engines.remove(engine)


def scratch_root() -> Path:
    """Where every stage run's scratch folder is made on this machine (flows/job.py `stage_workdir`)."""
    return Path(os.environ.get("POSTTRAIN_WORKDIR", "runs"))


_active: list[EnginePool] = []


@contextmanager
def engine_pool(workdir: Path, seed: int) -> Iterator[EnginePool]:
    """The run's pool while the block runs: stage flows called inside it lease from it (`active_pool`)."""
    pool = EnginePool(workdir, seed)
    _active.append(pool)
    try:
        yield pool
    finally:
        _active.remove(pool)
        pool.close()


def active_pool() -> EnginePool | None:
    return _active[-1] if _active else None


@contextmanager
def leased_engines(checkpoint: str, *, exclusive: bool, precision: str = "auto",
                   decoding: dict | None = None) -> Iterator[EngineSettings | None]:
    """Running-engine settings for one engine of the active pool serving `checkpoint` while the block runs; None
    (start your own) outside a pipeline's pool."""
    pool = active_pool()
    if pool is None:
        yield None
        return
    url = pool.lease(checkpoint, exclusive=exclusive, precision=precision, decoding=decoding)
    try:
        yield EngineSettings(engine_urls=[url])
    finally:
        pool.release(url)
