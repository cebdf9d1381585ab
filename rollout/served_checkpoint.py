"""The checkpoint an engine serves, as a local directory: what every engine backend needs of a checkpoint URI."""

from __future__ import annotations

from pathlib import Path

from infra.store import open_artifact

# What an engine needs of a checkpoint: not DeepSpeed's resume state (optimizer moments, twice the model).
NOT_SERVED = ("deepspeed/",)


def local_checkpoint(model_path: str, workdir: Path) -> Path:
    """A committed artifact URI is downloaded (digests checked, resume state left out); a local directory
    is used as it is."""
    if "://" in model_path:
        return open_artifact(model_path).download(workdir / model_path.rstrip("/").rsplit("/", 1)[-1], skip=NOT_SERVED)
    path = Path(model_path)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"{model_path}: not a checkpoint directory (no config.json)")
    return path
