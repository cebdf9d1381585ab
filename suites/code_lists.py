"""The code suite's templates on lists of integers: each draws its parameters and test inputs from `rng` and returns
the task, a reference solution (source) and the expected results, computed here independently of that source."""

from __future__ import annotations

import random

from suites.code_cases import DrawnTask


def _values(rng: random.Random, low: int = 0, high: int = 8) -> list[int]:
    return [rng.randint(-20, 20) for _ in range(rng.randint(low, high))]


def _lists(rng: random.Random, *edges: list[int]) -> list[list[int]]:
    """Four drawn lists (at least two long), then the edge cases."""
    return [_values(rng, 2) for _ in range(4)] + [list(edge) for edge in edges]


def running_totals(rng: random.Random) -> DrawnTask:
    maximum = rng.random() < 0.5
    lists = _lists(rng, [], [5])

    def expected(values: list[int]) -> list[int]:
        totals, current = [], None
        for value in values:
            current = value if current is None else (max(current, value) if maximum else current + value)
            totals.append(current)
        return totals

    if maximum:
        return DrawnTask(
            "running_max", "values", "returns the list whose i-th item is the largest of values[0] .. values[i]",
            "Keep the largest value seen so far and append it after each item.",
            "def running_max(values):\n    result = []\n    for value in values:\n"
            "        result.append(value if not result else max(result[-1], value))\n    return result\n",
            tuple(((values,), expected(values)) for values in lists))
    return DrawnTask(
        "running_sum", "values", "returns the list whose i-th item is values[0] + ... + values[i]",
        "Keep a running total and append it after adding each item.",
        "def running_sum(values):\n    result = []\n    total = 0\n    for value in values:\n        total += value\n"
        "        result.append(total)\n    return result\n",
        tuple(((values,), expected(values)) for values in lists))


def second_extreme(rng: random.Random) -> DrawnTask:
    largest = rng.random() < 0.5
    kind = "largest" if largest else "smallest"
    lists = _lists(rng, [], [3, 3, 3])

    def expected(values: list[int]) -> int | None:
        distinct = sorted(set(values), reverse=largest)
        return distinct[1] if len(distinct) > 1 else None

    return DrawnTask(
        f"second_{kind}", "values", f"returns the second {kind} distinct value of `values`, or None when it has "
        "fewer than two distinct values",
        f"Sort the distinct values{' in reverse' if largest else ''}; the second one is the answer if it exists.",
        f"def second_{kind}(values):\n    distinct = sorted(set(values), reverse={largest})\n"
        "    return distinct[1] if len(distinct) > 1 else None\n",
        tuple(((values,), expected(values)) for values in lists))


def chunk(rng: random.Random) -> DrawnTask:
    size = rng.randint(2, 4)
    lists = _lists(rng, [], [1])
    return DrawnTask(
        "chunk", "values", f"splits `values` into consecutive lists of {size} items (the last one may be shorter)",
        f"Slice values[i:i + {size}] for i in steps of {size}.",
        f"def chunk(values):\n    return [values[i:i + {size}] for i in range(0, len(values), {size})]\n",
        tuple(((values,), [values[i:i + size] for i in range(0, len(values), size)]) for values in lists))


def rotate(rng: random.Random) -> DrawnTask:
    steps = rng.randint(1, 5)
    left = rng.random() < 0.5
    direction = "left" if left else "right"
    lists = _lists(rng, [], [1, 2])

    def expected(values: list[int]) -> list[int]:
        if not values:
            return []
        shift = steps % len(values) if left else -steps % len(values)
        return values[shift:] + values[:shift]

    split = f"{steps} % len(values)" if left else f"-{steps} % len(values)"
    return DrawnTask(
        f"rotate_{direction}", "values", f"returns `values` rotated {steps} places to the {direction} (items that "
        "fall off one end come back at the other)",
        "Reduce the shift modulo the length, then join the two slices; an empty list stays empty.",
        f"def rotate_{direction}(values):\n    if not values:\n        return []\n    shift = {split}\n"
        "    return values[shift:] + values[:shift]\n",
        tuple(((values,), expected(values)) for values in lists))


def remove_duplicates(rng: random.Random) -> DrawnTask:
    lists = [[rng.randint(0, 5) for _ in range(rng.randint(2, 10))] for _ in range(4)] + [[], [2, 2, 2]]
    return DrawnTask(
        "remove_duplicates", "values", "returns the values of `values` without repeats, each at its first position",
        "Walk the list, remembering what was seen, and keep only values not seen before.",
        "def remove_duplicates(values):\n    seen = set()\n    result = []\n    for value in values:\n"
        "        if value not in seen:\n            seen.add(value)\n            result.append(value)\n    return result\n",
        tuple(((values,), list(dict.fromkeys(values))) for values in lists))


def count_above(rng: random.Random) -> DrawnTask:
    threshold = rng.randint(-10, 10)
    lists = _lists(rng, [], [threshold])
    return DrawnTask(
        "count_above", "values", f"counts the items of `values` greater than {threshold}",
        f"Count the values with value > {threshold}.",
        f"def count_above(values):\n    return sum(1 for value in values if value > {threshold})\n",
        tuple(((values,), sum(value > threshold for value in values)) for values in lists))


def differences(rng: random.Random) -> DrawnTask:
    lists = _lists(rng, [], [4])
    return DrawnTask(
        "differences", "values", "returns the list of values[i + 1] - values[i] for each pair of neighbours",
        "Pair each item with the next one and subtract; fewer than two items give an empty list.",
        "def differences(values):\n    return [values[i + 1] - values[i] for i in range(len(values) - 1)]\n",
        tuple(((values,), [b - a for a, b in zip(values, values[1:], strict=False)]) for values in lists))


def window_sums(rng: random.Random) -> DrawnTask:
    width = rng.randint(2, 4)
    lists = _lists(rng, [], [1] * (width - 1))
    return DrawnTask(
        "window_sums", "values", f"returns the sums of every {width} consecutive items of `values`, in order",
        f"For each start i from 0 to len(values) - {width}, sum values[i:i + {width}].",
        f"def window_sums(values):\n    return [sum(values[i:i + {width}]) for i in range(len(values) - {width} + 1)]\n",
        tuple(((values,), [sum(values[i:i + width]) for i in range(len(values) - width + 1)]) for values in lists))


def scaled_parity(rng: random.Random) -> DrawnTask:
    even = rng.random() < 0.5
    factor = rng.randint(2, 5)
    kind, remainder = ("even", 0) if even else ("odd", 1)
    lists = _lists(rng, [], [1, 2, 3])
    return DrawnTask(
        f"scaled_{kind}s", "values", f"returns the {kind} items of `values`, in order, each multiplied by {factor}",
        f"Keep the values with value % 2 == {remainder} and multiply each by {factor}.",
        f"def scaled_{kind}s(values):\n    return [value * {factor} for value in values if value % 2 == {remainder}]\n",
        tuple(((values,), [v * factor for v in values if v % 2 == remainder]) for values in lists))


def index_of_extreme(rng: random.Random) -> DrawnTask:
    largest = rng.random() < 0.5
    kind, compare = ("max", ">") if largest else ("min", "<")
    lists = _lists(rng, [], [7, 7])

    def expected(values: list[int]) -> int:
        if not values:
            return -1
        best = (max if largest else min)(values)
        return values.index(best)

    return DrawnTask(
        f"index_of_{kind}", "values", f"returns the index of the first {'largest' if largest else 'smallest'} item "
        "of `values`, or -1 when it is empty",
        f"Scan once, moving the best index only when an item is strictly {'larger' if largest else 'smaller'}.",
        f"def index_of_{kind}(values):\n    best = -1\n    for i, value in enumerate(values):\n"
        f"        if best == -1 or value {compare} values[best]:\n            best = i\n    return best\n",
        tuple(((values,), expected(values)) for values in lists))


def merge_sorted(rng: random.Random) -> DrawnTask:
    pairs = [(sorted(_values(rng)), sorted(_values(rng))) for _ in range(4)] + [([], []), ([1, 3], [])]
    return DrawnTask(
        "merge_sorted", "left, right", "merges the sorted lists `left` and `right` into one sorted list",
        "Walk both lists with two indices, always taking the smaller head, then append what is left.",
        "def merge_sorted(left, right):\n    merged = []\n    i = j = 0\n    while i < len(left) and j < len(right):\n"
        "        if left[i] <= right[j]:\n            merged.append(left[i])\n            i += 1\n        else:\n"
        "            merged.append(right[j])\n            j += 1\n    return merged + left[i:] + right[j:]\n",
        tuple(((left, right), sorted(left + right)) for left, right in pairs))


LIST_TEMPLATES = (running_totals, second_extreme, chunk, rotate, remove_duplicates, count_above, differences,
                  window_sums, scaled_parity, index_of_extreme, merge_sorted)
