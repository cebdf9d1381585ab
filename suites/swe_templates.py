"""The swe suite's function templates and the bugs each can carry.

A template draws one small module (one or two functions) from a seeded generator: its names and constants vary, and
so do the inputs its tests call it with. Each template lists the bugs of the five families it can carry, as a
fragment of the correct source and what the bug puts in its place; suites/swe.py injects one, checks that the
tests tell the two apart, and writes the tests. Inputs include the edge cases that expose each bug (a width of 0,
a value equal to the threshold, a count divisible by the page size), since a bug no test sees is no task.
"""

from __future__ import annotations

import random
import string
from collections.abc import Callable
from dataclasses import dataclass

FAMILIES = ("off_by_one", "wrong_comparison", "missed_case", "wrong_default", "swapped_arguments")


@dataclass(frozen=True)
class Bug:
    family: str
    correct: str  # a fragment of the correct source, found there exactly once
    buggy: str  # what the bug puts in its place
    explanation: str  # what is wrong, as the fix's reasoning says it


@dataclass(frozen=True)
class Case:
    label: str  # names the test: test_<label>
    args: tuple

    def call(self, function: str) -> str:
        return f"{function}({', '.join(repr(arg) for arg in self.args)})"


@dataclass(frozen=True)
class FunctionModule:
    template: str
    module: str  # the file is <module>.py
    function: str  # the function the tests call
    source: str
    bugs: tuple[Bug, ...]
    cases: tuple[Case, ...]


def _integers(rng: random.Random, count: int, low: int = -9, high: int = 30) -> list[int]:
    return [rng.randint(low, high) for _ in range(count)]


def window_sums(rng: random.Random) -> FunctionModule:
    function = rng.choice(["window_sums", "rolling_sums", "moving_totals"])
    values, width = rng.choice(["values", "numbers", "readings"]), rng.choice(["width", "size", "span"])
    source = f'''def {function}({values}, {width}):
    """The sums of every {width} consecutive items of {values}, in order; none for a {width} below 1."""
    if {width} <= 0:
        return []
    sums = []
    for start in range(len({values}) - {width} + 1):
        sums.append(sum({values}[start:start + {width}]))
    return sums
'''
    bugs = (
        Bug("off_by_one", f"range(len({values}) - {width} + 1)", f"range(len({values}) - {width})",
            f"the loop stops one window early, so the last window of {values} is never summed"),
        Bug("wrong_comparison", f"if {width} <= 0:", f"if {width} < 0:",
            f"a {width} of 0 is not caught by the guard, which must test `{width} <= 0`"),
    )
    cases = [Case("whole_list", (_integers(rng, 4), 4)), Case("width_zero", (_integers(rng, 3), 0)),
             Case("wider_than_list", (_integers(rng, 2), 3)), Case("empty_list", ([], 2))]
    for index in range(4):
        items = _integers(rng, rng.randint(3, 7))
        cases.append(Case(f"windows_{index + 1}", (items, rng.randint(1, len(items)))))
    return FunctionModule("window_sums", rng.choice(["windows", "rolling", "series"]), function, source, bugs,
                          tuple(cases))


def clamp(rng: random.Random) -> FunctionModule:
    function, value = rng.choice(["clamp", "bound", "limit_to"]), rng.choice(["value", "level", "score"])
    high = rng.choice([10, 20, 50, 100, 255, 1000])
    wrong_high = rng.choice([h for h in (high // 2, high - 1, high * 2) if h != high])
    source = f'''def {function}({value}, low=0, high={high}):
    """{value} limited to the range [low, high]; bounds given the wrong way round are swapped first."""
    if low > high:
        low, high = high, low
    return max(low, min({value}, high))
'''
    bugs = (
        Bug("wrong_default", f"high={high})", f"high={wrong_high})",
            f"the default upper bound is {wrong_high}, and it must be {high}"),
        Bug("missed_case", "    if low > high:\n        low, high = high, low\n", "",
            "bounds given the wrong way round are not swapped before clamping"),
        Bug("wrong_comparison", "if low > high:", "if low < high:",
            "the bounds are swapped when they are in order, instead of when low > high"),
        Bug("swapped_arguments", f"max(low, min({value}, high))", f"max(high, min({value}, low))",
            "low and high are swapped in the max and min calls"),
    )
    cases = [Case("inside", (rng.randint(1, high - 1),)), Case("above_default", (high + rng.randint(1, 3 * high),)),
             Case("below_zero", (-rng.randint(1, 50),)), Case("just_above_half", (high // 2 + 1,)),
             Case("at_the_top", (high,))]
    for index in range(2):
        low, top = sorted(rng.sample(range(-20, 40), 2))
        cases.append(Case(f"given_bounds_{index + 1}", (rng.randint(low - 10, top + 10), low, top)))
        cases.append(Case(f"reversed_bounds_{index + 1}", (rng.randint(low - 10, top + 10), top, low)))
        cases.append(Case(f"reversed_bounds_above_{index + 1}", (top + 5, top, low)))
    return FunctionModule("clamp", rng.choice(["bounds", "limits", "ranges"]), function, source, bugs, tuple(cases))


def _pairs_text(rng: random.Random, separator: str, empty_items: bool) -> str:
    keys = rng.sample(["port", "retries", "timeout", "depth", "workers", "limit", "width", "level"], rng.randint(2, 4))
    items = [f"{' ' * rng.randint(0, 1)}{key}={rng.randint(-5, 500)}" for key in keys]
    if empty_items:
        items.insert(rng.randint(0, len(items)), rng.choice(["", " "]))
        items.append("")
    return separator.join(items)


def parse_pairs(rng: random.Random) -> FunctionModule:
    function = rng.choice(["parse_pairs", "parse_settings", "read_options"])
    separator = rng.choice([",", ";", "|"])
    other = rng.choice([s for s in ",;|" if s != separator])
    source = f'''def {function}(text, separator="{separator}"):
    """A dict from text like "a=1{separator}b=2": keys stripped, values as integers; empty items are skipped."""
    pairs = {{}}
    for item in text.split(separator):
        if not item.strip():
            continue
        key, value = item.split("=", 1)
        pairs[key.strip()] = int(value)
    return pairs
'''
    bugs = (
        Bug("missed_case", "        if not item.strip():\n            continue\n", "",
            "empty items (a trailing or doubled separator) are not skipped, so splitting them fails"),
        Bug("wrong_default", f'separator="{separator}"', f'separator="{other}"',
            f'the default separator is "{other}", and it must be "{separator}"'),
        Bug("swapped_arguments", "key, value = item.split", "value, key = item.split",
            "key and value are swapped when an item is split at its '='"),
    )
    cases = [Case("one_pair", (f"size={rng.randint(1, 99)}",)),
             Case("empty_text", ("",)),
             Case("trailing_separator", (_pairs_text(rng, separator, True),)),
             Case("given_separator", (_pairs_text(rng, other, False), other))]
    for index in range(3):
        cases.append(Case(f"pairs_{index + 1}", (_pairs_text(rng, separator, False),)))
    return FunctionModule("parse_pairs", rng.choice(["settings", "options", "config"]), function, source, bugs,
                          tuple(cases))


def count_above(rng: random.Random) -> FunctionModule:
    function = rng.choice(["count_above", "count_over", "how_many_above"])
    values = rng.choice(["values", "scores", "readings"])
    threshold = rng.randint(3, 60)
    wrong = threshold + rng.choice([-2, -1, 1, 5])
    source = f'''def {function}({values}, threshold={threshold}):
    """How many of {values} are strictly greater than threshold."""
    count = 0
    for item in {values}:
        if item > threshold:
            count += 1
    return count
'''
    bugs = (
        Bug("wrong_comparison", "if item > threshold:", "if item >= threshold:",
            "items equal to the threshold are counted, but only greater ones should be"),
        Bug("wrong_default", f"threshold={threshold})", f"threshold={wrong})",
            f"the default threshold is {wrong}, and it must be {threshold}"),
        Bug("off_by_one", "    count = 0\n", "    count = 1\n", "the count starts at 1 instead of 0"),
    )
    cases = [Case("none", ([],)), Case("at_the_threshold", ([threshold, threshold - 1, threshold + 1],)),
             Case("given_threshold", (_integers(rng, 5, 0, 20) + [7], 7))]
    for index in range(4):
        items = _integers(rng, rng.randint(3, 8), threshold - 10, threshold + 10)
        cases.append(Case(f"mixed_{index + 1}", (items + [threshold] * (index % 2),)))
    return FunctionModule("count_above", rng.choice(["tally", "counting", "stats"]), function, source, bugs,
                          tuple(cases))


def inclusive_range(rng: random.Random) -> FunctionModule:
    function = rng.choice(["inclusive_range", "span", "steps_between"])
    step = rng.choice([1, 1, 2, 3])
    source = f'''def {function}(start, stop, step={step}):
    """The integers from start to stop, both included, step apart; counting down when start > stop."""
    if start > stop:
        return list(range(start, stop - 1, -step))
    return list(range(start, stop + 1, step))
'''
    bugs = (
        Bug("off_by_one", "range(start, stop + 1, step)", "range(start, stop, step)",
            "the upward range stops before stop, which is meant to be included"),
        Bug("missed_case", "    if start > stop:\n        return list(range(start, stop - 1, -step))\n", "",
            "a start above stop is not handled: the range must count down then"),
        Bug("wrong_default", f"step={step})", f"step={step + 1})", f"the default step is {step + 1}, and it must be {step}"),
    )
    start = rng.randint(-5, 10)
    cases = [Case("one_number", (start, start)), Case("upward", (start, start + 2 * step)),
             Case("downward", (start + 4, start)), Case("given_step", (start, start + 9, 3)),
             Case("long_upward", (start, start + 6 * step))]
    for index in range(2):
        low = rng.randint(-10, 10)
        cases.append(Case(f"range_{index + 1}", (low, low + rng.randint(0, 12))))
    return FunctionModule("inclusive_range", rng.choice(["spans", "ranges", "counting"]), function, source, bugs,
                          tuple(cases))


def page_count(rng: random.Random) -> FunctionModule:
    function = rng.choice(["page_count", "pages_needed", "count_pages"])
    per_page = rng.choice([5, 10, 12, 20, 25, 50])
    wrong = rng.choice([per_page * 2, per_page + 5])
    source = f'''def {function}(items, per_page={per_page}):
    """How many pages items fill at per_page a page; a partly filled page counts, and no items need no pages."""
    if items <= 0:
        return 0
    return (items + per_page - 1) // per_page
'''
    bugs = (
        Bug("off_by_one", "(items + per_page - 1) // per_page", "(items + per_page) // per_page",
            "a count that fills its last page exactly gets an extra, empty page"),
        Bug("missed_case", "    if items <= 0:\n        return 0\n", "",
            "a negative number of items is not handled: it must need no pages"),
        Bug("wrong_default", f"per_page={per_page})", f"per_page={wrong})",
            f"the default page size is {wrong}, and it must be {per_page}"),
    )
    cases = [Case("no_items", (0,)), Case("one_item", (1,)), Case("exactly_full", (per_page * rng.randint(1, 6),)),
             Case("negative", (-rng.randint(per_page + 1, 5 * per_page),)),
             Case("given_page_size", (rng.randint(1, 90), 7)),
             Case("full_given_page_size", (21, 7))]
    for index in range(2):
        cases.append(Case(f"partial_{index + 1}", (rng.randint(1, 9 * per_page),)))
    return FunctionModule("page_count", rng.choice(["pages", "paging", "layout"]), function, source, bugs, tuple(cases))


def share_of(rng: random.Random) -> FunctionModule:
    function = rng.choice(["share_of", "percent_of", "portion"])
    digits = rng.choice([1, 2])
    source = f'''def percent(part, whole):
    return round(100 * part / whole, {digits})


def {function}(counts, key):
    """key's share of all the counts, in percent ({digits} decimals); 0.0 when there are no counts."""
    total = sum(counts.values())
    if total == 0:
        return 0.0
    return percent(counts.get(key, 0), total)
'''
    bugs = (
        Bug("swapped_arguments", "percent(counts.get(key, 0), total)", "percent(total, counts.get(key, 0))",
            "the arguments of percent are swapped: the part comes first, then the whole"),
        Bug("missed_case", "    if total == 0:\n        return 0.0\n", "",
            "empty counts (a total of 0) are not handled, so the share divides by zero"),
        Bug("wrong_default", "counts.get(key, 0)", "counts.get(key, 1)",
            "a key that is not counted is taken as 1 instead of 0"),
    )
    names = [letter * 2 for letter in string.ascii_lowercase]
    cases = [Case("no_counts", ({}, "aa")), Case("missing_key", ({"bb": rng.randint(1, 9)}, "aa"))]
    for index in range(4):
        keys = rng.sample(names, rng.randint(2, 4))
        counts = {key: rng.randint(1, 40) for key in keys}
        cases.append(Case(f"share_{index + 1}", (counts, rng.choice(keys))))
    return FunctionModule("share_of", rng.choice(["shares", "percentages", "summary"]), function, source, bugs,
                          tuple(cases))


TEMPLATES: dict[str, Callable[[random.Random], FunctionModule]] = {
    "window_sums": window_sums,
    "clamp": clamp,
    "parse_pairs": parse_pairs,
    "count_above": count_above,
    "inclusive_range": inclusive_range,
    "page_count": page_count,
    "share_of": share_of,
}
