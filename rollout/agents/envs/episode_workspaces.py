"""The code tasks' workspaces (swe, terminal): each running episode's own, opened on first use, removed at its end.

An episode's workspace (rollout/agents/envs/code_sandbox.py) opens when its first tool call or its verification
needs it, and is removed when the episode ends, whatever ends it:
- the task service verifies it, abandons it, forgets it as idle, or stops (SIGTERM, Ctrl-C) while it runs: the
  service calls the task's `end_episode` (rollout/agents/envs/tasks.py, `EndsEpisodes`), which closes it here;
- the episode object is dropped anywhere else (an in-process caller, a failed request): a finalizer on the
  episode closes it, and an interpreter that exits normally runs the finalizers still pending;
- too many are open at once: past `capacity` the least recently used is closed, an episode abandoned without a
  word being the likeliest. Its episode, if it ever comes back, gets `WorkspaceClosed` rather than a fresh copy
  of its files that would silently undo its work: the service answers 500 and the orchestrator counts an
  environment failure, not the model's.
Only a SIGKILL of the service leaves workspace folders behind (posttrain-workspace-* in the temporary folder).
"""

from __future__ import annotations

import posixpath
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from dataclasses import dataclass

from rollout.agents.envs.code_sandbox import SandboxLimits, Workspace, open_workspace
from rollout.agents.envs.tasks import Episode


class WorkspaceClosed(RuntimeError):
    """The episode's workspace was closed before the episode ended (too many workspaces were open)."""


def row_files(metadata: Mapping, field: str = "files", max_bytes: int = 4_000_000,
              allow_empty: bool = False) -> dict[str, str]:
    """The files `metadata[field]` holds (relative path -> text), checked as `check_row` does: ValueError names the field.
    `allow_empty`: a task may start from an empty folder (a terminal chore that makes its files from nothing)."""
    files = metadata.get(field)
    if not isinstance(files, Mapping) or not (files or allow_empty):
        raise ValueError(f"metadata.{field}: a code task row needs its files as a non-empty object of path -> text")
    for path, text in files.items():
        normal = posixpath.normpath(path) if isinstance(path, str) else ""
        if not normal or normal == "." or posixpath.isabs(normal) or normal == ".." or normal.startswith("../"):
            raise ValueError(f"metadata.{field}: {path!r} is not a path inside the workspace")
        if not isinstance(text, str):
            raise ValueError(f"metadata.{field}[{path!r}]: a file's content is text, not {type(text).__name__}")
    if (size := sum(len(text.encode()) for text in files.values())) > max_bytes:
        raise ValueError(f"metadata.{field}: {size} bytes of files, more than the {max_bytes} a workspace takes")
    return dict(files)


def limits_note(contained: tuple[str, ...]) -> str:
    """The line a tool result ends with when sandbox limits acted, so the episode's record names them."""
    return f"\n[sandbox limits acted: {', '.join(contained)}]" if contained else ""


@dataclass
class _Held:
    stack: ExitStack | None  # None once closed
    workspace: Workspace | None
    finalizer: weakref.finalize


# A workspace between commands is a folder of a few kilobytes and nothing running: as many as the task service
# holds episodes (its --max-episodes default), so that only episodes nobody ends are ever closed early.
CAPACITY = 4096


class EpisodeWorkspaces:
    """The open workspaces of one task's episodes, at most `capacity`."""

    def __init__(self, limits: SandboxLimits, capacity: int = CAPACITY):
        self.limits, self.capacity = limits, capacity
        # By id(episode): a live episode's id is its own, and its finalizer forgets the entry before the id can be
        # reused. Least recently used first. Closed entries stay (without a workspace) until their episode is gone.
        self._held: OrderedDict[int, _Held] = OrderedDict()
        self._lock = threading.Lock()  # the service plays episodes' turns in worker threads

    def workspace(self, episode: Episode, files: Callable[[], Mapping[str, str]]) -> Workspace:
        """The episode's workspace, opened with `files()` on first use."""
        key = id(episode)
        with self._lock:
            held = self._held.get(key)
            if held is not None:
                if held.workspace is None:
                    raise WorkspaceClosed("this episode's workspace was closed: more than "
                                          f"{self.capacity} workspaces were open, and it was the least recently used")
                self._held.move_to_end(key)
                return held.workspace
            evicted = self._evict(len(self._open_keys()) + 1 - self.capacity)
        for stack in evicted:
            stack.close()
        stack = ExitStack()
        workspace = stack.enter_context(open_workspace(files(), self.limits))  # outside the lock: bwrap starts
        with self._lock:
            if key not in self._held:
                self._held[key] = _Held(stack, workspace, weakref.finalize(episode, self._forget, key))
                return workspace
        stack.close()  # another turn of the same episode opened one meanwhile: that one is the episode's
        return self.workspace(episode, files)

    def close(self, episode: Episode) -> None:
        """Remove the episode's workspace now (nothing happens if it never opened one)."""
        with self._lock:
            held = self._held.get(id(episode))
            stack = self._release(held) if held is not None else None
        if stack is not None:
            stack.close()

    def open_count(self) -> int:
        with self._lock:
            return len(self._open_keys())

    def _open_keys(self) -> list[int]:
        return [key for key, held in self._held.items() if held.workspace is not None]

    def _evict(self, count: int) -> list[ExitStack]:
        return [self._release(self._held[key]) for key in self._open_keys()[:max(count, 0)]]

    @staticmethod
    def _release(held: _Held) -> ExitStack | None:
        stack, held.stack, held.workspace = held.stack, None, None
        return stack

    def _forget(self, key: int) -> None:
        """The episode is gone (or the process is exiting): close its workspace and forget it."""
        with self._lock:
            held = self._held.pop(key, None)
            stack = self._release(held) if held is not None else None
        if stack is not None:
            stack.close()
