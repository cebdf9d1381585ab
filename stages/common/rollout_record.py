"""The samples a stage trained on, on record: each step's as a rollout@1 shard in the store, committed
while the stage runs, so a crash keeps every step written before it.

A shard's name ends with its content's digest. A step that a resumed stage trains again (it crashed
after the last resume point) writes a new shard beside the old one only when its samples differ, and
a checkpoint lists the shards of the steps its weights went through (the trainer state carries them
across a resume), so no sample is listed twice. Each rank commits its own samples; every rank learns
the step's shard names, and rank 0's checkpoint lists them as its `rollouts` inputs. Commits run on a
background thread, beside the next step; a checkpoint commit waits for them first.
"""

from __future__ import annotations

import hashlib
import json
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from data_contracts import ROLLOUT_V1
from data_contracts.lineage import DataInput, Lineage
from data_contracts.parquet import write_parquet
from infra.rollouts import SHARD_FILE
from infra.store import ArtifactStore, sha256_file
from model.readable import readable
from rewards import RewardSample
from stages.common.config import RolloutRecordSettings
from stages.common.distributed import Dist, all_gather_objects, barrier
from stages.common.events import EventLog

# A person reads the end of a prompt (the question) and a completion; neither needs more on a screen.
SHOWN_CHARS = 600


def recorded(group_id: str, sample_rate: float) -> bool:
    """Whether a group is on record: the same groups whichever rank, run or resume draws them."""
    if sample_rate >= 1.0:
        return True
    draw = int.from_bytes(hashlib.sha256(group_id.encode()).digest()[:8], "big") / 2**64
    return draw < sample_rate


class RolloutRecord:
    """`write(step, rows)` after each step's update, `inputs()` when committing a checkpoint, `close()` at the end.

    `template` is the lineage every shard shares (its stage's parents, datasets, code, config and reward
    modules); a shard's own adds the step and rank.
    """

    def __init__(self, store: ArtifactStore, settings: RolloutRecordSettings, *, stage: str, prefix: str,
                 template: Lineage, dist: Dist, scratch: Path, events: EventLog, tokenizer):
        self.store, self.settings, self.stage, self.prefix, self.template = store, settings, stage, prefix, template
        self.dist, self.scratch, self.events, self.tokenizer = dist, scratch, events, tokenizer
        self.shards: dict[int, list[str]] = {}  # step → its shards' names, every rank's
        self.rows: dict[str, int] = {}
        self._pending: list[Future] = []
        self._committer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rollout-record")

    def restore(self, state: dict[str, list[str]]) -> None:
        """The shards of the steps a resumed checkpoint went through (its trainer state's `rollouts`)."""
        self.shards = {int(step): names for step, names in state.items()}

    def state(self) -> dict[str, list[str]]:
        return {str(step): names for step, names in sorted(self.shards.items())}

    def write(self, step: int, rows: list[dict]) -> dict:
        """Put the step's trained samples on record (those of the recorded groups); the step's metrics."""
        started = time.monotonic()
        kept = [{**row, "stage": self.stage, "step": step} for row in rows
                if recorded(row["group_id"], self.settings.sample_rate)]
        local = None
        if kept:
            self.scratch.mkdir(parents=True, exist_ok=True)
            path = self.scratch / f"step-{step:06d}-rank-{self.dist.rank:04d}.parquet"
            # Whatever the stage trained on goes on record, however long (the contract's default bound is for imports).
            write_parquet(ROLLOUT_V1, kept, path, max_tokens=_longest(kept))
            # Named and sized before the commit is queued: the commit thread deletes the scratch file when done.
            local = (f"{self.prefix}step-{step:06d}-rank-{self.dist.rank:04d}-{sha256_file(path)[:16]}", len(kept),
                     path.stat().st_size)
            self._pending.append(self._committer.submit(self._commit, step, local[0], path, len(kept)))
        everyone = _gathered(local)
        self.shards[step] = [name for name, _, _ in everyone]
        self.rows.update({name: rows for name, rows, _ in everyone})
        if self.settings.show_every and (step == 1 or step % self.settings.show_every == 0) and kept:
            self.show(step, kept)
        return {"recorded_samples": sum(r for _, r, _ in everyone), "recorded_bytes": sum(b for _, _, b in everyone),
                "record_s": time.monotonic() - started}

    def _commit(self, step: int, name: str, path: Path, rows: int) -> None:
        lineage = self.template.model_copy(update={
            "kind": "dataset", "name": f"{self.template.name} rollouts step {step} rank {self.dist.rank}",
            # The stage's own config stays beside: its reward modules' paths and params, in `reward_scores` order.
            "config": {"contract": ROLLOUT_V1.id, "stage": self.stage, "step": step, "rank": self.dist.rank,
                       "rows": rows, "stage_config": self.template.config},
            "eval_summary": {}})
        writer = self.store.begin(name)
        writer.put_file(SHARD_FILE, path)
        writer.commit(lineage.committed_as(self.store.root_uri, name).to_bytes())
        path.unlink()

    def drain(self) -> None:
        """Wait for every shard commit so far; the first that failed raises here."""
        pending, self._pending = self._pending, []
        for future in pending:
            future.result()

    def inputs(self, through_step: int) -> list[DataInput]:
        """The `rollouts` inputs of a checkpoint at `through_step`: every shard of its steps, committed."""
        self.drain()
        barrier()  # every rank's shards of these steps are committed
        inputs = []
        for step in sorted(s for s in self.shards if s <= through_step):
            for name in self.shards[step]:
                artifact = self.store.open(name)
                if name not in self.rows:  # a shard of the run this one resumed: its lineage has its size
                    self.rows[name] = artifact.lineage()["config"]["rows"]
                inputs.append(DataInput(uri=artifact.uri, digest=artifact.digest, rows=self.rows[name],
                                        contract=ROLLOUT_V1.id, role="rollouts"))
        return inputs

    def close(self) -> None:
        self.drain()
        self._committer.shutdown()

    def show(self, step: int, rows: list[dict]) -> None:
        """A few samples of the step as a person reads them, for the run's log and the UI's table: the best and
        the worst of each of a few groups (a group's samples answer one prompt, so its best and worst show what
        the reward told apart), with each reward module's score."""
        shown = []
        for row in best_and_worst(rows, self.settings.show_samples):
            scores = {f"score {s['module']}": s["score"] for s in row.get("reward_scores") or []}
            shown.append({"task": row["task"], "group": row["group_id"].rsplit("/", 1)[-1],
                          "reward": row.get("reward"), **scores, "advantage": row.get("advantage"),
                          "prompt": readable(self.tokenizer, row["prompt_ids"])[-SHOWN_CHARS:],
                          "completion": readable(self.tokenizer, row["response_ids"])[:SHOWN_CHARS]})
        self.events.emit("samples", step=step, samples=shown)


def best_and_worst(rows: list[dict], count: int) -> list[dict]:
    """Up to `count` rows: the highest and the lowest rewarded of each group in turn (one where they tie)."""
    groups: dict[str, list[dict]] = {}
    for row in rows:
        groups.setdefault(row["group_id"], []).append(row)
    chosen = []
    for members in groups.values():
        best = max(members, key=_reward)
        worst = min(members, key=_reward)
        chosen += [best] if _reward(best) == _reward(worst) else [best, worst]
    return chosen[:count]


def _reward(row: dict) -> float:
    return row.get("reward") or 0.0


def reward_input(sample: RewardSample) -> str:
    """What a reward module read besides the completion, as the `reward_input` column keeps it: a recorded
    module given `RewardSample(**json.loads(it), response=<the decoded completion>)` scores it again."""
    return json.dumps({"prompt": list(sample.prompt), "reference": sample.reference, "metadata": dict(sample.metadata)},
                      sort_keys=True, default=str)


def masked_fraction(kept: list[float], loss_mask: list[int]) -> float:
    """The share of a sample's trained tokens (mask 1) that a gate dropped (`kept` 0 there)."""
    trained = [k for k, m in zip(kept, loss_mask, strict=True) if m]
    return sum(1 for k in trained if not k) / len(trained) if trained else 0.0


def _longest(rows: list[dict]) -> int:
    return max(max(len(row["prompt_ids"]), len(row["response_ids"])) for row in rows)


def _gathered(local: tuple[str, int, int] | None) -> list[tuple[str, int, int]]:
    """(name, rows, bytes) of the step's shard on every rank that wrote one, in rank order."""
    return [shard for shard in all_gather_objects(local) if shard]

