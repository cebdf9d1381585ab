"""Hostile and mistaken inputs against every surface a person types into or a client reaches.

Each input must be refused with an error that names what is wrong (the field, file, path or limit):
`named`. `unnamed` is a refusal whose message lacks the name (or a 5xx); `accepted` went through.
Prints one table row per input, a summary per surface, and exits 1 unless every input was `named`.

    .venv/bin/python bench/hostile_inputs.py            # about two minutes on 2 CPU cores
"""

from __future__ import annotations

import json
import math
import os
import sys
import tempfile
import textwrap
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pyarrow as pa  # noqa: E402
import requests  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402
from typer.testing import CliRunner  # noqa: E402


@dataclass
class Case:
    surface: str
    what: str
    attempt: Callable[[], object]  # raises, or returns an HTTP response / CLI result / value
    names: str  # what the error must mention


@dataclass
class Outcome:
    case: Case
    verdict: str
    message: str


def judge(case: Case) -> Outcome:
    try:
        result = case.attempt()
    except Exception as error:  # every refusal is judged by its message
        message = f"{type(error).__name__}: {error}"
        return Outcome(case, "named" if case.names.lower() in message.lower() else "unnamed", message)
    if isinstance(result, requests.Response) or hasattr(result, "status_code"):
        message = f"{result.status_code} {result.text[:300]}"
        if 400 <= result.status_code < 500:
            return Outcome(case, "named" if case.names.lower() in result.text.lower() else "unnamed", message)
        return Outcome(case, "unnamed" if result.status_code >= 500 else "accepted", message)
    if hasattr(result, "exit_code"):  # a CLI run: refused means a non-zero exit and one line, no traceback
        output = result.output.strip()
        one_line = len(output.splitlines()) == 1 and "Traceback" not in output
        if result.exit_code == 0:
            return Outcome(case, "accepted", output[:300])
        return Outcome(case, "named" if one_line and case.names.lower() in output.lower() else "unnamed", output[:300])
    if getattr(result, "problems", None):  # a reward contract check that failed, with its reasons
        message = "; ".join(result.problems)
        return Outcome(case, "named" if case.names.lower() in message.lower() else "unnamed", message)
    return Outcome(case, "accepted", repr(result)[:300])


# -- stage configs -------------------------------------------------------------------------------------

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


# -- reward modules: resolution and `rewards check` ----------------------------------------------------

HOSTILE_MODULE = '''
import os, time


class Base:
    version = "1"

    def __init__(self, **params):
        pass


class ExitsProcess(Base):
    name = "exits"

    def __call__(self, samples):
        os._exit(0)


class HoldsTheGil(Base):
    name = "gil"

    def __call__(self, samples):
        sum(range(10**12))


class AllNone(Base):
    name = "none"

    def __call__(self, samples):
        return [None] * len(samples)


class Booleans(Base):
    name = "bools"

    def __call__(self, samples):
        return [True] * len(samples)


class Huge(Base):
    name = "huge"

    def __call__(self, samples):
        return [1e308] * len(samples)


class NotANumber(Base):
    name = "nan"

    def __call__(self, samples):
        return [float("nan")] * len(samples)


class Raises(Base):
    name = "raises"

    def __call__(self, samples):
        raise RuntimeError("boom")


class WrongLength(Base):
    name = "short"

    def __call__(self, samples):
        return [0.5]


class SideEffectOnImport(Base):
    name = "fine"

    def __call__(self, samples):
        return [0.5] * len(samples)
'''


def reward_cases(scratch: Path) -> list[Case]:
    from rewards.isolated import check_contract_isolated
    from rewards.loading import load_reward_module

    package = scratch / "hostile_rewards"
    package.mkdir()
    (package / "__init__.py").write_text(textwrap.dedent(HOSTILE_MODULE))
    sys.path.insert(0, str(scratch))
    os.environ["PYTHONPATH"] = os.pathsep.join([str(scratch), os.environ.get("PYTHONPATH", "")])
    os.environ["POSTTRAIN_REWARD_PACKAGES"] = "hostile_rewards"

    def load(path, params=None):
        return lambda: load_reward_module(path, params)

    def check(path):
        return lambda: check_contract_isolated(path, timeout_s=5.0, start_up_s=30.0)

    cases = [
        ("load subprocess.Popen with args", load("subprocess.Popen", {"args": ["touch", str(scratch / "pwned")]}),
         "subprocess.Popen"),
        ("load os.system", load("os.system"), "os.system"),
        ("load builtins.exec", load("builtins.exec"), "builtins.exec"),
        ("load a module, not a class", load("rewards.verifiers"), "rewards.verifiers"),
        ("load a class that is not a reward", load("rewards.loading.RewardModuleError"), "RewardModuleError"),
        ("load a missing name", load("rewards.verifiers.Nope"), "Nope"),
        ("load an empty path", load(""), "''"),
        ("load a path with ..", load("rewards..verifiers.ArithExactMatch"), "rewards..verifiers"),
        ("load with params the class refuses", load("rewards.verifiers.ArithExactMatch", {"x": 1}), "params ['x']"),
        ("check os._exit(0)", check("hostile_rewards.ExitsProcess"), "ended before reporting"),
        ("check a GIL-holding hang", check("hostile_rewards.HoldsTheGil"), "did not finish"),
        ("check all None", check("hostile_rewards.AllNone"), "None"),
        ("check booleans", check("hostile_rewards.Booleans"), "bool"),
        ("check 1e308", check("hostile_rewards.Huge"), "1e+308"),
        ("check NaN", check("hostile_rewards.NotANumber"), "nan"),
        ("check raises", check("hostile_rewards.Raises"), "boom"),
        ("check wrong length", check("hostile_rewards.WrongLength"), "1 score"),
        ("check subprocess.Popen", check("subprocess.Popen"), "subprocess.Popen"),
    ]
    return [Case("reward modules", what, attempt, names) for what, attempt, names in cases]


# -- datasets ------------------------------------------------------------------------------------------

def dataset_cases(store: dict, scratch: Path) -> list[Case]:
    from data_contracts import CHAT_V1, PROMPT_V1, read_parquet, write_parquet
    from infra.store import open_store
    from stages.common.inputs import load_split

    artifact = open_store(store["root"]).open(store["datasets"][0])
    good = read_parquet(CHAT_V1, artifact.download(scratch / "good") / "test.parquet")
    rows = good.slice(0, 3).to_pylist()

    def written(name: str, data: bytes) -> Path:
        path = scratch / name
        path.write_bytes(data)
        return path

    original = (scratch / "good" / "test.parquet").read_bytes()
    flipped = bytearray(original)
    flipped[4:24] = b"\xff" * 20

    def changed(**fields):
        return [{**rows[0], **fields}, *rows[1:]]

    def message_changed(**fields):
        first = dict(rows[1])
        first["messages"] = [{**first["messages"][0], **fields}, *first["messages"][1:]]
        return [rows[0], first, rows[2]]

    ids = pa.Array.from_buffers(pa.string(), 3, [None, pa.py_buffer(bytes([0, 0, 0, 0, 2, 0, 0, 0, 4, 0, 0, 0, 6, 0, 0, 0])),
                                                 pa.py_buffer(b"ok\xff\xfexy")])
    table = good.slice(0, 3)
    bad_utf8 = table.set_column(table.column_names.index("id"), "id", ids)

    def write(rows_or_table, name="out.parquet"):
        return lambda: write_parquet(CHAT_V1, rows_or_table, scratch / name)

    def read(path, contract=CHAT_V1):
        return lambda: read_parquet(contract, path)

    corrupt_store = open_store(str(scratch / "corrupt-store"))
    writer = corrupt_store.begin("datasets/corrupt")
    writer.put_bytes("train.parquet", bytes(flipped))
    corrupt = writer.commit({})

    cases = [
        ("flipped bytes in a page", read(written("flipped.parquet", bytes(flipped))), "flipped.parquet"),
        ("corrupt file in a committed dataset", lambda: load_split([corrupt], "train", scratch / "load"),
         corrupt.uri),
        ("truncated file", read(written("truncated.parquet", original[: len(original) // 2])), "truncated.parquet"),
        ("empty file", read(written("empty.parquet", b"")), "empty.parquet"),
        ("a CSV named .parquet", read(written("table.parquet", b"id,messages\n1,hi\n")), "table.parquet"),
        ("chat rows read as prompts", read(scratch / "good" / "test.parquet", PROMPT_V1), "chat@1"),
        ("invalid UTF-8 in a column", write(bad_utf8, "utf8.parquet"), "column 'id', row 1"),
        ("unknown thinking_mode", write(changed(thinking_mode="always")), "thinking_mode"),
        ("no messages", write(changed(messages=[])), "messages"),
        ("unknown role", write(message_changed(role="developer")), "role"),
        ("null content", write(message_changed(content=None)), "content"),
        ("tools_json not JSON", write(changed(tools_json="{oops")), "tools_json"),
        ("missing column", write([{k: v for k, v in row.items() if k != "suite"} for row in rows]), "suite"),
        ("extra column", write([{**row, "sutie": "x"} for row in rows]), "sutie"),
        ("a row that is a string", write(["not a row"]), "row 0"),
        ("messages as a string", write(changed(messages="hello")), "messages"),
    ]
    return [Case("datasets", what, attempt, names) for what, attempt, names in cases]


# -- the artifact store and lineage names --------------------------------------------------------------

def store_cases(scratch: Path) -> list[Case]:
    from infra.store import open_store

    store = open_store(str(scratch / "names-store"))
    committed = store.begin("data/taken")
    committed.put_bytes("a.txt", b"first")
    committed.commit({})

    def begin(name):
        return lambda: store.begin(name)

    def put(relpath):
        return lambda: store.begin("data/new").put_bytes(relpath, b"x")

    def recommit():
        writer = store.begin("data/taken")
        writer.put_bytes("a.txt", b"second")
        return writer.commit({})

    cases = [
        ("name with ..", begin("data/../../etc"), ".."),
        ("absolute name", begin("/etc/passwd"), "/etc/passwd"),
        ("empty segment", begin("data//x"), "data//x"),
        ("a 300-character segment", begin("x" * 300), "255 bytes"),
        ("name with a space", begin("data/my set"), "my set"),
        ("non-ASCII name", begin("data/ä"), "\\xe4"),  # shown escaped: a look-alike shows as what it is
        ("_SUCCESS as a segment", begin("data/_SUCCESS"), "_SUCCESS"),
        ("_CLAIM as a segment", begin("data/_CLAIM/x"), "_CLAIM"),
        ("empty name", begin(""), "''"),
        ("file path with ..", put("../escape"), "../escape"),
        ("absolute file path", put("/etc/shadow"), "/etc/shadow"),
        ("file named manifest.json", put("manifest.json"), "manifest.json"),
        ("file named _SUCCESS", put("sub/_SUCCESS"), "_SUCCESS"),
        ("file with a control character", put("a\x00b"), "control character"),
        ("file with a backslash", put("a\\b"), "backslash"),
        ("other content under a committed name", recommit, "already committed"),
        ("a hidden segment", begin("data/.hidden"), "starts with '.'"),
        ("a Cyrillic look-alike", begin("data/\u0430rith"), "\\u0430rith"),
        ("a trailing line break", begin("data/x\n"), "not allowed"),
    ]
    return [Case("store", what, attempt, names) for what, attempt, names in cases]


def lineage_cases(scratch: Path) -> list[Case]:
    from posttrain.cli import app

    env = {"POSTTRAIN_STORE": str(scratch / "names-store"), "COLUMNS": "200",
           "POSTTRAIN_S3_ENDPOINT_URL": "http://127.0.0.1:9", "AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "y"}

    def lineage(*args):
        return lambda: CliRunner().invoke(app, ["lineage", *args], env=env)

    cases = [
        ("..", lineage(".."), ".."),
        ("a leading /", lineage("/etc"), "/etc"),
        ("file:///etc", lineage("file:///etc"), "file:///etc"),
        ("a 300-character name", lineage("x" * 300), "255 bytes"),
        ("a file path", lineage(str(scratch / "names-store" / "data" / "taken" / "a.txt")), "a.txt"),
        ("a name not committed", lineage("data/never"), "data/never"),
        ("s3:// with no server answering", lineage("s3://bucket/data/x"), "s3://bucket"),
        ("an http:// URI", lineage("http://example.com/x"), "http://example.com/x"),
        ("an empty name", lineage(""), "''"),
        ("--verify on a name not committed", lineage("data/never", "--verify"), "data/never"),
        ("--store on a kernel file system", lineage("data/taken", "--store", "/proc/self"), "--store"),
        ("--store s3:// with a port", lineage("data/taken", "--store", "s3://127.0.0.1:9/x"), "bucket name"),
    ]
    return [Case("lineage names", what, attempt, names) for what, attempt, names in cases]


# -- data import: `posttrain data import FILE` -------------------------------------------------------

def data_import_cases(scratch: Path) -> list[Case]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from posttrain.cli import app

    folder = scratch / "imports"
    folder.mkdir()
    env = {"POSTTRAIN_STORE": str(scratch / "import-store"), "COLUMNS": "200"}
    chat = {"messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}]}

    def jsonl(name: str, *lines: str) -> Path:
        path = folder / name
        path.write_text("".join(line + "\n" for line in lines))
        return path

    def parquet(name: str, columns: dict) -> Path:
        path = folder / name
        pq.write_table(pa.table(columns), path)
        return path

    def imported(path: Path | str, kind: str = "chat", *options: str):
        return lambda: CliRunner().invoke(app, ["data", "import", str(path), "--as", kind, *options], env=env)

    good = jsonl("good.jsonl", json.dumps(chat))
    fifo = folder / "fifo.jsonl"
    os.mkfifo(fifo)
    sparse = jsonl("sparse.jsonl", json.dumps(chat))
    os.truncate(sparse, 64 << 20)  # 64 MiB of zeros after the first line, no newline, sparse on disk
    tool_call = {"role": "assistant", "content": "", "tool_calls": [{"function": {
        "name": "calc", "arguments": "[" * 200_000 + "]" * 200_000}}]}
    cases = [
        ("/dev/zero as the data file", imported("/dev/zero"), "character device"),
        ("a FIFO as the data file", imported(fifo), "FIFO"),
        ("a 64 MiB line of zeros", imported(sparse), "16,000,000 bytes"),
        ("200,000 nested arrays", imported(jsonl("deep.jsonl", "[" * 200_000 + "]" * 200_000)), "nested deeper"),
        ("200,000 nested arrays in tool arguments", imported(jsonl("deep-args.jsonl", json.dumps({"messages": [
            chat["messages"][0], tool_call, {"role": "tool", "content": "4"}, chat["messages"][1]]}))),
         "tool_calls[0].arguments"),
        ("--name ../../../tmp/x", imported(good, "chat", "--name", "../../../tmp/x"), "dataset name"),
        ("--name %2e%2e/x", imported(good, "chat", "--name", "%2e%2e/x"), "dataset name"),
        ("--name with a Cyrillic a", imported(good, "chat", "--name", "d\u0430ta"), r"\u0430"),
        ("--name .hidden", imported(good, "chat", "--name", ".hidden"), "starting with a letter or digit"),
        ("a file named in katakana, no --name", imported(jsonl("\u30c7\u30fc\u30bf.jsonl", json.dumps(chat))), "--name"),
        ("a 5 MB id", imported(jsonl("big-id.jsonl", json.dumps({**chat, "id": "x" * 5_000_000}))), "at most 256"),
        ("an id with a terminal escape", imported(jsonl("escape-id.jsonl", json.dumps({**chat, "id": "a\x1b[2Jb"}))),
         "control or invisible character"),
        ("a NaN prompt", imported(jsonl("nan.jsonl", '{"prompt": NaN}'), "prompt"), "NaN is not valid JSON"),
        ("-Infinity in metadata", imported(jsonl("inf.jsonl", '{"prompt": "2+2?", "metadata": {"x": -Infinity}}'),
                                           "prompt"), "-Infinity is not valid JSON"),
        ("an integer of 5,000 digits", imported(jsonl("digits.jsonl", '{"id": ' + "9" * 5000 + "}")),
         "number too long"),
        ("a lone surrogate escape", imported(jsonl("surrogate.jsonl", '{"prompt": "\\ud800", "completion": "4"}')),
         "lone surrogate"),
        ("a Parquet float id column with NaN", imported(parquet("nan-id.parquet", {
            "prompt": ["2+2?", "3+3?"], "id": [1.0, float("nan")]}), "prompt"), "id: must be a string or an integer"),
        ("NaN in a Parquet metadata struct", imported(parquet("nan-meta.parquet", {
            "prompt": ["2+2?"], "metadata": [{"x": float("nan")}]}), "prompt"), "metadata: cannot be written as JSON"),
        ("a .parquet file that is JSONL", imported(jsonl("fake.parquet", json.dumps(chat))), "not a Parquet file"),
    ]
    return [Case("data import", what, attempt, names) for what, attempt, names in cases]


# -- spec files: `posttrain spec check FILE` ---------------------------------------------------------

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
    from flows.spec import load_spec
    from flows.spec_plan import plan_spec
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

    def planned(path: Path):  # what `spec check` finds after it has printed the plan
        def attempt():
            plan = plan_spec(*load_spec(path))
            if plan.problems:
                raise ValueError("; ".join(plan.problems))
            return plan
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


# -- launch fields: what becomes an sbatch script, a hostfile, an ssh target or a pod spec ----------------

def launch_cases() -> list[Case]:
    from infra.launchers import DeepSpeedLaunch, SlurmLaunch
    from infra.launchers.kubernetes import KubernetesLaunch

    image = "ghcr.io/org/posttrain:1.0"
    cases = [
        ("Slurm partition with a line break", lambda: SlurmLaunch(partition="gpu\ntouch pwned"), "partition"),
        ("Slurm account with a ;", lambda: SlurmLaunch(account="lab;touch pwned"), "account"),
        ("sbatch option with a carriage return", lambda: SlurmLaunch(sbatch_options=["--qos=x\rtouch pwned"]),
         "sbatch option"),
        ("Slurm time limit as shell", lambda: SlurmLaunch(time_limit="1:00 $(touch pwned)"), "time_limit"),
        ("DeepSpeed host as an ssh option", lambda: DeepSpeedLaunch(hosts=[{"name": "-oProxyCommand=touch pwned"}]),
         "hosts.0.name"),
        ("DeepSpeed host with a trailing line break", lambda: DeepSpeedLaunch(hosts=[{"name": "gpu1\n"}]),
         "hosts.0.name"),
        ("DeepSpeed master_addr with a space", lambda: DeepSpeedLaunch(master_addr="a b;c"), "master_addr"),
        ("a variable's name with a line break", lambda: DeepSpeedLaunch(environment={"A\nB": "1"}), "environment"),
        ("Kubernetes image with a line break", lambda: KubernetesLaunch(image="img:1\nrm -rf /"), "image"),
        ("Kubernetes service account ../admin", lambda: KubernetesLaunch(image=image, service_account="../admin"),
         "service_account"),
        ("Kubernetes node selector key with a space", lambda: KubernetesLaunch(image=image,
                                                                               node_selector={"gpu type": "h100"}),
         "node_selector"),
        ("Kubernetes master_port 22", lambda: KubernetesLaunch(image=image, master_port=22), "master_port"),
    ]
    return [Case("launch fields", what, attempt, names) for what, attempt, names in cases]


# -- credentials: the UI's password and the fleet's API key ---------------------------------------------

def auth_cases(scratch: Path) -> list[Case]:
    from posttrain.cli import app
    from rollout.agents.envs.service import build_env_app
    from rollout.agents.envs.tasks import CalcTask
    from rollout.auth import require_api_key

    def ui(*options):
        return lambda: CliRunner().invoke(app, ["ui", "--logs", str(scratch / "ui-logs"), *options],
                                          env={"COLUMNS": "200", "PREFECT_SERVER_API_AUTH_STRING": ""})

    service = TestClient(require_api_key(build_env_app(CalcTask()), "s3cret-key"))
    body = {"episode_id": "e", "messages": [{"role": "user", "content": "2 + 2?"}], "reference": "4"}

    def reset(**request):
        return lambda: service.post("/reset", json=body, **request)

    cases = [
        ("UI auth ':' on all interfaces", ui("--host", "0.0.0.0", "--auth-string", ":"), "USER:PASSWORD"),
        ("UI auth without a colon", ui("--host", "0.0.0.0", "--auth-string", "nocolon"), "USER:PASSWORD"),
        ("UI auth with an empty password", ui("--auth-string", "admin:"), "USER:PASSWORD"),
        ("UI on all interfaces without auth", ui("--host", "0.0.0.0"), "--auth-string"),
        ("service request without a key", reset(), "bearer"),
        ("service request with the wrong key", reset(headers={"Authorization": "Bearer guess"}), "bearer"),
        ("the key as a query parameter", reset(params={"api_key": "s3cret-key"}), "bearer"),
        ("the key as basic auth", reset(auth=("user", "s3cret-key")), "bearer"),
    ]
    return [Case("auth", what, attempt, names) for what, attempt, names in cases]


# -- the rollout engine and the task services ----------------------------------------------------------

def engine_cases(store: dict, scratch: Path) -> list[Case]:
    from rollout.process import EngineProcess

    engine = EngineProcess(store["init"], scratch / "engine.log", weights_dirs=[scratch / "allowed"])
    # A master nobody listens on is named after the join timeout: a few seconds here, a minute by default.
    engine.service.args += ["--weight-group-join-timeout-s", "5"]
    client = engine.start()
    url = client.base_url
    allowed = scratch / "allowed"
    from infra.store import open_store

    local = open_store(store["root"]).open(store["init"]).download(allowed / "vocab", skip=("deepspeed/",))
    config = json.loads((local / "config.json").read_text())
    (local / "config.json").write_text(json.dumps({**config, "vocab_size": 2_000_000}))
    outside = open_store(store["root"]).open(store["init"]).download(scratch / "outside", skip=("deepspeed/",))

    def generate(body):
        return lambda: requests.post(f"{url}/generate", json=body, timeout=60)

    def raw(text):
        return lambda: requests.post(f"{url}/generate", data=text, timeout=60, headers={"content-type": "application/json"})

    def update(path):
        return lambda: requests.post(f"{url}/update_weights", json={"model_path": str(path)}, timeout=120)

    def join(**fields):
        body = {"master_address": "127.0.0.1", "master_port": 29500, "rank_offset": 1, "world_size": 2,
                "backend": "gloo", **fields}
        return lambda: requests.post(f"{url}/init_weights_update_group", json=body, timeout=120)

    cases = [
        ("temperature NaN", raw('{"input_ids": [5, 6], "sampling_params": {"temperature": NaN}}'), "temperature"),
        ("top_p Infinity", raw('{"input_ids": [5, 6], "sampling_params": {"top_p": Infinity}}'), "top_p"),
        ("temperature negative", generate({"input_ids": [5, 6], "sampling_params": {"temperature": -1}}), "temperature"),
        ("5,000 prompts", generate({"input_ids": [[5]] * 5000, "sampling_params": {"max_new_tokens": 1}}), "4096"),
        ("600,000 new tokens", generate({"input_ids": [5], "sampling_params": {"max_new_tokens": 600_000}}), "524288"),
        ("a token id outside the vocabulary", generate({"input_ids": [5, 10**9]}), "vocabulary"),
        ("a prompt longer than the context", generate({"input_ids": [5] * 100_000, "sampling_params": {"max_new_tokens": 1}}),
         "context"),
        ("no input_ids", generate({"sampling_params": {}}), "input_ids"),
        ("max_new_tokens -1", generate({"input_ids": [5], "sampling_params": {"max_new_tokens": -1}}), "max_new_tokens"),
        ("update from a folder not allowed", update(outside), "--weights-dir"),
        ("update with vocab_size 2e6", update(allowed / "vocab"), "vocab_size"),
        ("update from a missing URI", update(Path(store["root"]).as_uri() + "/checkpoints/none"), "not a committed"),
        ("update with no model_path", lambda: requests.post(f"{url}/update_weights", json={}, timeout=30), "model_path"),
        ("a 50 MB /generate body", raw('{"input_ids": [' + "5," * 25_000_000 + '5]}'), "at most 25165824 bytes"),
        ("a 26 MB body sent without a length", lambda: requests.post(f"{url}/generate", data=iter(
            [b'{"input_ids": [' + b"5," * 13_000_000 + b"5]}"]), timeout=60), "at most 25165824 bytes"),
        ("8 million ids in 16 MB", raw('{"input_ids": [' + "5," * 8_000_000 + '5]}'), "786432 JSON values"),
        ("input_ids nested 100,000 deep", raw('{"input_ids": ' + "[" * 100_000 + "]" * 100_000 + "}"),
         "lists and objects"),
        ("master_address with shell words", join(master_address="a b;c"), "master_address"),
        ("a master nobody listens on", join(master_port=1), "127.0.0.1:1"),
        ("rank_offset past world_size", join(rank_offset=2), "rank_offset"),
        ("backend mpi", join(backend="mpi"), "backend"),
    ]
    return [Case("engine", what, attempt, names) for what, attempt, names in cases], engine


def service_cases() -> list[Case]:
    from rollout.agents.envs.service import build_env_app
    from rollout.agents.envs.tasks import CalcTask, SearchTask

    prompt = [{"role": "user", "content": "What is 2 + 2?"}]
    calc, search = TestClient(build_env_app(CalcTask(), max_episodes=3)), TestClient(build_env_app(SearchTask()))
    calc.post("/reset", json={"episode_id": "open", "messages": prompt, "reference": "4"})

    def reset(client, **fields):
        return lambda: client.post("/reset", json={"episode_id": "e", "messages": prompt, **fields})

    def fill():
        for name in ("f1", "f2"):
            calc.post("/reset", json={"episode_id": name, "messages": prompt, "reference": "4"})
        return calc.post("/reset", json={"episode_id": "f3", "messages": prompt, "reference": "4"})

    cases = [
        ("calc reference not an integer", reset(calc, reference="four"), "reference"),
        ("search without graph_seed", reset(search, reference="Paris", metadata={}), "graph_seed"),
        ("step an unknown episode", lambda: calc.post("/step", json={"episode_id": "ghost", "text": "hi"}), "ghost"),
        ("verify an unfinished episode", lambda: calc.post("/verify", json={"episode_id": "open"}), "not finished"),
        ("reset a running episode", lambda: calc.post("/reset", json={"episode_id": "open", "messages": prompt,
                                                                         "reference": "4"}), "already running"),
        ("reset without messages", lambda: calc.post("/reset", json={"episode_id": "x", "reference": "4"}), "messages"),
        ("a body that is not JSON", lambda: calc.post("/step", content=b"{nope", headers={"content-type": "application/json"}),
         "json"),
        ("more episodes than the service holds", fill, "--max-episodes"),
    ]
    return [Case("task services", what, attempt, names) for what, attempt, names in cases]


class HealthWatch:
    """Probes the engine's /health four times a second while the cases run: a body parsed on its event loop
    shows as a slow answer (a router would take the replica out after a few)."""

    def __init__(self, url: str):
        self.url, self.latencies = url, []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._probe, name="health-watch", daemon=True)

    def __enter__(self) -> HealthWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _probe(self) -> None:
        while not self._stop.wait(0.25):
            started = time.monotonic()
            try:
                requests.get(f"{self.url}/health", timeout=10).raise_for_status()
            except requests.RequestException:
                pass  # counted as its wait, up to the 10 s timeout
            self.latencies.append(time.monotonic() - started)


def main() -> int:
    from data_prep.prepare import prepare
    from infra.store import open_store
    from suites.prepare import SuiteSizes

    with tempfile.TemporaryDirectory(prefix="posttrain-hostile-") as tmp:
        scratch = Path(tmp)
        prepared = prepare(open_store(str(scratch / "store")), suites=["arith"], sizes=SuiteSizes(16, 8),
                           preset="glm5-tiny", seed=0, triggered_by="bench")
        store = {"root": str(scratch / "store"), "init": prepared.init_checkpoint.uri,
                 "datasets": sorted(d.uri for d in prepared.datasets.values())}
        engine_list, engine = engine_cases(store, scratch)
        try:
            cases = [*config_cases(store), *reward_cases(scratch), *dataset_cases(store, scratch),
                     *store_cases(scratch), *lineage_cases(scratch), *engine_list, *service_cases(),
                     *data_import_cases(scratch), *spec_cases(scratch), *launch_cases(), *auth_cases(scratch)]
            with HealthWatch(engine.url) as health:
                outcomes = [judge(case) for case in cases]
        finally:
            engine.stop()
        pwned = (scratch / "pwned").exists()

    for outcome in outcomes:
        print(f"| {outcome.case.surface} | {outcome.case.what} | {outcome.verdict} | "
              f"{outcome.message.splitlines()[0][:110] if outcome.message else ''} |")
    print()
    surfaces = Counter(o.case.surface for o in outcomes)
    named = Counter(o.case.surface for o in outcomes if o.verdict == "named")
    for surface in surfaces:
        print(f"{surface}: {named[surface]}/{surfaces[surface]} named")
    worst = max(health.latencies)
    print(f"total: {sum(named.values())}/{len(outcomes)} named; a file created by a config: {pwned}; "
          f"engine /health: worst answer {worst:.2f} s over {len(health.latencies)} probes")
    return 0 if sum(named.values()) == len(outcomes) and not pwned and worst < 1.0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
