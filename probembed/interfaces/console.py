"""The CLI's shared output: one stderr console, one way to fail, user text kept literal, and
the standard streams and output files under a script's pipes (a reader that goes, a full
disk, `-`, links, named pipes and devices).

Texts, ids, paths and error messages come from users and documents; rich would read
`[index]` or `[/]` in them as markup (dropping the text, or raising). Everything shown here
goes through `Text`, so only the styles written in this package are styles.
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import stat
import sys
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, ClassVar, TextIO, cast

import typer
from rich.console import Console, ConsoleOptions, RenderResult
from rich.markdown import Heading, Markdown, MarkdownElement
from rich.text import Text

from probembed import atomic

if TYPE_CHECKING:
    from probembed.pipeline import Pipeline

#: Messages, progress and warnings: stderr, so stdout stays clean for JSON and tables.
err = Console(stderr=True, highlight=False)


class _Out(Console):
    """Standard output for tables: a reader that stops early (`| head`) ends the command as
    every command's broken pipe does (exit 0), where rich's own handling exits 1."""

    def on_broken_pipe(self) -> None:
        raise BrokenPipeError


#: Columns of help and tables printed to a pipe or a file, where rich takes 80 and cut them
#: short (`--limit-concurren…`, an eval row `single:paraphr…`, a Δ cell over three lines):
#: every command's help fits in it whole (test_cli_scripting checks).
PIPED_WIDTH = 120


class _Heading(Heading):
    """A Markdown heading drawn as its styled text alone: rich justified it to the console's
    width, so every heading line printed to a file or a pipe ended in spaces up to
    PIPED_WIDTH (rich 13 centred it, padding both sides)."""

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        """The heading's text, unjustified: as long as it is."""
        text = self.text.copy()
        text.justify = "default"
        yield text


class Report(Markdown):
    """A command's Markdown report (eval's and tune's tables under a heading): rich's own,
    its headings unpadded (`_Heading`), its tables as wide as before."""

    elements: ClassVar[dict[str, type[MarkdownElement]]] = {
        **Markdown.elements,
        "heading_open": _Heading,
    }


def on_terminal(stream: TextIO | None) -> bool:
    """Whether a standard stream is a terminal (not None, closed, a pipe or a file)."""
    try:
        return stream is not None and stream.isatty()
    except ValueError:  # closed
        return False


def piped_width(stream: TextIO | None) -> int | None:
    """The columns to print `stream`'s help and tables in: PIPED_WIDTH where it is no
    terminal, None (rich's choice: the terminal's width, or COLUMNS) on a terminal or with
    COLUMNS set."""
    return None if on_terminal(stream) or "COLUMNS" in os.environ else PIPED_WIDTH


def out(stderr: bool = False) -> Console:
    """A console for a command's tables: on standard output (on stderr where stdout holds
    the command's JSON), PIPED_WIDTH columns wide where it is no terminal."""
    if stderr:
        return Console(stderr=True, highlight=False, width=piped_width(sys.stderr))
    return _Out(width=piped_width(sys.stdout))


class _LogStream:
    """A standard stream whose reader may go (`2>&1 | head -1`, a log collector restarted):
    once it has, what is written goes to /dev/null and the work goes on. A progress line's
    BrokenPipeError stopped an ingest half done, and the CLI took it for `| head` having
    what it wanted: exit 0. A log on a full disk is dropped alike. Standard output is one
    only while it holds reports (`stdout_is_report`): a command whose product is stdout
    ends when its reader goes, and any other failure to write it (a full disk: `>
    /dev/full`) is an error naming it."""

    def __init__(self, stream: TextIO, name: str, logs: bool) -> None:
        self.stream, self.name, self.logs = stream, name, logs

    def write(self, text: str) -> int:
        """Write `text` (into /dev/null once a log's reader has gone)."""
        with self._guarded():
            return self.stream.write(text)
        return len(text)

    def flush(self) -> None:
        """Flush (into /dev/null once a log's reader has gone)."""
        with self._guarded():
            self.stream.flush()

    @contextlib.contextmanager
    def _guarded(self) -> Iterator[None]:
        """A write's failure: a log's (its reader gone, its disk full) is swallowed; what is
        buffered for the stream goes to /dev/null, so the exit's own flush cannot fail again
        (status 120). A product's reader gone is the BrokenPipeError the CLI ends on (it
        asks `stdout_gone` first, then drops what is left); any other failure an OSError
        naming the stream."""
        try:
            yield
        except OSError as exc:
            if not self.logs and isinstance(exc, BrokenPipeError):
                raise
            _discard(self.stream)
            if not self.logs:
                raise OSError(f"cannot write to {self.name}: {exc.strerror or exc}") from exc

    def __getattr__(self, name: str) -> Any:
        """Everything else (isatty, fileno, encoding, buffer) is the stream's own."""
        return getattr(self.stream, name)


def _discard(stream: TextIO) -> None:
    """Point a standard stream's file descriptor at /dev/null: what is buffered for it, and
    whatever any library writes there later, goes nowhere instead of failing again (at exit:
    "Exception ignored", status 120)."""
    with contextlib.suppress(OSError, ValueError):  # no descriptor (a test's stream)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
        os.close(devnull)


@contextlib.contextmanager
def closable_streams(stdout_reports: bool) -> Iterator[None]:
    """Run a command with stderr a log whose reader may go, and stdout one too where it
    holds only reports (`stdout_reports`: a command that writes a collection or a file):
    the work finishes and exits by its outcome, its logs lost. A stream that is not there
    (closed when the process began: None) stays None."""
    stdout, stderr = sys.stdout, sys.stderr
    if stdout is not None:
        sys.stdout = cast("TextIO", _LogStream(stdout, "stdout", stdout_reports))
    if stderr is not None:
        sys.stderr = cast("TextIO", _LogStream(stderr, "stderr", True))
    try:
        yield
    finally:
        sys.stdout, sys.stderr = stdout, stderr


def stdout_is_report() -> None:
    """Stdout holds only reports from here on (`eval`'s table, once --json or --plots names a
    file to write): a reader of it that goes no longer ends the command before its file."""
    if isinstance(sys.stdout, _LogStream):
        sys.stdout.logs = True


def written_out() -> None:
    """Write out what is buffered for stdout while the command can still tell its errors: at
    exit, a reader gone (`--json | true`) or a full disk (`> /dev/full`) was "Exception
    ignored" and status 120. A reader gone is the BrokenPipeError the CLI ends on, any other
    failure an OSError naming stdout (`_LogStream`)."""
    if sys.stdout is not None:
        sys.stdout.flush()


def settle_stdout() -> None:
    """`written_out` as a command ends otherwise (failed, or stopped by its reader): its own
    outcome stands, and what stdout could not take goes to /dev/null."""
    try:
        written_out()
    except OSError:
        _discard(sys.stdout)


def stdout_gone() -> bool:
    """Whether stdout's reader has gone (a pipe or socket with none): a BrokenPipeError from
    anything else, a connection to a server, is a failure, not `| head` having enough."""
    try:
        descriptor = sys.stdout.fileno()
    except (OSError, ValueError, AttributeError):  # no descriptor (a test's stream)
        return False
    if not hasattr(select, "poll"):  # Windows: no way to ask; taken for stdout's, as before
        return True
    poller = select.poll()
    poller.register(descriptor, select.POLLOUT)
    return any(event & select.POLLERR for _, event in poller.poll(0))


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


def say_what_is_cut(cut: int, seen: int, pipe: Pipeline, remedy: str, sampled: bool) -> None:
    """Warn that `cut` of `seen` documents (the first `seen` of more where `sampled`) are
    longer than the pipeline's models read: only their start is embedded, so what comes later
    is not found (ingest, embed and eval alike)."""
    if cut:
        among = f"of the first {seen:,}" if sampled else f"of {seen:,}"
        note(
            "cut short:",
            "yellow",
            f"{cut:,} {among} documents are longer than {pipe.name!r} reads "
            f"({pipe.max_tokens} tokens): only their start is embedded, so what comes later "
            f"is not found; {remedy}",
        )


def named(message: str, options: Mapping[str, str]) -> str:
    """A library's message with the Python parameter names it holds read as the options the
    command's user typed (`group_by_doc` as `--group-by-doc`), each where it stands alone and
    outside the quoted values it shows (a filter on a field named `group_by_doc` keeps it)."""
    parts = _QUOTED.split(message)  # odd positions: the quoted values, kept as they are
    for name, option in options.items():
        word = re.compile(rf"(?<![\w-]){re.escape(name)}(?!\w)")
        parts[::2] = [word.sub(option, part) for part in parts[::2]]
    return "".join(parts)


def warnings_named(
    options: Mapping[str, str],
) -> contextlib.AbstractContextManager[list[warnings.WarningMessage]]:
    """Warnings given inside shown with the Python parameter names they hold read as the
    command's options (`named`), as its refusals read them: a loader's warning told a CLI
    user to set `keep_self_matches`."""
    return warnings_retold(lambda told: named(str(told), options))


@contextlib.contextmanager
def warnings_retold(
    retell: Callable[[Warning], str],
) -> Iterator[list[warnings.WarningMessage]]:
    """Warnings given inside shown once it ends as `retell` words each, in the command's
    words (`warnings_named`) or with what only the command knows (the lines of a file a
    search read); the list of them, filled as they come, is the caller's to read."""
    caught: list[warnings.WarningMessage] = []
    try:
        with warnings.catch_warnings(record=True) as caught:  # filters as they were
            yield caught
    finally:  # a refusal's warnings come before it, as they did
        for given in caught:
            text = retell(cast(Warning, given.message))
            warnings.showwarning(text, given.category, given.filename, given.lineno)


def listed(items: Sequence[str], shown: int) -> str:
    """Items comma-joined, the first `shown` named and the rest counted ('a, b and 3 more'):
    a list a line can hold, however long."""
    more = len(items) - shown
    return ", ".join(items[:shown]) + (f" and {more:,} more" if more > 0 else "")


def fail(message: str, code: int = 2) -> typer.Exit:
    """Print a one-line error to stderr and give the exit to raise."""
    note("error:", "bold red", message)
    return typer.Exit(code=code)


def ask(question: str) -> bool:
    """A yes/no question on stderr (typer's confirm wrote the prompt's last space to stdout),
    answered on a terminal: anything but y or yes is no. Where stdin is no terminal (a pipe, a
    file, cron) the answer is no at once and nothing is read: a pipe with no data held the
    command at the prompt, and one with data (a `while read` loop's) lost a line to it."""
    err.print(literal(f"{question} [y/N]: "), end="", soft_wrap=True)
    if sys.stdin is None or not sys.stdin.isatty():
        err.print("no (stdin is not a terminal: nothing was asked)")
        return False
    return sys.stdin.readline().strip().lower() in ("y", "yes")


class OutputFile:
    """A file a command writes, given as an option: standard output (`-`, or a path that is
    the command's stdout, such as /dev/stdout), a named pipe or a character device written
    as it is, or a file replaced whole once written (a link's target: `atomic.replacing`)."""

    def __init__(self, option: str, path: Path | None, direct: bool = False) -> None:
        #: The option that named it; None for stdout; whether to write the path as it is.
        self.option, self.path, self.direct = option, path, direct

    @property
    def to_stdout(self) -> bool:
        """Whether it is standard output: the command's table goes to stderr then."""
        return self.path is None

    def __str__(self) -> str:
        """How messages name it."""
        return "stdout" if self.path is None else str(self.path)

    @contextlib.contextmanager
    def open(self) -> Iterator[BinaryIO]:
        """A binary handle to write it with, flushed before the block ends, so a reader gone
        or a full disk is the block's error, not one at the process's exit."""
        if self.path is None:
            sys.stdout.flush()  # what was printed before comes first
            yield sys.stdout.buffer
            sys.stdout.buffer.flush()
        elif self.direct:
            with open(self.path, "wb") as handle:
                yield handle
        else:
            with atomic.replacing(self.path) as tmp, open(tmp, "wb") as handle:
                yield handle


def output_file(option: str, path: Path, binary: bool = False, suffix: str = "") -> OutputFile:
    """The file `option` names to write, refused before any work where it cannot be written:
    `-` (or the very file stdout is) is stdout; a named pipe or a character device is written
    as it is (no temporary file renamed over it); a file or a link to one is replaced whole;
    a directory, a socket, a block device, or a missing directory refused naming it. A
    `binary` format is refused where it would reach a terminal. A new file's name lacking
    `suffix` gets it (numpy's rule for .npz), a named pipe's or a device's does not."""
    if str(path) == "-" or _is_stdout(path):
        if sys.stdout is None:  # closed when the process began (`>&-`)
            raise fail(f"{option} {path}: stdout is closed; name a file")
        if binary and sys.stdout.isatty():
            raise fail(
                f"{option} {path}: stdout is a terminal, and binary data is not written to one; "
                "redirect stdout to a file or a pipe, or name a file"
            )
        return OutputFile(option, None)
    try:
        mode = path.stat().st_mode  # through links
    except (FileNotFoundError, NotADirectoryError):  # not there: its folder is checked below
        mode = None
    except OSError as exc:
        raise fail(f"{option} {path}: {exc.strerror}") from exc
    if mode is not None and (stat.S_ISFIFO(mode) or stat.S_ISCHR(mode)):
        if stat.S_ISCHR(mode) and _is_terminal(option, path) and binary:
            raise fail(f"{option} {path}: is a terminal, and binary data is not written to one")
        return OutputFile(option, path, direct=True)
    if mode is not None and not stat.S_ISREG(mode):
        what = "a directory; name the file to write in it" if stat.S_ISDIR(mode) else None
        raise fail(f"{option} {path}: is {what or atomic.file_kind(mode)}, not a file to write")
    named = path
    if suffix and path.suffix != suffix and not path.is_symlink():
        named = path.with_name(path.name + suffix)
    folder = atomic.replaced_path(named).parent
    if not folder.is_dir():
        raise fail(f"{option} {path}: no directory {folder}")
    return OutputFile(option, named)


def _is_stdout(path: Path) -> bool:
    """Whether a path is the file the command's standard output is (/dev/stdout, /dev/fd/1,
    or the file stdout was redirected to)."""
    try:
        there, fd = os.stat(path), os.fstat(sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # not there; stdout closed or replaced
        return False
    return (there.st_dev, there.st_ino) == (fd.st_dev, fd.st_ino)


def _is_terminal(option: str, path: Path) -> bool:
    """Whether a character device is a terminal, opened without waiting or becoming the
    process's controlling terminal; one that cannot be opened (/dev/tty without a terminal)
    refused now, not after the work."""
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError as exc:
        raise fail(f"{option} {path}: cannot write to it: {exc.strerror}") from exc
    try:
        return os.isatty(descriptor)
    finally:
        os.close(descriptor)


def check_output_folder(option: str, path: Path) -> None:
    """Refuse, before any work, a folder to write that is `-` (standard output takes no
    folder) or is, or lies in, something that is no folder (a file, a named pipe)."""
    if str(path) == "-":
        raise fail(f"{option} -: it names a folder to write files in; stdout cannot be one")
    if path.is_symlink() and not path.exists():
        raise fail(f"{option} {path}: a link to {os.readlink(path)}, which is not there")
    existing = next(p for p in (path, *path.absolute().parents) if p.exists())
    mode = existing.stat().st_mode
    if not stat.S_ISDIR(mode):
        kind = "a file" if stat.S_ISREG(mode) else atomic.file_kind(mode)
        where = "" if existing == path else f" {existing}"
        raise fail(f"{option} {path}:{where} is {kind}, not a folder")


def save_pipeline(pipeline: Pipeline, out: Path) -> None:
    """Save a command's pipeline and say where, naming a pipeline it replaced there: `fit` and
    `tune` write over one (the starting pipeline too) without asking."""
    from probembed.pipeline_directory import CONFIG_FILE

    replaced = (out / CONFIG_FILE).is_file()
    pipeline.save(out)
    said = " (it replaced the pipeline there)" if replaced else ""
    say(f"saved pipeline {pipeline.name!r} ({', '.join(pipeline.models)}) to {out}{said}")


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
