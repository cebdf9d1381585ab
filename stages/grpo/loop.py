"""The GRPO + IcePop loop shared by reasoning RL and general RL: sample, score, one step, push weights.

Fully on-policy: each step samples G responses per prompt from the rollout engine, scores them with
the configured reward modules, takes one optimizer step, and pushes the new weights to the engine
before the next step samples. The DSA indexer is frozen; its tie-stable top-k makes the engine's and
the trainer's sparse attention pick the same keys.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from contextlib import ExitStack
from operator import attrgetter

import torch

from model.presets import load_model
from model.routing import ReplayedRouting, RoutingLayout
from rewards import load_reward_module, reward_module_refs
from stages.common.checkpointer import StageCheckpointer
from stages.common.config import per_rank
from stages.common.difficulty import (
    Observation,
    PassRates,
    difficulty_metrics,
    observe_everywhere,
    pass_rates_for,
)
from stages.common.distributed import rank_share
from stages.common.finite import FiniteSteps
from stages.common.icepop import IcePopSettings
from stages.common.icepop_loss import group_advantages, grpo_icepop_loss, icepop_in_band
from stages.common.inputs import StageInputs
from stages.common.mtp_training import mtp_training
from stages.common.policy import policy_engine, rl_training_engine
from stages.common.policy_step import LossOf, policy_step
from stages.common.prompts import RlPrompt
from stages.common.rl_batches import TrainBatch, require_routed_experts, train_batch
from stages.common.router_balance import RouterBalance
from stages.common.timing import timed
from stages.common.training_engine import step_shape
from stages.grpo.anchors import anchor_weights, behaviour_logprobs, is_anchor, policy_requests, with_anchor_members
from stages.grpo.config import AnchorSettings, GeneralRlConfig, GrpoRecipe, ReasoningRlConfig
from stages.grpo.draws import draw_groups
from stages.grpo.metrics import skipped_step_metrics, step_metrics
from stages.grpo.record import grpo_rows
from stages.grpo.rewards import GroupRewards, WeightedReward, group_passes, group_rewards


def run_grpo(config: ReasoningRlConfig | GeneralRlConfig, stage: StageInputs, prompts: Sequence[RlPrompt], tokenizer,
             anchors: AnchorSettings | None = None) -> str:
    """Train on `prompts` until `max_steps`, committing checkpoints; returns the final checkpoint's URI.
    With `anchors` enabled, reference replies join their groups as off-policy members (stages/grpo/anchors.py)."""
    dist, events, workdir = stage.dist, stage.events, stage.workdir
    anchors_on = anchors is not None and anchors.enabled
    model = load_model(stage.init_dir).eval()  # no dropout: π_train must match the engine's π_infer
    balance = RouterBalance(model, config.router_balancing)
    routing = RoutingLayout.of(model)  # the engine returns each token's experts where the model has MoE layers
    replayed = ReplayedRouting(model) if routing is not None else None
    rewards, reward_refs = load_rewards(config)
    events.emit("data", train_prompts=len(prompts), rewards=[r.name for r in rewards])

    shape = step_shape(config.prompts_per_step * config.group_size, dist.world_size, config.compute.micro_batch_size,
                       "prompts_per_step × group_size")
    engine = rl_training_engine(model, config.optimizer, config.compute, shape, dist.world_size, frozen=config.frozen)
    mtp = mtp_training(model, config.mtp, config.optimizer, config.frozen)
    pass_rates = pass_rates_for(config.difficulty, config.group_size)
    checkpointer = StageCheckpointer(config, stage, engine, engine.module, tokenizer, reward_refs=reward_refs,
                                     record=config.record, parts={"pass_rates": pass_rates} if pass_rates else None)
    start_step = checkpointer.resume()
    finite = FiniteSteps(config.optimizer.nonfinite_skips, config.stage_name)
    share = per_rank(config.prompts_per_step, dist.world_size, "prompts_per_step")
    # A group's responses share their prompt: computed once (model/shared_prompts.py) where a KV cache can carry it.
    share_prompts = config.shared_prompts and not config.compute.activation_checkpointing
    with ExitStack() as stack:
        policy = policy_engine(stack, config, engine, workdir, dist, start_step)
        for step in range(start_step, config.max_steps):
            rng = random.Random(f"reasoning-rl:{config.seed}:{step}")
            sampler = GroupSampler(config, policy, rewards, tokenizer, prompts, rng, dist, anchors_on, pass_rates,
                                   routed_experts=routing is not None)
            groups = draw_groups(sampler.draw, sampler.sample_and_score, share, config.oversample,
                                 config.dynamic_sampling)
            if not groups.chosen:  # some rank drew no group with signal in `max_draws` draws: no update
                checkpointer.end_of_step(skipped_step_metrics(step + 1, engine.get_lr()[0], groups, dist,
                                                              sampler.difficulty_metrics(),
                                                              generate_s=sampler.generate_s, reward_s=sampler.reward_s)
                                         | balance.after_step(last=step + 1 == config.max_steps))
                continue
            chosen, step_prompts, scored = groups.chosen, groups.prompts, groups.scored
            members = [g * config.group_size + i for g in chosen for i in range(config.group_size)]
            samples, scores = [groups.samples[m] for m in members], [scored.scores[m] for m in members]
            rewards_by_group, kept = scored.total[chosen], [scored.kept[g] for g in chosen]

            with timed() as training:
                batch = train_batch(samples, tokenizer.pad_token_id, routing)
                keep = torch.tensor(kept).repeat_interleave(config.group_size)
                advantages = group_advantages(rewards_by_group).flatten().to(torch.float32) * keep
                is_anchor_member = is_anchor(samples)
                loss_of = grpo_loss_of(advantages, is_anchor_member, config.objective, anchors if anchors_on else None)
                trained = policy_step(engine, batch, config.compute.micro_batch_size, config.sampling.temperature,
                                      finite, step + 1, loss_of, mean_over="sequences", routing=replayed,
                                      replay=config.routing_replay, share_prompts=share_prompts, mtp=mtp)
                expert_load = balance.after_step(last=step + 1 == config.max_steps)
            # The tokens IcePop kept, on record: the gate compares the trainer's θ_old with what sampled each token.
            in_band = icepop_in_band(trained.logp_old, behaviour_logprobs(batch.logp_infer, trained.logp_old,
                                                                          is_anchor_member), config.objective)
            with timed() as pushing:
                policy.push(step + 1)

            checkpointer.end_of_step(
                step_metrics(step + 1, trained, engine.get_lr()[0], groups, samples, is_anchor_member, batch,
                             policy.fleet, dist, sampler.difficulty_metrics(), generate_s=sampler.generate_s,
                             reward_s=sampler.reward_s,
                             train_s=training.seconds, push_s=pushing.seconds) | expert_load,
                samples=grpo_rows(config.stage_name, step + 1, dist.rank, [step_prompts[g] for g in chosen], samples,
                                  scores, rewards_by_group, advantages, is_anchor_member, trained.logp_old, in_band))
    return checkpointer.finish()


class GroupSampler:
    """A step's draws of prompts (the same on every rank, each rank taking its share) and their groups,
    sampled on the policy's engines and scored, with the time each part took over the step's draws.
    With `pass_rates` (difficulty on), draws are weighted by the prompts' running pass rates, and every
    scored group, whichever rank scored it and whether or not it is trained on, updates them."""

    def __init__(self, config, policy, rewards, tokenizer, prompts, rng: random.Random, dist, anchors_on: bool,
                 pass_rates: PassRates | None, routed_experts: bool = False):
        self.config, self.policy, self.rewards, self.tokenizer = config, policy, rewards, tokenizer
        self.routed_experts = routed_experts
        self.prompts, self.rng, self.dist, self.anchors_on = prompts, rng, dist, anchors_on
        self.pass_rates = pass_rates
        self.generate_s = self.reward_s = 0.0
        self.drawn_outside_band = 0  # over every rank's share of the step's draws

    def draw(self, count: int) -> list[RlPrompt]:
        return rank_share(self.draw_for_every_rank(count * self.dist.world_size), self.dist.rank, count)

    def draw_for_every_rank(self, count: int) -> list[RlPrompt]:
        if self.pass_rates is None:  # the rng consumed as it always was: a run without difficulty draws alike
            return self.rng.sample(self.prompts, count)
        drawn = self.pass_rates.draw(self.rng, self.prompts, count, attrgetter("id"))
        self.drawn_outside_band += sum(self.pass_rates.outside_band(prompt.id) for prompt in drawn)
        return drawn

    def difficulty_metrics(self) -> dict[str, int]:
        return difficulty_metrics(self.pass_rates, self.drawn_outside_band)

    def sample_and_score(self, drawn: list[RlPrompt]) -> tuple[list, GroupRewards]:
        config = self.config
        with timed() as generation:
            # Seeded by step and rank, not by what the engine served before: a resumed run samples alike.
            sampling = config.sampling.params().model_copy(
                update={"sampling_seed": self.rng.randrange(2**31) + self.dist.rank})
            samples = self.policy.fleet.client.generate(policy_requests(drawn, config.group_size, self.anchors_on),
                                                        sampling, routed_experts=self.routed_experts)
            if self.routed_experts and config.routing_replay:
                require_routed_experts([sample.routed_experts for sample in samples])
            if self.anchors_on:
                samples = with_anchor_members(drawn, samples, config.group_size, self.tokenizer)
        with timed() as scoring:
            scored = group_rewards(drawn, samples, config.group_size, self.rewards, self.tokenizer,
                                   config.reward_timeout_s)
        self.generate_s += generation.seconds
        self.reward_s += scoring.seconds
        if self.pass_rates is not None:
            passes = group_passes(scored, is_anchor(samples), config.difficulty.solved_at)
            observe_everywhere(self.pass_rates, [Observation(prompt.id, passed, counted) for prompt, (passed, counted)
                                                 in zip(drawn, passes, strict=True)])
        return samples, scored


def grpo_loss_of(advantages: torch.Tensor, is_anchor_member: torch.Tensor, objective: IcePopSettings,
                 anchors: AnchorSettings | None) -> LossOf:
    """The Eq. 1 loss of a micro-batch of the step's rows (`policy_step`), anchor members weighted."""
    def loss_of(rows: slice, micro: TrainBatch, logp_new: torch.Tensor):
        # One optimizer step per rollout batch: θ_old is the current θ, so the trainer's own
        # recomputation π_train(θ_old) is this forward, without its gradient.
        logp_old = logp_new.detach()
        anchor, advantage = is_anchor_member[rows].to(logp_new.device), advantages[rows].to(logp_new.device)
        if anchors is not None:
            advantage = advantage * anchor_weights(logp_old, micro.response_mask, anchor, anchors.min_weight)
        return grpo_icepop_loss(logp_new, logp_old, behaviour_logprobs(micro.logp_infer, logp_old, anchor),
                                advantage, micro.response_mask, objective)
    return loss_of


def load_rewards(config: GrpoRecipe) -> tuple[list[WeightedReward], list]:
    """The configured reward modules with their weights, and their lineage records (composed parts included)."""
    modules = [load_reward_module(spec.path, spec.params) for spec in config.rewards]
    rewards = [WeightedReward(module.name, module, spec.weight) for module, spec in zip(modules, config.rewards, strict=True)]
    refs = [ref for spec, r in zip(config.rewards, rewards, strict=True)
            for ref in reward_module_refs(spec.path, r.module, spec.params)]
    return rewards, refs

