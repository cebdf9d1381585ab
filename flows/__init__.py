"""Prefect flows: one per stage plus the pipeline that chains them by checkpoint URI."""
