"""Held-out accuracy of a committed checkpoint through a rollout engine, committed as eval@1.

Reasoning RL's yardstick: greedy accuracy and the mean over k samples at the training temperature.
"""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path

from infra.publish import published_suite
from infra.store import ArtifactStore
from model.tokenizer import load_tokenizer
from rollout.engine_settings import EngineSettings
from rollout.engines import launch_engines
from stages.common.inputs import load_split
from stages.common.prompts import parse_prompts, prompt_contract
from stages.evaluation.committed import committed_eval
from stages.evaluation.sampled_accuracy import sampled_accuracy, verifier_for
from stages.evaluation.settings import SampledEvalSettings

MODE = "engine"  # how these metrics are keyed in the eval record (the SFT eval's are "sparse"/"dense")


def evaluate_sampled(store: ArtifactStore, checkpoint_uri: str, dataset_uri: str,
                     settings: SampledEvalSettings, engines: EngineSettings = EngineSettings()) -> dict[str, float]:
    """Evaluate on `engines`: one started here on the checkpoint by default, or running ones made to serve it.

    Every sampled request carries its own seed, so a shared engine gives the same numbers as a fresh one.
    """
    checkpoint, dataset = store.open(checkpoint_uri), store.open(dataset_uri)
    contract = prompt_contract(dataset)
    domain, verifier = verifier_for(contract.name, published_suite(dataset))
    config = {"kind": f"sampled_{domain}", "settings": asdict(settings), "checkpoint": checkpoint.digest,
              "dataset": dataset.digest}

    def run(workdir: Path) -> tuple[dict[str, dict[str, float]], list[dict]]:
        tokenizer = load_tokenizer(checkpoint.download(workdir / "checkpoint"))
        rows = load_split([dataset], "test", workdir / domain, contract)[: settings.prompts]
        with ExitStack() as stack:
            client = launch_engines(stack, engines, checkpoint.uri, workdir, seed=settings.seed)().client
            metrics = sampled_accuracy(
                client, tokenizer, parse_prompts(rows, contract, tokenizer), verifier(), domain,
                samples_per_prompt=settings.samples_per_prompt, temperature=settings.temperature,
                max_new_tokens=settings.max_new_tokens, seed=settings.seed,
            )
        created_at = datetime.now(UTC).isoformat(timespec="seconds")
        eval_rows = [{"checkpoint_uri": checkpoint.uri, "suite": domain, "metric": name.split("/", 1)[1],
                      "split": "test", "value": value, "n": len(rows), "created_at": created_at}
                     for name, value in metrics.items()]
        return {MODE: metrics}, eval_rows

    return committed_eval(store, checkpoint, [dataset], config, settings.seed, run)[MODE]
