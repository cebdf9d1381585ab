"""The code suite's templates on strings: each draws its parameters and test inputs from `rng` and returns the task,
a reference solution (source) and the expected results, computed here independently of that source."""

from __future__ import annotations

import random

from suites.code_cases import DrawnTask

WORDS = ("apple", "river", "stone", "cloud", "maple", "tiger", "lemon", "north", "piano", "amber", "delta", "ember",
         "fig", "grape", "oak", "ivy", "jolly", "kiwi", "lunar", "mango", "nut", "ocean", "pearl", "quiet", "raven",
         "sun", "tulip", "urban", "vivid", "willow", "yak", "zebra")


def _sentence(rng: random.Random, low: int = 2, high: int = 6) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(low, high)))


def _mixed_case(rng: random.Random, text: str) -> str:
    return "".join(char.upper() if rng.random() < 0.3 else char for char in text)


def reverse_words(rng: random.Random) -> DrawnTask:
    joiner = rng.choice((" ", "-", ", ", "/"))
    texts = [_sentence(rng) for _ in range(4)] + ["", f"  {rng.choice(WORDS)}  "]
    return DrawnTask(
        "reverse_words", "text", f"returns the words of `text` in reverse order, joined by {joiner!r}",
        f"Split the text on whitespace, reverse the list of words, and join them with {joiner!r}.",
        f"def reverse_words(text):\n    return {joiner!r}.join(reversed(text.split()))\n",
        tuple(((text,), joiner.join(text.split()[::-1])) for text in texts))


def count_vowels(rng: random.Random) -> DrawnTask:
    vowels = rng.choice(("aeiou", "aeiouy"))
    texts = [_mixed_case(rng, _sentence(rng)) for _ in range(4)] + ["", "RHYTHM"]
    return DrawnTask(
        "count_vowels", "text", f"counts the letters of `text` that are one of {vowels!r}, ignoring case",
        f"Lowercase the text and count the characters found in {vowels!r}.",
        f"def count_vowels(text):\n    return sum(1 for char in text.lower() if char in {vowels!r})\n",
        tuple(((text,), sum(char in vowels for char in text.lower())) for text in texts))


def run_length_encode(rng: random.Random) -> DrawnTask:
    count_first = rng.random() < 0.5
    texts = ["".join(rng.choice("abc") * rng.randint(1, 4) for _ in range(rng.randint(1, 5))) for _ in range(4)]
    texts += ["", "z"]

    def encode(text: str) -> str:
        runs, index = [], 0
        while index < len(text):
            end = index
            while end < len(text) and text[end] == text[index]:
                end += 1
            runs.append((text[index], end - index))
            index = end
        return "".join(f"{n}{char}" if count_first else f"{char}{n}" for char, n in runs)

    piece = "str(end - start) + text[start]" if count_first else "text[start] + str(end - start)"
    shape = "its length then the character" if count_first else "the character then its length"
    return DrawnTask(
        "run_length_encode", "text", f"replaces each run of one repeated character in `text` by {shape}",
        f"Walk the text, find where each run of the same character ends, and write {shape}.",
        "def run_length_encode(text):\n    parts = []\n    start = 0\n    while start < len(text):\n"
        "        end = start\n        while end < len(text) and text[end] == text[start]:\n            end += 1\n"
        f"        parts.append({piece})\n        start = end\n    return \"\".join(parts)\n",
        tuple(((text,), encode(text)) for text in texts))


def capitalize_long_words(rng: random.Random) -> DrawnTask:
    shortest = rng.randint(3, 5)
    texts = [_mixed_case(rng, _sentence(rng)) for _ in range(4)] + ["", "a bb ccc dddd eeeee"]

    def expected(text: str) -> str:
        return " ".join(word.capitalize() if len(word) >= shortest else word.lower() for word in text.split())

    return DrawnTask(
        "capitalize_long_words", "text",
        f"returns `text` with its words separated by single spaces, each word of at least {shortest} letters "
        "capitalized (first letter upper case, the rest lower case) and the other words in lower case",
        f"Split into words; capitalize those with {shortest} or more letters, lowercase the rest; join with spaces.",
        "def capitalize_long_words(text):\n    words = []\n    for word in text.split():\n"
        f"        words.append(word.capitalize() if len(word) >= {shortest} else word.lower())\n"
        "    return \" \".join(words)\n",
        tuple(((text,), expected(text)) for text in texts))


def is_palindrome(rng: random.Random) -> DrawnTask:
    def palindrome() -> str:
        half = rng.choice(WORDS) + rng.choice(WORDS)[: rng.randint(0, 3)]
        return _mixed_case(rng, half + rng.choice(("", "x", " ")) + half[::-1])

    texts = [palindrome(), _sentence(rng), palindrome(), "Step on no pets!", "", rng.choice(WORDS) + "ab"]
    rng.shuffle(texts)

    def expected(text: str) -> bool:
        letters = [char.lower() for char in text if char.isalpha()]
        return letters == letters[::-1]

    return DrawnTask(
        "is_palindrome", "text",
        "returns True when the letters of `text` read the same backwards, ignoring case and every character that is "
        "not a letter, else False",
        "Keep only the letters, lowercased, and compare the list with its reverse.",
        "def is_palindrome(text):\n    letters = [char.lower() for char in text if char.isalpha()]\n"
        "    return letters == letters[::-1]\n",
        tuple(((text,), expected(text)) for text in texts))


def caesar_shift(rng: random.Random) -> DrawnTask:
    shift = rng.randint(1, 25)
    texts = [_mixed_case(rng, _sentence(rng)) + rng.choice(("", "!", " 42.")) for _ in range(4)] + ["", "xyz"]

    def expected(text: str) -> str:
        return "".join(chr((ord(c) - 97 + shift) % 26 + 97) if "a" <= c <= "z" else c for c in text)

    return DrawnTask(
        "caesar_shift", "text",
        f"moves every lowercase letter a-z of `text` {shift} places forward in the alphabet, wrapping from z to a, "
        "and leaves every other character as it is",
        f"For each lowercase letter add {shift} to its position modulo 26; copy other characters.",
        "def caesar_shift(text):\n    shifted = []\n    for char in text:\n        if \"a\" <= char <= \"z\":\n"
        f"            char = chr((ord(char) - ord(\"a\") + {shift}) % 26 + ord(\"a\"))\n"
        "        shifted.append(char)\n    return \"\".join(shifted)\n",
        tuple(((text,), expected(text)) for text in texts))


def remove_letter(rng: random.Random) -> DrawnTask:
    letter = rng.choice("aeilnorst")
    texts = [_mixed_case(rng, _sentence(rng)) for _ in range(4)] + ["", letter.upper() * 3]
    return DrawnTask(
        "remove_letter", "text", f"returns `text` without any {letter!r} or {letter.upper()!r}",
        f"Keep every character whose lowercase form is not {letter!r}.",
        f"def remove_letter(text):\n    return \"\".join(char for char in text if char.lower() != {letter!r})\n",
        tuple(((text,), "".join(c for c in text if c.lower() != letter)) for text in texts))


def extreme_word(rng: random.Random) -> DrawnTask:
    longest = rng.random() < 0.5
    kind, pick = ("longest", "max") if longest else ("shortest", "min")
    texts = [_sentence(rng, 3, 7) for _ in range(4)] + ["", "ab cd ef"]

    def expected(text: str) -> str:
        words = text.split()
        return (max if longest else min)(words, key=len) if words else ""

    return DrawnTask(
        f"{kind}_word", "text", f"returns the first of the {kind} words of `text` (words are separated by "
        "whitespace), or \"\" when it has none",
        f"Split into words; {pick} by length returns the first of the {kind}; an empty text gives \"\".",
        f"def {kind}_word(text):\n    words = text.split()\n    if not words:\n        return \"\"\n"
        f"    return {pick}(words, key=len)\n",
        tuple(((text,), expected(text)) for text in texts))


def count_long_words(rng: random.Random) -> DrawnTask:
    longer_than = rng.randint(2, 5)
    texts = [_sentence(rng, 2, 8) for _ in range(4)] + ["", "x " * 3]
    return DrawnTask(
        "count_long_words", "text", f"counts the words of `text` with more than {longer_than} letters",
        f"Split into words and count those whose length exceeds {longer_than}.",
        f"def count_long_words(text):\n    return sum(1 for word in text.split() if len(word) > {longer_than})\n",
        tuple(((text,), sum(len(word) > longer_than for word in text.split())) for text in texts))


def acronym(rng: random.Random) -> DrawnTask:
    joiner = rng.choice(("", ".", "-"))
    texts = [_sentence(rng) for _ in range(4)] + ["", rng.choice(WORDS)]
    return DrawnTask(
        "acronym", "text", f"returns the first letters of the words of `text`, upper case, joined by {joiner!r}",
        f"Take each word's first letter, uppercase it, and join the letters with {joiner!r}.",
        f"def acronym(text):\n    return {joiner!r}.join(word[0].upper() for word in text.split())\n",
        tuple(((text,), joiner.join(word[0].upper() for word in text.split())) for text in texts))


def repeat_characters(rng: random.Random) -> DrawnTask:
    times = rng.randint(2, 4)
    texts = [rng.choice(WORDS) + rng.choice(("", " ", "!")) for _ in range(4)] + ["", "ab"]
    return DrawnTask(
        "repeat_characters", "text", f"returns `text` with each character written {times} times in a row",
        f"Build the result from each character repeated {times} times.",
        f"def repeat_characters(text):\n    return \"\".join(char * {times} for char in text)\n",
        tuple(((text,), "".join(char * times for char in text)) for text in texts))


def mask_digits(rng: random.Random) -> DrawnTask:
    mask = rng.choice("#*X")
    texts = [f"{rng.choice(WORDS)} {rng.randint(0, 99999)}-{rng.randint(0, 999)}" for _ in range(4)] + ["", "no digits"]
    return DrawnTask(
        "mask_digits", "text", f"returns `text` with every digit 0-9 replaced by {mask!r}",
        f"Replace each character that is a digit by {mask!r}, keep the others.",
        f"def mask_digits(text):\n    return \"\".join({mask!r} if char in \"0123456789\" else char for char in text)\n",
        tuple(((text,), "".join(mask if c in "0123456789" else c for c in text)) for text in texts))


def truncate(rng: random.Random) -> DrawnTask:
    width = rng.randint(4, 12)
    suffix = rng.choice(("...", "~"))
    texts = [_sentence(rng, 1, 4) for _ in range(4)] + ["", "w" * width]
    return DrawnTask(
        "truncate", "text", f"returns `text` unchanged when it has at most {width} characters, else its first "
        f"{width} characters followed by {suffix!r}",
        f"Compare the length with {width}; if longer, cut to {width} characters and add {suffix!r}.",
        f"def truncate(text):\n    if len(text) <= {width}:\n        return text\n    return text[:{width}] + {suffix!r}\n",
        tuple(((text,), text if len(text) <= width else text[:width] + suffix) for text in texts))


def to_camel_case(rng: random.Random) -> DrawnTask:
    pascal = rng.random() < 0.5
    function = "to_pascal_case" if pascal else "to_camel_case"
    names = ["_".join(rng.choice(WORDS) for _ in range(rng.randint(1, 4))) for _ in range(4)] + ["", "_big__red_"]

    def expected(name: str) -> str:
        parts = [part for part in name.split("_") if part]
        if not parts:
            return ""
        first = parts[0].capitalize() if pascal else parts[0].lower()
        return first + "".join(part.capitalize() for part in parts[1:])

    first = "capitalized" if pascal else "in lower case"
    return DrawnTask(
        function, "name", f"turns a snake_case `name` into {'PascalCase' if pascal else 'camelCase'}: the parts "
        f"between underscores (empty ones dropped) joined, the first {first} and the others capitalized",
        "Split on underscores, drop empty parts, then join them with the first part "
        f"{first} and the rest capitalized.",
        f"def {function}(name):\n    parts = [part for part in name.split(\"_\") if part]\n    if not parts:\n"
        f"        return \"\"\n    first = parts[0].{'capitalize' if pascal else 'lower'}()\n"
        "    return first + \"\".join(part.capitalize() for part in parts[1:])\n",
        tuple(((name,), expected(name)) for name in names))


def pad_left(rng: random.Random) -> DrawnTask:
    width = rng.randint(5, 10)
    fill = rng.choice("0*.")
    texts = [rng.choice(WORDS)[: rng.randint(1, 5)] for _ in range(3)] + [str(rng.randint(0, 999)), "", "x" * (width + 2)]
    return DrawnTask(
        "pad_left", "text", f"returns `text` padded on the left with {fill!r} to {width} characters (a longer text "
        "is returned unchanged)",
        f"Prepend {fill!r} as many times as {width} minus the length, when that is positive.",
        f"def pad_left(text):\n    return {fill!r} * max(0, {width} - len(text)) + text\n",
        tuple(((text,), text.rjust(width, fill)) for text in texts))


STRING_TEMPLATES = (reverse_words, count_vowels, run_length_encode, capitalize_long_words, is_palindrome, caesar_shift,
                    remove_letter, extreme_word, count_long_words, acronym, repeat_characters, mask_digits, truncate,
                    to_camel_case, pad_left)
