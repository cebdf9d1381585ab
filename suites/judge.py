"""Judge examples for the generative reward model (GRM): grade a reply against a human anchor.

An example is an ordinary chat@1 conversation, so SFT trains the judge like any other skill: the user
turn is the grading request (question, reference anchor, reply, scoring rules) and the assistant turn
the verdict — brief reasoning, then "Score: N" on its own line and a one-line rationale.
`parse_score` reads the score back out of a sampled verdict, the way the GRM reward will.

Scores follow the kind of reply graded: the anchor itself, its first sentence only (partial), or one
of the chat suite's worse replies (`chat.REJECTION_KINDS`).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

from suites import chat
from suites.chat_topics import ANCHORS

# reply kind -> (lowest score, highest score, rationale)
GRADES = {
    "anchor": (9, 10, "Answers the question fully and accurately, matching the reference."),
    "partial": (5, 7, "Accurate but stops after the first point; the practical advice is missing."),
    "too_short": (2, 3, "Too short to be useful; it does not explain anything."),
    "dismissive": (1, 2, "Declines to help with a harmless question."),
    "off_topic": (1, 1, "Answers a different question; nothing in it addresses the user."),
}
REQUEST = (
    "Grade the reply to the question below on a scale of 1 to 10, using the reference answer as the "
    "standard of quality. Answer with 'Score: N' on its own line, then 'Rationale:' and one sentence.\n\n"
    "Question: {question}\n\nReference answer: {reference}\n\nReply: {reply}"
)
SCORE_LINE = re.compile(r"^Score:\s*(10|[1-9])\s*$", re.MULTILINE)


@dataclass(frozen=True)
class JudgeExample:
    id: str
    question: str
    reference: str
    reply: str
    reply_kind: str
    score: int
    rationale: str

    def verdict(self) -> str:
        return f"Score: {self.score}\nRationale: {self.rationale}"

    def messages(self) -> list[dict]:
        request = REQUEST.format(question=self.question, reference=self.reference, reply=self.reply)
        reasoning = f"Compare the reply with the reference: {self.rationale[0].lower()}{self.rationale[1:]}"
        return [
            {"role": "user", "content": request},
            {"role": "assistant", "reasoning_content": reasoning, "content": self.verdict()},
        ]


def parse_score(verdict: str) -> int | None:
    """The 1-10 score of a verdict, or None when it has no well-formed score line."""
    match = SCORE_LINE.search(verdict)
    return int(match.group(1)) if match else None


def _graded_reply(rng: random.Random, subject: str, kind: str, split: str) -> str:
    if kind == "anchor":
        return ANCHORS[subject]
    if kind == "partial":
        return ANCHORS[subject].split(". ")[0] + "."
    return chat.worse_reply(rng, subject, kind, split)


def generate(count: int, seed: int, split: str) -> list[JudgeExample]:
    """`count` examples about the subjects of `split` (held-out subjects for "test")."""
    rng = random.Random(f"judge:{seed}:{split}")
    examples = []
    for i in range(count):
        prompt = chat.make_prompt(rng, split, f"judge-{split}-{seed}-{i}")
        kind = rng.choice(tuple(GRADES))
        low, high, rationale = GRADES[kind]
        reply = _graded_reply(rng, prompt.subject, kind, split)
        examples.append(
            JudgeExample(prompt.id, prompt.question, prompt.anchor, reply, kind, rng.randint(low, high), rationale)
        )
    return examples
