"""``auto`` weighs bytes too: among candidates within a few percent of the lowest
variance it takes the smallest report, and ``explain()`` says so with units."""

from __future__ import annotations

import pytest

import ldpkit
from ldpkit.mechanisms import AUTO_VARIANCE_TOLERANCE, CATEGORICAL, NUMERIC


def test_large_domain_prefers_olh_over_a_hair_lower_variance() -> None:
    # Issue 14: at epsilon=1, d=1024 subset selection (128-byte reports) is only 0.5%
    # below OLH (20 bytes); a phone should send the 20 bytes.
    choice = ldpkit.choose(epsilon=1.0, domain_size=1024)
    best = min(choice.variances.values())
    assert choice.variances["ss"] == best
    assert choice.name == "olh"
    assert choice.report_bytes["olh"] == 20 and choice.report_bytes["ss"] == 128
    assert ldpkit.mechanism("auto", epsilon=1.0, domain_size=1024).name == "olh"


@pytest.mark.parametrize(
    ("epsilon", "domain_size", "bounds"),
    [
        (1.0, 1024, None),
        (0.5, 3, None),
        (4.0, 16, None),
        (1.0, 64, None),
        (2.0, 4096, None),
        (8.0, 2, None),
        (0.7, None, (0.0, 10.0)),
        (1.0, None, (0.0, 240.0)),
        (4.0, None, (-1.0, 1.0)),
    ],
)
def test_the_rule(
    epsilon: float, domain_size: int | None, bounds: tuple[float, float] | None
) -> None:
    """The chosen one is within the tolerance of the lowest variance, and no candidate
    within it has a smaller report (nor an equal report and a lower variance)."""
    choice = ldpkit.choose(epsilon=epsilon, domain_size=domain_size, bounds=bounds)
    names = CATEGORICAL if domain_size is not None else NUMERIC
    assert tuple(choice.variances) == names
    best = min(choice.variances.values())
    limit = best * (1 + AUTO_VARIANCE_TOLERANCE)
    near = [k for k, v in choice.variances.items() if v <= limit]
    assert choice.name in near
    chosen = (choice.report_bytes[choice.name], choice.variances[choice.name])
    for k in near:
        assert chosen <= (choice.report_bytes[k], choice.variances[k] * (1 + 1e-9)), k
    for k in names:
        options = {"domain_size": domain_size} if domain_size else {"bounds": bounds}
        m = ldpkit.mechanism(k, epsilon=epsilon, **options)  # type: ignore[arg-type]
        assert choice.report_bytes[k] == m.report_dtype.itemsize
        assert choice.collector_cost[k] == m.aggregate_cost >= 1


def test_explain_has_a_header_units_and_the_reason() -> None:
    text = ldpkit.choose(epsilon=1.0, domain_size=1024).explain()
    lines = text.splitlines()
    assert "epsilon=1" in lines[0] and "1024" in lines[0]
    header = next(line for line in lines if line.lstrip().startswith("mechanism"))
    for column in ("variance", "bytes/report", "collector"):
        assert column in header
    chosen = [line for line in lines if "<- chosen" in line]
    assert len(chosen) == 1 and chosen[0].split()[0] == "olh"
    assert " 20 " in chosen[0] and "128" in text
    assert f"{AUTO_VARIANCE_TOLERANCE:.0%}" in text  # the rule is stated
    assert "counter" in text  # how the collector's cost is counted
    numeric = ldpkit.choose(epsilon=1.0, bounds=(0.0, 240.0)).explain()
    assert "bounds [0, 240]" in numeric.splitlines()[0]
    assert "<- chosen" in numeric and "bytes/report" in numeric
