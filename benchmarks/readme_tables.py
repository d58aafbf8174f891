"""Rewrite the docs' result tables from the committed result files, so they quote them exactly.

    python benchmarks/readme_tables.py [--check]

Each table sits between `<!-- name -->` and `<!-- /name -->` markers in one file, README.md or a
page under docs/ (most in docs/results.md), wherever the text around it lives: `quality`,
`diagnostics` and `failure` from benchmarks/results/quality.json, `search` from search.json,
`variance` from variance.json, `lodo` from lodo.json, `headroom` from lodo_headroom.json,
`errors` from error_signals.json, `geometry` from lodo_geometry.json, `task` from lodo_task.json,
`similar` from lodo_similar.json, `regret` from lodo_regret.json, `halves` from lodo_halves.json,
`serve` from serve.json, `pieces` from pieces.json, `chunking` from chunking.json,
`calibration_by_search` and `calibration_by_score` from search_calibration.json,
`tune_own_data` from tune_own_data.json, `abstention` from abstention.json.
`--check` changes nothing and exits 1 when a table is out of date, naming the files.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from probembed.evaluation.report import settings_text

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
DATASETS = {
    "stsb": ("STS-B", "spearman"),
    "sick": ("SICK-R", "spearman"),
    "scifact": ("SciFact", "ndcg@10"),
}
METRIC_NAMES = {"spearman": "Spearman", "ndcg@10": "nDCG@10"}
TARGETS = {"stsb": 83.8, "sick": 77.4, "scifact": 67.0}
METHODS = ("mean", "concat", "weighted", "uec")
SIGNALS = ("margin_prob", "neg_margin", "neg_top1", "top1_std", "query_var")

Rows = list[dict]


def table(header: Sequence[str], body: Sequence[Sequence[str]], right_from: int = 1) -> str:
    """A markdown table, columns from `right_from` on right-aligned."""
    align = ["---" if i < right_from else "---:" for i in range(len(header))]
    lines = [header, align, *body]
    return "\n".join("| " + " | ".join(cells) + " |" for cells in lines)


def value(rows: Rows, **where: str) -> float | None:
    """The value of the one row matching every field, or None."""
    found = [r["value"] for r in rows if all(r.get(k) == v for k, v in where.items())]
    return found[0] if found else None


def pct(x: float | None, signed: bool = False) -> str:
    """A fraction as points with two decimals ('' when missing)."""
    if x is None:
        return ""
    return f"{100 * x:+.2f}" if signed else f"{100 * x:.2f}"


def columns(rows: Rows) -> list[tuple[str, str]]:
    """(dataset, estimator) pairs present, in the quality table's column order."""
    estimators = list(dict.fromkeys(r["estimator"] for r in rows))
    present = {(r["dataset"], r["estimator"]) for r in rows}
    return [(d, e) for d in DATASETS for e in estimators if (d, e) in present]


def quality(rows: Rows) -> str:
    """Headline metric of every method per dataset and estimator, the targets and uec − weighted."""
    cols = columns(rows)
    header = ["method"] + [
        f"{DATASETS[d][0]} {METRIC_NAMES[DATASETS[d][1]]} ({e})" for d, e in cols
    ]
    singles = sorted({r["method"] for r in rows if r["method"].startswith("single:")})
    singles = [
        m
        for m in singles
        if value(rows, method=m, metric="spearman") is not None
        or value(rows, method=m, metric="ndcg@10") is not None
    ]
    body = []
    for method in [*singles, *METHODS]:
        cells = [
            pct(value(rows, dataset=d, estimator=e, method=method, metric=DATASETS[d][1]))
            for d, e in cols
        ]
        body.append([method, *cells])
    body.append(["target for uec", *[f"≥ {TARGETS[d]}" for d, _ in cols]])
    gains = []
    for d, e in cols:
        uec = value(rows, dataset=d, estimator=e, method="uec", metric=DATASETS[d][1])
        weighted = value(rows, dataset=d, estimator=e, method="weighted", metric=DATASETS[d][1])
        gains.append(pct(None if uec is None or weighted is None else uec - weighted, True))
    body.append(["uec − weighted", *gains])
    return table(header, body)


def diagnostics(rows: Rows) -> str:
    """Per model and estimator: CV of u_k across texts and its Spearman with the model's error."""
    estimators = list(dict.fromkeys(r["estimator"] for r in rows))
    header = ["model", "estimator"]
    for d in DATASETS:
        header += [f"{d} u_cv", f"{d} ρ(u, err)"]
    body = []
    for e in estimators:
        models = sorted(
            {r["method"] for r in rows if r["estimator"] == e and r["metric"] == "u_cv"},
            key=lambda m: [r["method"] for r in rows].index(m),
        )
        for m in models:
            cells = []
            for d in DATASETS:
                cv = value(rows, dataset=d, estimator=e, method=m, metric="u_cv")
                rho = value(rows, dataset=d, estimator=e, method=m, metric="u_error_spearman")
                cells += ["" if cv is None else f"{cv:.3f}", "" if rho is None else f"{rho:+.3f}"]
            body.append([m.removeprefix("single:"), e, *cells])
    return table(header, body, right_from=2)


def failure(rows: Rows) -> str:
    """SciFact: each query-level signal's AUROC, nDCG@10 at 80% coverage, per-decile Spearman."""
    parts = []
    for e in dict.fromkeys(r["estimator"] for r in rows if r["dataset"] == "scifact"):
        sub = [
            r
            for r in rows
            if r["estimator"] == e and r["dataset"] == "scifact" and r["method"] == "uec"
        ]
        header = [
            f"signal ({e})",
            "AUROC nDCG@10 < median",
            "AUROC Recall@10 = 0",
            "nDCG@10 at 80% coverage",
            "Recall@1 per decile, Spearman",
        ]
        body = []
        for s in SIGNALS:
            auroc = value(sub, metric=f"auroc:{s}")
            zero = value(sub, metric=f"auroc:{s}:recall@10=0")
            spearman = value(sub, metric=f"recall@1_decile_spearman:{s}")
            body.append(
                [
                    s,
                    "" if auroc is None else f"{auroc:.3f}",
                    "" if zero is None else f"{zero:.3f}",
                    pct(value(sub, metric=f"ndcg@10@coverage80:{s}")),
                    "" if spearman is None else f"{spearman:+.2f}",
                ]
            )
        body.append(["(all queries)", "", "", pct(value(sub, metric="ndcg@10")), ""])
        parts.append(table(header, body))
    return "\n".join(parts)


def search(rows: Rows) -> str:
    """Every search benchmark row: engine, score, QPS, recall against the exact scan, bytes."""
    header = [
        "dataset",
        "n",
        "engine",
        "score",
        "queries/s",
        "Recall@10 vs exact",
        "bytes/item on disk",
        "bytes/item in memory",
    ]

    def count(value: float | None) -> str:
        return "" if value is None else f"{value:.0f}"

    body = [
        [
            r["dataset"],
            f"{r['n']:,}",
            r["engine"],
            r["score"],
            f"{r['qps']:.0f}",
            f"{r['recall@10']:.4f}",
            count(r["bytes_per_item"]),
            count(r.get("memory_per_item")),
        ]
        for r in rows
    ]
    return table(header, body, right_from=4)


def variance(rows: Rows) -> str:
    """Per score, the largest error of compact stored variances against the full ones."""
    header = ["score", "max abs error", "relative to", "ratio"]
    body = []
    for r in rows:
        scale = r.get("score_range", r.get("median_std"))
        what = "score range" if "score_range" in r else "median std"
        body.append(
            [
                r["score"],
                f"{r['max_abs_error']:.2e}",
                f"{what} {scale:.3g}",
                f"{r['max_abs_error'] / scale:.1e}",
            ]
        )
    return table(header, body, right_from=1)


LODO_NAMES = {
    "stsb": "STS-B",
    "sick": "SICK-R",
    "scifact": "SciFact",
    "mr": "MR",
    "cr": "CR",
    "sst2": "SST-2",
    "banking77": "Banking77",
}
ADAPTIVE = ("uec", "mean+adapted", "static+adapted", "uec+adapted", "uec+lambda", "router")


def lodo(rows: Rows) -> str:
    """Per left-out dataset: singles, mean, static, each adaptive family and its gain."""
    left_out = list(dict.fromkeys(r["left_out"] for r in rows))
    methods = list(dict.fromkeys(r["method"] for r in rows))
    singles = [m for m in methods if m.startswith("single:")]
    header = ["left out", "best single", "mean", "static", *ADAPTIVE, "best adaptive − static"]
    body = []
    for name in left_out:
        get = {r["method"]: r["value"] for r in rows if r["left_out"] == name}
        best_single = max(get[m] for m in singles)
        adaptive = [get.get(m) for m in ADAPTIVE]
        gain = max(a for a in adaptive if a is not None) - get["static"]
        cells = [pct(best_single), pct(get["mean"]), pct(get["static"]), *map(pct, adaptive)]
        body.append([LODO_NAMES.get(name, name), *cells, pct(gain, signed=True)])
    return table(header, body)


def difference_cell(d: dict) -> str:
    """A paired difference with its 95% interval, in points."""
    low, high = pct(d["low"], signed=True), pct(d["high"], signed=True)
    return f"{pct(d['difference'], signed=True)} [{low}, {high}]"


def headroom(rows: Rows) -> str:
    """Per dataset: static weights chosen by LODO, in domain and on the test, with intervals."""
    header = ["dataset", "static (LODO)", "tuned in domain", "in domain − LODO [95% CI]"]
    header += ["test oracle", "oracle − LODO [95% CI]"]
    body = []
    for name in dict.fromkeys(r["left_out"] for r in rows):
        get = {r["chosen_on"]: r for r in rows if r["left_out"] == name}
        cells = [LODO_NAMES.get(name, name), pct(get["lodo"]["value"])]
        for how in ("in domain", "test oracle"):
            cells += [pct(get[how]["value"]), difference_cell(get[how]["vs_lodo"])]
        body.append(cells)
    return table(header, body)


def geometry(rows: Rows) -> str:
    """Per left-out dataset: each geometric adaptation against static, with intervals, and
    how much centring moves the best single member (is a gain the ensemble's?)."""
    families = [
        "centred",
        "centred or not",
        "static+spread",
        "mean+spread",
        "static+factor",
        "mean+factor",
    ]
    header = ["left out", "static", *(f"{f} − static [95% CI]" for f in families)]
    header.append("best single: plain → centred")
    body = []
    for name in dict.fromkeys(r["left_out"] for r in rows):
        get = {r["method"]: r for r in rows if r["left_out"] == name}
        cells = [LODO_NAMES.get(name, name), pct(get["static"]["value"])]
        cells += [difference_cell(get[family]["vs_static"]) for family in families]
        singles = [m[: -len(" plain")] for m in get if m.endswith(" plain")]
        best = max(singles, key=lambda m: get[f"{m} plain"]["value"])
        plain, centred = get[f"{best} plain"]["value"], get[f"{best} centred"]["value"]
        cells.append(f"{best.removeprefix('single:')} {pct(plain)} → {pct(centred)}")
        body.append(cells)
    return table(header, body)


TASK_FAMILIES = (
    "static by task",
    "static by task, pooled",
    "uec",
    "uec by task",
    "uec by task, pooled",
)


def weights_text(row: dict) -> str:
    """The weights (or uec's prior, T and β) a family chose, members in the pipeline's order."""
    fusion = row["fusion"]
    shown = " / ".join(f"{w:g}" for w in fusion["weights"] or fusion["prior"])
    if fusion["method"] != "uec":
        return shown
    return f"{shown}, T {float(fusion['temperature']):g}, β {row['score']['beta']:g}"


def task(rows: Rows) -> str:
    """Per left-out dataset: static weights tuned knowing the collection's task (same-task
    tuning splits, or half and half with all six) against `static`, with intervals, beside
    the best single member; then the settings each chose."""
    header = ["left out", "tuned on (by task)", "static"]
    header += [f"{f} − static [95% CI]" for f in TASK_FAMILIES]
    header.append("best single")
    chosen_header = ["left out", "static", "static by task", "static by task, pooled"]
    chosen_header += ["uec by task", "uec by task, pooled"]
    body, chosen = [], []
    for name in dict.fromkeys(r["left_out"] for r in rows):
        get = {r["method"]: r for r in rows if r["left_out"] == name}
        shares = get["static by task"]["tuning_shares"]
        alike = [LODO_NAMES.get(n, n) for n, share in shares.items() if share > 0]
        tuned_on = (
            "all six (no other of its task)" if len(alike) == len(shares) else ", ".join(alike)
        )
        cells = [LODO_NAMES.get(name, name), tuned_on, pct(get["static"]["value"])]
        cells += [difference_cell(get[f]["vs_static"]) for f in TASK_FAMILIES]
        best = max((m for m in get if m.startswith("single:")), key=lambda m: get[m]["value"])
        cells.append(f"{best.removeprefix('single:')} {pct(get[best]['value'])}")
        body.append(cells)
        chosen.append(
            [LODO_NAMES.get(name, name), *(weights_text(get[f]) for f in chosen_header[1:])]
        )
    return f"{table(header, body, right_from=2)}\n\n{table(chosen_header, chosen)}"


SIMILAR = "static by similarity"


def tau_text(tau: float | str) -> str:
    """A softmax temperature as the tables show it (JSON keeps inf as "inf")."""
    return "∞" if float(tau) == float("inf") else f"{float(tau):g}"


def similar(rows: Rows) -> str:
    """Per left-out dataset: static weights tuned on the datasets whose texts look like its
    collection (τ by nested LODO) against `static`, with intervals, the best single member and
    the weights; then each fixed τ's difference (not tuned); then the similarities read."""
    header = ["left out", "nearest (similarity)", "τ (nested)", "static", SIMILAR]
    header += [f"{SIMILAR} − static [95% CI]", "best single", "weights: static → by similarity"]
    body, curve, sims = [], [], []
    names = list(dict.fromkeys(r["left_out"] for r in rows))
    for name in names:
        get = {r["method"]: r for r in rows if r["left_out"] == name}
        tuned = get[SIMILAR]
        near = {n: s for n, s in tuned["similarity"].items() if n != name}
        top = sorted(near, key=near.__getitem__, reverse=True)[:2]
        nearest = ", ".join(f"{LODO_NAMES.get(n, n)} {near[n]:.3f}" for n in top)
        best = max((m for m in get if m.startswith("single:")), key=lambda m: get[m]["value"])
        cells = [LODO_NAMES.get(name, name), nearest, tau_text(tuned["tau"])]
        cells += [pct(get["static"]["value"]), pct(tuned["value"])]
        cells += [difference_cell(tuned["vs_static"])]
        cells.append(f"{best.removeprefix('single:')} {pct(get[best]['value'])}")
        cells.append(f"{weights_text(get['static'])} → {weights_text(tuned)}")
        body.append(cells)
        fixed = [m for m in get if m.startswith(f"{SIMILAR}, tau")]
        curve.append(
            [LODO_NAMES.get(name, name), *(difference_cell(get[m]["vs_static"]) for m in fixed)]
        )
        own = tuned["similarity"]
        sims.append(
            [LODO_NAMES.get(name, name)]
            + [f"({own[n]:.3f})" if n == name else f"{own[n]:.3f}" for n in names]
        )
    first = [r for r in rows if r["left_out"] == names[0]]
    taus = [tau_text(r["tau"]) for r in first if r["method"].startswith(f"{SIMILAR}, tau")]
    curve_header = ["left out", *(f"τ {t} − static (not tuned)" for t in taus)]
    sims_header = ["test collection", *(LODO_NAMES.get(n, n) for n in names)]
    return "\n\n".join(
        [
            table(header, body, right_from=2),
            table(curve_header, curve),
            table(sims_header, sims),
        ]
    )


HALVES = ("static by halves", "static + halves")


def halves(rows: Rows) -> str:
    """Per left-out dataset: static weights chosen with the left-out collection's halves task
    (alone, and beside the tuning mean with gamma by nested LODO) against `static`, with
    intervals, the best single member and the weights; then each fixed gamma (not tuned); then
    each member's own figure on the halves task of the test collection."""
    header = ["left out", "γ (nested)", "static", *(f"{f} − static [95% CI]" for f in HALVES)]
    header += ["best single", "weights: static / by halves / + halves"]
    body, curve, members = [], [], []
    names = list(dict.fromkeys(r["left_out"] for r in rows))
    for name in names:
        get = {r["method"]: r for r in rows if r["left_out"] == name}
        singles = [m for m in get if m.startswith("single:")]
        best = max(singles, key=lambda m: get[m]["value"])
        cells = [LODO_NAMES.get(name, name), f"{get[HALVES[1]]['gamma']:g}"]
        cells += [
            pct(get["static"]["value"]),
            *(difference_cell(get[f]["vs_static"]) for f in HALVES),
        ]
        cells.append(f"{best.removeprefix('single:')} {pct(get[best]['value'])}")
        cells.append(" → ".join(weights_text(get[f]) for f in ("static", *HALVES)))
        body.append(cells)
        fixed = [m for m in get if m.startswith(f"{HALVES[1]}, gamma")]
        curve.append(
            [LODO_NAMES.get(name, name), *(difference_cell(get[m]["vs_static"]) for m in fixed)]
        )
        members.append(
            [LODO_NAMES.get(name, name)]
            + [f"{pct(get[m]['value'])} / {pct(get[m]['halves_figure'])}" for m in singles]
        )
    first = [r for r in rows if r["left_out"] == names[0]]
    gammas = [f"{r['gamma']:g}" for r in first if r["method"].startswith(f"{HALVES[1]}, gamma")]
    singles = [
        r["method"].removeprefix("single:") for r in first if r["method"].startswith("single:")
    ]
    curve_header = ["left out", *(f"γ {g} − static (not tuned)" for g in gammas)]
    members_header = ["left out: test figure / halves figure", *singles]
    return "\n\n".join(
        [
            table(header, body, right_from=1),
            table(curve_header, curve),
            table(members_header, members),
        ]
    )


REGRET_FAMILIES = (
    "static, least regret (minimax)",
    "uec, least regret (minimax)",
    "static, least regret (constrained)",
    "uec, least regret (constrained)",
)


def below_mark(row: dict) -> str:
    """A dagger after a row below the best single member on the left-out test split."""
    return " †" if row["below_best_single"] else ""


def regret(rows: Rows) -> str:
    """Per left-out dataset: static weights chosen to stay above the best single member
    against `static`, with intervals (a dagger: below the best single member on the test);
    then the settings each chose and its worst tuning margin; then static's margin over the
    best single member on each tuning split."""
    families = ("uec", *REGRET_FAMILIES)
    header = ["left out", "best single", "static", *(f"{f} − static [95% CI]" for f in families)]
    chosen_header = ["left out", "static", *REGRET_FAMILIES]
    body, chosen, margins = [], [], []
    names = list(dict.fromkeys(r["left_out"] for r in rows))
    for name in names:
        get = {r["method"]: r for r in rows if r["left_out"] == name}
        static, top = get["static"], get["static"]["best_single_test"]
        cells = [LODO_NAMES.get(name, name), f"{top['member']} {pct(top['value'])}"]
        cells.append(pct(static["value"]) + below_mark(static))
        cells += [difference_cell(get[f]["vs_static"]) + below_mark(get[f]) for f in families]
        body.append(cells)
        chosen.append(
            [LODO_NAMES.get(name, name)]
            + [
                f"{weights_text(get[f])}{' (fell back)' if get[f].get('fell_back') else ''}; "
                f"worst {pct(get[f]['worst_tuning_margin'], signed=True)}"
                for f in chosen_header[1:]
            ]
        )
        own = static["tuning_margins"]
        margins.append(
            [LODO_NAMES.get(name, name)]
            + ["" if n not in own else pct(own[n], signed=True) for n in names]
        )
    margins_header = ["left out: static's margin on", *(LODO_NAMES.get(n, n) for n in names)]
    return "\n\n".join(
        [table(header, body), table(chosen_header, chosen), table(margins_header, margins)]
    )


def errors(rows: Rows) -> str:
    """Test-split ρ(u_k, own error) per dataset and member: the estimators' own variance, the
    anchor-profile disagreement, and the neighbour disagreement chosen on the tuning splits."""
    test = [r for r in rows if r["split"] == "test"]
    models = list(test[0]["rho"])
    chosen = next(r["signal"] for r in test if "interval" in r)
    header = ["dataset", "signal", *models]
    body = []
    for r in test:
        if r["signal"] not in ("laplace", "anchors", chosen):
            continue
        cells = []
        for m in models:
            cell = f"{r['rho'][m]:+.2f}"
            if "interval" in r:
                low, high = r["interval"][m]
                cell += f" [{low:+.2f}, {high:+.2f}]"
            cells.append(f"**{cell}**" if r["rho"][m] >= 0.3 else cell)
        body.append([LODO_NAMES.get(r["dataset"], r["dataset"]), r["signal"], *cells])
    return table(header, body, right_from=2)


def serve(rows: Rows) -> str:
    """Each load scenario beside offline batched encoding: throughput, latency, batches, errors."""
    offline = next(r["texts_per_s"] for r in rows if r["scenario"] == "offline")
    header = ["scenario", "batching", "clients", "requests", "texts/s", "÷ offline", "p50 ms"]
    header += ["p99 ms", "mean batch", "5xx", "lost writes"]
    body = []
    for r in rows:
        if r["scenario"] == "offline":
            body.append(["offline `Pipeline.encode`", "one call", "", "", f"{offline:.1f}", "1.00"]
                        + [""] * 5)  # fmt: skip
            continue
        body.append(
            [
                r["scenario"],
                "on" if r["batching"] else "off (`--max-batch 1`)",
                str(r["clients"]),
                str(r["requests"]),
                f"{r['texts_per_s']:.1f}",
                f"{r['texts_per_s'] / offline:.2f}",
                f"{r['p50_ms']:.0f}",
                f"{r['p99_ms']:.0f}",
                "" if r["mean_batch"] is None else f"{r['mean_batch']:.1f}",
                str(r["errors_5xx"]),
                "" if r["lost_writes"] is None else str(r["lost_writes"]),
            ]
        )
    return table(header, body, right_from=2)


def figure(x: float | None, spec: str) -> str:
    """A number formatted, or '' where a row has none."""
    return "" if x is None else format(x, spec)


def pieces(rows: Rows) -> str:
    """Each --max-piece setting's medians: the write's time and CPU, the searches beside it."""
    header = ["`--max-piece`", "beside the write", "write s", "÷ 256", "encoder CPU s", "÷ 256"]
    header += ["encode calls", "searches", "first ms", "÷ 256", "p50 ms", "p95 ms", "÷ 256"]
    header += ["max ms"]
    body = [
        [
            str(r["max_piece"]),
            "single requests" if r["stream"] else "nothing",
            f"{r['write_s']:.1f}",
            f"{r['write_vs_256']:.2f}",
            f"{r['encoder_cpu_s']:.1f}",
            f"{r['encoder_cpu_vs_256']:.2f}",
            f"{r['batches']:g}",
            figure(r["searches"], "g"),
            figure(r["search_first_ms"], ".0f"),
            figure(r["search_first_vs_256"], ".2f"),
            figure(r["search_p50_ms"], ".0f"),
            figure(r["search_p95_ms"], ".0f"),
            figure(r["search_p95_vs_256"], ".2f"),
            figure(r["search_max_ms"], ".0f"),
        ]
        for r in rows
    ]
    return table(header, body, right_from=2)


def chunking(rows: Rows) -> str:
    """SciFact nDCG@10, documents embedded whole against chunked with best-chunk scoring."""
    header = ["score", "truncated (whole documents)", "chunked, best chunk", "difference"]
    body = []
    for score in dict.fromkeys(r["score"] for r in rows):
        get = {r["mode"]: r for r in rows if r["score"] == score}
        whole, parts = get["truncated"]["ndcg@10"], get["chunked"]["ndcg@10"]
        body.append([score, pct(whole), pct(parts), pct(parts - whole, signed=True)])
    return table(header, body)


SEARCH_LABELS = {
    "hybrid": "hybrid, hybrid calibrator (shipped)",
    "hybrid, dense calibrator along the fused list": "hybrid, dense calibrator read along the "
    "fused list (before; still what a calibrator without a hybrid one gives)",
    "dense": "dense",
}


def calibration_by_search(rows: Rows) -> str:
    """p_relevant on SciFact test by kind of search, under the pipeline's own score."""
    header = [
        "p_relevant of hits of a search",
        "ECE, 15 bins",
        "Brier",
        "AUROC",
        "at p ≥ 0.03: relevant kept / irrelevant dropped",
    ]
    body = []
    for r in (r for r in rows if r["table"] == "main"):
        at = r["at_0.03"]
        body.append(
            [
                SEARCH_LABELS.get(r["search"], r["search"]),
                f"{r['ece15']:.3f}",
                f"{r['brier']:.4f}",
                f"{r['auroc']:.3f}",
                f"{at['relevant_kept']:.1%} / {at['irrelevant_dropped']:.1%}",
            ]
        )
    return table(header, body)


def calibration_by_score(rows: Rows) -> str:
    """p_relevant on SciFact test of dense and hybrid searches under each other score."""
    header = ["score", "ECE dense / hybrid", "AUROC dense / hybrid"]
    got = {r["search"]: r for r in rows if r["table"] == "score"}
    scores = dict.fromkeys(name.split("score=")[1] for name in got)
    body = []
    for score in scores:
        dense, hybrid = got[f"dense, score={score}"], got[f"hybrid, score={score}"]
        body.append(
            [
                f"`{score}`",
                f"{dense['ece15']:.3f} / {hybrid['ece15']:.3f}",
                f"{dense['auroc']:.3f} / {hybrid['auroc']:.3f}",
            ]
        )
    return table(header, body)


def tune_own_data(rows: Rows) -> str:
    """`probembed tune` on LIMIT-small's dev half: what it chose, nDCG@10 of each pipeline on
    dev and test (dense and hybrid), and the calibration of the top-10 test hits."""
    settings = next(r for r in rows if r["table"] == "settings")
    dropped = ", ".join(settings["dropped"]) or "none"
    chosen = f"Chosen on dev: {settings_text(settings['settings'])} (members dropped: {dropped})."
    ndcg = {
        (r["pipeline"], r["split"], r["search"]): r["value"] for r in rows if r["table"] == "ndcg"
    }
    labels = {"retrieval": "`retrieval` as shipped"}
    singles = [p for p in dict.fromkeys(p for p, _, _ in ndcg) if p.startswith("single:")]
    labels |= {p: f"{p.removeprefix('single:')} alone" for p in singles}
    labels["tuned"] = "tuned on dev"
    header = ["nDCG@10", "dev (the tuning split)", "test", "test, `--hybrid`"]
    cells = (("dev", "dense"), ("test", "dense"), ("test", "hybrid"))
    body = [[label, *(pct(ndcg.get((p, *c))) for c in cells)] for p, label in labels.items()]
    calibrated = {
        "retrieval": "`retrieval` (calibrated on SciFact)",
        "tuned": "tuned (calibrated on dev)",
    }
    trust = [
        [calibrated[r["pipeline"]], f"{r['mean_p_relevant']:.3f}", f"{r['share_relevant']:.3f}"]
        for r in rows
        if r["table"] == "calibration"
    ]
    hits = table(["top-10 test hits", "mean p_relevant", "share relevant"], trust)
    return f"{chosen}\n\n{table(header, body)}\n\n{hits}"


ABSTENTION_SIGNALS = {
    "top_p_relevant": "first hit's `p_relevant`",
    "confidence": "query's `confidence`",
    "top_score": "first hit's `score` (hybrid: its RRF value)",
    "top_std": "first hit's `std`, lower read as surer",
    "top_gap": "first hit's score minus the second's",
}


def interval_cell(figure: float, interval: Sequence[float], signed: bool = False) -> str:
    """A figure with its 95% interval, three decimals."""
    form = "+.3f" if signed else ".3f"
    low, high = interval
    return f"{figure:{form}} [{low:{form}}, {high:{form}}]"


def abstention_aurocs(rows: Rows) -> str:
    """Per signal, AUROC of answerable SciFact test questions against unanswerable and
    off-topic ones, dense and hybrid; the learned score's paired gain over the best single."""
    cells = [(k, o) for k in ("dense", "hybrid") for o in ("unanswerable", "off_topic")]
    header = ["AUROC, answerable against", *(f"{o.replace('_', '-')}, {k}" for k, o in cells)]
    aurocs = {(r["search"], r["signal"]): r for r in rows if r["table"] == "auroc"}
    body = []
    for signal in dict.fromkeys(s for _, s in aurocs):
        figures = [aurocs[k, signal][f"vs_{o}"] for k, o in cells]
        label = ABSTENTION_SIGNALS.get(signal, signal)
        body.append([label, *(interval_cell(f["auroc"], f["interval"]) for f in figures)])
        found = [aurocs[k, signal].get(f"minus_best_vs_{o}") for k, o in cells]
        gains = [g for g in found if g]
        if len(gains) == len(cells):
            body.append(
                [
                    "the same minus the best single signal (paired bootstrap)",
                    *(
                        f"{interval_cell(g['difference'], g['interval'], True)} ({g['best']})"
                        for g in gains
                    ),
                ]
            )
    return table(header, body)


def abstention_kept(rows: Rows) -> str:
    """Share of each group of SciFact test questions a min_p_relevant leaves with a hit."""
    kinds, groups = ("dense", "hybrid"), ("answerable", "unanswerable", "off_topic")
    header = [
        "min_p_relevant",
        *(f"keep ≥ 1 hit, {k}: answerable / unanswerable / off-topic" for k in kinds),
    ]
    kept = {(r["search"], r["min_p_relevant"]): r for r in rows if r["table"] == "kept"}
    thresholds = dict.fromkeys(t for _, t in kept)
    body = [
        [f"{t:g}", *(" / ".join(f"{kept[k, t][g]:.0%}" for g in groups) for k in kinds)]
        for t in thresholds
    ]
    return table(header, body)


def abstention(rows: Rows) -> str:
    """The abstention benchmark's two tables: signals' AUROCs, then what thresholds keep."""
    return f"{abstention_aurocs(rows)}\n\n{abstention_kept(rows)}"


SECTIONS: dict[str, tuple[str, Callable[[Rows], str]]] = {
    "lodo": ("lodo.json", lodo),
    "headroom": ("lodo_headroom.json", headroom),
    "errors": ("error_signals.json", errors),
    "geometry": ("lodo_geometry.json", geometry),
    "task": ("lodo_task.json", task),
    "similar": ("lodo_similar.json", similar),
    "regret": ("lodo_regret.json", regret),
    "halves": ("lodo_halves.json", halves),
    "quality": ("quality.json", quality),
    "diagnostics": ("quality.json", diagnostics),
    "failure": ("quality.json", failure),
    "search": ("search.json", search),
    "variance": ("variance.json", variance),
    "serve": ("serve.json", serve),
    "pieces": ("pieces.json", pieces),
    "chunking": ("chunking.json", chunking),
    "calibration_by_search": ("search_calibration.json", calibration_by_search),
    "calibration_by_score": ("search_calibration.json", calibration_by_score),
    "tune_own_data": ("tune_own_data.json", tune_own_data),
    "abstention": ("abstention.json", abstention),
}


def rows_of(name: str) -> Rows:
    """The tidy rows of a results file (quality.json keeps them under "rows")."""
    data = json.loads((RESULTS / name).read_text(encoding="utf-8"))
    return data["rows"] if isinstance(data, dict) else data


def marked_files(root: Path) -> list[Path]:
    """README.md and the pages under docs/: the files that may hold a table's markers."""
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def holder(texts: dict[Path, str], section: str) -> Path:
    """The one file whose text has the section's opening marker."""
    holding = [path for path, text in texts.items() if f"<!-- {section} -->\n" in text]
    if len(holding) != 1:
        found = ", ".join(path.name for path in holding) or "none of README.md and docs/*.md"
        raise SystemExit(f"<!-- {section} --> must be in one file; it is in {found}")
    return holding[0]


def render(texts: dict[Path, str]) -> dict[Path, str]:
    """Each file's text with every marked table regenerated in the file that holds it."""
    new = dict(texts)
    for section, (source, make) in SECTIONS.items():
        path = holder(new, section)
        new[path] = replaced(new[path], section, make(rows_of(source)))
    return new


def replaced(text: str, section: str, body: str) -> str:
    """`text` with `body` between the section's markers, which it must have."""
    pattern = re.compile(rf"(<!-- {section} -->\n).*?(\n<!-- /{section} -->)", re.S)
    if not pattern.search(text):
        raise SystemExit(f"<!-- {section} --> has no <!-- /{section} --> on a line after it")
    return pattern.sub(lambda m: m.group(1) + body + m.group(2), text)


def main(argv: Sequence[str] | None = None, root: Path = ROOT) -> int:
    """Regenerate the tables, or with --check report whether they are current; the exit status."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--check", action="store_true", help="exit 1 if a table is stale")
    args = parser.parse_args(argv)
    old = {path: path.read_text(encoding="utf-8") for path in marked_files(root)}
    new = render(old)
    stale = [path for path in old if new[path] != old[path]]
    names = ", ".join(str(path.relative_to(root)) for path in stale)
    if args.check:
        print(f"tables are stale in {names}" if stale else "tables are current")
        return 1 if stale else 0
    for path in stale:
        path.write_text(new[path], encoding="utf-8")
    print(f"tables rewritten in {names}" if stale else "tables unchanged")
    return 0


if __name__ == "__main__":
    sys.exit(main())
