"""Held-out evaluation: accuracy on `arith`, tool-episode success on `search`, format validity and
thinking-mode compliance of every generated turn, as a flat metrics dict and eval@1 rows.

    report = evaluate(model, tokenizer, {"arith": rows, "search": rows}, seed=0)  # stages.evaluation.evaluate
    write_parquet(EVAL_V1, eval_rows(report, checkpoint_uri, "test"), "eval.parquet")  # .report

Each stage's evaluation, committed once per checkpoint and settings: committed.py (SFT's greedy suites),
sampled.py (reasoning RL), agentic.py (tool success), general.py (rule compliance and reward means).
"""
