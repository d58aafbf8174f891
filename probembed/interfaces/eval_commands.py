"""`probembed eval`: score a pipeline on a dataset from disk, alone or against every baseline."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from probembed.calibration.checking import CalibrationCheck
    from probembed.evaluation.datasets import Evaluable
    from probembed.evaluation.report import Comparison
    from probembed.interfaces.console import OutputFile
    from probembed.pipeline import Pipeline

DEV_SPLITS = ("dev", "train")
#: The loaders' parameter names in their messages -> the options that set them.
DATASET_OPTIONS = {"keep_self_matches": "--keep-self-matches", "without strict": "without --strict"}


def dataset_folder(path: Path) -> Path:
    """The dataset folder of a folder or of one of its split files (a BEIR `qrels/` file too)."""
    directory = path if path.is_dir() else path.parent
    return directory.parent if directory.name == "qrels" else directory


def find_dev(path: Path, test_split: str) -> str | None:
    """The split tuning may use: dev if present, else train (SciFact's train qrels)."""
    directory = dataset_folder(path)
    for split in DEV_SPLITS:
        if split != test_split and (
            (directory / f"{split}.tsv").is_file()
            or (directory / "qrels" / f"{split}.tsv").is_file()
        ):
            return split
    return None


def split_file(path: Path, split: str) -> Path:
    """The file holding a split of the dataset at `path` (a folder, or one of its files), for
    messages: `<folder>/<split>.tsv`, or a BEIR folder's `qrels/<split>.tsv`."""
    directory = dataset_folder(path)
    beir = directory / "qrels" / f"{split}.tsv"
    return beir if beir.is_file() else directory / f"{split}.tsv"


def load_test_and_dev(
    path: Path, split: str | None, compare: bool, tune_on: str | None, options: dict[str, bool]
) -> tuple[Evaluable, Evaluable | None]:
    """The split to report and, for `--compare`, the one to tune on (dev, else train)."""
    from probembed.evaluation.datasets import ClassificationDataset, load_evaluable

    test = load_evaluable(path, split, **options)
    # a classification probe is trained on the train split: nothing left to tune on
    if not compare or isinstance(test, ClassificationDataset):
        return test, None
    if tune_on == test.split:
        raise ValueError(
            f"--tune-on {tune_on} is the split being reported: methods tuned on it would be "
            "scored on the data they were tuned on; tune on another split (dev or train)"
        )
    dev_split = tune_on or find_dev(path, test.split)
    if dev_split is None:
        return test, None
    return test, load_evaluable(path.parent if path.is_file() else path, dev_split, **options)


def check_outputs(
    path: Path,
    split: str | None,
    json_path: Path | None,
    plots: Path | None,
    tune_on: str | None,
    compare: bool,
    hybrid: bool,
    baseline: str | None = None,
) -> OutputFile | None:
    """Refuse what would fail or be ignored only after the whole evaluation of the dataset at
    `path` (its `split`) has run; the file --json names."""
    from probembed.evaluation.datasets import DEFAULT_SPLIT, kind_at
    from probembed.interfaces.console import check_output_folder, output_file

    if hybrid and compare:
        raise ValueError(
            "--hybrid measures the pipeline's own hybrid search, and --compare's rows are "
            "fusions no collection searches with; run eval --hybrid once per pipeline"
        )
    if hybrid and plots is not None:
        raise ValueError(
            "--plots draws the dense search's uncertainty signals, which a hybrid ranking "
            "does not report per query; leave out --hybrid to plot them"
        )
    if plots is not None and kind_at(path, split or DEFAULT_SPLIT) == "classification":
        raise ValueError(  # said after the whole evaluation (90 s), an empty folder left
            f"--plots draws per-item uncertainty (risk-coverage, per decile), which {path}, "
            "a classification split, has none of (its probe labels each text); leave out --plots"
        )
    if not compare:
        for option, value in (("--tune-on", tune_on), ("--baseline", baseline)):
            if value is not None:
                raise ValueError(f"{option} needs --compare: only a comparison has rows to tune")
    if plots is not None:
        check_output_folder("--plots", plots)
    return None if json_path is None else output_file("--json", json_path)


def check_baseline(baseline: str | None, pipe: Pipeline, tuned: bool) -> str:
    """The row --compare's differences are taken from (default: the pipeline as given),
    refused before any encoding when it names no row."""
    from probembed.evaluation.report import default_baseline, row_names

    rows = row_names(pipe, tuned)
    if baseline is None:
        return default_baseline(pipe, tuned)
    if baseline not in rows:
        raise ValueError(
            f"--baseline {baseline!r} is not a row of this comparison; its rows are: "
            + ", ".join(rows)
        )
    return baseline


def paired_column(
    differences: dict[str, dict[str, dict[str, float]]], metric: str, baseline: str
) -> dict[str, str]:
    """Per row, its difference from the baseline in `metric` and the interval, x100."""
    cells = {method: difference_text(by[metric]) for method, by in differences.items()}
    cells[baseline] = "baseline"
    return cells


def difference_text(d: Mapping[str, Any]) -> str:
    """A paired difference and its interval, x100, as tables and notes show it."""
    interval = (
        f"[{100 * d['low']:+.2f}, {100 * d['high']:+.2f}]"
        if math.isfinite(d["low"]) and math.isfinite(d["high"])
        else "[no interval: too few items]"
    )
    return f"{100 * d['difference']:+.2f} {interval}"


def check_hybrid(test: Evaluable) -> None:
    """Refuse --hybrid where no collection could be searched: BM25 ranks a corpus's documents,
    and a collection holds none with an empty text."""
    from probembed.evaluation.datasets import RetrievalDataset, dataset_kind

    if not isinstance(test, RetrievalDataset):
        raise ValueError(
            f"--hybrid applies to retrieval (BEIR) datasets only, not to {test.name} "
            f"({dataset_kind(test)}): a hybrid search fuses BM25 over a corpus of documents; "
            "leave --hybrid out"
        )
    empty = [doc_id for doc_id, text in test.corpus.items() if not text.strip()]
    if empty:  # found only once the corpus is embedded, as BM25's collection is made
        raise ValueError(
            f"--hybrid: {len(empty)} document(s) of {test.name} with an empty text (e.g. "
            f"{empty[0]!r}), which a collection refuses, so no hybrid search could rank them; "
            "leave them out of corpus.jsonl, or measure the dense search without --hybrid"
        )


#: What eval's cut-short note tells its user (`console.say_what_is_cut`).
CUT_REMEDY = (
    "eval scores them so, as a plain ingest stores them; `probembed ingest --chunk` splits "
    "them into passages"
)


def say_what_eval_cuts(test: Evaluable, pipe: Pipeline) -> None:
    """Warn, as ingest and embed do, when corpus documents are longer than the models read:
    eval scored them cut short without a word."""
    from probembed.evaluation.datasets import RetrievalDataset
    from probembed.interfaces.console import say_what_is_cut

    if isinstance(test, RetrievalDataset) and pipe.max_tokens is not None:
        documents = list(test.corpus.values())
        cut = int(pipe.cut(documents).sum())
        say_what_is_cut(cut, len(documents), pipe, CUT_REMEDY, sampled=False)


def own_figures(
    pipe: Pipeline,
    test: Evaluable,
    folder: Path,
    metrics: Sequence[str],
    hybrid: bool,
    plots: bool,
    calibration: bool,
) -> tuple[dict[str, float], Comparison | None, CalibrationCheck | None]:
    """The pipeline's figures in `metrics` as its search ranks (`folder`: the dataset's,
    whose corpus a hybrid search's BM25 reads); for `plots`, its uncertainty signals as a
    one-row comparison; for `calibration`, how its p_relevant and confidence hold on the
    split."""
    from probembed.evaluation.datasets import RetrievalDataset
    from probembed.evaluation.harness import embed, evaluate, searched_as
    from probembed.evaluation.report import pipeline_quality

    embedded = embed(pipe, test, progress=True)
    if hybrid and isinstance(test, RetrievalDataset):
        from probembed.calibration.training import hybrid_metrics

        return hybrid_metrics(pipe, test, folder, embedded, metrics), None, None
    outcome = evaluate(embedded, test, searched_as(pipe, embedded, test, pipe.name), metrics)
    quality = pipeline_quality(pipe, test, embedded, outcome, pipe.name, metrics) if plots else None
    checked = None
    if calibration and isinstance(test, RetrievalDataset):
        from probembed.calibration.checking import check_calibration

        checked = check_calibration(pipe, test, embedded)
    return outcome.metrics, quality, checked


def check_calibration_option(test: Evaluable, pipe: Pipeline, compare: bool, hybrid: bool) -> None:
    """Refuse --calibration where there is nothing to check, before any encoding."""
    from probembed.evaluation.datasets import RetrievalDataset, dataset_kind

    if compare or hybrid:
        option = "--compare" if compare else "--hybrid"
        raise ValueError(
            f"--calibration checks the pipeline's own dense search, not with {option}; "
            f"run it without {option}"
        )
    if not isinstance(test, RetrievalDataset):
        raise ValueError(
            f"--calibration applies to retrieval (BEIR) datasets only, not to {test.name} "
            f"({dataset_kind(test)}): p_relevant and confidence are a search's"
        )
    if pipe.calibrator is None:
        raise ValueError(
            f"--calibration: {pipe.name} has no relevance calibrator (calibration.json), so "
            "no p_relevant to check; probembed tune fits one on a judged split"
        )


def calibration_table(check: CalibrationCheck) -> str:
    """The check's figures as markdown: the hits' calibration, then each threshold's shares."""
    from probembed.calibration.checking import BINS, THRESHOLDS

    f = check.figures
    which = "learned" if check.learned else "outrank probability: no learned one"
    lines = [
        "| figure | value |",
        "|---|---:|",
        f"| top-10 hits of the judged queries | {f['hits']:.0f} |",
        f"| share relevant | {f['relevant_share']:.3f} |",
        f"| mean p_relevant | {f['mean_p_relevant']:.3f} |",
        f"| ECE of p_relevant ({BINS} bins) | {f['ece15']:.3f} |",
        f"| AUROC of confidence ({which}) for nDCG@10 below the median | "
        f"{f['confidence_auroc']:.3f} |",
        "",
        "| min_p_relevant | relevant hits kept | irrelevant hits dropped |",
        "|---:|---:|---:|",
    ]
    for t in THRESHOLDS:
        kept, dropped = f[f"kept_relevant@{t:g}"], f[f"dropped_irrelevant@{t:g}"]
        lines.append(f"| {t:g} | {kept:.3f} | {dropped:.3f} |")
    return "\n".join(lines)


def register(app: typer.Typer) -> None:
    """Add the eval command to the CLI."""

    @app.command("eval")
    def eval_command(
        path: Annotated[
            Path,
            typer.Argument(
                help="Dataset directory or a single split file: STS, BEIR retrieval or "
                "classification (docs/cli.md, Data formats)."
            ),
        ],
        pipeline: Annotated[
            str | None,
            typer.Option(
                help="Built-in name or pipeline directory (default: `retrieval` on a BEIR set, "
                "the built-in ingest indexes documents with; else `default`)."
            ),
        ] = None,
        split: Annotated[str | None, typer.Option(help="Split to report (default: test).")] = None,
        compare: Annotated[
            bool, typer.Option(help="Every single model and ensemble side by side.")
        ] = False,
        json_path: Annotated[
            Path | None,
            typer.Option(
                "--json",
                help="Write tidy result rows here as JSON. `-` (or /dev/stdout): to stdout, and "
                "the table to stderr; a named pipe or a device is written to as it is; a file "
                "is replaced once written whole, a link's target for a link.",
            ),
        ] = None,
        plots: Annotated[
            Path | None,
            typer.Option(
                help="Write risk-coverage and per-decile plots of the uncertainty signals "
                "(the learned confidence a search reports too, where the pipeline has one) to "
                "this folder: of the pipeline, or with --compare of its rows. Not with --hybrid, "
                "nor on a classification split."
            ),
        ] = None,
        tune_on: Annotated[
            str | None,
            typer.Option(help="Split to tune weights/T/beta on (default: dev, else train)."),
        ] = None,
        strict: Annotated[
            bool,
            typer.Option(help="Refuse judged documents missing from the corpus (else a warning)."),
        ] = False,
        keep_self_matches: Annotated[
            bool,
            typer.Option(help="Let a query retrieve the document with its own id (BEIR drops it)."),
        ] = False,
        hybrid: Annotated[
            bool,
            typer.Option(
                help="Score the rankings a hybrid search (search --hybrid) makes: the "
                "pipeline's dense ranking and BM25 over the corpus, fused by reciprocal rank. "
                "BEIR retrieval sets only; not with --compare."
            ),
        ] = False,
        calibration: Annotated[
            bool,
            typer.Option(
                help="Check the pipeline's p_relevant and query confidence on this judged BEIR "
                "split, searched as a collection of its corpus would be: ECE of p_relevant "
                "over the top-10 hits, relevant kept and irrelevant dropped at a few "
                "min_p_relevant values, confidence AUROC; with --plots, a reliability diagram "
                "and the confidence's risk-coverage. Not with --compare or --hybrid."
            ),
        ] = False,
        baseline: Annotated[
            str | None,
            typer.Option(
                help="With --compare: the row every other row's difference (and its paired "
                "bootstrap 95% interval) is taken from, e.g. single:minilm (default: the "
                "pipeline as given, `NAME as shipped`, or `uec` without a split to tune on)."
            ),
        ] = None,
        metric: Annotated[
            list[str] | None,
            typer.Option(
                "--metric",
                help="A metric to report, again for more: on a BEIR split ndcg@K, recall@K or "
                "mrr@K (K up to 100; default ndcg@10, recall@100 and mrr@10), on STS spearman, "
                "on classification accuracy. With --compare each gets a Δ column (default: "
                "the primary metric's) and its paired intervals in --json. On a BEIR split the "
                "uncertainty diagnostics (--json's AUROCs, coverage figures and each model's "
                "ρ(u, error); --plots) judge a query by the first one named and recall at its "
                "cutoff; their per-decile figure stays Recall@1, the figure ProbVLM's binned "
                "check is defined on, and --calibration's stay nDCG@10 and the top 10 hits, "
                "what the calibrator was fitted to predict.",
            ),
        ] = None,
    ) -> None:
        """Evaluate on STS (Spearman), BEIR retrieval (nDCG@10 ...) or classification (probe)."""
        from probembed.evaluation.datasets import (
            ClassificationDataset,
            RetrievalDataset,
            dataset_kind,
        )
        from probembed.evaluation.harness import primary_metric, reported_metrics, texts_held
        from probembed.evaluation.paired import (
            CONFIDENCE,
            RESAMPLES,
            SEED,
            against_baseline,
            item_kind,
            per_item_values,
        )
        from probembed.evaluation.report import compare as run_compare
        from probembed.evaluation.report import (
            file_stem,
            json_bytes,
            markdown_table,
            same_rows,
            settings_text,
            shipped_label,
            tuned_settings,
            write_plots,
        )
        from probembed.interfaces.console import (
            Report,
            fail,
            named,
            note,
            out,
            say,
            stdout_is_report,
            warnings_named,
        )
        from probembed.interfaces.store_options import SEARCH_PIPELINE
        from probembed.pipeline import Pipeline

        options = {"strict": strict, "keep_self_matches": keep_self_matches}
        try:
            json_out = check_outputs(
                path, split, json_path, plots, tune_on, compare, hybrid, baseline
            )
            with warnings_named(DATASET_OPTIONS):
                test, dev = load_test_and_dev(path, split, compare, tune_on, options)
            metrics = reported_metrics(test, metric or ())
            if hybrid:
                check_hybrid(test)
            if pipeline is None:
                pipeline = SEARCH_PIPELINE if isinstance(test, RetrievalDataset) else "default"
            pipe = Pipeline.load(pipeline)
            if compare:
                baseline = check_baseline(baseline, pipe, dev is not None)
            if calibration:
                check_calibration_option(test, pipe, compare, hybrid)
        except (OSError, ValueError) as exc:
            raise fail(named(str(exc), DATASET_OPTIONS)) from exc
        if (plots is not None or json_out is not None) and not (json_out and json_out.to_stdout):
            stdout_is_report()  # its table: a reader gone must not keep the files unwritten
        texts, held = texts_held(pipe, test)
        label = test.name if test.split == test.name else f"{test.name} {test.split}"  # one file
        cached = "" if held is None else f" ({held} from the cache)"  # said only with a cache
        say(f"{label}: {texts} texts{cached}, each embedded by {pipe.name}'s models")
        say_what_eval_cuts(test, pipe)
        tuned = pipe.tuned_on_split(dataset_kind(test), test.name, test.split)
        if tuned is not None:  # a figure on a split that chose the settings is not held out
            note(
                "warning:",
                "yellow",
                f"{pipe.name} was tuned on {tuned}: figures on this split are not held out; "
                "report a split it was not tuned on",
            )
        result, checked = None, None
        heading = test.name if test.name == test.split else f"{test.name} ({test.split})"
        if hybrid:
            heading += "; hybrid search: dense + BM25 by reciprocal rank"
        if compare and dev is not None:  # only the JSON's tuned_on said where they came from
            where = split_file(path, dev.split)
            say(
                f"tuning on {dev.name} {dev.split} ({where}; --tune-on chooses another split): "
                f"the weighted and uec rows are tuned there, {shipped_label(pipe.name)!r} is "
                f"{pipe.name} with its own settings, as eval without --compare scores it"
            )
            heading += f"; weighted and uec tuned on {dev.split}"
        if compare:
            result = run_compare(pipe, test, dev, progress=True, metrics=metrics)
            rows = result.rows
            if dev is None:  # the row would read as a tuned uec, as it does with a dev split
                why = (
                    "its probe trains on the train split"
                    if isinstance(test, ClassificationDataset)
                    else f"it has no dev or train split besides {test.split}"
                )
                say(
                    f"no split of {test.name} to tune on ({why}): the uec row is {pipe.name} "
                    "as shipped, with its own weights and score"
                )
        else:
            figures, result, checked = own_figures(
                pipe, test, dataset_folder(path), metrics, hybrid, plots is not None, calibration
            )
            method = f"{pipe.name} hybrid" if hybrid else pipe.name
            rows = [
                {
                    "dataset": test.name,
                    "split": test.split,
                    "method": method,
                    "metric": k,
                    "value": v,
                }
                for k, v in figures.items()
            ]
        chosen = (
            None
            if not compare or result is None or dev is None
            else tuned_settings(result, pipe.models)
        )
        columns: dict[str, dict[str, str]] = {}
        same: list[tuple[str, ...]] = []
        differences = None
        if compare and result is not None and baseline is not None:
            differences = against_baseline(test, result.outcomes, baseline, metrics)
            for shown in metrics if metric else (primary_metric(test),):
                columns[f"Δ {shown} [95% CI]"] = paired_column(differences, shown, baseline)
            same = same_rows(result)
            say(
                f"differences from {baseline!r}: paired bootstrap over the split's "
                f"{len(result.outcomes[baseline].ids)} {item_kind(test)}, {RESAMPLES} resamples "
                f"(seed {SEED}), 95% percentile interval (--baseline chooses another row)"
            )
        if chosen:
            columns["settings"] = {name: settings_text(s) for name, s in chosen.items()}
        if differences is not None:
            heading += f"; Δ: difference from {baseline}"
        table = markdown_table(rows, metrics, columns, same)
        console = out(stderr=json_out is not None and json_out.to_stdout)
        console.print(Report(f"### {heading}\n\n" + table))
        if checked is not None:
            title = f"### p_relevant and confidence of {pipe.name} on {label}, as searches report"
            console.print(Report(f"{title}\n\n" + calibration_table(checked)))
        if json_out is not None:
            config: dict[str, object] = {
                "dataset": str(path),
                "split": test.split,
                "tuned_on": dev.split if dev is not None else None,
                "tuned_settings": chosen,
                "strict": strict,
                "keep_self_matches": keep_self_matches,
                "hybrid": hybrid,
                "pipeline": pipe.name,
                "pipeline_fingerprint": pipe.fingerprint,
                "models": pipe.models,
                "metrics": list(metrics),
                "seed": 0,
            }
            if isinstance(test, RetrievalDataset):  # left out of every mean, with a warning
                config["queries_scored"] = len(test.qrels)
                config["queries_without_relevant"] = len(test.without_relevant)
                config["queries_without_relevant_ids"] = list(test.without_relevant)
                config["queries_judging_own_id"] = len(test.self_judged)
                config["queries_judging_own_id_ids"] = list(test.self_judged)
                config["queries_short_of_relevant"] = len(test.short_of_relevant)
                config["queries_with_none_relevant_in_corpus"] = len(test.none_in_corpus)
            sections: dict[str, object] = {}
            if result is not None and differences is not None:
                config["same_rows"] = same
                sections["paired"] = {
                    "baseline": baseline,
                    "items": item_kind(test),
                    "resamples": RESAMPLES,
                    "confidence": CONFIDENCE,
                    "seed": SEED,
                    "interval": "percentile",
                    "differences": differences,
                }
                sections["per_item"] = per_item_values(test, result.outcomes, metrics)
            if result is not None and result.tuning:
                sections["tuning"] = result.tuning
            if checked is not None:
                sections["calibration"] = {
                    "confidence": "learned" if checked.learned else "outrank",
                    "figures": checked.figures,
                    "reliability": checked.reliability,
                }
            with json_out.open() as handle:
                handle.write(json_bytes(rows, config, sections))
            say(f"wrote {len(rows)} rows to {json_out}")  # notes on stderr, the table on stdout
        if result is not None and plots is not None:  # after the rows: a plot may still fail
            written = write_plots(result, test, plots)
            if checked is not None:
                from probembed.calibration.checking import plot_check

                stem = file_stem(f"{test.name}-{test.split}-{pipe.name}")
                written += plot_check(checked, plots, stem, f"{label} ({pipe.name})")
            for png in written:
                say(f"plot: {png}")
            if not written:  # an empty folder, and not a word, looked like a failure
                note(
                    "warning:",
                    "yellow",
                    f"no plots written to {plots}: risk-coverage needs per-item uncertainty "
                    "of at least 2 items (STS pairs or scored queries)",
                )
