"""Spec files: `posttrain spec check FILE`."""

from __future__ import annotations

import os
from pathlib import Path

from typer.testing import CliRunner

from bench.hostile.cases import Case


def anchor_bomb(levels: int = 9) -> str:
    """A spec whose reward params hold `levels` anchors, each a list of nine aliases of the one before:
    9**levels strings once expanded, a few hundred bytes as written."""
    names = "abcdefghijklmnopqrstuvwxyz"[:levels]
    params = [f'          {names[0]}: &{names[0]} [{", ".join(["lol"] * 9)}]']
    params += [f"          {name}: &{name} [{', '.join([f'*{before}'] * 9)}]"
               for before, name in zip(names, names[1:], strict=False)]
    return ("model: {preset: glm5-tiny}\ndata: {suites: {instruct: {}}}\nstages:\n  general_rl:\n"
            "    datasets: [instruct]\n    rewards:\n      - path: rewards.rules.InstructSoft\n        params:\n"
            + "\n".join(params) + "\n")


def spec_cases(scratch: Path) -> list[Case]:
    from posttrain.cli import app

    folder = scratch / "specs"
    folder.mkdir()
    head = "model: {preset: glm5-tiny}\ndata: {suites: {instruct: {}}}\n"

    def spec(name: str, text: str | bytes) -> Path:
        path = folder / name
        path.write_bytes(text if isinstance(text, bytes) else text.encode())
        return path

    def with_sft(extra: str = "", sft: str = "{datasets: [instruct]}") -> str:
        return f"{head}{extra}stages:\n  sft: {sft}\n"

    def with_reward(reward: str) -> str:
        return f"{head}stages:\n  general_rl:\n    datasets: [instruct]\n    rewards: [{reward}]\n"

    def check(path: Path | str):
        return lambda: CliRunner().invoke(app, ["spec", "check", str(path)], env={"COLUMNS": "200"})

    def planned(path: Path):  # what `spec check` finds after it has printed the plan: its lines on stderr
        def attempt():
            result = CliRunner().invoke(app, ["spec", "check", str(path)], env={"COLUMNS": "200"})
            if result.exit_code:
                raise ValueError(result.stderr.strip())
            return result
        return attempt

    fifo = folder / "fifo.yaml"
    os.mkfifo(fifo)
    cases = [
        ("a YAML anchor bomb in reward params", check(spec("bomb.yaml", anchor_bomb())), "100,000 values"),
        ("two sft: sections", check(spec("twice.yaml", with_sft() + "  sft: {datasets: [other]}\n")),
         "duplicate key 'sft'"),
        ("a reward param the module does not take", check(spec("param.yaml", with_reward(
            "{path: rewards.rules.InstructSoft, params: {bogus_param: 1}}"))), "bogus_param"),
        ("a reward path naming a module", check(spec("module.yaml", with_reward("{path: rewards.verifiers}"))),
         "names a module"),
        ("a mix component's param", check(spec("mix.yaml", with_reward(
            "{path: rewards.mix.MixedReward, params: {domains: {instruct: [{path: rewards.rules.InstructSoft, "
            "params: {x: 1}}]}}}"))), "domains.instruct"),
        ("suite train -5", check(spec("negative.yaml", with_sft().replace("instruct: {}", "instruct: {train: -5}"))),
         "train"),
        ("seed 2**128", check(spec("seed.yaml", with_sft(f"seed: {2**128}\n"))), "seed"),
        ("store s3://host:port/../..", check(spec("s3.yaml", with_sft('store: "s3://127.0.0.1:9/b/../../x"\n'))),
         "bucket name"),
        ("store /proc/self/fd", check(spec("proc.yaml", with_sft("store: /proc/self/fd\n"))), "kernel"),
        ("/dev/zero as the spec", check("/dev/zero"), "character device"),
        ("a FIFO as the spec", check(fifo), "FIFO"),
        ("a 2 MB spec", check(spec("big.yaml", "# " + "x" * (2 << 20) + "\n" + with_sft())), "bytes"),
        ("100,000 nested lists", check(spec("deep.yaml", "[" * 100_000)), "nested deeper"),
        ("a python/object tag", check(spec("tag.yaml", with_sft("x: !!python/object/apply:os.system [touch pwned]\n"))),
         "python/object"),
        ("Latin-1 bytes", check(spec("latin1.yaml", with_sft().encode() + b"# caf\xe9\n")), "utf-8"),
        ("a list, not a mapping", check(spec("list.yaml", "- model\n- stages\n")), "mapping"),
        ("a Slurm partition with a shell line", check(spec("slurm.yaml", with_sft(
            'launch: {kind: slurm, partition: "gpu\\ntouch pwned"}\n'))), "partition"),
        ("an import of /dev/zero", planned(spec("import.yaml", head.replace("data: {suites: {instruct: {}}}",
            "data: {imports: {zero: {path: /dev/zero, as: chat}}}") + "stages:\n  sft: {datasets: [zero]}\n")),
         "/dev/zero"),
    ]
    return [Case("spec files", what, attempt, names) for what, attempt, names in cases]
