"""The code suite's templates on integers: each draws its parameters and test inputs from `rng` and returns the task,
a reference solution (source) and the expected results, computed here independently of that source."""

from __future__ import annotations

import math
import random

from suites.code_cases import DrawnTask

FIZZ_WORDS = (("Fizz", "Buzz"), ("Foo", "Bar"), ("Ping", "Pong"), ("Tick", "Tock"))


def digit_sum(rng: random.Random) -> DrawnTask:
    root = rng.random() < 0.5
    numbers = [rng.randint(-99999, 99999) for _ in range(4)] + [0, rng.randint(1, 9)]

    def expected(n: int) -> int:
        n = abs(n)
        while True:
            n = sum(int(digit) for digit in str(n))
            if not root or n < 10:
                return n

    if root:
        return DrawnTask(
            "digital_root", "n", "returns the digital root of the integer `n`: the sum of the digits of its absolute "
            "value, summed again until one digit is left",
            "Take the absolute value; replace it by its digit sum until it is below 10.",
            "def digital_root(n):\n    n = abs(n)\n    while True:\n        n = sum(int(digit) for digit in str(n))\n"
            "        if n < 10:\n            return n\n",
            tuple(((n,), expected(n)) for n in numbers))
    return DrawnTask(
        "digit_sum", "n", "returns the sum of the decimal digits of the integer `n` (of its absolute value)",
        "Write the absolute value as text and add up its digits.",
        "def digit_sum(n):\n    return sum(int(digit) for digit in str(abs(n)))\n",
        tuple(((n,), expected(n)) for n in numbers))


def fizzbuzz(rng: random.Random) -> DrawnTask:
    first, second = rng.sample(range(2, 8), 2)
    word, other = rng.choice(FIZZ_WORDS)
    limits = [rng.randint(1, 30) for _ in range(4)] + [0, first * second]

    def expected(n: int) -> list[str]:
        return [(word if i % first == 0 else "") + (other if i % second == 0 else "") or str(i) for i in range(1, n + 1)]

    return DrawnTask(
        "fizzbuzz", "n", f"returns a list with one string for each number i from 1 to `n`: {word!r} when i is a "
        f"multiple of {first}, {other!r} when it is a multiple of {second}, {word + other!r} when both, else str(i)",
        f"For each i, append {word!r} if i % {first} == 0 and {other!r} if i % {second} == 0; "
        "an empty label means the number itself.",
        "def fizzbuzz(n):\n    labels = []\n    for i in range(1, n + 1):\n        label = \"\"\n"
        f"        if i % {first} == 0:\n            label += {word!r}\n        if i % {second} == 0:\n"
        f"            label += {other!r}\n        labels.append(label or str(i))\n    return labels\n",
        tuple(((n,), expected(n)) for n in limits))


def clamp(rng: random.Random) -> DrawnTask:
    low, high = rng.randint(-20, 0), rng.randint(1, 30)
    values = [rng.randint(low - 30, high + 30) for _ in range(4)] + [low, high]
    return DrawnTask(
        "clamp", "x", f"returns the integer `x` limited to the range from {low} to {high} (inclusive)",
        f"Below {low} gives {low}, above {high} gives {high}, otherwise x itself: max({low}, min({high}, x)).",
        f"def clamp(x):\n    return max({low}, min({high}, x))\n",
        tuple(((x,), max(low, min(high, x))) for x in values))


def count_multiples(rng: random.Random) -> DrawnTask:
    divisor = rng.randint(2, 9)
    limits = [rng.randint(0, 500) for _ in range(4)] + [0, divisor]
    return DrawnTask(
        "count_multiples", "limit", f"counts the integers from 1 to `limit` (limit >= 0) divisible by {divisor}",
        f"Every {divisor}th number is a multiple, so the count is limit // {divisor}.",
        f"def count_multiples(limit):\n    return limit // {divisor}\n",
        tuple(((limit,), sum(i % divisor == 0 for i in range(1, limit + 1))) for limit in limits))


def sum_of_multiples(rng: random.Random) -> DrawnTask:
    first, second = rng.sample(range(2, 10), 2)
    limits = [rng.randint(0, 200) for _ in range(4)] + [0, first * second + 1]
    return DrawnTask(
        "sum_of_multiples", "limit", f"returns the sum of the positive integers below `limit` that are multiples of "
        f"{first} or of {second}",
        f"Loop over 1 .. limit - 1 and add the numbers divisible by {first} or by {second} (counted once).",
        f"def sum_of_multiples(limit):\n    return sum(i for i in range(1, limit) if i % {first} == 0 or i % {second} == 0)\n",
        tuple(((limit,), sum(i for i in range(1, limit) if not i % first or not i % second)) for limit in limits))


def collatz_steps(rng: random.Random) -> DrawnTask:
    starts = [rng.randint(2, 200) for _ in range(4)] + [1, 27]

    def expected(n: int) -> int:
        steps = 0
        while n != 1:
            n = 3 * n + 1 if n % 2 else n // 2
            steps += 1
        return steps

    return DrawnTask(
        "collatz_steps", "n", "returns how many steps take the integer `n` >= 1 to 1, where a step halves an even "
        "number and turns an odd one into 3 * n + 1",
        "Loop until n is 1, halving even numbers and mapping odd ones to 3n + 1, counting the steps.",
        "def collatz_steps(n):\n    steps = 0\n    while n != 1:\n        n = n // 2 if n % 2 == 0 else 3 * n + 1\n"
        "        steps += 1\n    return steps\n",
        tuple(((n,), expected(n)) for n in starts))


def power_sum(rng: random.Random) -> DrawnTask:
    power = rng.randint(1, 4)
    limits = [rng.randint(1, 60) for _ in range(4)] + [0, 1]
    return DrawnTask(
        "power_sum", "n", f"returns 1**{power} + 2**{power} + ... + n**{power} for an integer `n` >= 0 (0 when n is 0)",
        f"Sum i ** {power} for i from 1 to n.",
        f"def power_sum(n):\n    return sum(i ** {power} for i in range(1, n + 1))\n",
        tuple(((n,), sum(i**power for i in range(1, n + 1))) for n in limits))


def factorial_modulo(rng: random.Random) -> DrawnTask:
    modulus = rng.choice((7, 97, 1000, 1_000_007))
    numbers = [rng.randint(2, 40) for _ in range(4)] + [0, 1]
    return DrawnTask(
        "factorial_modulo", "n", f"returns n! modulo {modulus} for an integer `n` >= 0",
        f"Multiply 1 .. n, reducing modulo {modulus} after each step to keep the numbers small.",
        f"def factorial_modulo(n):\n    result = 1 % {modulus}\n    for i in range(2, n + 1):\n"
        f"        result = result * i % {modulus}\n    return result\n",
        tuple(((n,), math.factorial(n) % modulus) for n in numbers))


def reverse_digits(rng: random.Random) -> DrawnTask:
    numbers = [rng.randint(-99999, 99999) for _ in range(4)] + [0, rng.randint(1, 9) * 100]
    return DrawnTask(
        "reverse_digits", "n", "returns the integer whose digits are those of `n` in reverse order, with the sign "
        "of `n` (-120 gives -21)",
        "Reverse the digits of the absolute value as text, convert back, and put the sign back.",
        "def reverse_digits(n):\n    reversed_value = int(str(abs(n))[::-1])\n"
        "    return -reversed_value if n < 0 else reversed_value\n",
        tuple(((n,), (-1 if n < 0 else 1) * int(str(abs(n))[::-1])) for n in numbers))


def to_base(rng: random.Random) -> DrawnTask:
    base = rng.randint(2, 9)
    numbers = [rng.randint(1, 5000) for _ in range(4)] + [0, base]

    def expected(n: int) -> str:
        digits = ""
        while n:
            n, digit = divmod(n, base)
            digits = str(digit) + digits
        return digits or "0"

    return DrawnTask(
        "to_base", "n", f"returns the digits of the integer `n` >= 0 written in base {base}, as a string (\"0\" for 0)",
        f"Take remainders of repeated division by {base}; they are the digits from last to first.",
        "def to_base(n):\n    if n == 0:\n        return \"0\"\n    digits = []\n    while n > 0:\n"
        f"        digits.append(str(n % {base}))\n        n //= {base}\n    return \"\".join(reversed(digits))\n",
        tuple(((n,), expected(n)) for n in numbers))


def divisor_pair(rng: random.Random) -> DrawnTask:
    least = rng.random() < 0.5
    pairs = [(rng.randint(1, 60) * k, rng.randint(1, 60) * k) for k in (rng.randint(1, 9) for _ in range(4))]
    pairs += [(7, 13), (12, 12)]
    if least:
        return DrawnTask(
            "least_common_multiple", "a, b", "returns the least common multiple of the positive integers `a` and `b`",
            "The product divided by the greatest common divisor, found with Euclid's algorithm.",
            "def least_common_multiple(a, b):\n    x, y = a, b\n    while y:\n        x, y = y, x % y\n"
            "    return a * b // x\n",
            tuple(((a, b), math.lcm(a, b)) for a, b in pairs))
    return DrawnTask(
        "greatest_common_divisor", "a, b", "returns the greatest common divisor of the positive integers `a` and `b`",
        "Euclid's algorithm: replace (a, b) by (b, a % b) until b is 0.",
        "def greatest_common_divisor(a, b):\n    while b:\n        a, b = b, a % b\n    return a\n",
        tuple(((a, b), math.gcd(a, b)) for a, b in pairs))


def count_digit(rng: random.Random) -> DrawnTask:
    digit = rng.randint(0, 9)
    numbers = [rng.randint(-999999, 999999) for _ in range(4)] + [0, int(str(digit) * 3)]
    return DrawnTask(
        "count_digit", "n", f"counts how many times the digit {digit} appears in the decimal form of the integer `n`",
        f"Write abs(n) as text and count the character {str(digit)!r}.",
        f"def count_digit(n):\n    return str(abs(n)).count({str(digit)!r})\n",
        tuple(((n,), str(abs(n)).count(str(digit))) for n in numbers))


NUMBER_TEMPLATES = (digit_sum, fizzbuzz, clamp, count_multiples, sum_of_multiples, collatz_steps, power_sum,
                    factorial_modulo, reverse_digits, to_base, divisor_pair, count_digit)
