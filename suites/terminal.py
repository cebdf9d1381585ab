"""`terminal`: file and text chores in a folder, done with one `bash` tool.

Each problem is drawn from a seed: a few files (a log, a CSV table, word lists, config files, numbers) and an
instruction in one of six families: count the lines matching a pattern into a file, rename files by a rule,
extract a CSV column, write a script that prints a result, replace a word in files, list the distinct words.
Its checker is a bash command that exits 0 once the folder is as asked (the task runs it in the sandbox when the
episode ends; the script checker also changes the input and runs the script again, so a script that prints a
fixed answer fails).

The reference trajectory lists the folder, looks at the input, runs the solution, looks at the result and says
what it did. Some hold an error segment first: a plausible wrong command (a case-sensitive pattern in the wrong
case, a rename that keeps the old extension, the column beside the right one, `sort` comparing numbers as text,
`sed` without /g, `uniq` on unsorted input), a look at its wrong result, then the right command. The wrong command
is flagged `error` (kept in context, not trained). Every tool result is what the commands print on the problem's
files, worked out here and written as the task writes a command's result (`shell_result`); a replay in the
sandbox sees the same (tests/test_terminal_task.py).
"""

from __future__ import annotations

import random
import shlex
from collections.abc import Callable
from dataclasses import dataclass

from model.tool_calls import ToolCall
from suites.tool_use import call_turns, reply_turn

TOOLS = [{
    "type": "function",
    "function": {
        "name": "bash",
        "description": "Run a bash command in the task's folder (no network) and show its output and exit code.",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
    },
}]
WORDS = ("apple", "birch", "cedar", "delta", "ember", "fjord", "grove", "harbor", "iris", "juniper", "kelp",
         "lagoon", "maple", "nectar", "orchid", "pebble", "quartz", "raven", "sage", "tundra")


def shell_result(output: str, exit_code: int) -> str:
    """What the bash tool shows for a command: its output, its exit code unless 0, "(no output)" for neither."""
    parts = [output.rstrip("\n")] if output.strip() else []
    if exit_code:
        parts.append(f"[exit code {exit_code}]")
    return "\n".join(parts) or "(no output)"


@dataclass(frozen=True)
class Step:
    """One command of the reference trajectory and what it prints on the problem's files at that point."""

    reasoning: str
    command: str
    output: str = ""
    exit_code: int = 0
    error: bool = False  # a mistake that a later step corrects


@dataclass(frozen=True)
class TerminalProblem:
    family: str
    instruction: str
    files: dict[str, str]
    solution: str  # the reference command, from the files as given
    check: str  # exits 0 once the folder is as asked
    steps: tuple[Step, ...]  # after listing the folder, up to the final reply
    summary: str  # the final reply

    @property
    def listing(self) -> str:
        """What `ls` prints in the folder: its top-level names, one a line (C.UTF-8 sorts by code point)."""
        return "".join(f"{name}\n" for name in sorted({path.split("/")[0] for path in self.files}))


def _lines(text: str, count: int) -> str:
    return "".join(text.splitlines(keepends=True)[:count])


def _equals(path: str, text: str) -> str:
    """A check that `path` holds `text` (trailing newlines aside, as `$(...)` drops them)."""
    return f'[ "$(cat {path})" = {shlex.quote(text.rstrip(chr(10)))} ]'


LEVELS = ("ERROR", "WARN", "INFO", "DEBUG")
COMPONENTS = ("db", "cache", "auth", "http", "queue", "scheduler")
# Lower case and free of the levels' words, so that a level matches only where it is the line's level.
EVENTS = ("request served", "retrying connection", "cache miss", "disk nearly full", "user logged in",
          "job finished", "timeout reached", "config reloaded", "slow query", "token expired")


def count_matches(rng: random.Random, with_error: bool) -> TerminalProblem:
    level = rng.choice(LEVELS)
    log = f"{rng.choice(['app', 'server', 'worker', 'api', 'build', 'sync'])}-{rng.randint(100, 9999)}.log"
    out = f"{level.lower()}_count.txt"
    levels = [rng.choice(LEVELS) for _ in range(rng.randint(6, 14))]
    levels[rng.randrange(len(levels))] = level
    text = "".join(f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d} {lvl} "
                   f"{rng.choice(COMPONENTS)}: {rng.choice(EVENTS)}\n" for lvl in levels)
    count = levels.count(level)
    solution = f"grep -c {level} {log} > {out}"
    steps = [Step("Look at the start of the log.", f"head -n 3 {log}", _lines(text, 3))]
    reasoning = f"Count the lines containing {level} with grep -c, into {out}."
    if with_error:
        steps += [Step(reasoning, f"grep -c {level.lower()} {log} > {out}", exit_code=1, error=True),
                  Step(f"Check the count in {out}.", f"cat {out}", "0\n")]
        reasoning = f"grep is case-sensitive and the log writes {level} in capitals: count the exact word."
    steps += [Step(reasoning, solution), Step(f"Check the count in {out}.", f"cat {out}", f"{count}\n")]
    return TerminalProblem("count_matches", f"Count the lines of {log} that contain {level} and write the number "
                           f"to {out}.", {log: text}, solution, f'[ "$(tr -d "[:space:]" < {out})" = "{count}" ]',
                           tuple(steps), f"{out} holds {count}, the number of lines of {log} that contain {level}.")


def rename_extension(rng: random.Random, with_error: bool) -> TerminalProblem:
    old, new = rng.choice([("txt", "md"), ("jpeg", "jpg"), ("htm", "html"), ("yml", "yaml"), ("text", "txt")])
    folder = f"{rng.choice(['notes', 'drafts', 'photos', 'pages', 'configs'])}_{rng.randint(10, 9999)}"
    stems = rng.sample(WORDS, rng.randint(3, 5))
    contents = {stem: f"{stem} {rng.randint(1, 99)}\n" for stem in stems}
    kept = f"{rng.choice(['index', 'list', 'summary'])}.{rng.choice(['csv', 'log'])}"
    files = {f"{folder}/{stem}.{old}": text for stem, text in contents.items()} | {f"{folder}/{kept}": "keep\n"}

    def listing(suffix: str) -> str:
        return "".join(f"{name}\n" for name in sorted([f"{stem}.{suffix}" for stem in stems] + [kept]))

    solution = f'cd {folder} && for f in *.{old}; do mv -- "$f" "${{f%.{old}}}.{new}"; done'
    steps = [Step(f"See the files in {folder}.", f"ls {folder}", listing(old))]
    reasoning = f"Rename each .{old} file in a loop, swapping the extension."
    if with_error:
        steps += [Step(reasoning, f'cd {folder} && for f in *.{old}; do mv -- "$f" "$f.{new}"; done', error=True),
                  Step("Check the new names.", f"ls {folder}", listing(f"{old}.{new}"))]
        reasoning = f"The names kept .{old} before the new extension: strip .{old}.{new} and add .{new}."
        fix = f'cd {folder} && for f in *.{old}.{new}; do mv -- "$f" "${{f%.{old}.{new}}}.{new}"; done'
        steps.append(Step(reasoning, fix))
    else:
        steps.append(Step(reasoning, solution))
    steps.append(Step("Check the new names.", f"ls {folder}", listing(new)))
    check = " && ".join([f"[ ! -e {folder}/{stem}.{old} ] && " + _equals(f"{folder}/{stem}.{new}", text)
                         for stem, text in contents.items()] + [_equals(f"{folder}/{kept}", "keep")])
    return TerminalProblem("rename_extension", f"Rename every .{old} file in {folder} to .{new}, keeping the rest of "
                           "its name.", files, solution, check, tuple(steps),
                           f"Renamed the {len(stems)} .{old} files in {folder} to .{new}.")


TABLES: dict[str, dict[str, Callable[[random.Random], str]]] = {
    "people": {"name": lambda rng: rng.choice(WORDS).capitalize(), "age": lambda rng: str(rng.randint(18, 90)),
               "city": lambda rng: rng.choice(["Oslo", "Lima", "Pune", "Graz", "Kobe", "Turin"]),
               "team": lambda rng: rng.choice(["red", "blue", "green"])},
    "orders": {"order": lambda rng: str(rng.randint(1000, 9999)), "item": lambda rng: rng.choice(WORDS),
               "quantity": lambda rng: str(rng.randint(1, 12)), "price": lambda rng: f"{rng.randint(1, 99)}.{rng.randint(0, 99):02d}"},
    "stations": {"station": lambda rng: rng.choice(WORDS), "elevation": lambda rng: str(rng.randint(0, 3000)),
                 "region": lambda rng: rng.choice(["north", "south", "east", "west"])},
}


def csv_column(rng: random.Random, with_error: bool) -> TerminalProblem:
    table = rng.choice(sorted(TABLES))
    header = rng.sample(sorted(TABLES[table]), len(TABLES[table]))
    path = f"{table}_{rng.randint(10, 9999)}.csv"
    rows = [[TABLES[table][column](rng) for column in header] for _ in range(rng.randint(4, 7))]
    text = "".join(",".join(row) + "\n" for row in [header, *rows])
    column = rng.choice(header)
    index = header.index(column)
    out = f"{column}_values.txt"

    def values(at: int) -> str:
        return "".join(row[at] + "\n" for row in rows)

    solution = f"cut -d, -f{index + 1} {path} | tail -n +2 > {out}"
    steps = [Step("Look at the header and the first rows.", f"head -n 3 {path}", _lines(text, 3))]
    reasoning = f"{column} is field {index + 1} of the header: cut it out and drop the header line."
    if with_error:
        beside = index + 1 if index + 1 < len(header) else index - 1
        steps += [Step(f"{column} is field {beside + 1}: cut it out and drop the header line.",
                       f"cut -d, -f{beside + 1} {path} | tail -n +2 > {out}", error=True),
                  Step(f"Check {out}.", f"cat {out}", values(beside))]
        reasoning = f"Those are the {header[beside]} values: {column} is field {index + 1}, so cut that one."
    steps += [Step(reasoning, solution), Step(f"Check {out}.", f"cat {out}", values(index))]
    return TerminalProblem("csv_column", f"Write the {column} column of {path} to {out}: its values only, without "
                           "the header, one per line.", {path: text}, solution, _equals(out, values(index)),
                           tuple(steps), f"Wrote the {len(rows)} {column} values of {path} to {out}.")


AGGREGATES: dict[str, tuple[str, Callable[[list[int]], int]]] = {
    "sum": ("awk '{{ total += $1 }} END {{ print total }}' {numbers}", sum),
    "largest": ("sort -n {numbers} | tail -n 1", max),
    "smallest": ("sort -n {numbers} | head -n 1", min),
}
RECHECK = [41, 7, 19]  # what the checker writes into the numbers file before running the script again


def write_script(rng: random.Random, with_error: bool) -> TerminalProblem:
    kind = rng.choice(sorted(AGGREGATES))
    body, aggregate = AGGREGATES[kind]
    numbers = f"numbers_{rng.randint(10, 9999)}.txt"
    values = [rng.randint(1, 120) for _ in range(rng.randint(4, 8))]
    text = "".join(f"{value}\n" for value in values)
    script = f"{kind}.sh"

    def writing(command: str) -> str:
        return f"cat > {script} <<'EOF'\n#!/bin/sh\n{command}\nEOF\nchmod +x {script}"

    solution = writing(body.format(numbers=numbers))
    steps = [Step("Look at the numbers.", f"head -n 3 {numbers}", _lines(text, 3))]
    reasoning = f"Write {script} to print the {kind} of {numbers}, and make it executable."
    # sort without -n compares the numbers as text: wrong wherever that order differs from the numeric one.
    as_text = sorted(str(value) for value in values)[-1 if kind == "largest" else 0]
    if with_error and kind != "sum" and int(as_text) != aggregate(values):
        steps += [Step(reasoning, writing(body.replace("sort -n", "sort").format(numbers=numbers)), error=True),
                  Step("Run the script to check it.", f"./{script}", f"{as_text}\n")]
        reasoning = "sort compared the numbers as text: it needs -n to compare them as numbers."
    steps += [Step(reasoning, solution), Step("Run the script to check it.", f"./{script}", f"{aggregate(values)}\n")]
    check = (f'[ -x {script} ] && [ "$(./{script})" = "{aggregate(values)}" ] && '
             f'printf "%s\\n" {" ".join(map(str, RECHECK))} > {numbers} && [ "$(./{script})" = "{aggregate(RECHECK)}" ]')
    return TerminalProblem("write_script", f"Write an executable shell script {script} that prints the {kind} of the "
                           f"numbers in {numbers} (one number a line).", {numbers: text}, solution, check, tuple(steps),
                           f"{script} prints the {kind} of the numbers in {numbers}: {aggregate(values)}.")


def replace_word(rng: random.Random, with_error: bool) -> TerminalProblem:
    old, new = rng.choice([("staging", "production"), ("blue", "green"), ("oldhost", "newhost"), ("beta", "stable")])
    paths = [f"{name}_{rng.randint(10, 999)}.conf" for name in rng.sample(["app", "db", "proxy", "cron", "mail"], 2)]
    keys = ["name", "url", "mirror", "mode", "owner", "region"]
    texts = {}
    for path in paths:
        lines = [f"{key} = {rng.choice(WORDS)}" for key in rng.sample(keys, 3)]
        lines[rng.randrange(3)] = f"url = {old}.example.org/{old}"  # twice on a line: what sed without /g misses
        lines.insert(rng.randint(0, 3), f"mode = {old}")
        texts[path] = "".join(f"{line}\n" for line in lines)
    done = {path: text.replace(old, new) for path, text in texts.items()}
    both = " ".join(paths)
    solution = f"sed -i 's/{old}/{new}/g' {both}"
    steps = [Step("Look at the two files.", f"cat {both}", "".join(texts.values()))]
    reasoning = f"Replace {old} with {new} in both files with sed, every match of each line."
    if with_error:
        once = {path: "".join(line.replace(old, new, 1) for line in text.splitlines(keepends=True))
                for path, text in texts.items()}
        left = "".join(f"{path}:{text.count(old)}\n" for path, text in once.items())
        steps += [Step(f"Replace {old} with {new} in both files with sed.", f"sed -i 's/{old}/{new}/' {both}",
                       error=True),
                  Step(f"Check that no {old} is left.", f"grep -c {old} {both}", left)]
        reasoning = f"Without /g sed replaced only the first {old} of each line: replace the rest too."
    steps += [Step(reasoning, solution), Step("Look at the files again.", f"cat {both}", "".join(done.values()))]
    return TerminalProblem("replace_word", f"Replace every {old} with {new} in {paths[0]} and {paths[1]}.", texts,
                           solution, " && ".join(_equals(path, text) for path, text in done.items()), tuple(steps),
                           f"Replaced every {old} with {new} in {paths[0]} and {paths[1]}.")


def distinct_words(rng: random.Random, with_error: bool) -> TerminalProblem:
    path, out = f"words_{rng.randint(10, 9999)}.txt", f"distinct_{rng.randint(10, 99)}.txt"
    vocabulary = rng.sample(WORDS, rng.randint(4, 7))
    words = vocabulary + rng.choices(vocabulary, k=rng.randint(3, 6))
    while max(map(words.count, words)) > (len(words) + 1) // 2:  # no order keeps its copies apart (it hung): redraw
        words = vocabulary + rng.choices(vocabulary, k=len(words) - len(vocabulary))
    while words == sorted(words) or any(a == b for a, b in zip(words, words[1:], strict=False)):
        rng.shuffle(words)  # unsorted, no neighbours alike: uniq alone keeps every duplicate
    text = "".join(f"{word}\n" for word in words)
    distinct = "".join(f"{word}\n" for word in sorted(set(words)))
    solution = f"sort -u {path} > {out}"
    steps = [Step("Look at the words.", f"head -n 5 {path}", _lines(text, 5))]
    reasoning = f"sort -u sorts the words and keeps each once; write that to {out}."
    if with_error:
        steps += [Step(f"uniq keeps each word once; write that to {out}.", f"uniq {path} > {out}", error=True),
                  Step(f"Check {out}.", f"cat {out}", text)]
        reasoning = "uniq only drops a word repeated on the next line: sort first, which sort -u does with it."
    steps += [Step(reasoning, solution), Step(f"Check {out}.", f"cat {out}", distinct)]
    return TerminalProblem("distinct_words", f"Write the distinct words of {path} to {out}, sorted alphabetically, "
                           "one per line.", {path: text}, solution, _equals(out, distinct), tuple(steps),
                           f"Wrote the {len(set(words))} distinct words of {path} to {out}, sorted.")


FAMILIES: dict[str, Callable[[random.Random, bool], TerminalProblem]] = {
    "count_matches": count_matches,
    "rename_extension": rename_extension,
    "csv_column": csv_column,
    "write_script": write_script,
    "replace_word": replace_word,
    "distinct_words": distinct_words,
}


@dataclass(frozen=True)
class TerminalEpisode:
    id: str
    problem: TerminalProblem
    messages: tuple[dict, ...]

    def metadata(self) -> dict:
        return {"family": self.problem.family, "files": dict(self.problem.files), "check": self.problem.check}


def _messages(problem: TerminalProblem) -> tuple[dict, ...]:
    messages = [{"role": "user", "content": f"{problem.instruction} Work in the current folder with the bash tool, "
                                            "and say when you are done."}]
    for step in (Step("See what is in the folder.", "ls", problem.listing), *problem.steps):
        result = shell_result(step.output, step.exit_code)
        messages += call_turns(step.reasoning, ToolCall("bash", {"command": step.command}), result, step.error)
    messages.append(reply_turn("The check shows it is done.", problem.summary))
    return tuple(messages)


def generate(count: int, seed: int, error_rate: float = 0.25) -> list[TerminalEpisode]:
    """`count` episodes, the families taken in turn; `error_rate` of them hold an error segment."""
    rng = random.Random(f"terminal:{seed}")
    names = sorted(FAMILIES)
    episodes = []
    for index in range(count):
        problem = FAMILIES[names[index % len(names)]](rng, rng.random() < error_rate)
        episodes.append(TerminalEpisode(f"terminal-{seed}-{index}", problem, _messages(problem)))
    return episodes
