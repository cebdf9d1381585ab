"""A checkpoint's ancestry: the DAG of lineage records behind it, and byte-level verification of it.

Every parent and data input is itself a committed artifact with its own lineage, so the ancestry is
followed recursively, by each reference's name inside the store given (never into another store). Verification re-hashes every file of every artifact in the DAG and
checks that each recorded parent/input digest still equals that artifact's digest today.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from data_contracts.lineage import DataInput, Lineage, ParentRef, RewardModuleRef
from infra.store import ArtifactStore, ArtifactStoreError, CommittedArtifact, open_artifact, open_store


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


def load_ancestry(store: ArtifactStore, name: str, *, role: str = "self", recorded_digest: str | None = None,
                  _seen: dict[str, AncestryNode] | None = None) -> AncestryNode:
    """Follow parents and inputs from the artifact `name` of `store`, inside that store only: a reference is
    followed by its name there, whatever store it was written in, and one to another store is an error node (never
    read: its bytes are not the store's). An artifact reached twice is loaded once."""
    seen = {} if _seen is None else _seen
    node = AncestryNode(uri=f"{store.root_uri}/{name}", role=role, recorded_digest=recorded_digest)
    if name in seen:
        node.artifact, node.lineage, node.error = seen[name].artifact, seen[name].lineage, seen[name].error
        return node
    seen[name] = node
    try:
        node.artifact = store.open(name)
        node.lineage = Lineage.model_validate(node.artifact.lineage())
    except (ArtifactStoreError, ValueError, OSError) as error:
        node.error = str(error) if node.uri in str(error) else f"{node.uri}: {error}"
        return node
    references = [(parent, parent.role) for parent in node.lineage.parents]
    references += [(data, "rollouts" if data.role == "rollouts" else "input") for data in node.lineage.inputs]
    for reference, reference_role in references:
        inside = name_in_store(store, reference)
        if inside is None:
            node.children.append(AncestryNode(
                uri=reference.uri, role=reference_role, recorded_digest=reference.digest,
                error=f"{reference.uri}: outside the store {store.root_uri}, so not read (only what is inside "
                      "the store given is verified)"))
            continue
        node.children.append(load_ancestry(store, inside, role=reference_role, recorded_digest=reference.digest,
                                           _seen=seen))
    return node


def name_in_store(store: ArtifactStore, reference: ParentRef | DataInput) -> str | None:
    """The name `reference` has in `store`, or None where it points elsewhere. Records written before references
    carried their names are read by their URIs, which then must lie under the store's root."""
    if reference.name is not None:
        return reference.name
    root = store.root_uri + "/"
    return reference.uri[len(root):] if reference.uri.startswith(root) else None


def located(uri: str, store: ArtifactStore) -> tuple[ArtifactStore, str]:
    """The store a full artifact URI lies in and its name there: `store` where the URI is under its root, else
    the root its lineage says it was committed under."""
    root = store.root_uri + "/"
    if uri.startswith(root):
        return store, uri[len(root):]
    lineage = Lineage.model_validate(open_artifact(uri).lineage())
    own = own_store(uri, lineage)
    if own is None:
        raise ValueError(f"{uri}: not inside the store {store.root_uri}, and its lineage does not name it in "
                         "its own store (written before lineage did): pass --store with the root it lies under")
    return own, lineage.stored_as


def own_store(uri: str, lineage: Lineage) -> ArtifactStore | None:
    """The store the artifact at `uri` lies in today: its URI less the name it was committed as (`stored_as`);
    None for a record written before lineage named artifacts in their store."""
    stored_as, uri = lineage.stored_as, uri.rstrip("/")
    if stored_as is None or not uri.endswith("/" + stored_as):
        return None
    return open_store(uri[:-len(stored_as) - 1])


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
