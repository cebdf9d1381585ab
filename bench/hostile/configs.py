"""Stage configs."""

from __future__ import annotations

import math

from bench.hostile.cases import Case


def config_cases(store: dict) -> list[Case]:
    from stages.grpo.config import GeneralRlConfig, ReasoningRlConfig
    from stages.sft.config import SftConfig

    base = {"run_id": "hostile", "store": store["root"], "init_checkpoint": store["init"], "datasets": store["datasets"]}

    def sft(**changes):
        return lambda: SftConfig.model_validate({**base, **changes})

    def rl(**changes):
        return lambda: ReasoningRlConfig.model_validate({**base, **changes})

    def general(path, params=None):
        spec = {"path": path, "weight": 1.0, **({"params": params} if params else {})}
        return lambda: GeneralRlConfig.model_validate({**base, "rewards": [spec]})

    cases = [
        ("lr Infinity", sft(optimizer={"lr": math.inf}), "lr"),
        ("lr 1e30", sft(optimizer={"lr": 1e30}), "lr"),
        ("lr NaN", sft(optimizer={"lr": math.nan}), "lr"),
        ("lr negative", sft(optimizer={"lr": -1e-3}), "lr"),
        ("weight_decay Infinity", sft(optimizer={"weight_decay": math.inf}), "weight_decay"),
        ("grad_clip Infinity", sft(optimizer={"grad_clip": math.inf}), "grad_clip"),
        ("grad_clip 0", sft(optimizer={"grad_clip": 0}), "grad_clip"),
        ("warm-up longer than max_steps", sft(max_steps=10, optimizer={"warmup_steps": 50}), "warmup"),
        ("indexer_loss_weight Infinity", sft(dsa={"indexer_loss_weight": math.inf}), "indexer_loss_weight"),
        ("indexer_lr 10", sft(dsa={"indexer_lr": 10}), "indexer_lr"),
        ("max_steps 0", sft(max_steps=0), "max_steps"),
        ("global_batch_size -1", sft(global_batch_size=-1), "global_batch_size"),
        ("misspelt field", sft(optimzer={"lr": 1e-3}), "optimzer"),
        ("run_id with a path", sft(run_id="../../etc"), "run_id"),
        ("no datasets", sft(datasets=[]), "datasets"),
        ("thinking_mix not summing to 1", sft(thinking_mix={"interleaved": 0.9}), "thinking_mix"),
        ("seed a string", sft(seed="abc"), "seed"),
        ("checkpoint_every 0", sft(checkpoint_every=0), "checkpoint_every"),
        ("temperature 0", rl(sampling={"temperature": 0}), "temperature"),
        ("temperature NaN", rl(sampling={"temperature": math.nan}), "temperature"),
        ("top_p 2", rl(sampling={"top_p": 2}), "top_p"),
        ("max_new_tokens 0", rl(sampling={"max_new_tokens": 0}), "max_new_tokens"),
        ("group_size 1", rl(group_size=1), "group_size"),
        ("reward subprocess.Popen", general("subprocess.Popen", {"args": ["touch", "pwned"]}), "subprocess.Popen"),
        ("reward os.system", general("os.system"), "os.system"),
        ("reward builtins.eval", general("builtins.eval"), "builtins.eval"),
        ("reward that does not exist", general("rewards.verifiers.NoSuchThing"), "NoSuchThing"),
        ("reward weight NaN", lambda: GeneralRlConfig.model_validate(
            {**base, "rewards": [{"path": "rewards.rules.InstructionRules", "weight": math.nan}]}), "weight"),
    ]
    return [Case("stage configs", what, attempt, names) for what, attempt, names in cases]
