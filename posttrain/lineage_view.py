"""How `posttrain lineage` shows an ancestry: a rich tree for people."""

from __future__ import annotations

from rich.tree import Tree

from infra.lineage import AncestryNode, RolloutsSummary, rollouts_summary


def _label(node: AncestryNode) -> str:
    if node.error:
        return f"[red]{node.role}[/red] {node.uri}  [red]{node.error}[/red]"
    lineage = node.lineage
    code = lineage.code.git_sha[:10] if lineage.code.git_sha else "unknown"
    if lineage.code.dirty:
        code += " (dirty)"
    parts = [
        f"[bold]{node.role}[/bold] [cyan]{lineage.kind}[/cyan] {lineage.name}",
        f"  {node.uri}",
        f"  digest {node.artifact.digest[:16]}  code {code}  config {(lineage.config_sha256 or '-')[:16]}"
        + (f"  seed {lineage.seed}" if lineage.seed is not None else ""),
    ]
    for module in lineage.reward_modules:
        parts.append(f"  reward {module.path} (source {module.source_sha256[:16]})")
    return "\n".join(parts)


def ancestry_tree(root: AncestryNode) -> Tree:
    tree = Tree(_label(root))
    _grow(tree, root, {root.uri})
    return tree


def _rollouts_label(summary: RolloutsSummary) -> str:
    parts = [f"[bold]rollouts[/bold] {summary.line()}"]
    parts += [f"  reward {module.path} (source {module.source_sha256[:16]})" for module in summary.reward_modules]
    return "\n".join(parts)


def _grow(branch: Tree, node: AncestryNode, on_path: set[str]) -> None:
    summary = rollouts_summary(node)
    if summary is not None:  # one line for the samples it trained on, not a branch per step's shard
        branch.add(_rollouts_label(summary))
    for child in node.children:
        if child.role == "rollouts":
            continue
        if child.uri in on_path:
            branch.add(f"[yellow]cycle back to {child.uri}[/yellow]")
            continue
        _grow(branch.add(_label(child)), child, on_path | {child.uri})
