"""The CLI's shared output: one stderr console, one way to fail, and user text kept literal.

Texts, ids, paths and error messages come from users and documents; rich would read
`[index]` or `[/]` in them as markup (dropping the text, or raising). Everything shown here
goes through `Text`, so only the styles written in this package are styles.
"""

from __future__ import annotations

import contextlib
import re
import sys
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path

import typer
from rich.console import Console
from rich.text import Text

#: Messages, progress and warnings: stderr, so stdout stays clean for JSON and tables.
err = Console(stderr=True, highlight=False)


class _Out(Console):
    """Standard output for tables: a reader that stops early (`| head`) ends the command as
    every command's broken pipe does (exit 0), where rich's own handling exits 1."""

    def on_broken_pipe(self) -> None:
        raise BrokenPipeError


def out() -> Console:
    """A console on standard output."""
    return _Out()


#: Control characters but tab and newline: a stored text's escape sequences reached the
#: terminal, which acted on them (colours, the window's title).
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
#: A value quoted as Python's repr quotes it (an apostrophe inside a word opens nothing).
_QUOTED = re.compile(r"""((?<!\w)'(?:[^'\\]|\\.)*'|(?<!\w)"(?:[^"\\]|\\.)*")""")


def literal(text: object) -> Text:
    """User or document text as rich shows it: never parsed as markup, and its control
    characters shown as escapes (\\x1b), never sent to the terminal."""
    return Text(_CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", str(text)))


def one_line(text: str) -> str:
    """An id on one line: its line breaks and tabs shown as \\n and \\t (an id holding a
    newline read as two ids in the results)."""
    return text.replace("\n", "\\n").replace("\t", "\\t")


def note(label: str, style: str, message: str) -> None:
    """A one-line `label: message` on stderr, with only the label styled."""
    err.print(Text.assemble((f"{label} ", style), literal(message)), soft_wrap=True)


def say(message: str) -> None:
    """A plain line on stderr."""
    err.print(literal(message), soft_wrap=True)


def named(message: str, options: Mapping[str, str]) -> str:
    """A library's message with the Python parameter names it holds read as the options the
    command's user typed (`group_by_doc` as `--group-by-doc`), each where it stands alone and
    outside the quoted values it shows (a filter on a field named `group_by_doc` keeps it)."""
    parts = _QUOTED.split(message)  # odd positions: the quoted values, kept as they are
    for name, option in options.items():
        word = re.compile(rf"(?<![\w-]){re.escape(name)}(?!\w)")
        parts[::2] = [word.sub(option, part) for part in parts[::2]]
    return "".join(parts)


def fail(message: str, code: int = 2) -> typer.Exit:
    """Print a one-line error to stderr and give the exit to raise."""
    note("error:", "bold red", message)
    return typer.Exit(code=code)


def ask(question: str) -> bool:
    """A yes/no question on stderr, answered on stdin (anything but y or yes, and no answer,
    is no): typer's confirm wrote the prompt's last space to stdout."""
    err.print(literal(f"{question} [y/N]: "), end="", soft_wrap=True)
    answer = sys.stdin.readline() if sys.stdin is not None else ""
    if not sys.stdin or not sys.stdin.isatty():  # a terminal echoes the answer's newline
        err.print()
    return answer.strip().lower() in ("y", "yes")


def check_output_file(option: str, path: Path) -> None:
    """Refuse, before any work, a file to write that is a directory or has no directory to go
    in: found only after encoding or evaluating everything, it failed naming a temporary file."""
    if path.is_dir():
        raise fail(f"{option} {path}: is a directory; name the file to write in it")
    if not path.absolute().parent.is_dir():
        raise fail(f"{option} {path}: no directory {path.absolute().parent}")


#: A terminal colour or style code (SGR), which some libraries put in their warnings.
_ANSI_STYLE = re.compile(r"\x1b\[[0-9;]*m")


@contextlib.contextmanager
def warnings_as_lines() -> Iterator[None]:
    """Show each distinct warning once as a `warning:` line on stderr, not as Python's
    `file:line: Category:` with a source excerpt; probembed's own ones every time they differ."""
    shown: set[str] = set()

    def show(message: Warning | str, *_: object) -> None:
        text = _ANSI_STYLE.sub("", str(message))  # numba colours its own: shown as \x1b[1m
        if text not in shown:
            shown.add(text)
            note("warning:", "yellow", text)

    with warnings.catch_warnings():
        warnings.filterwarnings("always", module=r"probembed(\.|$)")
        # numba's note on compiling ranx's metrics (first run only): nothing a user can do
        warnings.filterwarnings("ignore", r".*unsafe cast from \w+ to \w+\. Precision may be lost")
        warnings.showwarning = show  # type: ignore[assignment]  # called positionally
        yield
