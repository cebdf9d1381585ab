"""On-policy distillation: `python -m stages.distill.train --config run.json`, alone or under torchrun / deepspeed.

The final stage (SPEC "Cross-stage on-policy distillation"): the student — the last RL stage's
checkpoint — samples one response per prompt (G = 1) on its own engine; the teacher of the prompt's
source (the final checkpoint of the stage whose prompt set it comes from) scores every sampled token
by prefill on its own engine; each token's advantage is sg[log π_teacher − log π_student], trained
with the Eq. 1 objective (IcePop gate and clip kept). Weights reach the student's engine after every
step: fully on-policy. Every teacher is a `teacher` parent of the committed checkpoint.

A teacher with `agent_tasks` (the agentic one) gets whole episodes: the student plays its task rows
against the tasks' services started here, as agentic RL did, and the teacher scores every turn the
student sampled. Episode turns are sampled without a per-request seed (a seeded request runs alone
on the engine, and episodes are many short concurrent requests), so with such a teacher a re-run
samples differently.
"""

from __future__ import annotations

import random
from contextlib import ExitStack

import torch

from model.presets import load_model
from model.routing import ReplayedRouting, RoutingLayout
from rollout.agents.episodes import play_episodes
from rollout.agents.orchestrator import RolloutResult, RolloutSpec
from rollout.agents.task_services import TaskServices
from rollout.client import speculated
from rollout.engines import EngineFleet
from rollout.protocol import SamplingParams
from stages.common.checkpointer import StageCheckpointer
from stages.common.config import per_rank
from stages.common.distributed import rank_share
from stages.common.finite import FiniteSteps
from stages.common.icepop import IcePopSettings
from stages.common.icepop_loss import grpo_icepop_loss, icepop_in_band
from stages.common.inputs import StageInputs
from stages.common.mtp_training import mtp_training
from stages.common.policy import policy_engine, rl_training_engine
from stages.common.policy_step import LossOf, policy_step
from stages.common.rl_batches import TrainBatch, engine_batch
from stages.common.router_balance import RouterBalance
from stages.common.stage_main import stage_main
from stages.common.timing import timed
from stages.common.training_engine import step_shape
from stages.distill.config import DistillConfig
from stages.distill.data import AgentEpisode, draw_prompts, teacher_prompts
from stages.distill.loss import distill_advantages, response_aligned
from stages.distill.metrics import accept_length_over_ranks, step_metrics
from stages.distill.record import distill_rows
from stages.distill.rows import StudentRow, episode_rows, sample_rows
from stages.distill.teachers import teacher_engines, teacher_logprobs


def train(config: DistillConfig, stage: StageInputs) -> str:
    dist, events, workdir = stage.dist, stage.events, stage.workdir
    tokenizer = stage.tokenizer()
    prompts = teacher_prompts(stage.store, config.teachers, tokenizer, workdir,
                              limit=config.max_steps * config.prompts_per_step, seed=config.seed, data_seed=config.data_seed)
    teachers = [stage.store.open(teacher.checkpoint) for teacher in config.teachers]
    shares = {teacher.source: teacher.share for teacher in config.teachers}
    events.emit("data", train_prompts={source: len(p) for source, p in prompts.items()},
                teachers={t.source: a.uri for t, a in zip(config.teachers, teachers, strict=True)})

    model = load_model(stage.init_dir).eval()  # no dropout: π_train must match the engine's π_infer
    balance = RouterBalance(model, config.router_balancing)
    routing = RoutingLayout.of(model)  # a MoE student's engine returns each position's experts
    replayed = ReplayedRouting(model) if routing is not None else None
    shape = step_shape(config.prompts_per_step, dist.world_size, config.compute.micro_batch_size, "prompts_per_step")
    engine = rl_training_engine(model, config.optimizer, config.compute, shape, dist.world_size)
    mtp = mtp_training(model, config.mtp, config.optimizer)
    checkpointer = StageCheckpointer(config, stage, engine, engine.module, tokenizer, teachers=teachers,
                                     record=config.record)
    start_step = checkpointer.resume()
    finite = FiniteSteps(config.optimizer.nonfinite_skips, config.stage_name)
    share = per_rank(config.prompts_per_step, dist.world_size, "prompts_per_step")
    agent_tasks = sorted({task for teacher in config.teachers for task in teacher.agent_tasks})
    with ExitStack() as stack:
        scorers = teacher_engines(stack, config.teachers, workdir, config.seed, config.compute.precision)
        services = stack.enter_context(TaskServices(dict.fromkeys(agent_tasks, 1.0), workdir)) if agent_tasks else None
        student = policy_engine(stack, config, engine, workdir, dist, start_step)
        for step in range(start_step, config.max_steps):
            rng = random.Random(f"distill:{config.seed}:{step}")
            drawn = draw_prompts(prompts, shares, share * dist.world_size, rng)
            step_prompts = rank_share(drawn, dist.rank, share)

            with timed() as rollout:
                sampling = config.sampling.params().model_copy(update={"sampling_seed": rng.randrange(2**31) + dist.rank})
                rows, episodes, speculation = student_rows(student.fleet, step_prompts, sampling, services, tokenizer,
                                                           config, f"s{step + 1}-r{dist.rank}",
                                                           routed_experts=routing is not None)
            with timed() as teaching:
                scored = teacher_logprobs(scorers, rows)

            with timed() as training:
                batch = engine_batch([(r.prompt_ids, r.response_ids, r.loss_mask, r.logprobs) for r in rows],
                                     [r.routed_experts for r in rows], tokenizer.pad_token_id, routing,
                                     config.routing_replay, "row")
                logp_teacher = response_aligned([len(r.prompt_ids) for r in rows], scored, batch.logp_infer.shape[1])
                trained = policy_step(engine, batch, config.compute.micro_batch_size, config.sampling.temperature,
                                      finite, step + 1, distill_loss_of(logp_teacher, config.objective),
                                      mean_over="sequences", routing=replayed, replay=config.routing_replay,
                                      mtp=mtp)
                expert_load = balance.after_step(last=step + 1 == config.max_steps)
            student.push(step + 1)

            checkpointer.end_of_step(
                step_metrics(step + 1, trained, engine.get_lr()[0], batch, rows, logp_teacher, list(shares),
                             episodes if agent_tasks else None, dist, rollout_s=rollout.seconds,
                             teacher_s=teaching.seconds, train_s=training.seconds) | expert_load
                | accept_length_over_ranks(*speculation, dist),
                samples=distill_rows(config.stage_name, step + 1, dist.rank, rows, trained.logp_old, logp_teacher,
                                     icepop_in_band(trained.logp_old, batch.logp_infer, config.objective)))
    return checkpointer.finish()


def distill_loss_of(logp_teacher: torch.Tensor, objective: IcePopSettings) -> LossOf:
    """The Eq. 1 loss of a micro-batch (`policy_step`) with each token's advantage log π_teacher − log π_student."""
    def loss_of(rows: slice, micro: TrainBatch, logp_new: torch.Tensor):
        # One optimizer step per batch: π_θ_old is this forward without its gradient.
        logp_old = logp_new.detach()
        teacher = logp_teacher[rows, :logp_old.shape[1]].to(logp_old.device)
        advantages = distill_advantages(teacher, logp_old, micro.response_mask)
        return grpo_icepop_loss(logp_new, logp_old, micro.logp_infer, advantages, micro.response_mask, objective)
    return loss_of


def student_rows(student: EngineFleet, prompts: list, sampling: SamplingParams, services: TaskServices | None,
                 tokenizer, config: DistillConfig, batch_id: str,
                 routed_experts: bool = False) -> tuple[list[StudentRow], list[RolloutResult], tuple[int, int]]:
    """What the student samples for this step's prompts: one reply to each first-reply prompt (a single
    seeded request) and every agent episode played to the end, each with its positions' experts when
    `routed_experts`; the rows to train, the episodes, and (tokens decoded speculatively, verification steps)."""
    replies = [p for p in prompts if not isinstance(p, AgentEpisode)]
    episodes = [p for p in prompts if isinstance(p, AgentEpisode)]
    samples = student.client.generate([p.prompt_ids for p in replies], sampling,
                                      routed_experts=routed_experts) if replies else []
    specs = [RolloutSpec(f"{batch_id}-{i}", f"{batch_id}-{i}", episode.task, episode.row)
             for i, episode in enumerate(episodes)]
    results = play_episodes(specs, student.url, services, tokenizer, sampling.model_copy(update={"sampling_seed": None}),
                            config.episode, routed=student.routed, routed_experts=routed_experts) if specs else []
    rows = sample_rows(samples, replies, batch_id) + episode_rows(results, [e.teacher for e in episodes])
    if not rows:
        raise RuntimeError(f"batch {batch_id}: nothing to train, the environment failed in every episode: "
                           + "; ".join(sorted({r.failure or "" for r in results})))
    tokens, steps = speculated(samples)
    return rows, results, (tokens + sum(r.speculated_tokens for r in results), steps + sum(r.verify_steps for r in results))


def main(argv: list[str] | None = None) -> None:
    stage_main(DistillConfig, train, __doc__.splitlines()[0], argv)


if __name__ == "__main__":
    main()
