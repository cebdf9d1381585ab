"""Scoring one generated turn for format validity and thinking-mode compliance, suite-independently."""

from __future__ import annotations

from dataclasses import dataclass

from model import special_tokens as st
from model.tool_calls import ParsedTurn, parse_assistant_output


@dataclass(frozen=True)
class TurnScore:
    text: str
    thinking: bool
    parsed: ParsedTurn
    # Parses cleanly, stopped on its own, says something (a reply or tool calls), and a thinking-on
    # turn closed its reasoning.
    format_valid: bool
    # Thinking on: non-empty reasoning closed by </think>. Thinking off: no think tag generated at all.
    thinking_compliant: bool


def score_turn(text: str, thinking: bool) -> TurnScore:
    parsed = parse_assistant_output(text)
    format_valid = (
        parsed.well_formed
        and parsed.stop is not None
        and bool(parsed.reply or parsed.tool_calls)
        and (not thinking or parsed.reasoning is not None)
    )
    if thinking:
        compliant = bool(parsed.reasoning)
    else:
        compliant = st.THINK_OPEN not in text and st.THINK_CLOSE not in text
    return TurnScore(text, thinking, parsed, format_valid, compliant)
