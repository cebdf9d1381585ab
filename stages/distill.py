"""On-policy distillation: `python -m stages.distill --config run.json`, alone or under torchrun / deepspeed.

The final stage (SPEC "Cross-stage on-policy distillation"): the student — the last RL stage's
checkpoint — samples one response per prompt (G = 1) on its own engine; the teacher of the prompt's
source (the final checkpoint of the stage whose prompt set it comes from) scores every sampled token
by prefill on its own engine; each token's advantage is sg[log π_teacher − log π_student], trained
with the Eq. 1 objective (IcePop gate and clip kept). Weights reach the student's engine after every
step: fully on-policy. Every teacher is a `teacher` parent of the committed checkpoint.
"""

from __future__ import annotations

import random
import time
from contextlib import ExitStack


from model.logprobs import next_token_logprobs
from model.presets import load_model
from rollout.protocol import SamplingParams
from stages import checkpoints
from stages.distill_config import DistillConfig
from stages.distill_data import draw_prompts, teacher_prompts
from stages.distill_loss import distill_advantages, response_aligned, reverse_kl_by_teacher
from stages.distill_teachers import teacher_engines, teacher_logprobs
from stages.distributed import all_mean
from stages.grpo_loss import GrpoSettings, grpo_icepop_loss
from stages.rl_rollouts import train_batch
from stages.rl_trainer import commit_rl_checkpoint, end_of_step, policy_engine, push_weights, rl_training_engine
from stages.stage_inputs import StageInputs, stage_main, start_stage


def run(config: DistillConfig) -> str:
    stage = start_stage(config)
    if isinstance(stage, str):  # a previous run committed the output
        return stage
    return distill(config, stage)


def distill(config: DistillConfig, stage: StageInputs) -> str:
    dist, events, workdir = stage.dist, stage.events, stage.workdir
    tokenizer = stage.tokenizer()
    prompts = teacher_prompts(stage.store, config.teachers, tokenizer, workdir,
                              limit=config.max_steps * config.prompts_per_step, seed=config.seed)
    teachers = [stage.store.open(teacher.checkpoint) for teacher in config.teachers]
    shares = {teacher.source: teacher.share for teacher in config.teachers}
    events.emit("data", train_prompts={source: len(p) for source, p in prompts.items()},
                teachers={t.source: a.uri for t, a in zip(config.teachers, teachers)})

    model = load_model(stage.init_dir).eval()  # no dropout: π_train must match the engine's π_infer
    engine = rl_training_engine(model, lr=config.lr, warmup_steps=config.warmup_steps,
                                global_batch=config.prompts_per_step, world_size=dist.world_size,
                                zero_stage=config.zero_stage, grad_clip=config.grad_clip)
    start_step, history, resumed_from = checkpoints.resume_latest(
        engine, stage.store, config.resume_prefix, workdir / "resume", dist.local_rank == 0, events
    )
    settings = GrpoSettings(config.beta, config.eps_low, config.eps_high)
    sampling = SamplingParams(temperature=config.temperature, max_new_tokens=config.max_new_tokens)
    share = config.prompts_per_rank(dist.world_size)
    with ExitStack() as stack:
        scorers = teacher_engines(stack, config.teachers, workdir, config.seed)
        student = policy_engine(stack, config, engine, workdir, dist, start_step)
        for step in range(start_step, config.max_steps):
            rng = random.Random(f"distill:{config.seed}:{step}")
            drawn = draw_prompts(prompts, shares, share * dist.world_size, rng)
            step_prompts = drawn[dist.rank * share:(dist.rank + 1) * share]
            sources = [p.metadata["teacher"] for p in step_prompts]

            started = time.monotonic()
            step_sampling = sampling.model_copy(update={"sampling_seed": rng.randrange(2**31) + dist.rank})
            samples = student.generate([p.prompt_ids for p in step_prompts], step_sampling)
            rollout_s = time.monotonic() - started
            started = time.monotonic()
            scored = teacher_logprobs(scorers, sources, samples)
            teacher_s = time.monotonic() - started

            started = time.monotonic()
            batch = train_batch(samples, tokenizer.pad_token_id)
            logits = engine(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
            logp_new = next_token_logprobs(logits, batch.input_ids, config.temperature)
            # One optimizer step per batch: π_θ_old is this forward without its gradient.
            logp_old = logp_new.detach()
            logp_teacher = response_aligned(samples, scored, logp_old.shape[1])
            advantages = distill_advantages(logp_teacher, logp_old, batch.response_mask)
            loss, stats = grpo_icepop_loss(logp_new, logp_old, batch.logp_infer, advantages, batch.response_mask, settings)
            engine.backward(loss)
            engine.step()
            train_s = time.monotonic() - started
            push_weights(engine, workdir, step + 1, dist.is_main, lambda path: student.update_weights(path, str(step + 1)))

            lengths = [len(s.output_ids) for s in samples]
            kl = reverse_kl_by_teacher(logp_teacher, logp_old, batch.response_mask, sources, list(shares))
            record = {
                "step": step + 1, "loss": all_mean(float(loss)), "lr": engine.get_lr()[0],
                "reverse_kl": all_mean(float(-(advantages.sum() / batch.response_mask.sum()))),
                **{name: all_mean(value) for name, value in kl.items()},
                **{name: all_mean(value) for name, value in stats.items()},
                "response_length": all_mean(sum(lengths) / len(lengths)),
                "trained_tokens": int(all_mean(batch.response_tokens) * dist.world_size),
                "truncated_fraction": all_mean(sum(s.finish_reason == "length" for s in samples) / len(samples)),
                "rollout_tokens_per_s": all_mean(sum(lengths) / rollout_s) * dist.world_size,
                "teacher_tokens_per_s": all_mean(float(batch.attention_mask.sum()) / teacher_s) * dist.world_size,
                "train_tokens_per_s": all_mean(batch.input_ids.numel() / train_s) * dist.world_size,
                "weight_version": samples[0].weight_version,
            }
            end_of_step(record, history, events, config, lambda at, name: commit_rl_checkpoint(
                engine, tokenizer, config, stage, at, history, name, teachers=teachers))

    uri = commit_rl_checkpoint(engine, tokenizer, config, stage, config.max_steps, history, config.output_name,
                               teachers=teachers)
    events.emit("done", checkpoint=uri, resumed_from=resumed_from, already_committed=False)
    return uri


def main(argv: list[str] | None = None) -> None:
    stage_main(DistillConfig, run, __doc__.splitlines()[0], argv)


if __name__ == "__main__":
    main()
