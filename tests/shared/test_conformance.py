"""The conformance kit passes correct clients and fails silently wrong ones."""

from __future__ import annotations

import functools
import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from scipy import stats

from ldpkit import conformance, portable, wire
from ldpkit.client.conformance import device_answer
from ldpkit.mechanisms import Mechanism
from ldpkit.mechanisms.gaussian import exact_noise_parameter
from ldpkit.metrics import MetricDefinition

REPORTS = 2000


@functools.cache
def python_device() -> dict[str, Any]:
    """ldpkit's Python client's answer to the device script (the same in every plan)."""
    return device_answer({"device": conformance.device_script()})


def checked(plan: Any, batch: bytes, **kw: Any) -> conformance.Verdict:
    """The kit's verdict, the verification and the device script answered as ldpkit's
    Python client answers them."""
    kw.setdefault("device", python_device())
    return conformance.check(plan, batch, accepted=conformance.python_accepts(plan), **kw)


@pytest.fixture(scope="module")
def plan_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return conformance.write_plan(tmp_path_factory.mktemp("kit") / "plan.json", REPORTS)


def test_chi2_tail_matches_scipy() -> None:
    for stat, dof in [(0.5, 1), (3.0, 2), (100.0, 80), (1000.0, 900), (5.0, 40), (60.0, 10)]:
        assert math.isclose(conformance.chi2_sf(stat, dof), stats.chi2.sf(stat, dof), rel_tol=1e-9)


def test_plan_covers_every_portable_mechanism(plan_path: Path) -> None:
    plan = json.loads(plan_path.read_text())
    assert {m["resolved_mechanism"] for m in plan["metrics"]} == set(portable.MECHANISMS)
    assert all(i["count"] == REPORTS for i in plan["inputs"])


def test_python_client_passes(plan_path: Path) -> None:
    # Seeded, as every test here that needs the kit to pass: at alpha 1e-4 a correct client
    # fails one check in 10,000, so unseeded reports would make the test flaky.
    batch = conformance.respond(plan_path, rng=np.random.default_rng(40))
    verdict = checked(plan_path, batch)
    assert verdict.passed, verdict.render()
    assert {t.mechanism for t in verdict.tests} == set(portable.MECHANISMS)
    assert "PASS" in verdict.render()


def test_python_client_report_by_report_passes(tmp_path: Path) -> None:
    """Each report made alone under a generator of its own (``respond(one_at_a_time)``:
    ``perturb`` of one value, the single-report samplers of SUE, OUE and SS)."""
    plan = conformance.write_plan(tmp_path / "plan.json", 400)
    batch = conformance.respond(plan, one_at_a_time=True, rng=np.random.default_rng(47))
    verdict = checked(plan, batch)
    assert verdict.passed, verdict.render()


def test_the_device_path_passes(tmp_path: Path) -> None:
    """Each report as ``Reporter.report`` makes it: the client's codec, whose
    ``perturb`` takes the mechanisms' per-value paths (``perturb_value``), under a keyed
    generator of its own. ``respond(one_at_a_time)`` calls ``perturb`` of one value,
    which is not that path for GRR, OLH, HR, the numeric mechanisms, the exponential and
    the square wave: a planted bug in GRR's ``perturb_value`` passed the test above."""
    from ldpkit.client.codec import MetricCodec, keyed_generator

    data = json.loads(conformance.write_plan(tmp_path / "plan.json", 400).read_text())
    rng = np.random.default_rng(48)  # each report's key: a fixed verdict
    blocks = []
    for d in data["metrics"]:
        codec = MetricCodec.of(MetricDefinition.from_dict(d["name"], d))
        reports = [
            codec.perturb(codec.encode(i["value"])[0], keyed_generator(rng.bytes(16)))
            for i in data["inputs"]
            if i["metric"] == d["name"]
            for _ in range(i["count"])
        ]
        raw = b"".join(reports)
        blocks.append(
            wire.Block(d["name"], d["fingerprint"], data["bucket"], b"", raw, len(reports))
        )
    verdict = checked(data, wire.encode_sealed_batch(os.urandom(wire.ID_SIZE), blocks))
    assert verdict.passed, verdict.render()
    assert {t.mechanism for t in verdict.tests} == set(portable.MECHANISMS)


def seeded_words(rng: np.random.Generator) -> portable.WordSource:
    """A word source like ``portable.os_words``, drawing from ``rng`` (a fixed verdict)."""
    words = iter(())

    def take() -> int:
        nonlocal words
        word = next(words, None)
        if word is None:
            words = iter(rng.integers(0, 1 << 32, 4096, dtype=np.uint64).tolist())
            word = next(words)
        return int(word)

    return take


def test_portable_reference_rules_pass(plan_path: Path) -> None:
    """The rules of docs/protocol.md, run word by word, sample the exact laws too."""
    plan = json.loads(plan_path.read_text())
    rng = np.random.default_rng(54)
    blocks = []
    for d in plan["metrics"]:
        md = MetricDefinition.from_dict(d["name"], d)
        values = [
            md.kind_spec.encode(md, i["value"])[0]
            for i in plan["inputs"]
            if i["metric"] == d["name"]
            for _ in range(i["count"])
        ]
        source = seeded_words(rng)
        raw = b"".join(portable.perturb(d, v, source) for v in values)
        blocks.append(
            wire.Block(
                d["name"], d["fingerprint"], plan["bucket"], os.urandom(16 * len(values)), raw
            )
        )
    verdict = checked(plan, wire.encode_batch(blocks))
    assert verdict.passed, verdict.render()


def _failing(plan_path: Path, overrides: dict[str, Any]) -> tuple[str, ...]:
    # Seeded: each broken client must fail alone, and a chance failure of another mechanism
    # (alpha 1e-4 for the whole check) must not make the test flaky.
    batch = conformance.respond(plan_path, overrides, rng=np.random.default_rng(20261122))
    verdict = checked(plan_path, batch)
    assert not verdict.passed
    assert "FAIL" in verdict.render()
    return verdict.failing_mechanisms


def test_textbook_olh_hash_fails(plan_path: Path) -> None:
    assert _failing(plan_path, {"olh": conformance.textbook_olh}) == ("olh",)


def test_textbook_hash_fails_even_with_fair_keys(plan_path: Path) -> None:
    """The bucket test alone catches the wrong hash (not just the 61-bit keys)."""

    def fair_keys(m: Mechanism, values: npt.NDArray[Any], rng: np.random.Generator) -> Any:
        out = conformance.textbook_olh(m, values, rng)
        out["a"] = rng.integers(0, 2**64, size=values.size, dtype=np.uint64)
        out["b"] = rng.integers(0, 2**64, size=values.size, dtype=np.uint64)
        return out

    verdict = checked(plan_path, conformance.respond(plan_path, {"olh": fair_keys}))
    failed = {t.test for t in verdict.tests if not t.passed}
    assert "bucket vs hash" in failed and "hash key bits" not in failed


def test_wrong_piecewise_step_fails(plan_path: Path) -> None:
    assert _failing(plan_path, {"piecewise": conformance.wrong_step_piecewise()}) == ("piecewise",)


def _other(mech: str, **changed: Any) -> Any:
    """A sampler of the same mechanism with changed constructor-derived fields."""

    def perturb(m: Mechanism, values: npt.NDArray[Any], rng: np.random.Generator) -> Any:
        import dataclasses

        wrong = dataclasses.replace(m)
        for key, value in changed.items():
            object.__setattr__(wrong, key, value(m) if callable(value) else value)
        return wrong.perturb(values, rng)

    return perturb


def _off_by_one_leaf(m: Any, values: npt.NDArray[Any], rng: np.random.Generator) -> Any:
    lo, hi = m.bounds
    return m.perturb(np.clip(values + (hi - lo) / m.resolution, lo, hi), rng)


def _other_seed(m: Any, values: npt.NDArray[Any], rng: np.random.Generator) -> Any:
    import dataclasses

    return dataclasses.replace(m, seed=m.seed + 1).perturb(values, rng)


@pytest.mark.parametrize(
    ("mechanism", "override"),
    [
        ("hh", _off_by_one_leaf),
        ("prefix_sketch", _other_seed),
        # a client still on the first cut rule (level t keeps t bytes, not ceil(t m / M))
        ("prefix_sketch", _other("prefix_sketch", cut="prefix")),
    ],
    ids=["hh-leaf-off-by-one", "prefix-sketch-other-hash-seed", "prefix-sketch-old-cut"],
)
def test_silent_bugs_of_the_other_kinds_fail(
    plan_path: Path, mechanism: str, override: Any
) -> None:
    assert _failing(plan_path, {mechanism: override}) == (mechanism,)


@pytest.mark.parametrize(
    ("mechanism", "override"),
    [
        # GRR with the natural off-by-one p = e^eps / (e^eps + d)
        (
            "grr",
            _other("grr", p=lambda m: math.exp(m.epsilon) / (math.exp(m.epsilon) + m.domain_size)),
        ),
        # OLH with one bucket too few (a wrong variance rule for g)
        ("olh", _other("olh", g=lambda m: m.g - 1)),
        # OUE with q = e^-eps (a misread formula)
        ("oue", _other("oue", q=lambda m: math.exp(-m.epsilon))),
        # Duchi ignoring the value (always t = 0)
        ("duchi", lambda m, v, rng: m.perturb(np.full(v.size, sum(m.bounds) / 2), rng)),
        # Hybrid that always takes PM's branch
        ("hybrid", _other("hybrid", alpha=lambda m: 1.0 if m.alpha > 0 else 0.0)),
        # Laplace with noise at twice the scale
        (
            "laplace",
            lambda m, v, rng: np.clip(
                m.perturb(v, rng) * 2
                - np.round(
                    np.clip((v - m.bounds[0]) / (m.bounds[1] - m.bounds[0]), 0, 1) * 65536
                ).astype(np.int64),
                -m.noise_cap,
                65536 + m.noise_cap,
            ),
        ),
        # Gaussian with half the noise (sigma2 / 4: a misread calibration)
        (
            "gaussian",
            _other(
                "gaussian",
                laplace_scale=lambda m: exact_noise_parameter(m.grid_sigma / 2)[0],
                sigma2_over_t=lambda m: exact_noise_parameter(m.grid_sigma / 2)[1],
            ),
        ),
    ],
)
def test_other_silent_bugs_fail(plan_path: Path, mechanism: str, override: Any) -> None:
    assert _failing(plan_path, {mechanism: override}) == (mechanism,)


def test_framing_problems_are_named(plan_path: Path) -> None:
    plan = json.loads(plan_path.read_text())
    blocks = wire.decode_batch(conformance.respond(plan_path), max_reports=10**7)
    # Drop one metric's reports and give another a wrong fingerprint.
    broken = [b for b in blocks if b.metric != "hr-0_5"]
    first = broken[0]
    broken[0] = wire.Block(first.metric, "0" * 16, first.bucket, b"", first.reports, first.n)
    verdict = checked(plan, wire.encode_sealed_batch(os.urandom(16), broken))
    assert not verdict.passed
    text = verdict.render()
    assert "hr-0_5" in text and "fingerprint" in text
    assert checked(plan, b"\x93\x01").problems


def test_malformed_reports_fail(plan_path: Path) -> None:
    def invalid(m: Mechanism, values: npt.NDArray[Any], rng: np.random.Generator) -> Any:
        return np.full(values.size, 7, dtype=np.int8)  # Duchi reports are +1 or -1

    assert _failing(plan_path, {"duchi": invalid}) == ("duchi",)


def test_cli_plan_and_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from ldpkit.cli import main

    plan = tmp_path / "plan.json"
    assert main(["conformance", "plan", "--out", str(plan), "--reports", "400"]) == 0
    assert "reports to make" in capsys.readouterr().out
    good, bad = tmp_path / "good.msgpack", tmp_path / "bad.msgpack"
    good.write_bytes(conformance.respond(plan, rng=np.random.default_rng(214)))
    answer = tmp_path / "accepted.json"
    answer.write_text(json.dumps({"accepted": conformance.python_accepts(plan)}))
    device = tmp_path / "device.json"
    device.write_text(json.dumps(python_device()))
    bad.write_bytes(
        conformance.respond(plan, {"olh": conformance.textbook_olh}, rng=np.random.default_rng(215))
    )
    given = ["--accepted", str(answer), "--device", str(device)]
    assert main(["conformance", "check", str(plan), str(good), *given]) == 0
    out = capsys.readouterr().out
    assert "PASS" in out and "covered by the test vectors" in " ".join(out.split())
    assert main(["conformance", "check", str(plan), str(bad), *given]) == 1
    out = capsys.readouterr().out
    assert "FAIL: olh" in out
    assert main(["conformance", "check", str(plan), str(tmp_path / "missing")]) == 2


def trusting_client(plan: Any) -> list[str]:
    """A client that trusts every served constant: it accepts every definition whose
    fingerprint matches (the fingerprint covers no ``derived`` constant)."""
    data = json.loads(Path(plan).read_text())
    out = []
    for item in data["verify"]:
        served = item["definition"]
        d = MetricDefinition.from_served(served["name"], served, served["fingerprint"])
        if d.fingerprint == served["fingerprint"]:
            out.append(item["id"])
    return out


def test_the_python_client_refuses_every_lie_and_accepts_the_honest(plan_path: Path) -> None:
    plan = json.loads(plan_path.read_text())
    served = conformance.served_for_verification(plan["metrics"])
    honest = {vid for vid, _, lie in served if lie is None}
    assert set(conformance.python_accepts(plan_path)) == honest
    # every mechanism is lied about (the Gaussian, which has no threshold, by its own lie)
    lied = {d["resolved_mechanism"] for _, d, lie in served if lie is not None}
    assert lied == set(portable.MECHANISMS)


def test_a_client_trusting_the_served_constants_fails_by_name(plan_path: Path) -> None:
    batch = conformance.respond(plan_path, rng=np.random.default_rng(40))
    verdict = conformance.check(
        plan_path, batch, accepted=trusting_client(plan_path), device=python_device()
    )
    assert not verdict.passed
    text = verdict.render()
    assert "ACCEPTED A LYING DEFINITION: grr-0_5: derived.keep" in text
    assert "oue-2_0: derived.q" in verdict.lies_accepted
    assert "levels: derived.views[0].keep" in verdict.lies_accepted
    assert "prefix-sketch: derived.keep" in verdict.lies_accepted
    assert "gaussian-0_5: derived.t, derived.m" in verdict.lies_accepted
    # the constants besides thresholds (issue 29): a view's until, integers, labels, floats
    for lie in (
        "levels: derived.views[0].until",
        "olh-0_5: derived.g",
        "levels: derived.views[1].labels[0]",
        "prefix-sketch: derived.weights[0]",
        "hybrid-0_5: derived.duchi_index",
        "laplace-0_5: derived.cap",
        "duchi-0_5: derived.scale",
    ):
        assert lie in verdict.lies_accepted, lie
    assert set(verdict.failing_mechanisms) == set(portable.MECHANISMS)


def test_the_verification_must_be_answered(plan_path: Path) -> None:
    batch = conformance.respond(plan_path, rng=np.random.default_rng(40))
    verdict = conformance.check(plan_path, batch)
    assert not verdict.passed and "no answer to the plan's `verify`" in verdict.render()
    assert "no answer to the plan's `device` script" in verdict.render()
    assert verdict.failing_device == ("answer",) and "FAIL: device answer" in verdict.render()
    refusing = conformance.check(plan_path, batch, accepted=[])
    assert "refused the honest definition of grr-0_5" in refusing.render()


def test_the_python_client_refuses_a_lying_collector() -> None:
    from ldpkit.client.protocol import parse_definitions

    d = MetricDefinition.categorical("theme", ["a", "b", "c"], epsilon=1.0, mechanism="grr")
    served = d.to_dict()
    served["derived"]["keep"] = "f" * 16
    found, warnings = parse_definitions(json.dumps({"metrics": [served]}))
    assert found == {}
    assert "derived.keep" in warnings[0] and "refused metric 'theme'" in warnings[0]


# --- broken clients the wide, seeded and structured cases catch (issue 29) -------------


def _ignored_seed(m: Any, values: npt.NDArray[Any], rng: np.random.Generator) -> Any:
    """A strings client that hashes with seed 0 whatever the definition serves."""
    import dataclasses

    return dataclasses.replace(m, seed=0).perturb(values, rng)


_REVERSED = np.array([int(f"{i:08b}"[::-1], 2) for i in range(256)], dtype=np.uint8)


def _msb_first(m: Any, values: npt.NDArray[Any], rng: np.random.Generator) -> Any:
    """A bitmap written with bit j at ``0x80 >> (j % 8)`` of its byte (the protocol says
    ``1 << (j % 8)``); only where d is a multiple of 8, where no padding bit gives it away."""
    right = np.asarray(m.perturb(values, rng))
    if m.domain_size % 8:
        return right
    flipped = _REVERSED[np.ascontiguousarray(right).view(np.uint8)]
    return flipped.view(right.dtype).reshape(right.shape)


def _oue_for_sue(m: Any, values: npt.NDArray[Any], rng: np.random.Generator) -> Any:
    """A view client that samples every ``sue`` view with ``oue`` (same bitmap, other law)."""
    import dataclasses

    served = tuple(v.oracle.name for v in m.views)
    wrong = tuple("oue" if name == "sue" else name for name in served)
    return dataclasses.replace(m, oracle=wrong).perturb(values, rng)


def _failed_metrics(plan_path: Path, overrides: dict[str, Any]) -> tuple[tuple[str, ...], set[str]]:
    batch = conformance.respond(plan_path, overrides, rng=np.random.default_rng(20261127))
    verdict = checked(plan_path, batch)
    assert not verdict.passed and not verdict.problems, verdict.render()
    return verdict.failing_mechanisms, {t.metric for t in verdict.tests if not t.passed}


@pytest.mark.parametrize(
    ("mechanism", "override", "metrics"),
    [
        ("prefix_sketch", _ignored_seed, {"prefix-sketch-seeded"}),
        ("oue", _msb_first, {"oue-d16-1_0"}),
        ("sue", _msb_first, {"sue-d16-1_0"}),
        ("ss", _msb_first, {"ss-d16-1_0"}),
        ("joint", _oue_for_sue, {"joint-sue-16"}),
        ("levels", _oue_for_sue, {"levels-sue-16"}),
    ],
    ids=[
        "strings-ignored-seed",
        "oue-bit-order-d16",
        "sue-bit-order-d16",
        "ss-bit-order-d16",
        "joint-wrong-view-oracle",
        "levels-wrong-view-oracle",
    ],
)
def test_broken_clients_of_the_wide_seeded_and_view_cases_fail_by_name(
    plan_path: Path, mechanism: str, override: Any, metrics: set[str]
) -> None:
    """Each is well-formed (no framing problem): only the new cases' laws catch it."""
    failing, failed = _failed_metrics(plan_path, {mechanism: override})
    assert failing == (mechanism,)
    assert failed == metrics


def test_the_plan_holds_wide_seeded_and_every_view_oracle(plan_path: Path) -> None:
    plan = json.loads(plan_path.read_text())
    seeds = {m["derived"]["seed"] for m in plan["metrics"] if "seed" in m.get("derived", {})}
    assert "0000000000000000" in seeds and len(seeds) == 2
    kinds = {m["kind"] for m in plan["metrics"]}
    wide = {m["kind"] for m in plan["metrics"] if len(m.get("categories") or ()) == 16}
    assert wide == {"categorical", "hierarchy"} and kinds >= {"table", "strings"}
    oracles = {v["oracle"] for m in plan["metrics"] for v in m.get("derived", {}).get("views", ())}
    assert oracles == {"grr", "oue", "sue", "ss"}


# --- the device script: the budget ledger and memoization (issue 29) -----------------------


def test_the_python_reporter_keeps_the_ledger_and_memoizes(plan_path: Path) -> None:
    plan = json.loads(plan_path.read_text())
    answer = python_device()
    assert answer["refused"] == [5, 6, 11, 12] and answer["batches"]
    assert conformance.device_problems(plan["device"], answer) == []


def _no_ledger() -> dict[str, Any]:
    """A device whose reporter does not enforce the budget (its ledger admits 50)."""
    spec = {**conformance.DEVICE_SPEC, "budget": 50.0}  # the fingerprint holds no budget
    return device_answer(
        {"device": conformance.device_script()},
        definition=MetricDefinition.from_dict("device-olh", spec),
    )


@pytest.mark.parametrize(
    ("device", "named"),
    [
        (lambda: device_answer({"device": conformance.device_script()}, memoize=False), "memo"),
        (_no_ledger, "ledger"),
    ],
    ids=["no-memo", "no-ledger"],
)
def test_a_device_without_memo_or_ledger_fails_by_name(
    plan_path: Path, device: Any, named: str
) -> None:
    plan = json.loads(plan_path.read_text())
    found = tuple(conformance.device_problems(plan["device"], device()))
    verdict = conformance.Verdict((), 1e-4, 1e-4, device=found)  # check() adds these as is
    assert not verdict.passed and verdict.failing_device == (named,)
    text = verdict.render()
    assert f"FAIL: device {named}" in text
    assert f"DEVICE: {named.upper()}: step " in text


def _edited(change: Any) -> dict[str, Any]:
    """The Python device's answer with its batches' reports per bucket changed by
    ``change(buckets: dict[int, list[bytes]])`` (a device whose queue went wrong)."""
    answer = python_device()
    blocks = [b for body in answer["batches"] for b in wire.decode(bytes.fromhex(body)).blocks]
    first = blocks[0]
    size = len(first.reports) // first.n
    buckets: dict[int, list[bytes]] = {}
    for b in blocks:
        cut = [b.reports[i : i + size] for i in range(0, len(b.reports), size)]
        buckets.setdefault(b.bucket, []).extend(cut)
    change(buckets)
    out = [
        wire.Block(first.metric, first.fingerprint, k, b"", b"".join(v), len(v))
        for k, v in sorted(buckets.items())
    ]
    return {**answer, "batches": [wire.encode_sealed_batch(os.urandom(16), out).hex()]}


@pytest.mark.parametrize(
    ("change", "says"),
    [
        # the first bucket's report queued twice (a memoized value twice into one bucket)
        (
            lambda b: b[min(b)].append(b[min(b)][0]),
            "holds 2 reports; a device that memoizes queues 1",
        ),
        # a repeat queued with fresh bytes (the memo re-randomized)
        (lambda b: b[sorted(b)[1]].__setitem__(0, os.urandom(20)), "is not the same bytes"),
    ],
    ids=["queued-twice-in-a-bucket", "repeat-re-randomized"],
)
def test_a_memo_that_queues_twice_or_re_randomizes_fails(
    plan_path: Path, change: Any, says: str
) -> None:
    plan = json.loads(plan_path.read_text())
    found = conformance.device_problems(plan["device"], _edited(change))
    assert found and all(p.startswith("MEMO: ") for p in found), found
    assert says in found[0]
    assert conformance.device_problems(plan["device"], {"nope": 1})[0].startswith(
        "the device answer is not"
    )
