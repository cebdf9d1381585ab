"""The ORM: its loss, the train_orm job end to end, its lineage, and `rewards.orm.OrmScore` scoring with it."""

import math
from collections import defaultdict

import pytest
import torch

from data_contracts import PREFERENCE_V1, read_parquet
from data_contracts.conversation import messages_from_records
from infra.store import open_store
from model import special_tokens as st
from model.presets import load_model
from model.reward_model import ScalarRewardModel, load_reward_model
from rewards.orm import OrmScore
from rewards.protocol import RewardSample
from stages.orm.loss import bradley_terry_loss, pairwise_accuracy


def test_bradley_terry_loss_matches_hand_computed_values():
    chosen, rejected = torch.tensor([2.0, 0.0, -1.0]), torch.tensor([0.0, 0.0, 1.0])
    # -log σ(2), -log σ(0), -log σ(-2)
    expected = (math.log1p(math.exp(-2)) + math.log(2) + math.log1p(math.exp(2))) / 3
    assert bradley_terry_loss(chosen, rejected).item() == pytest.approx(expected, rel=1e-6)
    assert bradley_terry_loss(torch.tensor([1000.0]), torch.tensor([-1000.0])).item() == pytest.approx(0.0, abs=1e-6)
    assert math.isfinite(bradley_terry_loss(torch.tensor([-1000.0]), torch.tensor([1000.0])).item())


def test_pairwise_accuracy_counts_a_tie_as_wrong():
    assert pairwise_accuracy(torch.tensor([1.0, 0.5, 2.0, 0.0]), torch.tensor([0.0, 0.5, 3.0, -1.0])) == 0.5


def test_a_saved_reward_model_scores_the_same_after_loading(small_store, tmp_path):
    init = open_store(small_store["root"]).open(small_store["init"]).download(tmp_path / "init")
    model = ScalarRewardModel(load_model(init), seed=3).eval()
    model.save_pretrained(tmp_path / "orm")
    ids = torch.tensor([[5, 6, 7, 8], [9, 10, 0, 0]])
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]])
    with torch.no_grad():
        assert torch.equal(model(ids, mask), load_reward_model(tmp_path / "orm").eval()(ids, mask))
        # Read at the last real token: padding after it changes nothing.
        assert model(ids[1:, :2], mask[1:, :2]).item() == pytest.approx(model(ids[1:], mask[1:]).item(), abs=1e-5)
    with pytest.raises(FileNotFoundError, match="not a reward model checkpoint"):
        load_reward_model(init)


def test_train_orm_learns_held_out_preferences_and_commits_with_lineage(trained_orm):
    done = trained_orm["events"][-1]
    data = next(e for e in trained_orm["events"] if e["event"] == "data")
    assert data["train_pairs"] == 800 and data["heldout_pairs"] == 200
    # Chance is 0.5; the held-out chat subjects and instruct prompts never appear in training. The figure
    # depends on the CPU's kernels (0.69 on a 2-core machine without AVX-512, above 0.7 with it); 0.65 on
    # 200 pairs is more than four standard errors above chance, 0.65 on each suite's 100 three.
    assert done["heldout_accuracy"] >= 0.65, done
    assert done["heldout_accuracy/chat"] >= 0.65 and done["heldout_accuracy/instruct"] >= 0.65, done
    steps = [e for e in trained_orm["events"] if e["event"] == "step"]
    assert [e["step"] for e in steps] == list(range(1, 121))
    assert steps[-1]["loss"] < steps[0]["loss"]

    store = open_store(trained_orm["root"])
    checkpoint = store.open(trained_orm["checkpoint"])
    lineage = checkpoint.lineage()
    assert [i["uri"] for i in lineage["inputs"]] == [store.open(uri).uri for uri in trained_orm["datasets"]]
    assert {i["contract"] for i in lineage["inputs"]} == {PREFERENCE_V1.id}
    assert [parent["role"] for parent in lineage["parents"]] == ["init"]
    assert lineage["eval_summary"]["heldout_accuracy"] == done["heldout_accuracy"]
    assert set(lineage["eval_summary"]) == {k for k in steps[-1] if k.startswith("heldout_")}
    assert len(checkpoint.read_bytes("metrics.jsonl").decode().splitlines()) == 120
    assert store.is_committed(f"{trained_orm['config'].resume_prefix}step-000060")


def test_orm_score_ranks_held_out_pairs_as_the_stage_measured(trained_orm, tmp_path):
    """The reward module renders and scores exactly as training did: its held-out accuracy is the stage's."""
    store = open_store(trained_orm["root"])
    rows = []
    for uri in trained_orm["datasets"]:
        rows += read_parquet(PREFERENCE_V1, store.open(uri).download(tmp_path / uri.rsplit("/", 1)[-1])
                             / "test.parquet").to_pylist()
    orm = OrmScore(trained_orm["checkpoint"], store=trained_orm["root"], batch_size=48)
    samples = []
    for row in rows:
        prompt = tuple(messages_from_records(row["prompt"]))
        for reply in (row["chosen"], row["rejected"]):  # as the policy generates it, thinking on
            samples.append(RewardSample(prompt, f"{st.THINK_OPEN}Answer plainly.{st.THINK_CLOSE}{reply}{st.USER}"))
    scores = orm(samples)
    assert all(isinstance(score, float) and math.isfinite(score) for score in scores)
    wins = defaultdict(list)
    for index, row in enumerate(rows):
        wins[row["domain"]].append(scores[2 * index] > scores[2 * index + 1])
    done = trained_orm["events"][-1]
    for domain, outcomes in wins.items():
        assert sum(outcomes) / len(outcomes) == pytest.approx(done[f"heldout_accuracy/{domain}"], abs=0.02)
    assert orm(samples[:5]) == pytest.approx(scores[:5], abs=1e-4)  # nor does the batch it is scored in


def test_orm_score_opens_a_full_uri_from_any_store(trained_orm, tmp_path, monkeypatch):
    """A reward config recorded with the ORM's URI scores alike where the default store is another one."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("POSTTRAIN_STORE", str(tmp_path / "another-store"))
    sample = RewardSample(({"role": "user", "content": "Say hi."},), f"{st.THINK_CLOSE}Hi.{st.USER}")
    recorded = OrmScore(trained_orm["checkpoint"])([sample])
    assert recorded == pytest.approx(OrmScore(trained_orm["checkpoint"], store=trained_orm["root"])([sample]))
