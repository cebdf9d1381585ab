"""Hostile and mistaken inputs against every surface a person types into or a client reaches.

Each input must be refused with an error that names what is wrong (the field, file, path or limit):
`named`. `unnamed` is a refusal whose message lacks the name (or a 5xx); `accepted` went through.
Prints one table row per input, a summary per surface, and exits 1 unless every input was `named`.

    .venv/bin/python bench/hostile_inputs.py            # about two minutes on 2 CPU cores
"""

from __future__ import annotations

import sys
import tempfile
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.hostile.auth import auth_cases  # noqa: E402
from bench.hostile.cases import judge  # noqa: E402
from bench.hostile.configs import config_cases  # noqa: E402
from bench.hostile.data_import import data_import_cases  # noqa: E402
from bench.hostile.datasets import dataset_cases  # noqa: E402
from bench.hostile.engine import HealthWatch, engine_cases  # noqa: E402
from bench.hostile.launch import launch_cases  # noqa: E402
from bench.hostile.rewards import reward_cases  # noqa: E402
from bench.hostile.services import service_cases  # noqa: E402
from bench.hostile.spec_files import spec_cases  # noqa: E402
from bench.hostile.store import lineage_cases, store_cases  # noqa: E402


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
