"""The three thinking modes (SPEC.md, "Chat format and the three thinking modes") applied to conversations.

A suite writes every assistant turn with its reasoning; a mode decides how much of it the model sees:
- "interleaved" (GLM-5's default): reasoning rendered only after the last user message;
- "preserved": every past turn keeps its reasoning (`clear_thinking=False`);
- "off": thinking switched off turn by turn, so no assistant turn carries reasoning and generation
  opens with `</think>` (`enable_thinking=False`).
chat@1 names the last one "turn" (per-message `thinking` flags), see `CHAT_THINKING_MODE`.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence

MODES = ("interleaved", "preserved", "off")

# The chat@1 `thinking_mode` value each mode is stored under.
CHAT_THINKING_MODE = {"interleaved": "interleaved", "preserved": "preserved", "off": "turn"}

# What the suites produced before modes were mixed in: every conversation interleaved.
DEFAULT_THINKING_MIX: Mapping[str, float] = {"interleaved": 1.0}


def apply_thinking_mode(messages: Iterable[Mapping], mode: str) -> tuple[list[dict], dict]:
    """(messages, renderer kwargs) for `mode`; the input messages are left untouched."""
    copies = [dict(message) for message in messages]
    if mode == "interleaved":
        return copies, {"clear_thinking": True, "enable_thinking": True}
    if mode == "preserved":
        return copies, {"clear_thinking": False, "enable_thinking": True}
    if mode == "off":
        for message in copies:
            if message["role"] == "assistant":
                message.pop("reasoning_content", None)
                message["thinking"] = False
        return copies, {"clear_thinking": True, "enable_thinking": False}
    raise ValueError(f"unknown thinking mode {mode!r} (expected one of {', '.join(MODES)})")


def assign_modes(ids: Sequence[str], mix: Mapping[str, float], seed: int) -> list[str]:
    """One mode per id, drawn with probability proportional to `mix`.

    Each draw depends only on (seed, id), so a conversation keeps its mode when the split around it
    grows or shrinks, and the same ids always get the same modes.
    """
    unknown = sorted(set(mix) - set(MODES))
    if unknown:
        raise ValueError(f"unknown thinking modes in mix: {', '.join(unknown)}")
    if any(weight < 0 for weight in mix.values()) or sum(mix.values()) <= 0:
        raise ValueError(f"thinking mix weights must be non-negative with a positive sum, got {dict(mix)}")
    # Walk the modes in MODES order, not the mix's insertion order, so equal mixes give equal draws.
    weighted = [(mode, mix[mode]) for mode in MODES if mix.get(mode, 0) > 0]
    total = sum(weight for _, weight in weighted)
    modes = []
    for conversation_id in ids:
        point = random.Random(f"thinking-mode:{seed}:{conversation_id}").random() * total
        for mode, weight in weighted:  # noqa: B007 (the mode the loop stops at is the draw)
            point -= weight
            if point < 0:
                break
        modes.append(mode)
    return modes
