"""Light imports: ``import ldpkit`` and ``from ldpkit.client import Reporter`` load none of
the heavy parts (strings decoding, distributions, structured designs, conformance, the
audit, the analyst), and every public name still resolves (PEP 562 ``__getattr__``).

Each check runs in a fresh interpreter: this process has imported everything already.
"""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = (
    # strings decoding
    "ldpkit.heavy_hitters",
    "ldpkit.mechanisms.strings",
    "ldpkit.mechanisms._string_decoder",
    # distributions
    "ldpkit.distribution",
    "ldpkit.distribution_plan",
    "ldpkit.mechanisms.hierarchical",
    # structured designs
    "ldpkit.structured",
    "ldpkit.structured_estimates",
    "ldpkit.inference",
    "ldpkit.domains",
    "ldpkit.mechanisms.hierarchy",
    "ldpkit.mechanisms.table",
    "ldpkit.mechanisms._views",
    # the rest
    "ldpkit.conformance",
    "ldpkit.audit",
    "ldpkit.analyst",
)


def loaded_after(statement: str) -> list[str]:
    """The ldpkit modules in ``sys.modules`` after ``statement``, in a fresh interpreter."""
    code = f"{statement}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    return [m for m in json.loads(out.stdout) if m.split(".")[0] == "ldpkit"]


def test_import_ldpkit_loads_no_heavy_module() -> None:
    loaded = loaded_after("import ldpkit")
    assert not set(HEAVY) & set(loaded), loaded


def test_import_reporter_loads_no_heavy_module() -> None:
    loaded = loaded_after("from ldpkit.client import Reporter")
    assert not set(HEAVY) & set(loaded), loaded


def test_every_public_name_resolves_lazily() -> None:
    code = """
import ldpkit
missing = [name for name in ldpkit.__all__ if name not in dir(ldpkit)]
for name in ldpkit.__all__:
    getattr(ldpkit, name)
from ldpkit import HistogramEstimate, hierarchy, plan_strings
assert ldpkit.hierarchy is hierarchy and ldpkit.HistogramEstimate is HistogramEstimate
import ldpkit.structured
assert ldpkit.plan_strings is plan_strings and ldpkit.table is ldpkit.structured.table
print(missing)
"""
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.strip() == "[]"


def test_submodules_and_unknown_names() -> None:
    code = """
import ldpkit
print(ldpkit.mechanisms.mechanism is ldpkit.mechanism)
try:
    ldpkit.no_such_name
except AttributeError as exc:
    print(exc)
"""
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.splitlines() == ["True", "module 'ldpkit' has no attribute 'no_such_name'"]


def test_a_plan_does_not_load_the_decoder() -> None:
    """Plans read the walk's null model from heavy_hitters; the mechanism imports the
    decoder when it estimates, and the decoder imports neither of them."""
    loaded = loaded_after("import ldpkit\nldpkit.plan_strings(epsilon=4, max_length=8, n=1000)")
    assert "ldpkit.heavy_hitters" in loaded
    assert "ldpkit.mechanisms._string_decoder" not in loaded
