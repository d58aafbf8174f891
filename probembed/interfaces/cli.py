"""The `probembed` command line: typer for parsing, rich for tables and progress."""

from __future__ import annotations

import contextlib
import json
import math
import os
import shlex
import signal
import sys
import threading
from collections.abc import Iterator
from inspect import cleandoc
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer
from rich.table import Table
from rich.text import Text
from typer import rich_utils
from typer.core import TyperGroup

from probembed.documents import with_notes
from probembed.interfaces import eval_commands, store_commands, tune_command
from probembed.interfaces.console import (
    check_output_folder,
    closable_streams,
    fail,
    literal,
    named,
    note,
    out,
    output_file,
    piped_width,
    save_pipeline,
    say,
    settle_stdout,
    stdout_gone,
    warnings_as_lines,
    written_out,
)
from probembed.interfaces.inputs import read_lines, read_texts
from probembed.interfaces.store_options import exit_code, storage_told
from probembed.signals import Terminated, end_by_sigterm, kept_note, raise_terminated

#: Fusion settings `fit` takes, as the library's messages name them -> the options.
FUSION_OPTIONS = {
    "temperature": "--temperature",
    "weights": "--weights",
    "fusion method": "--fusion",
}
#: Failures probembed raises on purpose, with a message that says what to fix.
KNOWN_FAILURES = (ValueError, OSError, ImportError)
#: The CLI's own ways to stop (usage errors, --help, typer.Exit, Ctrl-C): click reports them.
_CLICK_EXITS = (typer.Exit, typer.Abort, typer.TyperException, EOFError)
_SHOWN_INPUT = 120
_COMMAND_LINE = "probembed.command_line"
#: Commands that write (a collection, a pipeline, files): what they print is a report, and a
#: reader of it that goes must not stop the write half done (`console.closable_streams`).
_WRITERS = frozenset(
    (
        "ingest",
        "embed",
        "fit",
        "tune",
        "delete",
        "drop",
        "undo",
        "compact",
        "pins",
        "demo",
        "cache clear",
    )
)
#: What a command stopped by Ctrl-C or SIGTERM has kept, said after how it stopped.
_INTERRUPTED_KEEPS = {
    "ingest": ": committed batches are kept; the same command resumes",
    "embed": ": the Parquet files written so far stay in --out; the same command resumes",
    "erase": ": each item is there once, the erased ones there or gone, and older versions "
    "may hold them still; the same command completes the erasure",
}


class ProbembedGroup(TyperGroup):
    """The root command: any exception a command lets out becomes one line on stderr.

    A known failure prints its message (exit 2); anything else prints the command, its input
    and the exception (exit 1). `--debug` lets the traceback through instead.
    """

    def __init__(self, **attrs: Any) -> None:
        """The commands' list shows each one's first paragraph as one text: typer kept its
        docstring's line breaks, which cut each summary mid-sentence."""
        super().__init__(**attrs)
        for command in self.commands.values():
            command.short_help = command.short_help or _summary(command.help)

    # click hands these typer's own Context, the subclass they are annotated with
    def parse_args(self, ctx: typer.Context, args: list[str]) -> list[str]:  # type: ignore[override]
        """Keep the command line after the root's own flags (--debug), to name it on failure;
        the root's help (`--help`, no command) is printed here."""
        first = next((i for i, word in enumerate(args) if not word.startswith("-")), len(args))
        ctx.meta[_COMMAND_LINE] = list(args[first:])
        with _piped_help_width():
            return super().parse_args(ctx, args)

    def invoke(self, ctx: typer.Context) -> object:  # type: ignore[override]
        """Run the command, reporting an escaped exception once, here, for every command (a
        command's help is printed in here too, as its arguments are parsed).

        Its logs (stderr, and stdout where a command writes a collection or a file) may lose
        their reader: the work goes on and exits by its outcome (`closable_streams`). A
        reader of a product on stdout that goes ends the command, exit 0."""
        words = ctx.meta.get(_COMMAND_LINE, [])
        command, _ = self._split(words)
        with closable_streams(stdout_reports=command in _WRITERS):
            try:
                with warnings_as_lines(), _unwound_on_sigterm(command), _piped_help_width():
                    result = super().invoke(ctx)
                written_out()  # a reader gone or a full disk, told here, not at exit
                return result
            except _CLICK_EXITS:
                raise
            except Terminated as stop:
                note("error:", "bold red", _stopped(command, "terminated (SIGTERM)", stop))
                end_by_sigterm()
            except BrokenPipeError as exc:
                if not stdout_gone():  # a connection's, not a reader of stdout that stopped
                    raise self._failed(ctx, words, exc) from None
                raise typer.Exit(0) from None  # `encode | head`: the reader has what it wanted
            except KeyboardInterrupt as stop:
                if ctx.params.get("debug"):
                    raise
                raise fail(_stopped(command, "interrupted", stop), code=130) from None
            except Exception as exc:
                raise self._failed(ctx, words, exc) from None
            finally:
                settle_stdout()

    def _failed(self, ctx: typer.Context, words: list[str], exc: Exception) -> typer.Exit:
        """Say what failed, on what input (exit 2 for a known failure, else 1), or let the
        traceback through with --debug."""
        if ctx.params.get("debug"):
            raise exc
        command, given = self._split(words)
        where = f"probembed {command}" + (f" failed on {given}" if given else " failed")
        said = storage_told(exc)
        if said is not None:  # the storage's, not a bug: the same command later may get through
            return fail(with_notes(f"{where}: {said}", exc), exit_code(exc))
        if isinstance(exc, KNOWN_FAILURES):
            return fail(with_notes(f"{where}: {exc}", exc), exit_code(exc))
        message = f"{where}: {type(exc).__name__}: {exc} (rerun with --debug for the traceback)"
        return fail(with_notes(message, exc), code=1)

    def _split(self, words: list[str]) -> tuple[str, str]:
        """The command path (`cache info`) and the rest of the command line, shortened."""
        command = words[:1]
        sub = self.commands.get(words[0]) if words else None
        if words[1:] and words[1] in getattr(sub, "commands", {}):
            command = words[:2]
        given = shlex.join(_redacted(words[len(command) :]))
        if len(given) > _SHOWN_INPUT:
            given = given[: _SHOWN_INPUT - 3] + "..."
        return " ".join(command), given


def _summary(text: str | None) -> str | None:
    """A command's help up to its first blank line, as one line of text."""
    return None if text is None else " ".join(cleandoc(text).split("\n\n")[0].split())


@contextlib.contextmanager
def _piped_help_width() -> Iterator[None]:
    """Help printed where stdout is no terminal at PIPED_WIDTH columns (`serve --help |
    less`: rich's 80 cut option names and values short, `--limit-concurren…`), set as typer's
    own TERMINAL_WIDTH sets it; on a terminal, or with TERMINAL_WIDTH or COLUMNS set, as it
    was. Only while arguments are parsed and help printed: an error's panel on stderr,
    printed after, keeps the terminal's width."""
    width = piped_width(sys.stdout)
    if width is None or rich_utils.MAX_WIDTH is not None:
        yield
        return
    rich_utils.MAX_WIDTH = width
    try:
        yield
    finally:
        rich_utils.MAX_WIDTH = None


def _stopped(command: str, how: str, stop: BaseException) -> str:
    """The line a command stopped from outside ends with: how, and what it has kept: the
    stop's own word where it has one (`signals.kept_note`: nothing, as it waited for another
    write or had not written yet, or how many batches), else the command's general one."""
    kept = kept_note(stop)
    if kept is not None:
        return f"probembed {command} {how}: {kept}"
    return f"probembed {command} {how}{_INTERRUPTED_KEEPS.get(command.split(' ')[0], '')}"


@contextlib.contextmanager
def _unwound_on_sigterm(command: str) -> Iterator[None]:
    """SIGTERM stops a command as Ctrl-C does: the work unwinds (`signals.Terminated`), so
    what its `finally` blocks keep (a write's undo pin removed, a stopped streamed file put
    back) holds, and `invoke` says what stays before the process ends by the signal (status
    143). Ended by the default action at once, a chunked ingest left its pin behind. A Ray
    session makes this handler its own for its duration (`ray_ingest.ray_session`). Not for
    `serve`, whose server handles SIGTERM itself, nor where someone else set a handler, or
    SIGTERM is ignored."""
    if (
        command.split(" ")[0] == "serve"
        or threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGTERM) != signal.SIG_DFL
    ):
        yield
        return
    signal.signal(signal.SIGTERM, raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _redacted(words: list[str]) -> list[str]:
    """The command line with every secret --storage-option value hidden (`_secret`): a
    failure message must not print a secret key, but an endpoint or a region is no secret,
    and a line that hid them (`aws_endpoint=***`) hid the mistake it reported."""
    prefix = _SECRET_OPTION + "="
    out = []
    for i, word in enumerate(words):
        if i and words[i - 1] == _SECRET_OPTION:
            word = _hidden_value(word)
        elif word.startswith(prefix):
            word = prefix + _hidden_value(word[len(prefix) :])
        out.append(word)
    return out


def _hidden_value(pair: str) -> str:
    """A KEY=VALUE storage option with its value hidden where the key may hold a secret."""
    from probembed.store.errors import without_userinfo

    key, sep, value = pair.partition("=")
    return f"{key}=***" if _secret(key) else f"{key}{sep}{without_userinfo(value)}"


def _secret(key: str) -> bool:
    """Whether a storage option's key may hold a credential: any but the known plain
    settings (endpoint, region, bucket, timeouts, flags), an unknown key hidden too."""
    return key.strip().lower() not in _PLAIN_OPTIONS


#: Storage option keys whose values are no secret, shown in a failure's command line.
_PLAIN_OPTIONS = frozenset(
    """
    aws_endpoint endpoint aws_endpoint_url endpoint_url aws_region region aws_default_region
    default_region aws_bucket aws_bucket_name bucket bucket_name allow_http
    allow_invalid_certificates timeout connect_timeout client_retry_timeout
    client_max_retries aws_virtual_hosted_style_request virtual_hosted_style_request
    azure_storage_endpoint azure_endpoint azure_storage_account_name account_name
    google_bucket google_bucket_name
    """.split()  # noqa: SIM905 (a list literal would be one line per key)
)

_SECRET_OPTION = "--storage-option"

app = typer.Typer(
    cls=ProbembedGroup,
    help="Probabilistic text embeddings: every vector and every hit says how sure it is.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


def _offline() -> None:
    """The models ship in their packages: never let a library reach for the hub."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def _quiet() -> None:
    """Only probembed's own progress shows: model loaders' bars ("Loading weights") are noise."""
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # read by transformers too


@app.callback()
def main(
    debug: Annotated[
        bool, typer.Option("--debug", help="Show the full traceback when a command fails.")
    ] = False,
) -> None:
    """Configure the process once, in the entry point rather than the library.

    `--debug` is read where failures are reported, in `ProbembedGroup.invoke`.
    """
    _offline()
    _quiet()


@app.command()
def models() -> None:
    """List the encoders probembed can address by name: built-in, then installed packages'
    (the probembed.encoders entry points), each custom one with its error if it does not load."""
    from probembed.encoders import available_encoders

    table = Table(title="encoders")
    for column in ("name", "dim", "package", "installed", "what", "source"):
        table.add_column(column, overflow="fold")  # a package name cut short installs nothing
    for info in available_encoders():
        mark = Text("yes", "green") if info.installed else Text.assemble(("no", "red"), ": ")
        mark.append(info.error or info.install)  # as is: rich read 'probembed[mpnet]' as markup
        dim = "?" if info.dim is None else str(info.dim)
        what = Text(info.description)  # a user's docstring may hold [brackets]
        table.add_row(info.name, dim, info.package, mark, what, info.source)
    out().print(table)


cache_app = typer.Typer(help="The embedding cache: what it holds, and emptying it.")
app.add_typer(cache_app, name="cache", no_args_is_help=True)


@cache_app.command("info")
def cache_info() -> None:
    """Where the cache is ($PROBEMBED_CACHE_DIR), its size against the cap, entries per model."""
    from probembed.cache import MAX_BYTES_ENV, EmbeddingCache

    info = EmbeddingCache().info()
    console = out()
    console.print(literal(f"path: {info.path}"), soft_wrap=True)
    console.print(
        f"{info.entries} entries, {info.bytes:,} of {info.max_bytes:,} bytes"
        f" (cap: ${MAX_BYTES_ENV})",
        highlight=False,
    )
    if info.models:
        table = Table()
        for column in ("model", "fingerprint", "entries", "vector bytes"):
            table.add_column(column, justify="left" if column == "model" else "right")
        for m in info.models:
            table.add_row(literal(m.label or "?"), m.model, str(m.entries), str(m.vector_bytes))
        console.print(table)


@cache_app.command("clear")
def cache_clear() -> None:
    """Remove every cached embedding (they are re-encoded when next needed)."""
    from probembed.cache import EmbeddingCache

    cache = EmbeddingCache()
    removed = cache.clear()
    if removed is None:
        say(f"removed {cache.path}: it was damaged (its entries are re-encoded when needed)")
    else:
        say(f"removed {removed} entries from {cache.path}")


@app.command()
def encode(
    texts: Annotated[
        list[str] | None,
        typer.Argument(help="Texts to embed; none (or -): one per line of stdin."),
    ] = None,
    pipeline: Annotated[str, typer.Option(help="Built-in name or pipeline directory.")] = "default",
    file: Annotated[
        Path | None,
        typer.Option(help="Read texts from this file, one per line (-: stdin)."),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            help="Write mean, var, weights to this .npz (a new name gets .npz). `-`: to stdout, "
            "as a named pipe or a device is written to as it is, never to a terminal; a file "
            "is replaced once written whole, a link's target for a link."
        ),
    ] = None,
) -> None:
    """Embed texts as Gaussians: one JSON line per text, or an .npz with --out.

    Read from a file or stdin, each line is a text, and a blank line none: it is skipped,
    so the output has a row per non-blank line (the count --out prints says how many were
    skipped)."""
    from probembed.gaussian import decimals
    from probembed.pipeline import Pipeline

    lines = read_lines(texts, file)
    items, blank = lines.texts, lines.blank
    target = None if out is None else output_file("--out", out, binary=True, suffix=".npz")
    try:
        pipe = Pipeline.load(pipeline)
    except ValueError as exc:
        raise fail(str(exc)) from exc
    fused = pipe.encode(items, progress=True)
    if target is not None:
        with target.open() as handle:
            np.savez(
                handle,
                mean=fused.gaussian.mean,
                var=fused.gaussian.var,
                weights=fused.weights,
                models=np.array(fused.models),
                texts=np.array(items),
            )
        skipped = f" ({blank} blank line(s) skipped)" if blank else ""
        say(f"wrote {len(items)} Gaussians of dimension {fused.gaussian.dim} to {target}{skipped}")
        return
    for i, text in enumerate(items):
        row = {
            "text": text,
            "mean": fused.gaussian.mean[i].astype(np.float64).round(6).tolist(),
            "var": decimals(fused.gaussian.var[i]),
            "weights": fused.explain(i),
        }
        sys.stdout.write(json.dumps(row) + "\n")


@app.command()
def similarity(
    text_a: Annotated[str, typer.Argument(metavar="TEXT_A", help="The text to compare with.")],
    text_b: Annotated[
        list[str], typer.Argument(metavar="TEXT_B", help="Texts to compare with TEXT_A.")
    ],
    pipeline: Annotated[str, typer.Option(help="Built-in name or pipeline directory.")] = "default",
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help='Print JSON: {"pipeline", "score_name", "beta", "text", "results": [{"text", '
            '"score", "std"}]}, one result per TEXT_B in order.',
        ),
    ] = False,
) -> None:
    """How similar TEXT_A is to each TEXT_B: the pipeline's own score (as its searches score),
    each ± the std a search hit reports for the same pair (on the pipeline's own weights, not a
    collection's tilt of them)."""
    from probembed.pipeline import Pipeline

    given = read_lines([text_a, *text_b], None)  # refuses a blank argument, naming it
    items = given.texts
    try:
        pipe = Pipeline.load(pipeline)
    except ValueError as exc:
        raise fail(str(exc)) from exc
    cut = np.flatnonzero(pipe.cut(items)).tolist()
    if cut:  # as ingest says it: what comes past the limit is not compared
        note(
            "cut short:",
            "yellow",
            f"{given.places(cut)} {'is' if len(cut) == 1 else 'are'} longer than "
            f"{pipe.name!r} reads ({pipe.max_tokens} tokens): only their start is compared",
        )
    found = pipe.similarity(items[0], items[1:])
    scores, stds = found.score[0].tolist(), found.std[0].tolist()
    if as_json:
        results = [
            {"text": t, "score": v, "std": e}
            for t, v, e in zip(items[1:], scores, stds, strict=True)
        ]
        answer = {"pipeline": pipe.name, "score_name": pipe.score.name, "beta": pipe.score.beta}
        answer |= {"text": items[0], "results": results}
        sys.stdout.write(json.dumps(answer, ensure_ascii=False) + "\n")
        return
    table = Table(
        title=Text.assemble("similarity to ", literal(items[0])),
        title_justify="left",
        caption=f"pipeline {pipe.name}: {pipe.score.name}, beta {pipe.score.beta:g}",
        caption_justify="left",
    )
    table.add_column("#", justify="right", no_wrap=True)
    table.add_column("score ± std", justify="right", no_wrap=True)
    table.add_column("text", overflow="fold")
    for i, (text, value, std) in enumerate(zip(items[1:], scores, stds, strict=True), start=1):
        table.add_row(str(i), f"{value:.4f} ± {std:.4f}", literal(text))
    out().print(table)


def parse_numbers(text: str | None, option: str) -> tuple[float, ...] | None:
    """Comma-separated numbers of an option, or an error that names the option."""
    if text is None:
        return None
    try:
        return tuple(float(part) for part in text.split(","))
    except ValueError:
        raise fail(f"{option} takes comma-separated numbers, e.g. 1,3; got {text!r}") from None


@app.command()
def fit(
    pairs: Annotated[
        list[Path],
        typer.Option(
            "--pairs",
            help="TSV of positive pairs under the header text_a<TAB>text_b (docs/cli.md, Data "
            "formats); repeatable.",
        ),
    ],
    out: Annotated[Path, typer.Option(help="Pipeline directory to write.")],
    model: Annotated[
        list[str], typer.Option("--model", help="Encoder short name or path; repeatable.")
    ] = ["minilm"],  # noqa: B006
    estimator: Annotated[str, typer.Option(help="laplace, head or perturb.")] = "laplace",
    fusion: Annotated[
        str, typer.Option(help="uec, mean, weighted, concat or single:<model>.")
    ] = "uec",
    temperature: Annotated[
        float | None, typer.Option(help="Fusion temperature T of uec \\[default: 1].")
    ] = None,
    weights: Annotated[
        str | None,
        typer.Option(help="Static weights of --fusion weighted, one per --model: e.g. 1,3."),
    ] = None,
    prior_precision: Annotated[float, typer.Option(help="Laplace prior precision lambda.")] = 1.0,
    max_pairs: Annotated[
        int, typer.Option(help="Use at most this many pairs (seeded sample).", min=1)
    ] = 8000,
    seed: Annotated[
        int, typer.Option(help="Seed for sampling and the calibration split.", min=0)
    ] = 0,
) -> None:
    """Fit each member's variance on positive pairs and save the pipeline as a directory.

    Its fusion is the one given, not tuned, and it has no relevance calibrator: `probembed
    tune` tunes both on a labelled split.
    """
    from probembed.encoders import resolve
    from probembed.evaluation.recipes import sample_pairs
    from probembed.pipeline import FusionConfig, ModelSpec, Pipeline, check_save_target
    from probembed.uncertainty import estimator_class

    options: dict[str, Any] = {
        "temperature": temperature,
        "weights": parse_numbers(weights, "--weights"),
    }
    try:
        fusion_config = FusionConfig(fusion, **{k: v for k, v in options.items() if v is not None})
        fusion_config.check(model)
    except ValueError as exc:
        raise fail(f"bad fusion settings: {named(str(exc), FUSION_OPTIONS)}") from exc
    if estimator == "laplace" and not (math.isfinite(prior_precision) and prior_precision > 0):
        raise fail(f"--prior-precision must be a finite number > 0, got {prior_precision}")
    check_output_folder("--out", out)
    out = out.absolute()  # `--out .` names the pipeline after the current directory
    try:
        check_save_target(out)
    except ValueError as exc:
        raise fail(str(exc)) from exc
    try:
        for name in model:  # before any work is announced
            resolve(name)
        estimator_class(estimator)
        collected = sample_pairs(pairs, max_pairs, seed)
    except (OSError, ValueError) as exc:
        raise fail(str(exc)) from exc
    params: dict[str, Any] = {"seed": seed}
    if estimator == "laplace":
        params["prior_precision"] = prior_precision
    specs = [ModelSpec(m, estimator, params) for m in model]
    say(f"fitting {estimator} on {len(collected)} pairs for {', '.join(model)}")
    try:
        pipe = Pipeline.fit(specs, collected, fusion_config, name=out.name, progress=True)
    except (ValueError, TypeError, ImportError) as exc:
        raise fail(str(exc)) from exc
    save_pipeline(pipe, out)


INSPECTED = ("default", "default-head", "default-perturb")
EXAMPLES = [
    "jaguar",
    "bank",
    "A man plays a guitar.",
    "Mutations in the BRCA1 gene raise the lifetime risk of breast and ovarian cancer.",
    "The jaguar is the largest cat species native to the Americas, hunting caimans in wetlands.",
]


@app.command()
def inspect(
    pipeline: Annotated[
        list[str] | None, typer.Option(help="Pipelines to compare; repeatable.")
    ] = None,
    text: Annotated[list[str] | None, typer.Option(help="Texts to inspect; repeatable.")] = None,
) -> None:
    """Each model's uncertainty per text under each estimator, and short-vs-long ratios."""
    from probembed.pipeline import Pipeline

    texts = read_texts(text, None, given="--text") if text else EXAMPLES
    names = list(dict.fromkeys(pipeline or INSPECTED))  # one given twice: its rows once
    found: list[tuple[str, str, str, np.ndarray]] = []
    for name in names:
        try:
            pipe = Pipeline.load(name)
        except ValueError as exc:
            raise fail(str(exc)) from exc
        for member, part in zip(pipe.members, pipe.encode_members(texts), strict=True):
            found.append((pipe.name, member.encoder.name, member.kind, part.total_variance()))
    # rows alike in model and estimator (two pipelines sharing a member) say whose they are
    shared = len({(m, k) for _, m, k, _ in found}) < len(found)
    rows = [(f"{p}/{m}" if shared else m, k, u) for p, m, k, u in found]
    console = out()
    for i, t in enumerate(texts, 1):
        console.print(Text.assemble(("  t" + str(i), "bold"), " ", literal(t)))
    console.print(inspect_table(len(texts), rows, examples=not text))


def inspect_table(
    n_texts: int, rows: list[tuple[str, str, np.ndarray]], examples: bool = True
) -> Table:
    """Rows of (model, estimator, u per text), narrow enough for 80 columns at 5 texts, and
    the first text's u over the last's (the examples run from short to long; a user's texts
    in any order)."""
    last = f"t{n_texts}"
    notes = []
    if n_texts >= 2:  # a text over itself says nothing
        order = ": short text over long" if examples else ""
        notes.append(f"t1/{last} = u(t1) / u({last}){order}")
    if any((u == 0).any() for _, _, u in rows):  # zero is no measurement, not certainty
        notes.append("n/a: no spread measured (word dropout cannot perturb one word)")
    table = Table(
        title="u = total variance of the unit-norm embedding, x1000",
        caption="; ".join(notes) or None,
    )
    longest = max((len(model) for model, _, _ in rows), default=5)
    table.add_column("model", justify="right", no_wrap=True, min_width=longest)
    table.add_column("estimator", justify="right")
    for i in range(1, n_texts + 1):
        table.add_column(f"t{i}", justify="right")
    if n_texts >= 2:
        table.add_column(f"t1/{last}", justify="right")
    for model, kind, u in rows:
        shown = [f"{1e3 * value:.1f}" if value > 0 else "n/a" for value in u]
        ratio = f"{u[0] / u[-1]:.2f}" if u[0] > 0 and u[-1] > 0 else "n/a"
        table.add_row(model, kind, *shown, *([ratio] if n_texts >= 2 else []))
    return table


eval_commands.register(app)
tune_command.register(app)
store_commands.register(app)

if __name__ == "__main__":  # the console script's way in (`python -m probembed` takes it too)
    from probembed.interfaces import main as console_script

    console_script()
