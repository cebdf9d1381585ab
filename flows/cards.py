"""What the Prefect UI shows for a stage: a metrics table and a lineage card."""

from __future__ import annotations

from prefect.artifacts import create_markdown_artifact, create_table_artifact

from data_contracts.lineage import Lineage


def publish_metrics_table(stage: str, before: dict[str, float], after: dict[str, float]) -> None:
    rows = [
        {"metric": name, "before": round(before.get(name, float("nan")), 4), "after": round(after[name], 4)}
        for name in sorted(after)
    ]
    create_table_artifact(table=rows, key=f"{stage}-metrics".replace("_", "-"), description=f"{stage}: held-out metrics")


def publish_lineage_card(stage: str, checkpoint_uri: str, lineage: Lineage) -> None:
    lines = [
        f"## {stage}: {lineage.name}",
        f"- checkpoint: `{checkpoint_uri}`",
        f"- code: `{lineage.code.git_sha}`" + (" (dirty)" if lineage.code.dirty else ""),
        f"- config sha256: `{lineage.config_sha256}`",
        f"- seed: {lineage.seed}",
        "",
        "| role | uri | digest |",
        "|---|---|---|",
        *(f"| {p.role} | `{p.uri}` | `{p.digest[:16]}` |" for p in lineage.parents),
        *(f"| input ({d.contract}) | `{d.uri}` | `{d.digest[:16]}` |" for d in lineage.inputs),
        *(f"| reward `{m.path}` | source | `{m.source_sha256[:16]}` |" for m in lineage.reward_modules),
        "",
        f"Verify: `posttrain lineage {checkpoint_uri} --verify`",
    ]
    create_markdown_artifact(markdown="\n".join(lines), key=f"{stage}-lineage".replace("_", "-"),
                             description=f"{stage}: lineage card")
