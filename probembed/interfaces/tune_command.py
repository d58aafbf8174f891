"""`probembed tune`: a pipeline's fusion and calibrator fitted on a user's own labelled split."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from probembed.interfaces.eval_commands import (
    DATASET_OPTIONS,
    dataset_folder,
    difference_text,
    find_dev,
    split_file,
)

if TYPE_CHECKING:
    from probembed.calibration.calibrator import RelevanceCalibrator
    from probembed.evaluation.datasets import Evaluable
    from probembed.evaluation.pipeline_tuning import TuneResult


def splits_folder(path: Path) -> Path:
    """The folder holding the splits of the dataset at `path`: BEIR's `qrels/`, else its own."""
    folder = dataset_folder(path)
    qrels = folder / "qrels"
    return qrels if qrels.is_dir() else folder


def tuning_split(path: Path, split: str | None) -> str:
    """The split to tune on: the one named, or the split file given, else dev, else train;
    never test by default."""
    if split is not None:
        return split
    if path.is_file():  # a split file is its own split, as eval reads it
        return path.stem
    found = find_dev(path, "test")
    if found is None:
        from probembed.evaluation.datasets import splits_found

        there = splits_found(splits_folder(path))
        raise ValueError(
            f"{path}: no dev or train split to tune on (splits here: {there}); name one with "
            "--split (a figure on a split tuned on is not held out)"
        )
    return found


def load_split(path: Path, split: str, strict: bool) -> Evaluable:
    """The labelled split tuning reads (STS or retrieval; a probe's classes are not fused),
    its kind checked before the loader's own checks, which would advise another split."""
    from probembed.evaluation.datasets import kind_at, load_evaluable

    if kind_at(path, split) == "classification":
        raise ValueError(
            f"{path}: a classification dataset; tune reads an STS or retrieval (BEIR) dataset"
        )
    return load_evaluable(path, split, strict=strict)


#: The splits a held-out figure is best measured on, first the best; any other split after.
HELD_OUT_ORDER = ("test", "validation", "dev", "train")


def held_out_command(out: Path, path: Path, tuned: str) -> str | None:
    """The command that measures the tuned pipeline on a split it was not tuned on: any split
    but the tuned one is held out (train too, when dev was tuned on)."""
    from probembed.evaluation.datasets import split_stems

    others = [s for s in split_stems(splits_folder(path)) if s != tuned]
    if not others:
        return None
    rank = {name: i for i, name in enumerate(HELD_OUT_ORDER)}
    held = min(others, key=lambda s: (rank.get(s, len(rank)), s))
    return f"probembed eval {dataset_folder(path)} --pipeline {out} --split {held}"


def show(result: TuneResult, dataset: Evaluable) -> None:
    """The tuning split's figures (start, members, tuned) and the chosen settings."""
    from probembed.evaluation.report import markdown_table, settings_text
    from probembed.interfaces.console import Report, out, say

    rows = [{"method": m, "metric": result.metric, "value": v} for m, v in result.figures.items()]
    heading = f"### {dataset.name} ({dataset.split}, the tuning split)"
    out().print(Report(f"{heading}\n\n" + markdown_table(rows, [result.metric])))
    if result.settings:
        say(f"chosen: {settings_text(result.settings)}")
    if result.dropped:
        say(f"dropped (weight 0 on {dataset.split}): {', '.join(result.dropped)}")
    against = result.against_best
    if against is not None:
        say(
            f"tuned - {against['member']}, {result.metric}: {difference_text(against)} "
            f"(paired bootstrap 95% interval over the {against['items']}; on the split it was "
            "tuned on, so it flatters the tuned pipeline)"
        )
        if not against["low"] > 0:  # NaN too: too few items for an interval
            warn_undecided(against, dataset)


def warn_undecided(against: Mapping[str, Any], dataset: Evaluable) -> None:
    """Say when the tuning split cannot tell the tuned pipeline from its best member, or puts
    it below: a gain the split cannot resolve even where it was chosen is no evidence for the
    ensemble, and a loss there is evidence against it."""
    from probembed.interfaces.console import note

    split, member = f"{dataset.name} {dataset.split}", against["member"]
    if against["high"] < 0:  # the tuned row is scored as searched, the members' as encoded
        said = (
            f"{split}: the tuned pipeline is below {member} alone even on the split it was "
            f"tuned on ({against['items']}): use {member} alone, or tune on more labelled data"
        )
    else:
        said = (
            f"{split}: its {against['items']} do not tell the tuned pipeline from {member} "
            "(the interval reaches 0 even on the split it was tuned on): tune on more labelled "
            "data, and measure both on a held-out split before relying on the ensemble"
        )
    note("warning:", "yellow", said)


def show_fit(calibrator: RelevanceCalibrator, dataset: Evaluable) -> None:
    """How the calibrator was fitted, and a warning where its p_relevant will be rough: a small
    split's calibrator is overconfident and nothing else would say so."""
    from probembed.calibration.training import ROUGH_QUERIES
    from probembed.interfaces.console import note, say

    info = calibrator.fit_info or {}
    held = info["holdout_ece"]
    ece = (
        "no held-out calibration error (the other queries' hits are of one class)"
        if held is None
        else f"held-out calibration error (ECE) {held['logistic']:.3f}, "
        f"{held['logistic+isotonic']:.3f} with the isotonic step"
    )
    kept = "kept" if info["isotonic"] else "left out"
    say(
        f"calibrator: {info['queries']} judged queries ({info['hits']} hits, "
        f"{info['relevant']} relevant), {info['holdout_queries']} held out; {ece}; "
        f"isotonic step {kept}: {info['isotonic_why']}"
    )
    if info["queries"] < ROUGH_QUERIES:
        note(
            "warning:",
            "yellow",
            f"{dataset.name} {dataset.split}: the calibrator is fitted on {info['queries']} "
            f"judged queries; below {ROUGH_QUERIES} its p_relevant will be rough (likely "
            "overconfident): tune on a split with more judged queries if p_relevant matters",
        )


def register(app: typer.Typer) -> None:
    """Add the tune command to the CLI."""

    @app.command("tune")
    def tune_command(
        pipeline: Annotated[str, typer.Argument(help="Built-in name or pipeline directory.")],
        path: Annotated[
            Path,
            typer.Argument(
                help="Dataset directory, or one split file: STS (<split>.tsv) or BEIR retrieval "
                "(corpus.jsonl, queries.jsonl, qrels/<split>.tsv; docs/cli.md, Data formats)."
            ),
        ],
        out: Annotated[Path, typer.Option(help="Pipeline directory to write.")],
        split: Annotated[
            str | None,
            typer.Option(
                help="Split to tune on (default: the split file given, else dev, else train; "
                "never test unasked)."
            ),
        ] = None,
        step: Annotated[
            float | None,
            typer.Option(
                help="Grid step of the static weights, 1/n (default: 0.1 up to three members, "
                "0.2 from four).",
                show_default=False,
            ),
        ] = None,
        seed: Annotated[int, typer.Option(help="Seed of the calibrator's hold-out.", min=0)] = 0,
        strict: Annotated[
            bool,
            typer.Option(help="Refuse judged documents missing from the corpus (else a warning)."),
        ] = False,
    ) -> None:
        """Tune a pipeline's fusion (and, on retrieval, its calibrator) on a labelled split.

        Weights on a simplex grid, uec's T and β around them and the collection adaptation's γ,
        as the built-ins are tuned; members given weight 0 are dropped. Report it on a split
        it was not tuned on (the command is printed).
        """
        from probembed.calibration.training import check_judged
        from probembed.evaluation.datasets import RetrievalDataset
        from probembed.evaluation.pipeline_tuning import (
            check_tunable,
            default_step,
            grid_sizes,
            tuned_and_calibrated,
        )
        from probembed.interfaces.console import (
            check_output_folder,
            fail,
            named,
            note,
            save_pipeline,
            say,
        )
        from probembed.pipeline import Pipeline, check_save_target

        check_output_folder("--out", out)
        out = out.absolute()  # `--out .` names the pipeline after the current directory
        try:
            check_save_target(out)
            chosen = tuning_split(path, split)
            dataset = load_split(path, chosen, strict)
            start = Pipeline.load(pipeline)
            members = len(start.members)
            if members < 2 and step is not None:
                raise ValueError(f"--step {step}: {start.name} has one member, no weights to tune")
            step = default_step(members) if step is None else step
            try:
                sizes = grid_sizes(members, step) if members > 1 else {}
            except ValueError as exc:
                raise ValueError(f"--step {step}: {exc}") from exc
            check_tunable(start, dataset)  # before minutes of embedding
            retrieval = dataset if isinstance(dataset, RetrievalDataset) else None
            if retrieval is not None:  # before minutes of tuning
                check_judged(retrieval)
            elif len(start.members) < 2:
                raise ValueError(
                    f"{start.name} has one member and {dataset.name} is not a retrieval "
                    "dataset: no fusion to tune and no relevance calibrator to fit"
                )
        except (OSError, ValueError) as exc:
            raise fail(named(str(exc), DATASET_OPTIONS)) from exc
        if chosen == "test":
            note(
                "warning:",
                "yellow",
                f"tuning on {chosen}: a figure on the split it was tuned on is optimistic; "
                "report a split it was not tuned on",
            )
        say(f"tuning {start.name} on {dataset.name} {chosen} ({split_file(path, chosen)})")
        if sizes:
            say(
                f"grid: {sizes['weights']} static weight vectors (step {step:g} over {members} "
                f"members), then {sizes['(T, β)']} (T, β) around the best, then {sizes['γ']} γ"
            )
        else:
            say(f"{start.name} has one member: no fusion to tune; fitting its calibrator only")
        try:
            result = tuned_and_calibrated(
                start, dataset, dataset_folder(path), chosen, out.name, seed, step
            )
        except ValueError as exc:
            raise fail(str(exc)) from exc
        tuned = result.pipeline
        show(result, dataset)
        if tuned.calibrator is not None:
            show_fit(tuned.calibrator, dataset)
        if retrieval is None and start.calibrator is not None:
            say(
                f"{start.name}'s calibrator was fitted for its old fusion and is not kept: "
                "p_relevant needs a retrieval dataset's qrels (tune on one)"
            )
        save_pipeline(tuned, out)
        command = held_out_command(out, path, chosen)
        if command is None:
            note(
                "warning:",
                "yellow",
                f"{dataset.name} has no split besides {chosen} to measure it on",
            )
        else:
            say(f"measure it on a held-out split: {command}")
