"""Data preparation: what the stages read, made before any stage runs. Not a stage job (nothing here
trains or runs under torchrun), so it sits beside stages/ rather than in it.

    prepare.py       the embedded suites as datasets, a tokenizer trained on them, the initial checkpoint
                     (`posttrain prepare`); a person's own Hugging Face checkpoint as an initial checkpoint
    import_data.py   a person's JSONL, Parquet or `datasets` folder as a committed dataset (`posttrain data import`)
    difficulty_filter.py  a dataset's train prompts kept by a checkpoint's pass rate on them, as a new dataset
                     (`posttrain data filter`, a spec's `difficulty_filter`); difficulty_settings.py its settings,
                     pass_rates.py the sampling and scoring

It sits above stages/ (pyproject's layers): the filter reads rows as RL prompts as the stages do.
"""
