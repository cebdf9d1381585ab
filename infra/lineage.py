"""A checkpoint's ancestry: the DAG of lineage records behind it, and byte-level verification of it.

Every parent and data input is itself a committed artifact with its own lineage, so the ancestry is
followed recursively by URI. Verification re-hashes every file of every artifact in the DAG and
checks that each recorded parent/input digest still equals that artifact's digest today.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from data_contracts.lineage import Lineage, RewardModuleRef
from infra.store import ArtifactStoreError, CommittedArtifact, open_artifact


@dataclass
class AncestryNode:
    """One artifact in the DAG, reached from its child through `role` (self, init, teacher, input, …)."""

    uri: str
    role: str
    recorded_digest: str | None
    artifact: CommittedArtifact | None = None
    lineage: Lineage | None = None
    error: str | None = None
    children: list[AncestryNode] = field(default_factory=list)

    def walk(self):
        yield self
        for child in self.children:
            yield from child.walk()


def load_ancestry(
    uri: str, opener: Callable[[str], CommittedArtifact] = open_artifact, *, role: str = "self",
    recorded_digest: str | None = None, _seen: dict[str, AncestryNode] | None = None,
) -> AncestryNode:
    """Follow parents and inputs from `uri`; an artifact reached twice is loaded once."""
    seen = {} if _seen is None else _seen
    node = AncestryNode(uri=uri, role=role, recorded_digest=recorded_digest)
    if uri in seen:
        node.artifact, node.lineage, node.error = seen[uri].artifact, seen[uri].lineage, seen[uri].error
        return node
    seen[uri] = node
    try:
        node.artifact = opener(uri)
        node.lineage = Lineage.model_validate(node.artifact.lineage())
    except (ArtifactStoreError, ValueError, OSError) as error:
        node.error = str(error) if uri in str(error) else f"{uri}: {error}"
        return node
    for parent in node.lineage.parents:
        node.children.append(load_ancestry(parent.uri, opener, role=parent.role, recorded_digest=parent.digest,
                                           _seen=seen))
    for data in node.lineage.inputs:
        role = "rollouts" if data.role == "rollouts" else "input"
        node.children.append(load_ancestry(data.uri, opener, role=role, recorded_digest=data.digest, _seen=seen))
    return node


def verify_ancestry(root: AncestryNode) -> list[str]:
    """Every problem in the DAG as a message naming the artifact and file; empty means all bytes match."""
    problems: list[str] = []
    verified: set[str] = set()
    for node in root.walk():
        if node.error:
            problems.append(node.error)
            continue
        if node.recorded_digest and node.artifact.digest != node.recorded_digest:
            problems.append(
                f"{node.uri}: digest is {node.artifact.digest}, but its child recorded {node.recorded_digest}"
            )
        if node.uri not in verified:
            verified.add(node.uri)
            problems.extend(f"{node.uri}/{problem}" for problem in node.artifact.verify())
    return problems


@dataclass(frozen=True)
class RolloutsSummary:
    """The samples a checkpoint's stage trained on, as its lineage lists them (rollout@1 shards)."""

    shards: int
    rows: int
    bytes: int
    steps: tuple[int, int] | None
    reward_modules: tuple[RewardModuleRef, ...]

    def line(self) -> str:
        steps = f" of steps {self.steps[0]}-{self.steps[1]}" if self.steps else ""
        return f"{self.rows} samples{steps} in {self.shards} shard(s), {self.bytes:,} bytes"


def rollouts_summary(node: AncestryNode) -> RolloutsSummary | None:
    """What `node`'s `rollouts` inputs hold, or None when it lists none."""
    shards = [child for child in node.children if child.role == "rollouts" and child.lineage is not None]
    if not shards:
        return None
    steps = [child.lineage.config["step"] for child in shards if "step" in child.lineage.config]
    modules = {(m.path, m.source_sha256): m for child in shards for m in child.lineage.reward_modules}
    return RolloutsSummary(
        shards=len(shards), rows=sum(child.lineage.config.get("rows", 0) for child in shards),
        bytes=sum(entry.size for child in shards for entry in child.artifact.manifest.files.values()),
        steps=(min(steps), max(steps)) if steps else None, reward_modules=tuple(modules.values()))


def ancestry_json(node: AncestryNode) -> dict[str, Any]:
    summary: dict[str, Any] = {"uri": node.uri, "role": node.role}
    if node.error:
        summary["error"] = node.error
        return summary
    lineage = node.lineage
    summary.update(
        digest=node.artifact.digest,
        kind=lineage.kind,
        name=lineage.name,
        code=lineage.code.model_dump(),
        config_sha256=lineage.config_sha256,
        reward_modules=[module.model_dump() for module in lineage.reward_modules],
        seed=lineage.seed,
        created_at=lineage.created_at.isoformat(),
        lineage=lineage.model_dump(mode="json"),
        ancestors=[ancestry_json(child) for child in node.children],
    )
    return summary


def _graph(root: AncestryNode) -> tuple[list[tuple[str, str, str]], list[tuple[str, str, str]]]:
    """([(id, label, name)], [(ancestor id, role, id)]): one node per artifact, one edge per feed; a
    checkpoint's rollout shards are drawn as one node, its `rollouts` input."""
    ids: dict[str, str] = {}
    nodes, edges = [], []

    def node_id(node: AncestryNode) -> str:
        if node.uri not in ids:
            ids[node.uri] = f"a{len(ids)}"
            label = node.lineage.name if node.lineage else "unreadable"
            kind = node.lineage.kind if node.lineage else "?"
            nodes.append((ids[node.uri], f"{kind}: {label}", node.uri.rsplit("/", 1)[-1]))
        return ids[node.uri]

    def edge(source: str, role: str, target: str) -> None:
        if (source, role, target) not in edges:
            edges.append((source, role, target))

    for node in _drawn(root):
        target = node_id(node)
        for child in node.children:
            if child.role != "rollouts":
                edge(node_id(child), child.role, target)
        summary = rollouts_summary(node)
        if summary is not None:
            rollouts = f"{target}r"
            if all(rollouts != existing for existing, _, _ in nodes):
                nodes.append((rollouts, f"rollouts: {summary.line()}", node.uri.rsplit("/", 1)[-1] + "-rollouts"))
            edge(rollouts, "rollouts", target)
    return nodes, edges


def _drawn(node: AncestryNode, seen: set[str] | None = None):
    """The DAG's nodes in walk order, each once, without the rollout shards (a summary node stands for them)."""
    seen = set() if seen is None else seen
    if node.uri in seen:
        return
    seen.add(node.uri)
    yield node
    for child in node.children:
        if child.role != "rollouts":
            yield from _drawn(child, seen)


def ancestry_mermaid(root: AncestryNode) -> str:
    """A Mermaid flowchart: one box per artifact, an arrow from each ancestor to what it fed."""
    nodes, edges = _graph(root)
    lines = ["flowchart BT"]
    lines += [f'  {node_id}["{label}<br/>{name}"]' for node_id, label, name in nodes]
    lines += [f"  {source} -->|{role}| {target}" for source, role, target in edges]
    return "\n".join(lines) + "\n"


def ancestry_dot(root: AncestryNode) -> str:
    """The same DAG in Graphviz dot (`dot -Tsvg`)."""
    nodes, edges = _graph(root)
    lines = ["digraph lineage {", "  rankdir=BT;", "  node [shape=box];"]
    lines += [f'  {node_id} [label="{_dot_escape(label)}\\n{_dot_escape(name)}"];' for node_id, label, name in nodes]
    lines += [f'  {source} -> {target} [label="{_dot_escape(role)}"];' for source, role, target in edges]
    return "\n".join(lines + ["}"]) + "\n"


def _dot_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')
