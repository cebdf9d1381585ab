"""What the user reads of a generated turn: the reply a judge or a reward model grades."""

from __future__ import annotations

from model import special_tokens as st
from model.turns import score_turn
from rewards.protocol import RewardSample


def visible_reply(sample: RewardSample) -> str:
    """The reply of a well-formed turn; of a malformed one, the text after its last `</think>` with
    special tokens removed (graded as it stands rather than skipped: a broken format is a worse reply)."""
    turn = score_turn(sample.response, thinking=bool(sample.metadata.get("thinking", True)))
    if turn.format_valid:
        return turn.parsed.reply
    text = sample.response
    for token in st.STOP_TOKENS:
        text = text.replace(token, "")
    return text.split(st.THINK_CLOSE)[-1].strip()
