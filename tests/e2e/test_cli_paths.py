"""The analyst's CLI where a newcomer trips: plot paths, pipes, phrasing, log levels."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.readiness import HANG_GUARD

from .conftest import READ, Populated

CLI = [sys.executable, "-m", "ldpkit.cli"]


def ldpkit(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("LDPKIT_")}
    return subprocess.run(
        [*CLI, *args],
        capture_output=True,
        text=True,
        timeout=HANG_GUARD,  # a hang, not a slow machine: some calls --wait 120
        cwd=cwd,
        env={**clean, **(env or {})},
    )


def test_plot_paths(populated: Populated, tmp_path: Path) -> None:
    query = ["estimates", "theme", "--collector", populated.url, "--token", READ]
    missing = ldpkit(*query, "--plot", str(tmp_path / "no" / "such" / "theme.png"))
    assert missing.returncode == 2, missing.stderr
    assert "Traceback" not in missing.stderr
    assert "--plot" in missing.stderr and str(tmp_path / "no" / "such") in missing.stderr

    bare = ldpkit(*query, "--plot", "theme", cwd=tmp_path)
    assert bare.returncode == 0, bare.stderr
    assert (tmp_path / "theme.png").read_bytes()[:4] == b"\x89PNG"
    assert "written to theme.png" in bare.stderr

    svg = ldpkit(*query, "--plot", "theme.svg", cwd=tmp_path)
    assert svg.returncode == 0, svg.stderr
    assert b"<svg" in (tmp_path / "theme.svg").read_bytes()[:400]

    odd = ldpkit(*query, "--plot", "theme.docx", cwd=tmp_path)
    assert odd.returncode == 2 and "png" in odd.stderr and "Traceback" not in odd.stderr


def test_output_into_a_closed_pipe_is_quiet(populated: Populated) -> None:
    """`ldpkit estimates ... | head -c 1`: the reader goes away; no traceback."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("LDPKIT_")}
    proc = subprocess.Popen(
        [
            *CLI,
            "estimates",
            "theme",
            "--per-bucket",
            "--format",
            "json",
            "--collector",
            populated.url,
            "--token",
            READ,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=clean,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # before the command prints: its first write meets a closed pipe
    err = proc.stderr.read().decode()
    proc.wait(timeout=60)
    assert "Traceback" not in err and "BrokenPipe" not in err, err


def test_cli_messages_speak_in_flags(populated: Populated) -> None:
    """Errors name the command-line flags, not the Python API's parameters."""
    no_token = ldpkit("estimates", "theme", "--collector", populated.url)
    assert no_token.returncode == 2
    assert "--token" in no_token.stderr and "LDPKIT_READ_TOKEN" in no_token.stderr
    assert "token=" not in no_token.stderr
    no_token = ldpkit("metrics", "--collector", populated.url)
    assert no_token.returncode == 2 and "--token" in no_token.stderr

    cases = {
        ("--bounds", "0", "10", "--mechanism", "oue", "--n", "100"): "--domain-size",
        ("--domain-size", "8", "--mechanism", "piecewise", "--n", "100"): "--bounds LO HI",
        ("--domain-size", "8", "--n", "100", "--frequency", "2"): "--frequency",
        ("--domain-size", "8", "--n", "0"): "--n",
        ("--domain-size", "1", "--n", "10"): "--domain-size",
        ("--bounds", "5", "1", "--n", "10"): "--bounds",
        ("--domain-size", "8", "--half-width", "-1"): "--half-width",
        ("--bounds", "0", "1", "--n", "10", "--value-std", "-1"): "--value-std",
    }
    for args, flag in cases.items():
        out = ldpkit("plan", "--epsilon", "1", *args)
        assert out.returncode == 2, (args, out.stderr)
        assert flag in out.stderr, (args, out.stderr)
        for python_name in ("domain_size", "bounds=(", "half_width", "value_std", "token="):
            assert python_name not in out.stderr, (args, out.stderr)
        assert out.stdout == "", (args, out.stdout)  # no half table before the error
    eps = ldpkit("plan", "--epsilon", "0", "--domain-size", "8", "--n", "10")
    assert eps.returncode == 2 and "--epsilon" in eps.stderr


def test_wrong_kind_of_token_reads_well(populated: Populated) -> None:
    import urllib.error
    import urllib.request

    request = urllib.request.Request(
        populated.url + "/v1/reports",
        data=b"",
        method="POST",
        headers={"Authorization": f"Bearer {READ}"},
    )
    try:
        urllib.request.urlopen(request, timeout=10)
        raise AssertionError("a read token must not post reports")
    except urllib.error.HTTPError as exc:
        assert exc.code == 403
        assert "takes an ingest or relay token" in exc.read().decode()


def test_plan_formats_follow_the_plan_fields() -> None:
    import csv
    import dataclasses
    import io
    import json

    from ldpkit.planner import Plan

    fields = [f.name for f in dataclasses.fields(Plan)]
    args = ["plan", "--epsilon", "1", "--domain-size", "16", "--n", "10000", "--half-width", "0.01"]
    as_json = ldpkit(*args, "--format", "json")
    assert as_json.returncode == 0, as_json.stderr
    data = json.loads(as_json.stdout)
    assert [p["given"] for p in data["plans"]] == ["n", "half_width"]
    for p in data["plans"]:
        assert set(fields) <= set(p)
    assert data["choice"]["name"] == data["plans"][0]["mechanism"]
    assert set(data["choice"]["report_bytes"]) == set(data["choice"]["variances"])
    as_csv = ldpkit(*args, "--format", "csv")
    assert as_csv.returncode == 0, as_csv.stderr
    rows = list(csv.DictReader(io.StringIO(as_csv.stdout)))
    assert len(rows) == 2 and set(fields) <= set(rows[0])
    assert int(rows[1]["n"]) == data["plans"][1]["n"]
    table = ldpkit(*args)
    assert "per user variance: " in table.stdout  # a Plan field the sentence does not say


def test_metrics_listing_has_a_header_and_plain_csv(populated: Populated) -> None:
    import csv
    import io

    base = ["metrics", "--collector", populated.url, "--token", READ]
    table = ldpkit(*base)
    assert table.returncode == 0, table.stderr
    head = table.stdout.splitlines()[0].split()
    assert head[:3] == ["name", "kind", "mechanism"] and "epsilon" in head
    out = ldpkit(*base, "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(out.stdout)))
    numeric = next(r for r in rows if r["name"] == "session_minutes")
    assert (float(numeric["low"]), float(numeric["high"])) == (0.0, 240.0)
    assert "(" not in out.stdout  # no Python repr of a tuple
    theme = next(r for r in rows if r["name"] == "theme")
    assert theme["categories"] == "light|dark|system" and len(theme["version"]) == 16


def test_log_level_after_the_subcommand() -> None:
    out = ldpkit(
        "plan", "--epsilon", "1", "--domain-size", "8", "--n", "100", "--log-level", "DEBUG"
    )
    assert out.returncode == 0, out.stderr
    out = ldpkit("--log-level", "WARNING", "plan", "--epsilon", "1", "-d", "8", "--n", "100")
    assert out.returncode == 0, out.stderr
