"""`chat`: open questions answered by human-written anchor replies, and preference pairs against them.

A preference pair's chosen reply is the anchor; its rejected reply is worse in one named way
(`REJECTION_KINDS`): another subject's anchor (off topic), a curt non-answer (too short), or a polite
refusal to help (dismissive). Held-out prompts ask about subjects training never shows
(`HELD_OUT_SUBJECTS`), so the test split cannot be passed by recalling an anchor.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from suites.chat_topics import ANCHORS, CURT_REPLIES, DISMISSIVE_REPLIES, QUESTION_TEMPLATES

HELD_OUT_SUBJECTS = tuple(subject for index, subject in enumerate(ANCHORS) if index % 4 == 3)
REJECTION_KINDS = ("off_topic", "too_short", "dismissive")


@dataclass(frozen=True)
class ChatPrompt:
    id: str
    subject: str
    question: str

    @property
    def anchor(self) -> str:
        return ANCHORS[self.subject]

    def prompt_messages(self) -> list[dict]:
        return [{"role": "user", "content": self.question}]

    def messages(self) -> list[dict]:
        reasoning = f"They want a plain explanation of {self.subject}: what it is, why it matters, one practical point."
        return [*self.prompt_messages(), {"role": "assistant", "reasoning_content": reasoning, "content": self.anchor}]


@dataclass(frozen=True)
class PreferencePair:
    prompt: ChatPrompt
    rejected: str
    rejection_kind: str

    @property
    def chosen(self) -> str:
        return self.prompt.anchor


def subjects_for(split: str) -> tuple[str, ...]:
    held_out = split == "test"
    return tuple(subject for subject in ANCHORS if (subject in HELD_OUT_SUBJECTS) == held_out)


def make_prompt(rng: random.Random, split: str, prompt_id: str) -> ChatPrompt:
    subject = rng.choice(subjects_for(split))
    return ChatPrompt(prompt_id, subject, rng.choice(QUESTION_TEMPLATES).format(subject=subject))


def generate(count: int, seed: int, split: str) -> list[ChatPrompt]:
    """`count` prompts of `split`; a longer run starts with the prompts of a shorter one."""
    rng = random.Random(f"chat:{seed}:{split}")
    return [make_prompt(rng, split, f"chat-{split}-{seed}-{i}") for i in range(count)]


def worse_reply(rng: random.Random, subject: str, kind: str, split: str) -> str:
    """A reply to a question about `subject` that is worse than its anchor in the way `kind` names.
    An off-topic reply is the anchor of another subject of the same split: a held-out pair whose
    rejected reply were a training anchor would test recall of training text, not relevance."""
    if kind == "off_topic":
        return ANCHORS[rng.choice([other for other in subjects_for(split) if other != subject])]
    if kind == "too_short":
        return rng.choice(CURT_REPLIES)
    if kind == "dismissive":
        return rng.choice(DISMISSIVE_REPLIES)
    raise ValueError(f"unknown rejection kind {kind!r} (expected one of {', '.join(REJECTION_KINDS)})")


def preference_pairs(count: int, seed: int, split: str) -> list[PreferencePair]:
    rng = random.Random(f"chat-preference:{seed}:{split}")
    pairs = []
    for i in range(count):
        prompt = make_prompt(rng, split, f"chat-pref-{split}-{seed}-{i}")
        kind = rng.choice(REJECTION_KINDS)
        pairs.append(PreferencePair(prompt, worse_reply(rng, prompt.subject, kind, split), kind))
    return pairs
