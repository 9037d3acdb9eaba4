"""The analyst's and newcomer's subcommands: ``estimates``, ``metrics``, ``plan``, ``demo``.

They register themselves in :data:`ldpkit.cli.COMMANDS` when imported.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import importlib.util
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np

from .. import plan as plan_campaign
from .. import required_n
from ..analyst import TOKEN_ENV, Analyst
from ..errors import ParameterError
from ..kinds import Campaign, PlanTarget
from ..kinds.base import DEFAULT_FORGERY_FRACTION
from ..kinds.render import aligned_lines
from ..mechanisms import NAMES, Choice, choose
from ..mechanisms import mechanism as make_mechanism
from ..metrics import MetricDefinition, check_forgery_fraction
from ..planner import Plan
from .registry import command

COLLECTOR_ENV = "LDPKIT_COLLECTOR"
DEFAULT_COLLECTOR = "http://127.0.0.1:8787"
TIMEOUT_ENV = "LDPKIT_TIMEOUT"
DEFAULT_TIMEOUT = 10.0


def _connection_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--collector",
        default=os.environ.get(COLLECTOR_ENV, DEFAULT_COLLECTOR),
        help=f"collector URL (default: ${COLLECTOR_ENV} or {DEFAULT_COLLECTOR})",
    )
    parser.add_argument("--token", default=None, help=f"read token (default: ${TOKEN_ENV})")
    parser.add_argument(
        "--timeout",
        metavar="SECONDS",
        default=None,
        help=f"how long to wait for each answer (default: ${TIMEOUT_ENV} or "
        f"{DEFAULT_TIMEOUT:g}); past it the CLI says the collector did not answer in time",
    )
    parser.add_argument(
        "--format", choices=["table", "csv", "json"], default="table", help="output format"
    )


def _analyst(args: argparse.Namespace) -> Analyst:
    token = args.token if args.token is not None else os.environ.get(TOKEN_ENV)
    if not token:
        raise ParameterError(f"a read token is needed: give --token TOKEN or set {TOKEN_ENV}")
    # (`plan --metric` reads a definition without the connection flags' --timeout)
    return Analyst(args.collector, token, timeout=_timeout(getattr(args, "timeout", None)))


def _timeout(given: str | None) -> float:
    """``--timeout``, else $LDPKIT_TIMEOUT, else the default: seconds > 0."""
    text, source = given, "--timeout"
    if text is None:
        text, source = os.environ.get(TIMEOUT_ENV), f"${TIMEOUT_ENV}"
    if text is None or not text.strip():
        return DEFAULT_TIMEOUT
    try:
        seconds = float(text)
    except ValueError:
        seconds = float("nan")
    if not (0 < seconds < float("inf")):
        raise ParameterError(f"{source} takes a number of seconds > 0, got {text!r}")
    return seconds


def _metric_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("metric", help="metric name")
    _connection_arguments(parser)


def _estimates_arguments(parser: argparse.ArgumentParser) -> None:
    _metric_arguments(parser)
    parser.add_argument("--from", dest="start", help="first bucket: ISO date/time or unix seconds")
    parser.add_argument("--to", dest="end", help="end (exclusive): ISO date/time or unix seconds")
    parser.add_argument("--level", type=float, default=0.95, help="interval level (default 0.95)")
    parser.add_argument(
        "--version",
        dest="metric_version",
        metavar="FINGERPRINT",
        help="a version of the metric (default: the current one; `ldpkit versions` lists them)",
    )
    parser.add_argument(
        "--consistent", action="store_true", help="add Norm-Sub consistent estimates"
    )
    parser.add_argument(
        "--forgery-fraction",
        type=float,
        metavar="BETA",
        help="the fraction of forged reports each forgery shift is about (default: the "
        "metric's, 0.01 unless its definition says)",
    )
    parser.add_argument(
        "--robust",
        action="store_true",
        help="add the estimates robust to the forgery fraction of forged reports (categorical "
        "and numeric metrics): projected onto what every honest population satisfies, with "
        "intervals for the genuine reporters (docs/statistics.md)",
    )
    parser.add_argument(
        "--simultaneous",
        action="store_true",
        help="intervals that cover a whole group together at the level (a hierarchy's depth "
        "or subtree, a table's cells and each marginal, a categorical metric's items)",
    )
    parser.add_argument(
        "--wait",
        type=float,
        metavar="SECONDS",
        help="strings, hierarchies, tables and distributions are computed off the request "
        "path: wait up to SECONDS for an estimate of the data as it is now (default: the "
        "latest one at once; the output says how fresh it is)",
    )
    parser.add_argument(
        "--per-bucket",
        action="store_true",
        help="also estimate each time bucket (table: after the totals; csv: one row per bucket)",
    )
    parser.add_argument(
        "--plot",
        metavar="FILE",
        help="write a plot with interval whiskers (.png, .svg or .pdf; .png if none given)",
    )
    kind = parser.add_argument_group("each kind's own questions (docs/protocol.md)")
    kind.add_argument("--bins", type=int, help="distribution: K equal bins (default 16)")
    kind.add_argument("--edges", metavar="A,B,...", help="distribution: bins between these edges")
    kind.add_argument("--quantiles", metavar="Q,...", help="distribution: e.g. 0.5,0.9")
    kind.add_argument("--range", dest="range_", metavar="A,B", help="distribution: [A, B)")
    kind.add_argument(
        "--estimand",
        choices=("reporters", "population"),
        help="distribution: intervals for the reporting users' bins (default) or the "
        "population's they were drawn from",
    )
    kind.add_argument(
        "--estimator",
        choices=("inversion", "ml"),
        help="categorical (grr, rr, exponential): ml is the constrained maximum likelihood "
        "with profile-likelihood intervals (default: inversion, unbiased)",
    )
    kind.add_argument("--depth", type=int, help="hierarchy: the level (1 = top; default leaves)")
    kind.add_argument("--subtree", metavar="PATH", help="hierarchy: the nodes under PATH")
    kind.add_argument("--candidates", metavar="S,...", help="strings: estimate these strings")


def _numbers(text: str | None, flag: str) -> list[float] | None:
    if text is None:
        return None
    try:
        return [float(x) for x in text.split(",")]
    except ValueError:
        raise ParameterError(f"{flag} takes numbers separated by commas, got {text!r}") from None


PLOT_FORMATS = (".png", ".svg", ".pdf")


def _plot_path(given: str) -> Path:
    """Where ``--plot`` writes, checked before the query: a missing folder or an unknown
    format is an argument error, not a traceback after the work is done."""
    path = Path(given).expanduser()
    if not path.suffix:
        path = path.with_suffix(".png")  # what matplotlib would write anyway: say so
    if path.suffix.lower() not in PLOT_FORMATS:
        raise ParameterError(
            f"--plot {given}: write one of {', '.join(PLOT_FORMATS)}, not {path.suffix!r}"
        )
    if not path.parent.is_dir():
        raise ParameterError(
            f"--plot {given}: the folder {path.parent} does not exist (create it first)"
        )
    if importlib.util.find_spec("matplotlib") is None:
        raise ParameterError("--plot needs matplotlib: pip install 'ldpkit[plots]'")
    return path


@command("estimates", "print a metric's estimates with confidence intervals", _estimates_arguments)
def estimates(args: argparse.Namespace) -> int:
    plot = _plot_path(args.plot) if args.plot else None
    analyst = _analyst(args)
    result = analyst.estimates(
        args.metric,
        start=args.start,
        end=args.end,
        level=args.level,
        consistent=args.consistent,
        per_bucket=args.per_bucket or False,
        version=args.metric_version,
        bins=args.bins,
        edges=_numbers(args.edges, "--edges"),
        quantiles=_numbers(args.quantiles, "--quantiles"),
        range_=_pair(_numbers(args.range_, "--range")),
        estimand=args.estimand,
        estimator=args.estimator,
        depth=args.depth,
        subtree=args.subtree,
        candidates=None if args.candidates is None else args.candidates.split(","),
        forgery_fraction=args.forgery_fraction,
        robust=args.robust,
        simultaneous=args.simultaneous,
        wait=args.wait,
    )
    if result.n == 0 and args.metric_version is None:
        _note_older_versions(analyst, args.metric)
    if args.format == "json":
        print(result.to_json())
    elif args.format == "csv":
        sys.stdout.write(result.to_csv())
    else:
        print(result.to_table())
    if plot is not None:
        from ..analyst.plots import plot_estimate

        plot_estimate(result, plot)
        print(f"plot written to {plot}", file=sys.stderr)
    return 0


def _pair(values: list[float] | None) -> tuple[float, float] | None:
    if values is None:
        return None
    if len(values) != 2:
        raise ParameterError(f"--range takes two numbers A,B, got {len(values)}")
    return values[0], values[1]


def _note_older_versions(analyst: Analyst, metric: str) -> None:
    """n=0 right after a definition change hides the data of the old versions: say where."""
    known = analyst.versions(metric)
    others = [v for v in known if not v.current and v.n > 0]
    if not others:
        return
    current = next((v.fingerprint for v in known if v.current), "?")
    listed = ", ".join(
        f"{v.fingerprint} (n={v.n}, epsilon={v.definition.epsilon:g})" for v in others
    )
    print(
        f"note: the current version {current} of {metric} holds no reports in this range; "
        f"older versions do: {listed}. Pick one with --version FINGERPRINT "
        f"(`ldpkit versions {metric}` lists them all).",
        file=sys.stderr,
    )


@command(
    "versions",
    "list a metric's versions (one per change of its parameters) with their reports",
    _metric_arguments,
)
def versions(args: argparse.Namespace) -> int:
    found = _analyst(args).versions(args.metric)
    rows = [
        {
            "version": v.fingerprint,
            "current": "yes" if v.current else "",
            "n": v.n,
            "mechanism": v.definition.resolved_mechanism,
            "epsilon": v.definition.epsilon,
            "bucket": v.definition.bucket.value,
        }
        for v in found
    ]
    if args.format == "json":
        listed = [{**r, "current": v.current} for r, v in zip(rows, found, strict=True)]
        print(json.dumps(listed, indent=2))
    elif args.format == "csv":
        _print_csv(rows)
    else:
        text = [
            {k: f"{v:g}" if isinstance(v, float) else str(v) for k, v in r.items()} for r in rows
        ]
        print("\n".join(aligned_lines(text)))
        print(f"\nestimate one: ldpkit estimates {args.metric} --version FINGERPRINT")
    return 0


@command("metrics", "list the collector's metric definitions", _connection_arguments)
def metrics(args: argparse.Namespace) -> int:
    definitions = _analyst(args).metrics()
    if args.format == "json":
        print(json.dumps([d.to_dict() for d in definitions], indent=2))
        return 0
    rows = [_metric_row(d) for d in definitions]
    if args.format == "csv":
        _print_csv(rows, METRIC_COLUMNS)
        return 0
    if not definitions:
        print("no metrics defined yet (PUT /v1/metrics/NAME with an admin token, or the config)")
        return 0
    table = [
        {
            **{k: r[k] for k in ("name", "kind", "mechanism", "epsilon", "bucket")},
            "domain": d.kind_spec.describe(d),  # what its values are, in a few words
            "version": r["version"],
        }
        for r, d in zip(rows, definitions, strict=True)
    ]
    print("\n".join(aligned_lines(table)))
    return 0


def _metric_row(d: MetricDefinition) -> dict[str, str]:
    low, high = (f"{b:g}" for b in d.bounds) if d.bounds is not None else ("", "")
    return {
        "name": d.name,
        "kind": d.kind.value,
        "mechanism": d.resolved_mechanism,
        "epsilon": f"{d.epsilon:g}",
        "bucket": d.bucket.value,
        "categories": "|".join(d.categories) if d.categories is not None else "",
        "low": low,
        "high": high,
        "version": d.fingerprint,
    }


METRIC_COLUMNS = [
    "name",
    "kind",
    "mechanism",
    "epsilon",
    "bucket",
    "categories",
    "low",
    "high",
    "version",
]


def _plan_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--mechanism", default="auto", help=f"one of {', '.join(NAMES)} (default auto)"
    )
    parser.add_argument(
        "--epsilon", type=float, help="epsilon per report (with --metric: the metric's)"
    )
    domain = parser.add_mutually_exclusive_group(required=True)
    domain.add_argument("--domain-size", "-d", type=int, help="number of categories")
    domain.add_argument(
        "--bounds", type=float, nargs=2, metavar=("LO", "HI"), help="numeric bounds"
    )
    domain.add_argument(
        "--distribution",
        type=float,
        nargs=2,
        metavar=("LO", "HI"),
        help="a distribution over these bounds (with --resolution)",
    )
    domain.add_argument("--leaves", metavar="PATH,...", help="a hierarchy: its leaf paths")
    domain.add_argument(
        "--dimension",
        action="append",
        metavar="NAME=A,B,...",
        help="a table: one attribute and its categories (give it once per attribute)",
    )
    domain.add_argument("--max-length", type=int, help="strings: the longest, in bytes (UTF-8)")
    domain.add_argument("--metric", help="a metric defined on the collector (--collector, --token)")
    parser.add_argument("--resolution", type=int, default=1024, help="distribution: leaves")
    parser.add_argument("--separator", default="/", help="hierarchy: path separator (default /)")
    parser.add_argument("--k", type=int, default=20, help="strings: heavy hitters (default 20)")
    parser.add_argument(
        "--collector",
        default=os.environ.get(COLLECTOR_ENV, DEFAULT_COLLECTOR),
        help=f"with --metric: collector URL (default: ${COLLECTOR_ENV} or {DEFAULT_COLLECTOR})",
    )
    parser.add_argument("--token", default=None, help=f"with --metric: read token (${TOKEN_ENV})")
    parser.add_argument("--n", type=int, help="number of reports: print the expected half-width")
    parser.add_argument("--half-width", type=float, help="target half-width: print the n needed")
    parser.add_argument("--level", type=float, default=0.95, help="interval level (default 0.95)")
    parser.add_argument("--frequency", type=float, help="assumed item frequency (default worst)")
    parser.add_argument(
        "--estimand",
        choices=["reporters", "population"],
        default="reporters",
        help="distribution: intervals about the reporting users' values (default) or "
        "the population they were drawn from",
    )
    parser.add_argument(
        "--forgery-fraction",
        type=float,
        metavar="BETA",
        help="the forged fraction whose shift to show (default: the metric's, or 0.01)",
    )
    parser.add_argument(
        "--format", choices=["table", "csv", "json"], default="table", help="output format"
    )


# The core's messages name its Python parameters; the plan command names its flags.
_FLAG_NAMES = (
    (re.compile(r"bounds=\(lo, hi\)"), "--bounds LO HI"),
    (re.compile(r"(?<![-\w])domain_size\b"), "--domain-size"),
    (re.compile(r"(?<![-\w])half_width\b"), "--half-width"),
    (re.compile(r"\bnot bounds\b"), "not --bounds"),
    (re.compile(r"^(epsilon|n|level|frequency|bounds)\b"), r"--\1"),
    (re.compile(r"^forgery_fraction\b"), "--forgery-fraction"),
    (re.compile(r"^'(\w+)' is"), r"--mechanism \1 is"),
)


def _in_flags(exc: ParameterError) -> ParameterError:
    message = str(exc)
    for pattern, flag in _FLAG_NAMES:
        message = pattern.sub(flag, message)
    return ParameterError(message)


@command(
    "plan", "expected interval half-width for n reports, or the n for a target", _plan_arguments
)
def plan(args: argparse.Namespace) -> int:
    if args.epsilon is None and args.metric is None:
        raise ParameterError("give --epsilon (the epsilon of one report), or --metric NAME")
    definition = _plan_definition(args)
    beta = _plan_fraction(args, definition)
    if definition is None:  # --domain-size or --bounds: a mechanism's campaign
        bounds = tuple(args.bounds) if args.bounds else None
        c = Campaign(args.mechanism, args.epsilon, args.domain_size, bounds)
        return _plan_campaign(args, c, beta, None)
    campaign = definition.kind_spec.campaign(definition)
    if campaign is not None:  # a categorical or numeric metric of the collector
        return _plan_campaign(args, campaign, beta, definition)
    return _plan_kind(args, definition, beta)


def _plan_fraction(args: argparse.Namespace, definition: MetricDefinition | None) -> float:
    """``--forgery-fraction``, else the metric's, else the default (0.01)."""
    if args.forgery_fraction is None:
        return (
            DEFAULT_FORGERY_FRACTION
            if definition is None
            else definition.effective_forgery_fraction
        )
    try:
        return check_forgery_fraction(args.forgery_fraction)
    except ParameterError as exc:
        raise _in_flags(exc) from None


_IN_SENTENCE = {"given", "mechanism", "epsilon", "n", "level", "half_width"}


def _plan_campaign(
    args: argparse.Namespace, c: Campaign, beta: float, definition: MetricDefinition | None
) -> int:
    """Plan ``c`` with :func:`ldpkit.plan` (for ``--n``) and :func:`ldpkit.required_n`
    (for ``--half-width``), both if both are given, and the forgery shift it would disclose
    at ``beta`` (the metric's, if ``definition`` is given)."""
    if args.n is None and args.half_width is None:
        raise ParameterError("give --n (to get the half-width) and/or --half-width (to get n)")
    choice, plans = _campaign_plans(args, c)
    what = "fraction" if c.domain_size is not None else "mean"
    shifts = (
        _campaign_shifts(c, plans[0][1], what, beta)
        if definition is None
        else definition.kind_spec.forgery_shifts(definition, beta)
    )
    rows = [{**_plan_dict(g, p), **_shift_fields(beta, shifts)} for g, p in plans]
    if args.format == "json":
        print(json.dumps({"choice": _choice_dict(choice), "plans": rows}, indent=2))
    elif args.format == "csv":
        _print_csv(rows)
    else:
        if choice is not None:
            print(choice.explain())
            print()
        for given, p in plans:
            print("\n".join(_campaign_lines(args, given, p, what)))
        print("\n".join(_shift_lines(beta, shifts)))
    return 0


def _campaign_shifts(c: Campaign, p: Plan, what: str, beta: float) -> dict[str, float]:
    """What the campaign's answers would disclose as forgery shift (its mechanism's)."""
    size: dict[str, Any] = (
        {"domain_size": c.domain_size} if c.domain_size is not None else {"bounds": c.bounds}
    )
    m: Any = make_mechanism(p.mechanism, epsilon=p.epsilon, **size)
    shift = float(np.max(m.estimate(m.empty_aggregate()).forgery_shift(beta)))
    return {"each category's fraction" if what == "fraction" else "the mean": shift}


def _shift_fields(beta: float, shifts: dict[str, float]) -> dict[str, Any]:
    """A plan's forgery shift as JSON/CSV fields (one number, or one per estimate)."""
    shown: Any = next(iter(shifts.values())) if len(shifts) == 1 else shifts
    return {"forgery_fraction": beta, "forgery_shift": shown}


def _shift_lines(beta: float, shifts: dict[str, float]) -> list[str]:
    head = (
        f"forgery shift: how far {beta * 100:g}% forged reports could move an estimate, "
        "whatever they are"
    )
    return [head, *(f"  {what}: {shift:.4g}" for what, shift in shifts.items())]


def _campaign_plans(
    args: argparse.Namespace, c: Campaign
) -> tuple[Choice | None, list[tuple[str, Plan]]]:
    """What ``auto`` chose and the plans, all computed before anything is printed (an error
    leaves no half output), errors in the flags' names."""
    common = dict(
        epsilon=c.epsilon,
        domain_size=c.domain_size,
        bounds=c.bounds,
        level=args.level,
        frequency=args.frequency,
    )
    try:
        choice = (
            choose(epsilon=c.epsilon, domain_size=c.domain_size, bounds=c.bounds)
            if c.mechanism == "auto"
            else None
        )
        plans = (
            [("n", plan_campaign(c.mechanism, n=args.n, **common))] if args.n is not None else []
        )
        if args.half_width is not None:
            for_width = required_n(c.mechanism, half_width=args.half_width, **common)
            plans.append(("half_width", for_width))
    except ParameterError as exc:
        raise _in_flags(exc) from None
    return choice, plans


def _campaign_lines(args: argparse.Namespace, given: str, p: Plan, what: str) -> list[str]:
    if given == "n":
        head = (
            f"{p.mechanism}, epsilon={p.epsilon:g}, n={p.n}: expected {p.level:.0%} "
            f"half-width of the {what} {p.half_width:.6g}"
        )
    else:
        head = (
            f"{p.mechanism}, epsilon={p.epsilon:g}: n >= {p.n} reports for a "
            f"{p.level:.0%} half-width of {args.half_width:g}"
        )
    lines = [head]
    if p.frequency is not None:
        held = (
            f"the worst case over item frequencies (an item held by {p.frequency:.1%})"
            if args.frequency is None
            else f"an item held by {p.frequency:.1%} of users"
        )
        lines.append(f"  assumed: {held}")
    elif what == "mean":
        lines.append("  assumed: the mechanism's worst noise over the bounds")
    # Every other field of the Plan, whatever the planner adds: no rework here.
    for name, value in _plan_dict(given, p).items():
        if name not in _IN_SENTENCE:
            lines.append(f"  {name.replace('_', ' ')}: {_table_cell(value)}")
    return lines


def _plan_definition(args: argparse.Namespace) -> MetricDefinition | None:
    """The metric a kind's plan is about: from the flags, or the collector's (--metric)."""
    if args.metric is not None:
        found = {d.name: d for d in _analyst(args).metrics()}
        if args.metric not in found:
            raise ParameterError(
                f"--metric {args.metric}: the collector has no such metric "
                f"(it has: {', '.join(sorted(found)) or 'none'})"
            )
        return found[args.metric]
    data: dict[str, Any] = {"epsilon": args.epsilon, "mechanism": args.mechanism}
    if args.distribution is not None:
        data.update(kind="distribution", bounds=args.distribution, resolution=args.resolution)
    elif args.leaves is not None:
        data.update(kind="hierarchy", categories=args.leaves.split(","), separator=args.separator)
    elif args.dimension is not None:
        data.update(kind="table", dimensions=_dimensions(args.dimension))
    elif args.max_length is not None:
        data.update(kind="strings", max_length=args.max_length, k=args.k)
    else:
        return None
    return MetricDefinition.from_dict("plan", data)


def _dimensions(flags: list[str]) -> dict[str, list[str]]:
    dims: dict[str, list[str]] = {}
    for given in flags:
        name, sep, cats = given.partition("=")
        if not sep or not name:
            raise ParameterError(f"--dimension takes NAME=A,B,..., got {given!r}")
        dims[name] = cats.split(",")
    return dims


def _plan_kind(args: argparse.Namespace, definition: MetricDefinition, beta: float) -> int:
    """Plan a metric with its kind's own planner (a distribution, hierarchy, table,
    strings), and the forgery shift its answers would disclose at ``beta``."""
    target = PlanTarget(args.n, args.half_width, args.frequency, args.level, args.estimand)
    planned = definition.kind_spec.plan(definition, target)
    shifts = definition.kind_spec.forgery_shifts(definition, beta)
    data = dataclasses.asdict(planned.plan)
    if args.format == "json":
        as_json = {"kind": definition.kind.value, "plan": data, **_shift_fields(beta, shifts)}
        print(json.dumps(as_json, indent=2))
    elif args.format == "csv":
        _print_csv([{**data, **_shift_fields(beta, shifts)}])
    else:
        name = f"metric {definition.name}, " if args.metric else ""
        print(f"{name}{definition.kind.value}, mechanism {definition.resolved_mechanism}")
        print(planned.explain())
        print("\n".join(_shift_lines(beta, shifts)))
    return 0


def _plan_dict(given: str, p: Plan) -> dict[str, Any]:
    return {"given": given, **dataclasses.asdict(p)}


def _choice_dict(choice: Choice | None) -> dict[str, Any] | None:
    if choice is None:
        return None
    keys = ("name", "tolerance", "variances", "report_bytes", "collector_cost")
    return {k: getattr(choice, k) for k in keys}


def _print_csv(rows: list[dict[str, Any]], columns: list[str] | None = None) -> None:
    """CSV on stdout; a cell that is neither a number nor text is written as JSON."""
    writer = csv.DictWriter(sys.stdout, fieldnames=columns or list(rows[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows({k: _csv_cell(v) for k, v in row.items()} for row in rows)


def _csv_cell(value: Any) -> Any:
    return value if value is None or isinstance(value, str | int | float) else json.dumps(value)


def _table_cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value) if isinstance(value, str | int) or value is None else json.dumps(value)


def _demo_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--users", type=int, default=20_000, help="simulated users (default 20000)")
    parser.add_argument("--seed", type=int, default=None, help="seed the simulation (default: OS)")
    parser.add_argument("--port", type=int, default=0, help="collector port (default: a free one)")
    parser.add_argument(
        "--serve",
        action="store_true",
        help="keep the collector running afterwards so the dashboard can be opened",
    )


@command(
    "demo", "start a collector, send simulated users' reports, print estimates", _demo_arguments
)
def demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    return run_demo(users=args.users, seed=args.seed, port=args.port, serve=args.serve)


def _conformance_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    plan = actions.add_parser(
        "plan", help="write metric definitions and inputs for a client under test"
    )
    plan.add_argument("--out", required=True, type=Path, help="where to write plan.json")
    plan.add_argument(
        "--reports",
        type=int,
        default=None,
        help="reports per input (default: 4000; fewer tests less)",
    )
    check = actions.add_parser("check", help="test a client's reports for a plan")
    check.add_argument("plan", type=Path, help="the plan.json the client answered")
    check.add_argument("reports", type=Path, help="the client's wire batch (msgpack)")
    check.add_argument(
        "--alpha",
        type=float,
        default=None,
        help="chance that a correct client fails (default: 1e-4)",
    )
    check.add_argument(
        "--accepted",
        type=Path,
        default=None,
        help="the client's {\"accepted\": [id, ...]}: which of the plan's `verify` "
        "definitions it accepted (required to pass)",
    )
    check.add_argument(
        "--device",
        type=Path,
        default=None,
        help="the client's answer to the plan's device script, {\"refused\": [step, ...], "
        '"batches": [hex, ...]}: its budget ledger and memo (required to pass)',
    )
    check.add_argument("--verbose", action="store_true", help="list every test")


@command(
    "conformance",
    "check that a client in any language samples every mechanism exactly",
    _conformance_arguments,
)
def conformance(args: argparse.Namespace) -> int:
    from .. import conformance as kit

    if args.action == "plan":
        reports = kit.DEFAULT_REPORTS if args.reports is None else args.reports
        path = kit.write_plan(args.out, reports)
        plan = json.loads(path.read_text())
        print(
            f"wrote {path}: {len(plan['metrics'])} metrics, {len(plan['inputs'])} inputs, "
            f"{sum(i['count'] for i in plan['inputs'])} reports to make"
        )
        print(
            f"next: perturb them with the client under test, then `ldpkit conformance check "
            f"{path} reports.msgpack --accepted accepted.json --device device.json`"
        )
        return 0
    answers = [p for p in (args.accepted, args.device) if p is not None]
    for path in (args.plan, args.reports, *answers):
        if not path.is_file():
            raise ParameterError(f"no such file: {path}")
    alpha = kit.DEFAULT_ALPHA if args.alpha is None else args.alpha
    verdict = kit.check(
        args.plan, args.reports, alpha=alpha, accepted=args.accepted, device=args.device
    )
    print(verdict.render(verbose=args.verbose))
    return 0 if verdict.passed else 1
