"""The byte-level tokenizer of the embedded tiny model, built locally (no download).

One token per byte: id b is byte b (through GPT-2's byte-to-unicode table, so the
tokenizer.json is an ordinary Hugging Face byte-level BPE with no merges), and
``<|endoftext|>`` is id 256. vLLM and transformers load it like any other tokenizer.json.
"""

from __future__ import annotations

from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers

EOS_TOKEN = "<|endoftext|>"
EOS_ID = 256
VOCAB_SIZE = 257


def encode(text: str) -> list[int]:
    """Token ids of ``text``: one per UTF-8 byte, id = byte value."""
    return list(text.encode())


def decode(ids: list[int]) -> str:
    """The text of byte-level ids; ids that are no byte (end-of-text, the embedding's
    padding rows 257-319) are dropped, invalid UTF-8 becomes U+FFFD."""
    return bytes(i for i in ids if i < 256).decode(errors="replace")


def byte_to_unicode() -> dict[int, str]:
    """GPT-2's reversible map from bytes to printable unicode characters."""
    printable = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    chars = printable[:]
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return dict(zip(printable, map(chr, chars), strict=True))


def build_byte_tokenizer() -> Tokenizer:
    vocab = {ch: b for b, ch in byte_to_unicode().items()}
    vocab[EOS_TOKEN] = EOS_ID
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([EOS_TOKEN])
    return tok


def hf_byte_tokenizer():
    """The byte-level tokenizer as transformers loads it from a tiny model's folder
    (``save_tokenizer``), built in memory: for code that has the model but not its folder
    (the warm start's greedy episodes)."""
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(
        tokenizer_object=build_byte_tokenizer(), eos_token=EOS_TOKEN, pad_token=EOS_TOKEN
    )


def save_tokenizer(directory: Path, chat_template: str | None = None) -> None:
    """Write tokenizer.json and the Hugging Face tokenizer config next to a model, with
    ``chat_template`` (Jinja) when given."""
    import json

    directory.mkdir(parents=True, exist_ok=True)
    build_byte_tokenizer().save(str(directory / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "eos_token": EOS_TOKEN,
        "pad_token": EOS_TOKEN,
        "bos_token": None,
        "model_max_length": 512,
        "clean_up_tokenization_spaces": False,
    }
    if chat_template is not None:
        config["chat_template"] = chat_template
    (directory / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    (directory / "special_tokens_map.json").write_text(
        json.dumps({"eos_token": EOS_TOKEN, "pad_token": EOS_TOKEN}, indent=2)
    )
