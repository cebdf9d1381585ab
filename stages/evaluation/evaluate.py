"""Held-out evaluation of a causal LM on the embedded suites' rows."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from stages.evaluation.arith_accuracy import run_arith
from stages.evaluation.generation import greedy_generator
from stages.evaluation.prompts import GenerateTurns
from stages.evaluation.report import EvalReport, summarize
from stages.evaluation.search_episodes import run_episodes
from suites.search_tools import matches_graph, split_graph

SUITES = ("arith", "search")


def evaluate(
    model,
    tokenizer,
    suites_rows: Mapping[str, Sequence[Mapping]],
    *,
    seed: int,
    limit_per_suite: int | None = None,
    batch_size: int = 64,
    max_new_tokens: int = 128,
    max_turns: int = 6,
) -> EvalReport:
    """Greedy, deterministic scores of `model` on chat@1 rows keyed by suite.

    `seed` is the one the rows were prepared with (suites.prepare): the search suite's knowledge
    graph is rebuilt from it. The model is left in the train/eval mode it came in.
    """
    was_training = model.training
    model.eval()
    try:
        return evaluate_with(
            greedy_generator(model, tokenizer, max_new_tokens), suites_rows, seed=seed,
            limit_per_suite=limit_per_suite, batch_size=batch_size, max_turns=max_turns,
        )
    finally:
        model.train(was_training)


def evaluate_with(
    generate: GenerateTurns,
    suites_rows: Mapping[str, Sequence[Mapping]],
    *,
    seed: int,
    limit_per_suite: int | None = None,
    batch_size: int = 64,
    max_turns: int = 6,
) -> EvalReport:
    """`evaluate` with any turn generator: the model's, or a script of known texts."""
    unknown = sorted(set(suites_rows) - set(SUITES))
    if unknown:
        raise ValueError(f"no evaluator for suite(s) {', '.join(unknown)}; known: {', '.join(SUITES)}")
    arith_rows = list(suites_rows.get("arith", ()))[:limit_per_suite]
    search_rows = list(suites_rows.get("search", ()))[:limit_per_suite]
    graphs = {split: split_graph(seed, split) for split in {row["split"] for row in search_rows}}
    mismatched = [row["id"] for row in search_rows if not matches_graph(row, graphs[row["split"]])]
    if mismatched:
        raise ValueError(
            f"{len(mismatched)} search row(s), e.g. {mismatched[0]}, do not match the knowledge graph of seed {seed}; "
            "pass the seed the rows were prepared with"
        )
    columns = (TextColumn("evaluating"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, transient=True) as progress:
        task = progress.add_task("evaluating", total=len(arith_rows) + len(search_rows))
        advance = partial(progress.advance, task)
        arith = run_arith(arith_rows, generate, batch_size=batch_size, advance=advance)
        search = run_episodes(
            search_rows, seed, generate, batch_size=batch_size, max_turns=max_turns, advance=advance
        )
    return summarize(arith, search)
