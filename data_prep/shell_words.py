"""The commands a bash script starts, read without running it: each simple command's words, with its line.

The Harbor import (data_prep/harbor_needs.py) reads a task's scripts for the programs they start, so that a
task needing what the sandbox lacks (an installer, the network, a tool not on its PATH) is refused naming the
program and the line. This is a reading of common bash, not all of it: heredoc bodies, `case` blocks and
arithmetic are passed over, and a program started indirectly (through `xargs`, `env`, a variable, a quoted
`$(...)`) is not seen. What it misses, the import's run of the task in the sandbox still catches (the reference
solution must pass); what it reads lets a refusal say why.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator

# Words after which the next word is a command again.
PREFIX_WORDS = {"if", "then", "else", "elif", "do", "while", "until", "!", "{", "time", "exec"}
# Words that close a compound command: nothing to run.
CLOSING_WORDS = {"fi", "done", "}", "]]"}
BUILTINS = {
    ".", ":", "[", "[[", "alias", "bg", "bind", "break", "builtin", "cd", "command", "compgen", "complete",
    "continue", "declare", "dirs", "disown", "echo", "enable", "eval", "exit", "export", "false", "fc", "fg",
    "getopts", "hash", "help", "history", "jobs", "kill", "let", "local", "logout", "mapfile", "popd", "printf",
    "pushd", "pwd", "read", "readarray", "readonly", "return", "set", "shift", "shopt", "source", "suspend", "test",
    "times", "trap", "true", "type", "typeset", "ulimit", "umask", "unalias", "unset", "wait",
}
ASSIGNMENT = re.compile(r"[A-Za-z_]\w*(\[[^]]*\])?\+?=")
SEPARATOR_CHARS = set(";&|(\n")
PUNCTUATION = "();<>|&\n"


def simple_commands(text: str, builtins: bool = False) -> Iterator[tuple[int, list[str]]]:
    """(line, words) of each simple command the script starts, its command word first; the script's own functions
    left out, and bash's builtins unless `builtins`. ValueError when the text is not bash this can read (an
    unclosed quote)."""
    commands, functions = _commands(_tokens(_code_lines(text)))
    for line, words in commands:
        if (builtins or words[0] not in BUILTINS) and words[0] not in functions:
            yield line, words


def _tokens(text: str) -> list[tuple[str, int, bool]]:
    """(token, line, is punctuation) in order: shlex splits words as bash quotes them, and runs of `();<>|&` and
    newlines as punctuation (a newline ends a command as `;` does)."""
    lexer = shlex.shlex(text, posix=True, punctuation_chars=PUNCTUATION)
    lexer.whitespace = " \t\r"  # newlines are punctuation here: they separate commands
    lexer.commenters = ""  # comments are gone already (_code_lines): shlex would swallow the newline after one
    lexer.wordchars += "$@%+:,^{}[]!#"  # `${f%.txt}` and `[[` are words, as bash reads them
    tokens = []
    line = 1  # counted here: shlex's own count goes wrong when it reads a character twice (punctuation)
    while True:
        token = lexer.get_token()
        if token is None or token == lexer.eof:
            return tokens
        tokens.append((token, line, bool(token) and all(char in PUNCTUATION for char in token)))
        line += token.count("\n")


def _commands(tokens: list[tuple[str, int, bool]]) -> tuple[list[tuple[int, list[str]]], set[str]]:
    commands: list[tuple[int, list[str]]] = []
    functions: set[str] = set()
    words: list[str] = []
    line, skip_until, index = 0, None, 0

    def flush() -> None:
        if words:
            commands.append((line, list(words)))
            words.clear()

    while index < len(tokens):
        token, at, punctuation = tokens[index]
        index += 1
        if skip_until == "esac":
            skip_until = None if token == "esac" else skip_until
            continue
        if skip_until == "))":
            skip_until = None if punctuation and "))" in token else skip_until
            continue
        if skip_until == "header":  # a `for`/`select` header runs nothing until its `;` or newline
            skip_until = None if punctuation and (";" in token or "\n" in token) else skip_until
            continue
        if punctuation:
            if "<" in token or ">" in token:  # a redirection: the word after it is a file, not an argument
                index += index < len(tokens) and not tokens[index][2]
            elif SEPARATOR_CHARS & set(token.split("((")[0]):
                flush()
            if "((" in token:  # arithmetic: no command in it
                skip_until = "))"
            continue
        if words:
            words.append(token)
            continue
        following = tokens[index][0] if index < len(tokens) else ""
        if token == "case":
            skip_until = "esac"
        elif token in ("for", "select"):
            skip_until = "header"
        elif token == "function" and index < len(tokens):  # a function's definition: its name is no program
            functions.add(tokens[index][0])
            index += 1
        elif following.startswith("()"):
            functions.add(token)
        elif token in PREFIX_WORDS or token in CLOSING_WORDS or ASSIGNMENT.match(token):
            pass  # the command, if any, comes next
        else:
            words.append(token)
            line = at
    flush()
    return commands, functions


def _code_lines(text: str) -> str:
    """`text` with comments and heredoc bodies blanked and continued lines joined (each followed by as many empty
    lines as it took in, so that line numbers stay the script's)."""
    lines = text.split("\n")
    out: list[str] = []
    quote = None  # the quote open at the end of the last line: a string may span lines
    index = 0
    while index < len(lines):
        code, quote, delimiters = _strip_comment(lines[index], quote)
        index += 1
        joined = 0
        while quote != "'" and _continues(code) and index < len(lines):  # `\` at the end: one command goes on
            more_code, quote, more = _strip_comment(lines[index], quote)
            code, delimiters = f"{code[:-1]} {more_code}", delimiters + more
            index += 1
            joined += 1
        out += [code, *[""] * joined]
        for delimiter in delimiters:  # each heredoc's body follows its line, in order
            while index < len(lines) and lines[index].strip() != delimiter:
                out.append("")
                index += 1
            if index < len(lines):
                out.append("")
                index += 1
    return "\n".join(out)


def _continues(code: str) -> bool:
    """Whether the line ends in an unescaped backslash (an odd run of them)."""
    return (len(code) - len(code.rstrip("\\"))) % 2 == 1


HEREDOC = re.compile(r"<<-?\s*(['\"]?)([A-Za-z_][\w.-]*)\1")


def _strip_comment(line: str, quote: str | None) -> tuple[str, str | None, list[str]]:
    """The line up to an unquoted `#` that starts a word, the quote still open at its end, and the delimiters of
    the heredocs it opens."""
    delimiters = []
    index = 0
    while index < len(line):
        char = line[index]
        if quote == "'":
            quote = None if char == "'" else quote
        elif char == "\\":
            index += 1  # the escaped character is literal
        elif quote == '"':
            quote = None if char == '"' else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (index == 0 or line[index - 1] in " \t;&|("):
            return line[:index], quote, delimiters
        elif line.startswith("<<", index) and not line.startswith("<<<", index):
            if match := HEREDOC.match(line, index):
                delimiters.append(match.group(2))
        index += 1
    return line, quote, delimiters
