"""`posttrain prepare` then `posttrain lineage`: the ancestry, its JSON, and byte-level verification."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from data_contracts.lineage import Lineage
from infra.publish import parent_ref, publish_directory
from infra.store import open_store
from posttrain.cli import app
from tests.s3_server import raw_s3_client

POSTTRAIN = str(Path(sys.executable).with_name("posttrain"))
pytestmark = pytest.mark.slow


def posttrain(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([POSTTRAIN, *args], capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def prepared_store(tmp_path_factory):
    root = tmp_path_factory.mktemp("prepared")
    result = posttrain("prepare", "--store", str(root / "store"), "--out", str(root / "prepared.json"))
    assert result.returncode == 0, result.stdout + result.stderr
    return root, json.loads((root / "prepared.json").read_text())


def flip_byte(path: Path, offset: int = 100) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


def test_help_lists_commands_and_lineage_options():
    assert all(word in posttrain("--help").stdout for word in ("lineage", "prepare", "pipeline"))
    help_text = posttrain("lineage", "--help").stdout
    assert "--json" in help_text and "--verify" in help_text


def test_lineage_shows_the_whole_ancestry(prepared_store):
    _, summary = prepared_store
    checkpoint = summary["init_checkpoint"]
    ancestry = json.loads(posttrain("lineage", checkpoint, "--json").stdout)
    assert ancestry["kind"] == "checkpoint" and ancestry["code"]["git_sha"]
    (tokenizer,) = ancestry["ancestors"]
    assert tokenizer["role"] == "tokenizer"
    assert sorted(node["uri"] for node in tokenizer["ancestors"]) == sorted(summary["datasets"].values())
    assert all(node["role"] == "input" and node["kind"] == "dataset" for node in tokenizer["ancestors"])
    tree = posttrain("lineage", checkpoint)
    assert "glm5-bpe" in tree.stdout and "arith" in tree.stdout
    assert "-->|tokenizer|" in posttrain("lineage", checkpoint, "--format", "mermaid").stdout
    dot = posttrain("lineage", checkpoint, "--format", "dot").stdout
    assert dot.startswith("digraph lineage {") and '[label="tokenizer"]' in dot and dot.count(" -> ") >= 2


def test_verify_passes_then_names_a_flipped_checkpoint_byte(prepared_store):
    root, summary = prepared_store
    checkpoint = summary["init_checkpoint"]
    assert posttrain("lineage", checkpoint, "--verify").returncode == 0
    weights = Path(checkpoint.removeprefix("file://")) / "model.safetensors"
    original = weights.read_bytes()
    flip_byte(weights)
    try:
        result = posttrain("lineage", checkpoint, "--verify")
        assert result.returncode == 1
        assert "model.safetensors" in result.stderr and checkpoint in result.stderr
    finally:
        weights.write_bytes(original)


def test_verify_names_a_changed_byte_in_an_ancestors_data_input(prepared_store):
    _, summary = prepared_store
    dataset = summary["datasets"]["arith"]
    parquet = Path(dataset.removeprefix("file://")) / "train.parquet"
    original = parquet.read_bytes()
    flip_byte(parquet, offset=len(original) // 2)
    try:
        result = posttrain("lineage", summary["init_checkpoint"], "--verify")
        assert result.returncode == 1
        assert f"{dataset}" in result.stderr and "train.parquet" in result.stderr
    finally:
        parquet.write_bytes(original)


def test_a_name_not_committed_in_the_store_is_a_one_line_error_naming_it(prepared_store):
    root, _ = prepared_store
    result = subprocess.run([POSTTRAIN, "lineage", "checkpoints/sft/never-trained", "--verify"], capture_output=True,
                            text=True, timeout=300, env=os.environ | {"POSTTRAIN_STORE": str(root / "store")})
    assert result.returncode == 2
    assert result.stderr.startswith("error: ") and "checkpoints/sft/never-trained" in result.stderr
    assert "Traceback" not in result.stderr


def test_prepare_and_lineage_over_s3(s3_root, moto_endpoint, tmp_path):
    result = posttrain("prepare", "--store", s3_root, "--out", str(tmp_path / "prepared.json"))
    assert result.returncode == 0, result.stdout + result.stderr
    summary = json.loads((tmp_path / "prepared.json").read_text())
    checkpoint = summary["init_checkpoint"]
    assert checkpoint.startswith("s3://") and posttrain("lineage", checkpoint, "--verify").returncode == 0
    bucket, _, prefix = checkpoint.removeprefix("s3://").partition("/")
    client = raw_s3_client(moto_endpoint)
    body = bytearray(client.get_object(Bucket=bucket, Key=f"{prefix}/config.json")["Body"].read())
    body[5] ^= 0x01
    client.put_object(Bucket=bucket, Key=f"{prefix}/config.json", Body=bytes(body))
    result = posttrain("lineage", checkpoint, "--verify")
    assert result.returncode == 1 and "config.json" in result.stderr


def test_preparing_again_names_the_same_content_addressed_artifacts(prepared_store):
    root, summary = prepared_store
    again = posttrain("prepare", "--store", str(root / "store"), "--out", str(root / "again.json"))
    assert again.returncode == 0, again.stdout + again.stderr
    assert json.loads((root / "again.json").read_text()) == summary


@pytest.mark.parametrize("name, says", [
    ("..", "must not contain empty, '.' or '..' segments"),
    ("/etc/passwd", "must be a non-empty relative path"),
    ("checkpoints/../../etc", "'..' segments"),
    ("file:///etc", "names a folder below the store root"),
    ("s3://no-such-bucket/x", "s3://no-such-bucket/x: "),
    ("a" * 300, "a segment is longer than 255 bytes"),
])
def test_every_bad_name_or_uri_is_one_line_and_a_non_zero_exit(prepared_store, name, says):
    # In this process (the command's own code, without the seconds a fresh `posttrain` spends importing):
    # the installed entry point is exercised by every other test here.
    root, _ = prepared_store
    env = {"POSTTRAIN_STORE": str(root / "store"), "AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": "",
           "AWS_EC2_METADATA_DISABLED": "true"}
    result = CliRunner().invoke(app, ["lineage", name], env=env)
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error: ") and says in result.stderr and result.stderr.count("\n") == 1
    assert "Traceback" not in result.stderr
    debug = CliRunner().invoke(app, ["lineage", name, "--debug"], env=env)
    assert debug.exit_code != 0 and debug.exception is not None and not isinstance(debug.exception, SystemExit)


def test_lineage_and_rollouts_take_the_store_as_the_runbooks_show(prepared_store):
    root, summary = prepared_store
    store = root / "store"
    name = summary["init_checkpoint"].removeprefix(store.as_uri() + "/")
    env = {key: value for key, value in os.environ.items() if key != "POSTTRAIN_STORE"}
    verified = subprocess.run([POSTTRAIN, "lineage", name, "--verify", "--store", str(store)], capture_output=True,
                              text=True, timeout=300, env=env, cwd=root)
    assert verified.returncode == 0, verified.stderr
    assert "all files of" in verified.stderr and summary["init_checkpoint"] in verified.stdout.replace("\n", "")
    no_samples = CliRunner().invoke(app, ["rollouts", name, "--store", str(store)], env={"POSTTRAIN_STORE": ""})
    assert no_samples.exit_code == 1 and "no samples on record" in no_samples.stderr


def node_uris(node: dict) -> list[str]:
    return [node["uri"], *(uri for ancestor in node.get("ancestors", []) for uri in node_uris(ancestor))]


def test_a_copied_or_moved_store_is_verified_where_it_is_and_each_flipped_byte_of_it_is_named(prepared_store, tmp_path):
    root, summary = prepared_store
    original = (root / "store").as_uri()
    name = summary["init_checkpoint"].removeprefix(original + "/")
    dataset = summary["datasets"]["arith"].removeprefix(original + "/")
    shutil.copytree(root / "store", tmp_path / "copy")
    (tmp_path / "copy").rename(tmp_path / "moved")  # a store moved to a new folder
    moved = (tmp_path / "moved").as_uri()
    # Given by its URI alone: the lineage names the checkpoint in its store, so the store's root today is known.
    clean = posttrain("lineage", f"{moved}/{name}", "--verify", "--json")
    assert clean.returncode == 0, clean.stderr
    read = node_uris(json.loads(clean.stdout))
    assert len(read) > 5 and all(uri.startswith(moved + "/") for uri in read)

    flip_byte(tmp_path / "moved" / name / "model.safetensors")
    flip_byte(tmp_path / "moved" / dataset / "train.parquet", offset=2000)
    flipped = posttrain("lineage", name, "--verify", "--store", str(tmp_path / "moved"))
    assert flipped.returncode == 1
    mismatches = [line for line in flipped.stderr.splitlines() if line.startswith("MISMATCH")]
    assert any(f"{moved}/{name}/model.safetensors" in line for line in mismatches)
    assert any(f"{moved}/{dataset}/train.parquet" in line for line in mismatches)
    assert not any(original in line for line in mismatches)
    assert posttrain("lineage", name, "--verify", "--store", str(root / "store")).returncode == 0  # untouched


def test_a_reference_to_another_store_is_named_and_never_read(prepared_store, tmp_path):
    root, summary = prepared_store
    other = open_store(str(tmp_path / "other"))
    lineage = Lineage(kind="checkpoint", name="made from another store's checkpoint",
                      parents=[parent_ref(open_store(str(root / "store")).open(
                          summary["init_checkpoint"].removeprefix((root / "store").as_uri() + "/")), "init")])
    (tmp_path / "weights").mkdir()
    (tmp_path / "weights" / "model.safetensors").write_bytes(b"not read")
    made = publish_directory(other, "checkpoints/sft/elsewhere", tmp_path / "weights", lineage)
    assert Lineage.model_validate(made.lineage()).parents[0].name is None
    result = CliRunner().invoke(app, ["lineage", made.uri, "--verify"], env={"POSTTRAIN_STORE": ""})
    assert result.exit_code == 1
    assert f"MISMATCH {summary['init_checkpoint']}: outside the store {other.root_uri}" in result.stderr
