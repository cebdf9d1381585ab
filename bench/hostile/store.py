"""The artifact store and lineage names."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from bench.hostile.cases import Case


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
