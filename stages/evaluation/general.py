"""Held-out rule compliance and reward of a committed checkpoint on prompt@1 test splits, as eval@1.

General RL's yardstick: each held-out prompt is answered greedily through a rollout engine, and the
replies are scored by the instruct rules (`rule_compliance`: every constraint met) and by each of the
stage's reward modules (`reward/<name>`), averaged over the samples each scores.
"""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path

from data_contracts import PROMPT_V1
from infra.store import ArtifactStore
from model.tokenizer import load_tokenizer
from rewards import load_reward_module
from rewards.rules import InstructGate
from rollout.engine_settings import EngineSettings
from rollout.engines import launch_engines
from rollout.protocol import SamplingParams
from stages.common.inputs import load_split
from stages.common.prompts import general_prompts
from stages.evaluation.committed import committed_eval
from stages.evaluation.reward_means import reward_means
from stages.evaluation.settings import GeneralEvalSettings
from stages.grpo.config import RewardSpec

MODE = "engine"


def evaluate_general(store: ArtifactStore, checkpoint_uri: str, dataset_uris: list[str], rewards: list[RewardSpec],
                     settings: GeneralEvalSettings, engines: EngineSettings = EngineSettings()) -> dict[str, float]:
    """{"rule_compliance", "reward/<module>"...} on `engines` (default: one
    started here on the checkpoint; running ones are made to serve it)."""
    checkpoint = store.open(checkpoint_uri)
    datasets = [store.open(uri) for uri in dataset_uris]
    config = {"kind": "general", "settings": asdict(settings), "rewards": [r.model_dump() for r in rewards],
              "checkpoint": checkpoint.digest, "datasets": sorted(d.digest for d in datasets)}

    def run(workdir: Path) -> tuple[dict[str, dict[str, float]], list[dict]]:
        tokenizer = load_tokenizer(checkpoint.download(workdir / "checkpoint"))
        prompts = [prompt for index, dataset in enumerate(datasets) for prompt in general_prompts(
            load_split([dataset], "test", workdir / f"data-{index}", PROMPT_V1)[: settings.prompts_per_dataset], tokenizer)]
        stage_modules = [load_reward_module(spec.path, spec.params) for spec in rewards]
        modules = stage_modules + ([] if any(m.name == InstructGate.name for m in stage_modules) else [InstructGate()])
        with ExitStack() as stack:
            client = launch_engines(stack, engines, checkpoint.uri, workdir, seed=settings.seed)().client
            means = reward_means(client, tokenizer, prompts, modules,
                                 SamplingParams(temperature=0.0, max_new_tokens=settings.max_new_tokens))
        metrics = {"rule_compliance": means[InstructGate.name],
                   **{f"reward/{module.name}": means[module.name] for module in stage_modules}}
        created_at = datetime.now(UTC).isoformat(timespec="seconds")
        rows = [{"checkpoint_uri": checkpoint.uri, "suite": "general", "metric": name, "split": "test", "value": value,
                 "n": len(prompts), "created_at": created_at} for name, value in metrics.items()]
        return {MODE: metrics}, rows

    return committed_eval(store, checkpoint, datasets, config, settings.seed, run)[MODE]
