"""`instruct`: instructions with rule-checkable constraints, a reference reply that meets them, and the checker.

An instruction is one base constraint (how much or what to write about a topic) plus optional format
constraints (uppercase, final punctuation). Every constraint is a small JSON-able dict, e.g.
{"kind": "word_count", "n": 3}, so RL prompts can carry it in metadata and `check` — the rule reward of
General RL — can grade a sampled reply against it. Each item also has a reply that breaks the base
constraint, for preference pairs and for testing that the checker really rejects.

Held-out items are about topics that training never shows (`HELD_OUT_TOPICS`), so no test prompt
repeats a training prompt and the split measures following constraints, not recalling replies.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

# topic -> words about it; a reference reply is built only from its topic's words.
TOPICS = {
    "the ocean": ("waves", "tides", "coral", "whales", "salt", "shore"),
    "forests": ("pines", "moss", "deer", "ferns", "owls", "trails"),
    "winter": ("snow", "frost", "scarves", "ice", "fireplaces", "sledding"),
    "music": ("melody", "rhythm", "drums", "chords", "choirs", "violins"),
    "coffee": ("beans", "espresso", "aroma", "crema", "roasting", "mugs"),
    "mountains": ("peaks", "glaciers", "cliffs", "valleys", "goats", "summits"),
    "libraries": ("books", "shelves", "silence", "librarians", "atlases", "catalogs"),
    "trains": ("tracks", "stations", "carriages", "whistles", "platforms", "tickets"),
    "gardens": ("roses", "soil", "bees", "seeds", "hedges", "tulips"),
    "markets": ("stalls", "spices", "bargains", "vendors", "fruit", "crowds"),
    "rain": ("puddles", "umbrellas", "clouds", "drizzle", "thunder", "gutters"),
    "cities": ("streets", "towers", "traffic", "parks", "neon", "subways"),
    "deserts": ("dunes", "cacti", "heat", "camels", "oases", "sand"),
    "space": ("stars", "planets", "comets", "rockets", "orbits", "galaxies"),
    "bakeries": ("bread", "ovens", "flour", "pastries", "croissants", "yeast"),
    "rivers": ("currents", "bridges", "banks", "otters", "rapids", "boats"),
    "chess": ("pawns", "knights", "gambits", "openings", "castling", "checkmate"),
    "autumn": ("leaves", "harvest", "pumpkins", "wind", "apples", "sweaters"),
    "islands": ("beaches", "palms", "lagoons", "ferries", "reefs", "sunsets"),
    "kitchens": ("knives", "pans", "herbs", "recipes", "stoves", "spoons"),
}
HELD_OUT_TOPICS = tuple(topic for index, topic in enumerate(TOPICS) if index % 5 == 4)
ADJECTIVES = ("quiet", "bright", "ancient", "gentle", "vast", "busy", "golden", "restless", "humble", "curious")
FINAL_MARKS = ("!", "?")

WORD = re.compile(r"[A-Za-z0-9']+")


def words_of(reply: str) -> list[str]:
    return WORD.findall(reply)


def _word_count(constraint: Mapping, reply: str) -> bool:
    return len(words_of(reply)) == constraint["n"]


def _max_words(constraint: Mapping, reply: str) -> bool:
    return 0 < len(words_of(reply)) <= constraint["n"]


def _include_word(constraint: Mapping, reply: str) -> bool:
    return constraint["word"].lower() in {word.lower() for word in words_of(reply)}


def _comma_list(constraint: Mapping, reply: str) -> bool:
    items = [item.strip() for item in reply.split(",")]
    return "\n" not in reply.strip() and len(items) == constraint["n"] and all(items)


def _uppercase(constraint: Mapping, reply: str) -> bool:
    return any(char.isalpha() for char in reply) and reply == reply.upper()


def _ends_with(constraint: Mapping, reply: str) -> bool:
    return reply.rstrip().endswith(constraint["suffix"])


CHECKS: dict[str, Callable[[Mapping, str], bool]] = {
    "word_count": _word_count,
    "max_words": _max_words,
    "include_word": _include_word,
    "comma_list": _comma_list,
    "uppercase": _uppercase,
    "ends_with": _ends_with,
}


def check(constraint: Mapping, reply: str) -> bool:
    """Whether `reply` meets one constraint; an unknown kind raises rather than silently passing."""
    kind = constraint.get("kind")
    if kind not in CHECKS:
        raise ValueError(f"unknown constraint kind {kind!r} (expected one of {', '.join(CHECKS)})")
    return CHECKS[kind](constraint, reply)


def check_all(constraints: Iterable[Mapping], reply: str) -> bool:
    return all(check(constraint, reply) for constraint in constraints)


@dataclass(frozen=True)
class InstructItem:
    id: str
    topic: str
    instruction: str
    constraints: tuple[dict, ...]
    reasoning: str
    reference: str
    violating_reply: str

    def messages(self) -> list[dict]:
        return [
            {"role": "user", "content": self.instruction},
            {"role": "assistant", "reasoning_content": self.reasoning, "content": self.reference},
        ]


@dataclass(frozen=True)
class _Base:
    """A base constraint with its instruction, a note for the reasoning, and a passing and a failing reply."""

    instruction: str
    constraint: dict
    note: str
    reply: str
    violating_reply: str


def _sentence(words: list[str]) -> str:
    return " ".join(words).capitalize() + "."


def _exact_words(rng: random.Random, topic: str, words: tuple[str, ...]) -> _Base:
    n = rng.randint(2, 5)
    chosen = rng.sample(words, n)
    return _Base(f"Write exactly {n} words about {topic}.", {"kind": "word_count", "n": n},
                 f"exactly {n} words", _sentence(chosen), _sentence(chosen[:-1]))


def _at_most_words(rng: random.Random, topic: str, words: tuple[str, ...]) -> _Base:
    n = rng.randint(5, 8)
    first, second = rng.sample(words, 2)
    # Every topic word after a four-word lead-in: at least 10 words, over any allowed limit.
    too_long = f"{topic.capitalize()} is all about {', '.join(words)}."
    return _Base(f"Describe {topic} in at most {n} words.", {"kind": "max_words", "n": n},
                 f"at most {n} words", f"{topic.capitalize()}: {first} and {second}.", too_long)


def _with_word(rng: random.Random, topic: str, words: tuple[str, ...]) -> _Base:
    adjective, other = rng.sample(ADJECTIVES, 2)
    first, second = rng.sample(words, 2)

    def reply(word: str) -> str:
        return f"I picture {topic} as {word}, full of {first} and {second}."

    return _Base(f'Write one sentence about {topic} that uses the word "{adjective}".',
                 {"kind": "include_word", "word": adjective}, f'use the word "{adjective}"',
                 reply(adjective), reply(other))


def _listed(rng: random.Random, topic: str, words: tuple[str, ...]) -> _Base:
    n = rng.randint(3, 5)
    chosen = rng.sample(words, n)
    # Joining the last item with "and" leaves one comma-separated item too few.
    short = ", ".join(chosen[:-1]) + " and " + chosen[-1]
    return _Base(f"Name {n} things associated with {topic}, as a comma-separated list.",
                 {"kind": "comma_list", "n": n}, f"a comma-separated list of {n} items", ", ".join(chosen), short)


BASES = (_exact_words, _at_most_words, _with_word, _listed)


def _end_with(reply: str, suffix: str) -> str:
    return reply.rstrip(".!?") + suffix


def make_item(rng: random.Random, topic: str, item_id: str) -> InstructItem:
    base = rng.choice(BASES)(rng, topic, TOPICS[topic])
    instruction, constraints, notes = [base.instruction], [base.constraint], [base.note]
    reply, violating = base.reply, base.violating_reply
    # Format constraints reshape both replies alike, so the violating one still breaks only the base.
    if rng.random() < 0.5:
        suffix = rng.choice(FINAL_MARKS)
        instruction.append(f"End your reply with '{suffix}'.")
        constraints.append({"kind": "ends_with", "suffix": suffix})
        notes.append(f"end with '{suffix}'")
        reply, violating = _end_with(reply, suffix), _end_with(violating, suffix)
    if rng.random() < 0.4:
        instruction.append("Reply in uppercase.")
        constraints.append({"kind": "uppercase"})
        notes.append("all uppercase")
        reply, violating = reply.upper(), violating.upper()
    reasoning = f"Topic: {topic}. Constraints: {'; '.join(notes)}."
    return InstructItem(item_id, topic, " ".join(instruction), tuple(constraints), reasoning, reply, violating)


def topics_for(split: str) -> tuple[str, ...]:
    held_out = split == "test"
    return tuple(topic for topic in TOPICS if (topic in HELD_OUT_TOPICS) == held_out)


def generate(count: int, seed: int, split: str) -> list[InstructItem]:
    """`count` items of `split`; a longer run starts with the items of a shorter one."""
    rng = random.Random(f"instruct:{seed}:{split}")
    topics = topics_for(split)
    return [make_item(rng, rng.choice(topics), f"instruct-{split}-{seed}-{i}") for i in range(count)]
