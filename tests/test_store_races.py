"""Two processes committing one name at the same moment: one artifact, never a torn one.

Each round releases both writers from a barrier together. With the same content both get the
one committed artifact back; with different content exactly one wins and the other gets an
ArtifactExistsError. Either way the name verifies, holds one writer's lineage, and no claim or
temporary file is left behind.
"""

import multiprocessing

import pytest

from infra.store import ArtifactExistsError, open_store

ROUNDS = 20
WRITERS = 2


def _content(round_index: int, writer: int) -> tuple[bytes, bytes]:
    # Several files of a few hundred KB keep each commit long enough for the two to overlap.
    same = round_index % 2 == 0
    tag = b"" if same else f"writer-{writer}".encode()
    return b"w" * 300_000 + tag, b"o" * 200_000 + tag


def _race(root: str, writer: int, barrier, results) -> None:
    store = open_store(root)
    for round_index in range(ROUNDS):
        weights, optimizer = _content(round_index, writer)
        artifact = store.begin(f"race/round-{round_index:02d}")
        artifact.put_bytes("model.safetensors", weights)
        artifact.put_bytes("deepspeed/optimizer.pt", optimizer)
        artifact.put_bytes("notes.txt", f"round {round_index}".encode())
        barrier.wait()
        try:
            outcome = ("committed", artifact.commit({"writer": writer}).digest)
        except ArtifactExistsError as exc:
            outcome = ("exists", str(exc))
        except Exception as exc:  # anything else is a bug the parent reports with its type
            outcome = ("error", f"{type(exc).__name__}: {exc}")
        results.put((round_index, writer, outcome))


def _run_race(root: str) -> dict[int, dict[int, tuple[str, str]]]:
    context = multiprocessing.get_context("spawn")
    barrier, results = context.Barrier(WRITERS), context.Queue()
    processes = [context.Process(target=_race, args=(root, writer, barrier, results)) for writer in range(WRITERS)]
    for process in processes:
        process.start()
    outcomes: dict[int, dict[int, tuple[str, str]]] = {}
    for _ in range(ROUNDS * WRITERS):
        round_index, writer, outcome = results.get(timeout=300)
        outcomes.setdefault(round_index, {})[writer] = outcome
    for process in processes:
        process.join(timeout=60)
        assert process.exitcode == 0
    return outcomes


@pytest.mark.timeout(600)
def test_racing_commits_of_one_name(store_root: str) -> None:
    outcomes = _run_race(store_root)

    store = open_store(store_root)
    for round_index in range(ROUNDS):
        name = f"race/round-{round_index:02d}"
        kinds = sorted(kind for kind, _ in outcomes[round_index].values())
        errors = [detail for kind, detail in outcomes[round_index].values() if kind == "error"]
        assert not errors, f"{name}: {errors}"
        committed = store.open(name)
        if round_index % 2 == 0:
            assert kinds == ["committed", "committed"], outcomes[round_index]
            assert {detail for _, detail in outcomes[round_index].values()} == {committed.digest}
        else:
            assert kinds == ["committed", "exists"], outcomes[round_index]
            winner = next(w for w, (kind, _) in outcomes[round_index].items() if kind == "committed")
            assert committed.read_bytes("notes.txt") == f"round {round_index}".encode()
            assert committed.read_bytes("model.safetensors") == _content(round_index, winner)[0]
            loser_message = next(detail for kind, detail in outcomes[round_index].values() if kind == "exists")
            assert committed.digest in loser_message
        assert committed.verify() == []
        assert committed.lineage()["writer"] in range(WRITERS)
        leftovers = [key for key in store.backend.list_prefix(name + "/")
                     if "/_CLAIM/" in key or key.endswith(".tmp")]
        assert leftovers == []
    assert len(store.list_committed("race/")) == ROUNDS

