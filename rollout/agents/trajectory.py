"""One agent rollout as training samples: exact engine ids and logprobs, environment tokens masked.

A rollout is a run of turns. While each turn's prompt is the previous prompt plus the previous
output plus the environment's reply, the whole run is one sample: the model's tokens are trained
(loss mask 1, with the engine's logprobs) and the environment's are not (mask 0). When context
management rewrites the history (a placeholder, a discard), the engine saw a different prefix, so a
new sample starts at that turn: every sample holds exactly the ids its tokens were generated after.

Where the engine returns each position's routed experts (routing replay), each turn asks for them from where
its sample's last turn's ended (`routed_from`): the positions the engine ran in this turn, the previous turn's
last sampled token first. A sample's parts put together cover every position of it but its last token, in
SGLang's layout, as a single-turn sample's do.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field

from model import special_tokens as st
from rollout.client import Sample


@dataclass
class Segment:
    prompt_ids: list[int]
    response_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    weight_versions: list[int] = field(default_factory=list)
    turn_starts: list[int] = field(default_factory=list)  # where each generated turn begins in response_ids
    # Each turn's routed experts (SGLang's base64 payload), while every turn returned them; None once one did not.
    routed_parts: list[str] | None = field(default_factory=list)

    def sequence(self) -> list[int]:
        return self.prompt_ids + self.response_ids

    @property
    def routed_experts(self) -> str | None:
        """The experts of every position but the last, one payload; None unless every turn returned its part."""
        if not self.routed_parts:
            return None
        return base64.b64encode(b"".join(base64.b64decode(part) for part in self.routed_parts)).decode("ascii")


@dataclass
class TrajectoryBuilder:
    segments: list[Segment] = field(default_factory=list)
    turns: int = 0
    # Over the turns an engine decoded speculatively: their tokens and its verification steps.
    speculated_tokens: int = 0
    verify_steps: int = 0

    def routed_from(self, prompt_ids: list[int]) -> int:
        """The first position whose routed experts the turn after `prompt_ids` should ask for: 0 where the turn
        starts a sample, else the previous turn's last sampled token (the first position this turn runs)."""
        current = self.segments[-1] if self.segments else None
        return len(current.sequence()) - 1 if current is not None and self._continues(current, prompt_ids) else 0

    @staticmethod
    def _continues(current: Segment, prompt_ids: list[int]) -> bool:
        so_far = current.sequence()
        return prompt_ids[: len(so_far)] == so_far

    def add_turn(self, prompt_ids: list[int], sample: Sample) -> None:
        """Record the turn the engine generated after `prompt_ids` (with its routed experts from
        `routed_from(prompt_ids)` on, where it returned them)."""
        self.turns += 1
        self.speculated_tokens += sample.speculated_tokens
        self.verify_steps += sample.spec_verify_ct or 0
        current = self.segments[-1] if self.segments else None
        so_far = current.sequence() if current else None
        if current is not None and self._continues(current, prompt_ids):
            environment = prompt_ids[len(so_far):]  # what the environment added since the last turn
            current.response_ids += environment
            current.loss_mask += [0] * len(environment)
            current.logprobs += [0.0] * len(environment)
        else:
            current = Segment(list(prompt_ids))
            self.segments.append(current)
        if len(sample.output_logprobs) != len(sample.output_ids):
            raise ValueError(f"{len(sample.output_logprobs)} logprobs for {len(sample.output_ids)} generated tokens")
        current.turn_starts.append(len(current.response_ids))
        current.response_ids += sample.output_ids
        current.loss_mask += [1] * len(sample.output_ids)
        current.logprobs += sample.output_logprobs
        if current.routed_parts is not None:
            current.routed_parts = current.routed_parts + [sample.routed_experts] if sample.routed_experts else None
        version = int(sample.weight_version)
        if version not in current.weight_versions:
            current.weight_versions.append(version)

    @property
    def weight_versions(self) -> list[int]:
        return sorted({v for segment in self.segments for v in segment.weight_versions})


def prompt_ids(tokenizer, messages: list[dict], tools: list[dict] | None) -> list[int]:
    """The ids of a conversation rendered up to a new assistant turn with thinking on."""
    text = tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True, enable_thinking=True,
                                         tokenize=False)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def observation_ids(tokenizer, tool_results: list[str]) -> list[int]:
    """The ids the chat template puts after a tool call's stop token: the results, then the next
    assistant turn's generation prompt (thinking on). Taken from the template itself, so a real GLM-5
    tokenizer's template gives its own format."""
    call = [{"role": "user", "content": "q"},
            {"role": "assistant", "content": "", "tool_calls": [{"name": "t", "arguments": {}}]}]
    before = tokenizer.apply_chat_template(call, tokenize=False, enable_thinking=True)
    after = tokenizer.apply_chat_template(call + [{"role": "tool", "content": r} for r in tool_results],
                                          tokenize=False, add_generation_prompt=True, enable_thinking=True)
    if not after.startswith(before) or not after[len(before):].startswith(st.OBSERVATION):
        raise ValueError("the chat template does not render tool results as an observation turn after the call")
    # The model generated the observation token itself: it is the stop that ended its turn.
    return tokenizer(after[len(before) + len(st.OBSERVATION):], add_special_tokens=False)["input_ids"]
