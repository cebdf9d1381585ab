"""Held-out evaluation: accuracy on `arith`, tool-episode success on `search`, format validity and
thinking-mode compliance of every generated turn, as a flat metrics dict and eval@1 rows.

    report = evaluate(model, tokenizer, {"arith": rows, "search": rows}, seed=0)
    write_parquet(EVAL_V1, eval_rows(report, checkpoint_uri, "test"), "eval.parquet")
"""

from stages.evaluation.evaluate import SUITES, evaluate, evaluate_with
from stages.evaluation.generation import GenerateTurns, Prompt, greedy_generator
from stages.evaluation.report import EvalReport, eval_rows
from stages.evaluation.search_episodes import split_graph

__all__ = [
    "SUITES",
    "EvalReport",
    "GenerateTurns",
    "Prompt",
    "eval_rows",
    "evaluate",
    "evaluate_with",
    "greedy_generator",
    "split_graph",
]
