"""Where randomness comes from: the AES keystream words and the production generator."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from ldpkit.errors import ParameterError
from ldpkit.mechanisms import _bits
from ldpkit.randomness import KEY_SIZE, KeyedGenerator, KeystreamWords, os_generator

# FIPS-197 / NIST SP 800-38A: AES-128 under the zero key of the counter blocks 0 and 1.
ZERO_KEY_BLOCKS = "66e94bd4ef8a2c3b884cfa59ca342b2e58e2fccefa7e3061367f1d57a4e7455a"


def test_keystream_is_aes128_ctr_known_answer() -> None:
    words = KeystreamWords(bytes(16))(4)
    assert words.dtype == np.uint64
    assert b"".join(int(w).to_bytes(8, "little") for w in words).hex() == ZERO_KEY_BLOCKS


def test_keystream_continues_across_calls() -> None:
    key = bytes(range(16))
    one = KeystreamWords(key)
    pieces = np.concatenate([one(3), one(0), one(5), one(70_000)])
    np.testing.assert_array_equal(pieces, KeystreamWords(key)(70_008))


def test_word_counts_are_checked() -> None:
    words = KeystreamWords(bytes(16))
    for bad in (-1, 2.5, "3"):
        with pytest.raises(ParameterError, match="non-negative integer"):
            words(bad)  # type: ignore[arg-type]
    assert words(np.int64(2)).size == 2 and words(0).size == 0


def test_keys_are_checked() -> None:
    with pytest.raises(ParameterError, match="16 bytes"):
        KeystreamWords(bytes(15))
    with pytest.raises(ParameterError, match=f"{KEY_SIZE} bytes"):
        KeyedGenerator(bytes(16))
    with pytest.raises(ParameterError, match=f"{KEY_SIZE} bytes"):
        KeyedGenerator("k" * KEY_SIZE)  # type: ignore[arg-type]


def test_keyed_generator_is_reproducible_and_its_two_streams_independent() -> None:
    key = bytes(range(KEY_SIZE))
    a, b = KeyedGenerator(key), KeyedGenerator(key)
    assert a.random() == b.random()
    np.testing.assert_array_equal(a.words(8), b.words(8))
    # Philox is keyed with the first 16 bytes, the keystream with the last 16.
    philox = np.random.Generator(np.random.Philox(key=int.from_bytes(key[:16], "little")))
    assert KeyedGenerator(key).random() == philox.random()
    np.testing.assert_array_equal(KeyedGenerator(key).words(4), KeystreamWords(key[16:])(4))


def test_samplers_read_the_keystream_of_a_keyed_generator_else_the_bit_generator() -> None:
    key = bytes(KEY_SIZE)
    words = _bits.rng_words(KeyedGenerator(key))
    np.testing.assert_array_equal(words(4), KeystreamWords(bytes(16))(4))
    plain = np.random.Generator(np.random.Philox(key=5))
    expected = np.random.Philox(key=5).random_raw(4)
    np.testing.assert_array_equal(_bits.rng_words(plain)(4), expected)


def test_os_generator_draws_fresh_keys() -> None:
    a, b = os_generator(), os_generator()
    assert isinstance(a, KeyedGenerator) and isinstance(a, np.random.Generator)
    assert not np.array_equal(a.words(4), b.words(4))


def test_keyed_generator_refuses_to_be_pickled() -> None:
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(os_generator())
