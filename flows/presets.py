"""Pipeline presets: everything a preset name stands for, in one place, built from the stages' typed recipes."""

from __future__ import annotations

from dataclasses import dataclass, field

from rollout.orchestrator import EpisodeSettings
from stages.agentic.config import AgenticRecipe
from stages.common.config import HeldoutSettings, OptimizerSettings, SamplingSettings
from stages.distill.config import DistillRecipe
from stages.evaluation.agentic import AgenticEvalSettings
from stages.evaluation.committed import EvalSettings
from stages.evaluation.general import GeneralEvalSettings
from stages.evaluation.sampled import SampledEvalSettings
from stages.grpo.config import GrpoRecipe, RewardSpec
from stages.orm.config import OrmRecipe
from stages.sft.config import DsaSchedule, SftRecipe
from suites.prepare import SuiteSizes

# The smoke preset's agent episodes: two turns in a short context; its two-step RL stages warm up over both.
SMOKE_EPISODE = EpisodeSettings(max_turns=2, max_context=512, discard_above=480)
SMOKE_OPTIMIZER = OptimizerSettings(lr=5e-5, warmup_steps=2)


@dataclass(frozen=True)
class PipelinePreset:
    model: str
    sizes: dict[str, SuiteSizes]  # every published suite and its split sizes
    sft_suites: tuple[str, ...] = ("arith", "search", "calc", "instruct")  # what SFT trains on; the rest feed later stages
    sft: SftRecipe = field(default_factory=SftRecipe)
    eval: EvalSettings = field(default_factory=EvalSettings)
    reasoning_rl: GrpoRecipe | None = None  # None skips the stage
    rl_eval: SampledEvalSettings = field(default_factory=SampledEvalSettings)
    agentic_rl: AgenticRecipe | None = None  # None skips the stage
    agentic_eval: AgenticEvalSettings = field(default_factory=AgenticEvalSettings)
    orm: OrmRecipe | None = None  # None trains no ORM (the mix then has none)
    preference_suites: tuple[str, ...] = ("chat", "instruct")  # whose preference@1 pairs the ORM trains on
    general_rl: GrpoRecipe | None = None  # None skips the stage
    general_suites: tuple[str, ...] = ("instruct",)  # whose prompts (prompt@1) general RL trains on
    general_eval: GeneralEvalSettings = field(default_factory=GeneralEvalSettings)
    distill: DistillRecipe | None = None  # None skips the stage
    distill_shares: dict[str, int] = field(default_factory=dict)  # a teacher's share of each batch (default 1)


PIPELINE_PRESETS = {
    # A minute-long check that an installation runs every stage end to end; learns nothing useful.
    "smoke": PipelinePreset(
        model="glm5-tiny",
        sizes={suite: SuiteSizes(train=64, test=16) for suite in ("arith", "search", "calc", "instruct", "chat")},
        sft=SftRecipe(max_steps=6, global_batch_size=8, optimizer=OptimizerSettings(lr=3e-3, warmup_steps=2),
                      heldout=HeldoutSettings(every=3, samples=8), checkpoint_every=100,
                      dsa=DsaSchedule(dense_steps=2, indexer_warmup_steps=2)),
        eval=EvalSettings(limit_per_suite=8, batch_size=8, max_new_tokens=24),
        reasoning_rl=GrpoRecipe(max_steps=2, group_size=2, prompts_per_step=2, optimizer=SMOKE_OPTIMIZER,
                                sampling=SamplingSettings(max_new_tokens=16)),
        rl_eval=SampledEvalSettings(prompts=8, samples_per_prompt=2, max_new_tokens=16),
        agentic_rl=AgenticRecipe(max_steps=2, group_size=2, groups_per_step=2, max_in_flight_groups=2, replicas=2,
                                 sampling=SamplingSettings(max_new_tokens=16), episode=SMOKE_EPISODE),
        agentic_eval=AgenticEvalSettings(episodes_per_task=4, max_new_tokens=16, episode=SMOKE_EPISODE),
        orm=OrmRecipe(max_steps=4, global_batch_size=4, optimizer=OptimizerSettings(lr=3e-4, warmup_steps=4),
                      heldout=HeldoutSettings(every=2, batch_size=64), checkpoint_every=100),
        general_rl=GrpoRecipe(max_steps=2, group_size=2, prompts_per_step=2, optimizer=SMOKE_OPTIMIZER,
                              sampling=SamplingSettings(max_new_tokens=16)),
        general_eval=GeneralEvalSettings(prompts_per_dataset=8, max_new_tokens=16),
        distill=DistillRecipe(max_steps=2, prompts_per_step=3, sampling=SamplingSettings(max_new_tokens=16)),
    ),
    # The demo: at most 4 minutes of SFT (training and its evaluation) on 2 CPU cores.
    "tiny": PipelinePreset(
        model="glm5-tiny",
        # Arithmetic dominates SFT: it is what later RL stages improve, and it needs the most samples.
        # 20,000 distinct problems, each seen about once, teach the steps instead of the answers: with
        # 8,000 seen about twice the model scored 23% greedy on training prompts and 9% held out, and
        # RL on those prompts mostly reinforced recall (+3.5 points sampled; +5.6 with 20,000).
        # A search sample costs five arith samples' compute. Copying names (search success) needs
        # about 6,400 search samples on this model (measured on search alone), beyond the demo's budget:
        # the demo model answers "unknown" or follows the wrong company, in well-formed turns; with only
        # 1,500 of them next to 20,000 arith, search format validity fell to 0.67. calc episodes teach
        # the calculator calls agentic RL starts from. 300 instruct replies teach the format General RL
        # improves: without them its held-out rule compliance stays at chance (0.085 before and after 48
        # steps, with or without anchor members); with 1,000 they diluted arith (held-out 0.11, RL +4.3).
        sizes={"arith": SuiteSizes(train=20000, test=1000), "search": SuiteSizes(train=3000, test=200),
               "calc": SuiteSizes(train=600, test=200), "instruct": SuiteSizes(train=300, test=600),
               "chat": SuiteSizes(train=1000, test=200)},
        # lr 1e-3 at batch 32 lowered held-out loss faster per second than 3e-3/5e-3 at batch 64 here.
        # Few thinking-off turns: an arith turn with thinking off states a multi-step result with no
        # working, which this model cannot learn, and its loss swamps the rest. Held-out accuracy with
        # thinking on after 600 steps: 8-13% with 15% off (3 runs), 36% with 5%, 40-44% with none (2 runs).
        # The learning rate stays at its peak (min_lr_ratio 1.0): RL gains only on a checkpoint whose SFT
        # schedule has not annealed. Sampled / greedy held-out arith, before -> after 26 steps of this
        # RL config with exact match alone, by how far SFT annealed: 0.1: 7.4% -> 7.6%, 11.9% -> 11.5%;
        # 1.0: 5.4% -> 8.3%, 10.2% -> 11.7% (30-36 steps at lr 5e-5 earlier: +3 to +5 points from 1.0,
        # +4 from 0.5, +1 from 0.3). Search episodes that give up after two failed opens keep the
        # unannealed model's search turns well formed (format validity 0.80-0.89 without them, 1.0 with).
        # 540 steps (dense 400) saved no time here and left RL +3.8 points (0.078 -> 0.116) instead of +8.
        sft=SftRecipe(max_steps=580, global_batch_size=32, optimizer=OptimizerSettings(lr=1e-3, warmup_steps=50),
                      min_lr_ratio=1.0, heldout=HeldoutSettings(every=100, samples=128), checkpoint_every=200,
                      thinking_mix={"interleaved": 0.8, "preserved": 0.15, "off": 0.05},
                      dsa=DsaSchedule(dense_steps=420, indexer_warmup_steps=50)),
        eval=EvalSettings(limit_per_suite=200, search_episodes=120, batch_size=200, max_new_tokens=64),
        # Tuned on an SFT checkpoint trained on 8,000 arith problems (sampled 5.4%, greedy 10.2%), 26 steps:
        # exact match alone at lr 5e-5 / 1e-4 / 2e-4: +2.4 / +2.9 / +1.9 sampled, +1.2 / +1.5 / -1.2 greedy;
        # with the step-prefix process reward at weight 0.5 (lr 1e-4): +3.4 sampled, +2.6 greedy; at weight
        # 1.0: +2.5, +2.1. Freezing the MoE routers did not help (annealed SFT). Prompts SFT never saw
        # gave less (+1.4): at 5% accuracy most of their groups carry no signal. On the current SFT checkpoint
        # 26 steps gave +8.75 sampled in a 168 s stage on an older 2-core machine (22 gave +8.1 there). On a
        # machine with AVX-512 the same SFT recipe lands elsewhere (sampled 0.103): 22 steps gave +4.9, 26 +5.9,
        # 30 +5.75 (a 63-69 s stage there).
        reasoning_rl=GrpoRecipe(max_steps=26, group_size=8, prompts_per_step=16, oversample=2,
                                optimizer=OptimizerSettings(lr=1e-4, warmup_steps=3), sampling=SamplingSettings(max_new_tokens=64),
                                rewards=[RewardSpec(path="rewards.verifiers.ArithExactMatch"),
                                         RewardSpec(path="rewards.verifiers.ArithStepPrefix", weight=0.5)]),
        rl_eval=SampledEvalSettings(prompts=1000, samples_per_prompt=4, max_new_tokens=64),
        # Tool success is small and noisy at this size: 10 steps raised it 0.01 -> 0.125, 0.0375 -> 0.1125 and
        # lowered it 0.05 -> 0.0375 in single runs (80 evaluation episodes); 20 steps with 200 episodes raised it
        # 0.08 -> 0.105 in a 105 s stage on the AVX-512 machine. The older machine is about 2.5x slower here:
        # calc's multi-turn episodes made 16 steps a 167 s training job on it.
        agentic_rl=AgenticRecipe(max_steps=20, group_size=4, groups_per_step=8, max_in_flight_groups=16, replicas=2,
                                 optimizer=OptimizerSettings(lr=5e-5, warmup_steps=2),
                                 sampling=SamplingSettings(max_new_tokens=64), episode=EpisodeSettings(max_turns=6)),
        # 100 episodes per task: at 40 one episode moved a task's success by 2.5 points, more than agentic
        # RL's gain (each evaluation takes about 15 s on the AVX-512 machine, 50 s on the older one).
        agentic_eval=AgenticEvalSettings(episodes_per_task=100),
        # On the SFT trunk: 0.73 held-out pairwise accuracy after 100 and 120 steps at lr 1e-4 (1e-3 overfit);
        # 50 steps reached 0.65 (0.66 after 60); on the AVX-512 machine 100 steps take 28 s.
        orm=OrmRecipe(max_steps=100, global_batch_size=16, optimizer=OptimizerSettings(lr=1e-4, warmup_steps=10),
                      heldout=HeldoutSettings(every=1000, batch_size=64), checkpoint_every=1000),
        # With the ORM in the mix, 24 steps at lr 1e-4 raised held-out rule compliance 0.075 -> 0.165 and kept
        # arith (sampled 0.176 -> 0.163); from another agentic checkpoint it went 0.065 -> 0.045. 40 steps at 2e-4 gained less (0.075 -> 0.085) and cost arith
        # (-> 0.055) and tool success (-> 0.008); at 3e-4 and 5e-4 compliance fell (0.03, 0.0).
        general_rl=GrpoRecipe(max_steps=16, group_size=8, prompts_per_step=8, optimizer=OptimizerSettings(lr=1e-4, warmup_steps=3),
                              sampling=SamplingSettings(max_new_tokens=48)),
        # 600 held-out prompts (the instruct test split): on 200, one prompt is half a point of compliance,
        # and distillation's student went 0.095 -> 0.085 (kept 0.89) where on 600 it kept 1.04.
        general_eval=GeneralEvalSettings(prompts_per_dataset=600, max_new_tokens=48),
        # Teacher shares per batch, reasoning / agentic / general. The general teacher is the student itself,
        # so its prompts only hold the student in place: with equal shares compliance fell below the
        # teacher's. Arith is what agentic and general RL cost (sampled 0.162 -> 0.125 and 0.142 in two runs)
        # and what distillation is slowest to bring back: with agent episodes played whole, shares 4 / 2 / 5
        # kept 0.946 of it (lr 1e-4: 0.906; 66 prompts a step: 0.949), 8 / 2 / 5 kept 0.972 and 0.971 on
        # the two students, keeping 1.0 of tool success and compliance (24 steps, 47 s of training).
        distill=DistillRecipe(max_steps=24, prompts_per_step=33, optimizer=OptimizerSettings(lr=5e-5, warmup_steps=2),
                              sampling=SamplingSettings(max_new_tokens=64)),
        distill_shares={"reasoning_rl": 8, "agentic_rl": 2, "general_rl": 5},
    ),
    # A single-GPU preset: a 40M model and longer training.
    "small": PipelinePreset(
        model="glm5-small",
        sizes={"arith": SuiteSizes(train=50000, test=1000), "search": SuiteSizes(train=5000, test=500),
               "calc": SuiteSizes(train=2000, test=500), "instruct": SuiteSizes(train=5000, test=500), "chat": SuiteSizes(train=5000, test=500)},
        sft=SftRecipe(max_steps=3000, global_batch_size=64, optimizer=OptimizerSettings(lr=1e-3, warmup_steps=100),
                      heldout=HeldoutSettings(every=250, samples=128), checkpoint_every=500,
                      dsa=DsaSchedule(dense_steps=1500, indexer_warmup_steps=200)),
        eval=EvalSettings(limit_per_suite=1000, batch_size=128, max_new_tokens=128),
    ),
}


def get_preset(name: str) -> PipelinePreset:
    if name not in PIPELINE_PRESETS:
        raise ValueError(f"unknown pipeline preset {name!r}; known: {', '.join(sorted(PIPELINE_PRESETS))}")
    return PIPELINE_PRESETS[name]
