"""Token ids as a person reads them: each turn on its own line led by its role, no control tokens.

A sample table in the UI or a terminal shows a prompt and a completion; decoded with every special token kept,
a chat reads as `[gMASK]<sop><|user|>…<|assistant|>…`. Here the role tokens become a role's name at the start of
a line and the other control tokens go; the structure tokens a model writes (think, tool calls) stay, since they
are part of what was rewarded.
"""

from __future__ import annotations

import re

from model import special_tokens as st

ROLE_NAMES = {st.SYSTEM: "system", st.USER: "user", st.ASSISTANT: "assistant", st.OBSERVATION: "tool"}
_CONTROL = re.compile("|".join(re.escape(token) for token in st.CONTROL_TOKENS))


def readable(tokenizer, ids: list[int]) -> str:
    """`ids` decoded for a reader: a role token starts a line with the role's name, other control tokens dropped."""
    text = tokenizer.decode(ids, skip_special_tokens=False)

    def shown(match: re.Match) -> str:
        role = ROLE_NAMES.get(match.group(0))
        return f"\n{role}: " if role else ""

    # A completion of control tokens alone (an untrained model's bare stop token) is shown as it is, not as nothing.
    return _CONTROL.sub(shown, text).strip() or text
