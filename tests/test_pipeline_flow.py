"""The pipeline as a Prefect flow on a real (temporary) Prefect server, with the smoke preset."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey, ArtifactFilterType

from flows.pipeline import pipeline
from infra.openlineage import dataset_name, events_file
from infra.rollouts import recorded_shards
from infra.store import open_store
from tests.openlineage_checks import check_complete_event, read_events, validate_event

pytestmark = pytest.mark.slow


def test_pipeline_writes_report_and_skips_committed_stages(smoke_pipeline):
    params, summary, tmp_path = smoke_pipeline["params"], smoke_pipeline["summary"], smoke_pipeline["tmp"]
    run_dir = tmp_path / "runs" / summary["run_id"]
    written = json.loads((run_dir / "summary.json").read_text())
    assert (tmp_path / "runs" / "LATEST").read_text().strip() == summary["run_id"]
    assert {"run_id", "preset", "wall_s", "stages"} <= set(written)
    sft, rl, agentic, orm, general, distilled = written["stages"]
    for stage in written["stages"]:
        assert {"stage", "checkpoint", "metrics_before", "metrics_after", "wall_s", "train_s", "train_tokens"} <= set(stage)
        assert stage["train_tokens"] > 0 and 0 < stage["train_s"] < stage["wall_s"]
    assert [s["stage"] for s in written["stages"]] == ["sft", "reasoning_rl", "agentic_rl", "train_orm", "general_rl",
                                                      "distill"]
    assert {"arith/accuracy", "format_validity", "thinking_compliance", "search/success"} <= set(sft["metrics_after"])
    assert set(rl["metrics_before"]) == set(rl["metrics_after"]) == {"arith/accuracy_greedy", "arith/accuracy_sampled"}
    # The run's engines, pooled across stages (flows/engine_pool.py), every start on the ledger beside the report.
    starts = [json.loads(line) for line in (run_dir / "engine-starts.jsonl").read_text().splitlines()]
    assert written["engine_starts"] == len(starts) == sum(stage["engine_starts"] for stage in written["stages"])
    print("engine starts per stage:", {stage["stage"]: stage["engine_starts"] for stage in written["stages"]})
    # Reasoning RL's engine (the evaluations' and the policy's) is started on the SFT checkpoint; agentic RL's
    # evaluation before reuses it (loaded with reasoning RL's checkpoint), so agentic RL starts its job's replica
    # and the engine of its evaluation after (kept: distillation's agentic teacher); general RL starts its policy's
    # (the agentic checkpoint's stays for the teacher); distillation's student takes general RL's, idle, and two
    # teachers (SFT's and general RL's: the others are the kept ones) start.
    assert [stage["engine_starts"] for stage in written["stages"]] == [0, 1, 2, 0, 1, 2]
    # Reasoning RL starts from the SFT checkpoint, and its lineage says so.
    lineage = json.loads(Path(rl["checkpoint"].removeprefix("file://"), "lineage.json").read_text())
    assert lineage["parents"][0]["uri"] == sft["checkpoint"]
    assert [ref["path"] for ref in lineage["reward_modules"]] == ["rewards.verifiers.ArithExactMatch"]
    # The flow's one engine served the evaluations and the training's rollouts.
    assert lineage["config"]["engines"]["engine_urls"][0].startswith("http://127.0.0.1:")
    # Agentic RL starts from the reasoning RL checkpoint and reports held-out tool-task success.
    assert {"search/tool_success", "calc/tool_success", "tool_success"} <= set(agentic["metrics_after"])
    agentic_lineage = json.loads(Path(agentic["checkpoint"].removeprefix("file://"), "lineage.json").read_text())
    assert agentic_lineage["parents"][0]["uri"] == rl["checkpoint"]
    # The ORM's trunk is the SFT checkpoint; it reports held-out pairwise accuracy per domain.
    assert {"heldout_accuracy", "heldout_accuracy/chat", "heldout_accuracy/instruct"} <= set(orm["metrics_after"])
    orm_lineage = json.loads(Path(orm["checkpoint"].removeprefix("file://"), "lineage.json").read_text())
    assert orm_lineage["parents"][0]["uri"] == sft["checkpoint"]
    assert {i["contract"] for i in orm_lineage["inputs"]} == {"preference@1"}
    # General RL starts from the agentic checkpoint, trains on instruct prompts with the rules and the ORM.
    assert {"rule_compliance", "reward/mixed"} <= set(general["metrics_after"])
    general_lineage = json.loads(Path(general["checkpoint"].removeprefix("file://"), "lineage.json").read_text())
    assert [(p["role"], p["uri"]) for p in general_lineage["parents"]] == [("init", agentic["checkpoint"]),
                                                                          ("reward_model", orm["checkpoint"])]
    assert general_lineage["inputs"][0]["contract"] == "prompt@1"
    assert {"rewards.mix.MixedReward", "rewards.orm.OrmScore"} <= {r["path"] for r in general_lineage["reward_modules"]}
    # Distillation: the general RL checkpoint is the student; each stage that teaches (SFT too, as in GLM-5)
    # teaches its domain with its final checkpoint.
    distill_lineage = json.loads(Path(distilled["checkpoint"].removeprefix("file://"), "lineage.json").read_text())
    assert [(p["role"], p["uri"]) for p in distill_lineage["parents"]] == [
        ("init", general["checkpoint"]), ("teacher", sft["checkpoint"]), ("teacher", rl["checkpoint"]),
        ("teacher", agentic["checkpoint"]), ("teacher", general["checkpoint"])]
    assert {i["contract"] for i in distill_lineage["inputs"]} == {"chat@1", "prompt@1", "rollout@1"}
    assert set(distilled["retention"]) == {"sft", "reasoning_rl", "agentic_rl", "general_rl"}
    assert distilled["teacher_scores"]["reasoning_rl/arith/accuracy_sampled"] == rl["metrics_after"]["arith/accuracy_sampled"]
    assert {"sft/format_validity", "reasoning_rl/arith/accuracy_sampled", "agentic_rl/tool_success",
            "general_rl/rule_compliance"} <= set(distilled["metrics_after"])
    # Each RL stage and distillation lists the samples it trained on; every stage run is an OpenLineage run
    # (START, then COMPLETE with its lineage.json's inputs and its checkpoint) an auditor's tool can read.
    store = open_store(params.store)
    for stage in written["stages"]:
        shards = recorded_shards(store.open(stage["checkpoint"]))
        assert bool(shards) == (stage["stage"] not in ("sft", "train_orm")), stage["stage"]
    events = read_events(events_file())
    for stage in written["stages"]:
        output = dataset_name(stage["checkpoint"])
        (complete,) = [e for e in events if e["eventType"] == "COMPLETE"
                       and (e["outputs"][0]["namespace"], e["outputs"][0]["name"]) == output]
        (start,) = [e for e in events if e["eventType"] == "START" and e["run"]["runId"] == complete["run"]["runId"]]
        for event in (start, complete):
            validate_event(event)
        check_complete_event(complete, store.open(stage["checkpoint"]))
    report = (run_dir / "report.md").read_text()
    for name in ("sft", "reasoning_rl", "agentic_rl", "train_orm", "general_rl", "distill"):
        assert f"{name}_loss.png" in report and (run_dir / f"{name}_loss.png").stat().st_size > 1000
    assert "kept of each teacher's score: sft " in report and ", reasoning_rl " in report
    # Each policy's expert load over its job, a line and a layer × expert heat map (the ORM's trunk trains apart).
    for name in ("sft", "reasoning_rl", "agentic_rl", "general_rl", "distill"):
        assert f"{name}_expert_load.png" in report and (run_dir / f"{name}_expert_load.png").stat().st_size > 1000
    assert report.count("- expert load over the job, per MoE layer: busiest expert ") == 5
    assert report.count("- groups with signal: ") == 3  # reasoning, agentic and general RL's dynamic sampling
    # The report is committed into the run's own store too, each stage's checkpoint a parent; the
    # pipeline's run page carries one summary table of every stage's metrics and checkpoint.
    committed = open_store(params.store).open(f"reports/{summary['run_id']}")
    assert summary["report_uri"] == committed.uri and committed.verify() == []
    assert json.loads(committed.read_bytes("summary.json")) == written
    assert [p["uri"] for p in committed.lineage()["parents"]] == [s["checkpoint"] for s in written["stages"]]
    with get_client(sync_client=True) as client:  # the fault suite's pipelines share this server: this run's table
        tables = client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["pipeline-summary"])))
    checkpoints = {s["checkpoint"] for s in written["stages"]}
    summaries = [json.loads(table.data) if isinstance(table.data, str) else table.data for table in tables]
    (rows,) = [rows for rows in summaries if {row["checkpoint"] for row in rows if row["checkpoint"]} == checkpoints]
    assert [row["stage"] for row in rows if row["stage"]] == [s["stage"] for s in written["stages"]]
    assert {"metric", "before", "after"} <= set(rows[0])
    # While they trained, the RL stages and distillation showed what the policy wrote, decoded, with its reward.
    keys = ["reasoning-rl-samples", "agentic-rl-samples", "general-rl-samples", "distill-samples"]
    with get_client(sync_client=True) as client:
        shown = client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=keys)))
    assert {artifact.key for artifact in shown} == set(keys)
    for artifact in shown:
        samples = json.loads(artifact.data) if isinstance(artifact.data, str) else artifact.data
        assert samples and all(sample["completion"] and "reward" in sample for sample in samples)
    with get_client(sync_client=True) as client:
        progress = client.read_artifacts(artifact_filter=ArtifactFilter(type=ArtifactFilterType(any_=["progress"])))
    assert any(a.data == 100.0 and (a.description or "").startswith("pipeline: 6 of 6 stages done") for a in progress)
    # Each trained stage has its wandb run (offline), with the lineage record attached.
    wandb_dir = Path(os.environ["POSTTRAIN_WORKDIR"]) / Path(distilled["checkpoint"]).name / "wandb" / "wandb"
    (offline_run,) = wandb_dir.glob("offline-run-*")
    assert any(offline_run.rglob("*.wandb"))
    assert distill_lineage["wandb_run"] == f"posttrain/{Path(distilled['checkpoint']).name}"

    again = pipeline(params)  # nothing changed: every stage is found committed and none retrains
    assert [stage["checkpoint"] for stage in again["stages"]] == [s["checkpoint"] for s in written["stages"]]
    assert [stage["metrics_after"] for stage in again["stages"]] == [s["metrics_after"] for s in written["stages"]]
    assert all(stage["train_s"] == 0.0 for stage in again["stages"])
    assert Path(again["report"]).exists()

    # Started at general RL from the agentic checkpoint: the ORM's trunk and distillation's teachers come
    # from that checkpoint's lineage, so the stages are the full run's and are found committed.
    resumed = pipeline(params.model_copy(update={"from_stage": "general_rl", "init": agentic["checkpoint"]}))
    assert [(s["stage"], s["checkpoint"]) for s in resumed["stages"]] == [
        (s["stage"], s["checkpoint"]) for s in written["stages"][3:]]

    # The auditor's check on the final checkpoint: every byte of the whole DAG matches, until one byte of
    # a data input two stages up (general RL's prompts) changes, and the report names that file.
    posttrain = [str(Path(sys.executable).with_name("posttrain")), "lineage", distilled["checkpoint"], "--verify"]
    assert subprocess.run(posttrain, capture_output=True, text=True, timeout=300).returncode == 0
    prompts = next(i["uri"] for i in general_lineage["inputs"])
    parquet = Path(prompts.removeprefix("file://")) / "test.parquet"
    data = bytearray(parquet.read_bytes())
    data[len(data) // 2] ^= 0x01
    parquet.write_bytes(bytes(data))
    failed = subprocess.run(posttrain, capture_output=True, text=True, timeout=300)
    assert failed.returncode == 1 and f"MISMATCH {prompts}" in failed.stderr and "test.parquet" in failed.stderr
