"""A reward model trained by the real train_orm job on the chat and instruct preference pairs."""

import tempfile
from pathlib import Path

import pytest

from data_prep.prepare import prepare, publish_preferences
from infra.launch import run_stage_job
from infra.launchers.local import LocalLaunch
from infra.store import open_store
from stages.common.events import parse_event
from stages.orm.config import TrainOrmConfig
from suites.prepare import SuiteSizes

PAIRS = SuiteSizes(train=400, test=100)  # per suite


@pytest.fixture(scope="session")
def trained_orm(tmp_path_factory):
    """{"root", "checkpoint", "datasets", "config", "events"} of one finished ORM run (120 steps, about a minute)."""
    root = tmp_path_factory.mktemp("orm")
    store = open_store(str(root / "store"))
    # A tokenizer trained on the text the ORM reads; the init checkpoint is the trunk.
    prepared = prepare(store, suites=["chat", "instruct"], sizes=SuiteSizes(64, 8), preset="glm5-tiny", seed=0,
                       triggered_by="tests")
    with tempfile.TemporaryDirectory() as workdir:
        datasets = sorted(publish_preferences(store, suite, PAIRS, 0, Path(workdir), "tests")[0].uri
                          for suite in ("chat", "instruct"))
    config = TrainOrmConfig(run_id="orm-test", store=str(root / "store"), init_checkpoint=prepared.init_checkpoint.uri,
                            datasets=datasets, max_steps=120, global_batch_size=16, optimizer={"lr": 1e-4, "warmup_steps": 10},
                            heldout={"every": 40, "batch_size": 64},
                            checkpoint_every=60)
    path = root / "run.json"
    path.write_text(config.model_dump_json())
    events = []
    run_stage_job(LocalLaunch(nproc=1, threads_per_proc=2), "stages.orm.train", path,
                  lambda line: events.append(event) if (event := parse_event(line)) else None)
    done = events[-1]
    assert done["event"] == "done", events[-3:]
    return {"root": str(root / "store"), "checkpoint": done["checkpoint"], "datasets": datasets, "config": config,
            "events": events}
