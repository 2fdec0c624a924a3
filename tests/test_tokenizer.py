"""The tiny model's byte-level tokenizer, loaded the way vLLM and transformers load it."""

from __future__ import annotations

import random
import string

import pytest

from zoo.models.tokenizer import EOS_ID, EOS_TOKEN


@pytest.fixture(scope="module")
def tokenizer(tiny_path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_path)


def test_encodes_arithmetic_prompt_to_byte_values(tokenizer):
    assert tokenizer.encode("12+34=") == [49, 50, 43, 51, 52, 61]
    assert tokenizer.encode("12+34=") == list(b"12+34=")


def test_every_ascii_character_is_its_byte_value(tokenizer):
    for code in range(128):
        assert tokenizer.encode(chr(code)) == [code], code


def test_eos_id_is_256(tokenizer):
    assert tokenizer.eos_token == EOS_TOKEN
    assert tokenizer.eos_token_id == 256 == EOS_ID
    assert tokenizer.encode(f"7{EOS_TOKEN}") == [55, 256]
    assert tokenizer.decode([55, 256], skip_special_tokens=True) == "7"


def test_decode_round_trips_arbitrary_ascii(tokenizer):
    rng = random.Random(0)
    alphabet = string.printable  # letters, digits, punctuation and whitespace
    samples = ["", " ", "a , b .", "  leading and trailing  ", "x\n\ty\r\n", "-17", "don't"]
    samples += [
        "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 40))) for _ in range(300)
    ]
    samples.append("".join(map(chr, range(128))))
    for text in samples:
        ids = tokenizer.encode(text)
        assert ids == list(text.encode())
        assert tokenizer.decode(ids) == text
