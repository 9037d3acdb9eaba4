"""The test vectors of docs/protocol.md, checked against ldpkit.wire and ldpkit.metrics.

The vectors are parsed out of the markdown, so the document cannot drift from the code.
Fenced blocks carry their role in the info string: ``hex NAME`` (a batch), ``json blocks
NAME`` (what it decodes to), ``hex malformed NAME`` (must be refused), ``json definition
NAME`` and ``text canonical NAME`` (fingerprint input), and ```` `fp` (fingerprint NAME)````
in the text.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import numpy as np
import pytest

from ldpkit import wire
from ldpkit.errors import ProtocolError
from ldpkit.metrics import MetricDefinition

DOC = Path(__file__).resolve().parents[2] / "docs" / "protocol.md"
FENCE = re.compile(r"^```([^\n`]+)\n(.*?)^```\s*$", re.MULTILINE | re.DOTALL)


def _vectors() -> dict[tuple[str, ...], str]:
    text = DOC.read_text()
    section = text[text.index("## Test vectors") :]
    found: dict[tuple[str, ...], str] = {}
    for info, body in FENCE.findall(section):
        key = tuple(info.split())
        assert key not in found, f"duplicate vector {key}"
        found[key] = body.strip()
    return found


VECTORS = _vectors()
SECTION = DOC.read_text()[DOC.read_text().index("## Test vectors") :]
BATCHES = sorted(k[1] for k in VECTORS if k[0] == "hex" and len(k) == 2)
MALFORMED = sorted(k[2] for k in VECTORS if k[:2] == ("hex", "malformed"))
DEFINITIONS = sorted(k[2] for k in VECTORS if k[:2] == ("json", "definition"))


def test_the_document_has_vectors() -> None:
    assert {"empty", "grr-two-reports", "two-blocks"} <= set(BATCHES)
    assert {"theme", "latency"} <= set(DEFINITIONS)
    assert len(MALFORMED) >= 3


def _hex(text: str) -> bytes:
    return bytes.fromhex("".join(text.split()))


@pytest.mark.parametrize("name", BATCHES)
def test_batch_vector(name: str) -> None:
    data = _hex(VECTORS["hex", name])
    expected = json.loads(VECTORS["json", "blocks", name])
    blocks = wire.decode_batch(data)
    assert len(blocks) == len(expected)
    for block, want in zip(blocks, expected, strict=True):
        assert (block.metric, block.fingerprint, block.bucket) == (
            want["metric"],
            want["fp"],
            want["bucket"],
        )
        assert block.ids == bytes.fromhex(want["ids"])
        assert block.reports == bytes.fromhex(want["reports"])
        # The reports are the values in the mechanism's report dtype.
        definition = MetricDefinition.from_dict(
            want["metric"], json.loads(VECTORS["json", "definition", want["metric"]])
        )
        assert definition.fingerprint == want["fp"]
        dtype = definition.mechanism_instance.report_dtype
        assert block.report_array(dtype).tolist() == want["values"]
        assert bool(np.all(definition.mechanism_instance.check_reports(block.report_array(dtype))))
    # Encoding the same blocks gives the same bytes.
    rebuilt = [
        wire.Block(
            w["metric"], w["fp"], w["bucket"], bytes.fromhex(w["ids"]), bytes.fromhex(w["reports"])
        )
        for w in expected
    ]
    assert wire.encode_batch(rebuilt) == data


# What each malformed vector breaks, as the refusal names it: refused for another reason
# (a vector breaking two rules), it would not test its own rule.
MALFORMED_REASONS = {
    "version-2": "needs field 'batch'",
    "ids-not-multiple-of-16": "ids length 15 is not a multiple of 16",
    "trailing-bytes": "trailing bytes",
    "not-a-map": "must be a msgpack map",
}


@pytest.mark.parametrize("name", MALFORMED)
def test_malformed_vector(name: str) -> None:
    with pytest.raises(ProtocolError, match=re.escape(MALFORMED_REASONS[name])):
        wire.decode_batch(_hex(VECTORS["hex", "malformed", name]))


@pytest.mark.parametrize("name", DEFINITIONS)
def test_fingerprint_vector(name: str) -> None:
    spec = json.loads(VECTORS["json", "definition", name])
    definition = MetricDefinition.from_dict(name, spec)
    canonical = VECTORS["text", "canonical", name]
    if "mechanism_params" in spec:  # what the collector serves for the client to check
        assert spec["mechanism_params"] == definition.parameters()["mechanism_params"]
    assert json.dumps(definition.parameters(), sort_keys=True, separators=(",", ":")) == canonical
    digest = hashlib.sha256(canonical.encode()).hexdigest()
    match = re.search(rf"`([0-9a-f]{{16}})` \(fingerprint {re.escape(name)}\)", SECTION)
    assert match is not None, f"no fingerprint given for {name}"
    assert definition.fingerprint == digest[:16] == match.group(1)
    full = re.findall(r"SHA-256: `([0-9a-f]{64})`", SECTION)
    if name == "theme":
        assert full == [digest]


V2 = sorted(k[2] for k in VECTORS if k[:2] == ("hex", "v2"))
V2_MALFORMED = sorted(k[2] for k in VECTORS if k[:2] == ("hex", "v2-malformed"))


def test_the_document_has_v2_vectors() -> None:
    assert {"empty", "grr-two-reports", "two-blocks"} <= set(V2)
    assert len(V2_MALFORMED) >= 4


@pytest.mark.parametrize("name", V2)
def test_v2_batch_vector(name: str) -> None:
    data = _hex(VECTORS["hex", "v2", name])
    expected = json.loads(VECTORS["json", "v2", name])
    batch = wire.decode(data)
    assert (batch.version, batch.batch_id) == (2, bytes.fromhex(expected["batch"]))
    assert len(batch.blocks) == len(expected["blocks"])
    for block, want in zip(batch.blocks, expected["blocks"], strict=True):
        assert (block.metric, block.fingerprint, block.bucket, block.n) == (
            want["metric"],
            want["fp"],
            want["bucket"],
            want["n"],
        )
        assert block.ids == b"" and block.reports == bytes.fromhex(want["reports"])
        definition = MetricDefinition.from_dict(
            want["metric"], json.loads(VECTORS["json", "definition", want["metric"]])
        )
        assert definition.fingerprint == want["fp"]
        dtype = definition.mechanism_instance.report_dtype
        assert block.report_array(dtype).tolist() == want["values"]
    rebuilt = [
        wire.Block(w["metric"], w["fp"], w["bucket"], b"", bytes.fromhex(w["reports"]), w["n"])
        for w in expected["blocks"]
    ]
    assert wire.encode_sealed_batch(bytes.fromhex(expected["batch"]), rebuilt) == data


# The ids-in-v2 block has no "n" either: refused only as missing it, a decoder taking ids
# in a v2 block would pass.
V2_MALFORMED_REASONS = {
    "missing-batch": "needs field 'batch'",
    "short-batch-id": "its 16-byte batch id",
    "ids-in-v2": "unknown fields ids",
    "n-mismatch": "8 bytes of reports do not split into 3 equal reports",
}


@pytest.mark.parametrize("name", V2_MALFORMED)
def test_v2_malformed_vector(name: str) -> None:
    with pytest.raises(ProtocolError, match=re.escape(V2_MALFORMED_REASONS[name])):
        wire.decode(_hex(VECTORS["hex", "v2-malformed", name]))


REFUSED = sorted(k[2] for k in VECTORS if k[:2] == ("json", "refuse"))


def test_a_fingerprint_vector_for_every_kind() -> None:
    from ldpkit.kinds import NAMES

    kinds = {json.loads(VECTORS["json", "definition", n]).get("kind") for n in DEFINITIONS}
    assert kinds == set(NAMES)


def test_served_derived_in_a_fingerprint_vector_is_the_definitions() -> None:
    given = [n for n in DEFINITIONS if "derived" in json.loads(VECTORS["json", "definition", n])]
    assert given  # the strings vector serves its seed
    for name in given:
        spec = json.loads(VECTORS["json", "definition", name])
        ours = MetricDefinition.from_dict(name, spec).to_dict()["derived"]
        assert {k: ours[k] for k in spec["derived"]} == spec["derived"]


def test_the_document_has_definitions_to_refuse() -> None:
    assert len(REFUSED) >= 5


@pytest.mark.parametrize("name", REFUSED)
def test_the_python_client_refuses_a_lying_definition(name: str) -> None:
    """Its fingerprint is right; its named constant is not (docs/protocol.md, Verification)."""
    from ldpkit.client.protocol import parse_definitions

    served = json.loads(VECTORS["json", "refuse", name])
    lie = VECTORS["text", "lie", name]
    definition = MetricDefinition.from_served(served["name"], served, served["fingerprint"])
    assert definition.fingerprint == served["fingerprint"]
    assert any(d.startswith(f"{lie} = ") for d in definition.served_differences(served))
    found, warnings = parse_definitions(json.dumps({"metrics": [served]}))
    assert found == {} and lie in warnings[0]
