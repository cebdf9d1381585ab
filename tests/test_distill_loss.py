"""On-policy distillation's per-token advantage inside the Eq. 1 objective, against values by hand (SPEC Eq. 2)."""

import math
import random

import pytest
import torch

from rollout.agents.orchestrator import RolloutResult, RolloutSpec
from rollout.client import Sample
from stages.common.icepop_loss import grpo_icepop_loss
from stages.common.prompts import RlPrompt
from stages.common.rl_batches import padded_batch
from stages.distill.config import DistillConfig, TeacherSpec
from stages.distill.data import draw_prompts
from stages.distill.loss import distill_advantages, response_aligned, reverse_kl_by_teacher
from stages.distill.rows import episode_rows, sample_rows


def t(rows):
    return torch.tensor(rows, dtype=torch.float64)


def sample(prompt, output):
    return Sample(prompt_ids=prompt, output_ids=output, output_logprobs=[0.0] * len(output), finish_reason="stop",
                  weight_version="0")


def test_each_token_is_pushed_by_its_own_teacher_student_gap():
    log = math.log
    # One response, three tokens: the teacher likes token 1 more, token 2 less, token 3 equally.
    logp_student = t([[log(0.5), log(0.5), log(0.25)]]).requires_grad_(True)
    logp_teacher = t([[log(0.8), log(0.2), log(0.25)]])
    mask = t([[1, 1, 1]])
    advantages = distill_advantages(logp_teacher, logp_student, mask)
    assert torch.allclose(advantages, t([[log(1.6), log(0.4), 0.0]]))
    assert not advantages.requires_grad  # sg[·]: the advantage is a constant of the step
    loss, _ = grpo_icepop_loss(logp_student, logp_student.detach(), logp_student.detach(), advantages, mask)
    # r = ρ = 1: L = −(1/3) Σ_t A_t, and ∂L/∂log π_θ(y_t) = −A_t / 3.
    assert loss.item() == pytest.approx(-(log(1.6) + log(0.4)) / 3)
    loss.backward()
    assert torch.allclose(logp_student.grad, -advantages / 3)


def test_per_token_advantages_keep_the_icepop_gate_and_the_clip():
    log = math.log
    # Token 1: r = 1.5 with A > 0 is clipped at 1.28. Token 2: ρ = 3 is outside β = 2 and popped.
    logp_new, logp_old, logp_infer = t([[log(1.5), 0.0]]), t([[0.0, log(3.0)]]), t([[0.0, 0.0]])
    loss, stats = grpo_icepop_loss(logp_new, logp_old, logp_infer, t([[1.0, 5.0]]), t([[1, 1]]))
    assert loss.item() == pytest.approx(-1.28 / 2)
    assert stats["pop_masked_fraction"] == pytest.approx(0.5)
    assert stats["clip_fraction"] == pytest.approx(0.5)


def test_teacher_logprobs_land_on_the_response_targets_and_kl_is_reported_per_teacher():
    prompts = [RlPrompt(f"p{i}", (), None, [], {"teacher": teacher}) for i, teacher in enumerate(["reasoning_rl", "general_rl"])]
    rows = sample_rows([sample([1, 2, 3], [4, 5]), sample([1], [6, 7, 8])], prompts, "s1-r0")
    aligned = response_aligned([len(r.prompt_ids) for r in rows], [[-1.0, -2.0], [-3.0, -4.0, -5.0]], width=4)
    # Target t predicts token t + 1: the first response token of a 3-token prompt is target 2.
    assert aligned.tolist() == [[0.0, 0.0, -1.0, -2.0], [-3.0, -4.0, -5.0, 0.0]]
    mask = (aligned != 0).float()
    kl = reverse_kl_by_teacher(aligned, torch.zeros_like(aligned), mask, ["reasoning_rl", "general_rl"],
                               ["reasoning_rl", "agentic_rl", "general_rl"])
    assert kl == {"kl/reasoning_rl": pytest.approx(1.5), "kl/agentic_rl": 0.0, "kl/general_rl": pytest.approx(4.0)}


def episode(rollout_id, status, rows):
    return RolloutResult(RolloutSpec(rollout_id, rollout_id, "calc", {"id": rollout_id}), rows, 1.0, status)


def test_an_episode_trains_the_models_turns_only_and_a_failed_environment_trains_nothing():
    # Two model turns (tokens 4-5 and 8) with the environment's reply (6-7) between them, as one segment.
    turns = {"sample_id": "a/0", "prompt_id": "p", "task": "calc", "prompt_ids": [1, 2], "response_ids": [4, 5, 6, 7, 8],
             "loss_mask": [1, 1, 0, 0, 1], "rollout_logprobs": [-0.1, -0.2, 0.0, 0.0, -0.3], "weight_versions": [0],
             "status": "ok", "turn_starts": [0, 4]}
    rows = episode_rows([episode("a", "ok", [turns]), episode("b", "env_error", [turns])], ["agentic_rl"] * 2)
    assert len(rows) == 1 and rows[0].teacher == "agentic_rl" and rows[0].loss_mask == [1, 1, 0, 0, 1]
    batch = padded_batch([(r.prompt_ids, r.response_ids, r.loss_mask, r.logprobs) for r in rows], pad_id=0)
    teacher = response_aligned([2], [[-1.0, -1.0, -9.0, -9.0, -1.0]], width=batch.input_ids.shape[1] - 1)
    student = torch.zeros_like(teacher)
    advantages = distill_advantages(teacher, student, batch.response_mask)
    # The teacher's logprobs of the environment's tokens are scored but never become an advantage.
    assert advantages.tolist() == [[0.0, -1.0, -1.0, 0.0, 0.0, -1.0]]
    assert reverse_kl_by_teacher(teacher, student, batch.response_mask, ["agentic_rl"], ["agentic_rl"]) == {
        "kl/agentic_rl": pytest.approx(1.0)}


def test_agent_tasks_must_be_known():
    assert TeacherSpec(source="agentic_rl", checkpoint="c", datasets=["d"], agent_tasks=["calc", "search"]).agent_tasks
    with pytest.raises(ValueError, match="unknown agent task .browse.; known: calc, search"):
        TeacherSpec(source="agentic_rl", checkpoint="c", datasets=["d"], agent_tasks=["browse"])


def test_teachers_take_turns_in_every_batch_by_their_shares():
    prompts = {source: [RlPrompt(f"{source}-{i}", (), None, [i], {"teacher": source}) for i in range(size)]
               for source, size in (("reasoning_rl", 1000), ("general_rl", 3))}
    drawn = draw_prompts(prompts, {"reasoning_rl": 1, "general_rl": 1}, 6, random.Random(0))
    assert [p.metadata["teacher"] for p in drawn] == ["reasoning_rl", "general_rl"] * 3
    assert drawn == draw_prompts(prompts, {"reasoning_rl": 1, "general_rl": 1}, 6, random.Random(0))  # seeded
    weighted = draw_prompts(prompts, {"reasoning_rl": 1, "general_rl": 2}, 6, random.Random(0))
    assert [p.metadata["teacher"] for p in weighted] == ["reasoning_rl", "general_rl", "general_rl"] * 2


def test_config_takes_its_datasets_from_the_teachers_and_refuses_a_teacher_twice():
    teachers = [TeacherSpec(source="reasoning_rl", checkpoint="c1", datasets=["d/arith"]),
                TeacherSpec(source="agentic_rl", checkpoint="c2", datasets=["d/search", "d/calc"])]
    config = DistillConfig(run_id="d", init_checkpoint="c3", teachers=teachers)
    assert config.datasets == ["d/arith", "d/calc", "d/search"]
    assert config.output_name == "checkpoints/distill/d"
    with pytest.raises(ValueError, match="each source teaches once"):
        DistillConfig(run_id="d", init_checkpoint="c3", teachers=teachers + teachers[:1])
    with pytest.raises(ValueError, match="differ from the teachers' datasets"):
        DistillConfig(run_id="d", init_checkpoint="c3", teachers=teachers, datasets=["d/other"])
    # A source names the teacher's files and metrics (which stages teach, the distill flow checks: test_distill.py).
    with pytest.raises(ValueError, match="source"):
        TeacherSpec(source="../sft", checkpoint="c1", datasets=["d/arith"])
