"""Does an RL stage learn? One stage, one input checkpoint, N seeds: the held-out gain with its 95% confidence
interval, and with `--compare KEY=VALUE` the paired difference of a second arm. `--help` lists the options;
posttrain/learning_bench.py says what each run does.

    .venv/bin/python bench/learning.py --store artifacts --stage agentic_rl --seeds 3 \\
        --compare dynamic_sampling.enabled=false
"""

import sys
from pathlib import Path

# Run as a script (`python bench/learning.py`), its folder is on sys.path, not the repository's.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from posttrain.learning_bench import main  # noqa: E402

if __name__ == "__main__":
    main()
