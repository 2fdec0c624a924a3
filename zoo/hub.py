"""Downloads from the Hugging Face Hub by name, and when not to download.

Online (the default) a Qwen3 preset's weights come through ``huggingface_hub``'s
``snapshot_download`` (its progress bar, resumption of an interrupted download, ``HF_TOKEN``
or the token of ``hf auth login``) into the Hugging Face cache, and a data set through
``datasets.load_dataset`` (zoo.envs.data.loading), both from ``$HF_ENDPOINT``
(https://huggingface.co unless set). What is cached is not fetched again.

Offline, nothing is requested: ``HF_HUB_OFFLINE=1`` (or ``HF_DATASETS_OFFLINE=1`` /
``TRANSFORMERS_OFFLINE=1``) in the environment, or a Hub that cannot be reached: before
the first download a process opens one TCP connection to the endpoint's host (3 s at
most; skipped behind an HTTP(S) proxy) and, when that fails, reads the cache as if
offline instead of sitting through the libraries' retries (about 25 s per file). A
download that fails on the connection later also falls back to the cache. Offline the
model and the data come from the cache or a local path, and a missing one is a
``ConfigError`` that says where it looked and why nothing was downloaded.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from urllib.parse import urlsplit

from zoo.core.config import ConfigError

OFFLINE_VARIABLES = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE")
MODEL_FILES = ["*.json", "*.safetensors", "*.txt", "*.jinja", "*.model"]
"""What a model download fetches: config, weights (and their index), tokenizer files and
chat template; not the other formats (*.bin, *.gguf, original/) some repos also hold."""


class HubUnreachable(Exception):
    """The Hub could not be reached (connection refused, no route, DNS, timeout)."""


def offline_requested() -> bool:
    """Whether the user switched the Hub off: one of ``OFFLINE_VARIABLES`` set to a true
    value now, or ``huggingface_hub`` having read one when it was imported."""
    import huggingface_hub.constants as hub_constants

    truthy = {"1", "ON", "YES", "TRUE"}
    return hub_constants.HF_HUB_OFFLINE or any(
        os.environ.get(k, "").upper() in truthy for k in OFFLINE_VARIABLES
    )


_UNREACHABLE: dict[str, str] = {}
PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY")


def unreachable() -> str:
    """Why the Hub cannot be reached ("" when it can): one TCP connection to the endpoint's
    host and port, at most 3 s, once per endpoint and process. Behind a proxy (one of
    ``PROXY_VARIABLES`` set) the Hub is taken as reachable and the libraries decide."""
    url = endpoint()
    if url not in _UNREACHABLE:
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
        reason = ""
        if not any(os.environ.get(k) for k in PROXY_VARIABLES):
            try:
                socket.create_connection((parts.hostname or "", port), timeout=3).close()
            except OSError as exc:
                reason = f"{type(exc).__name__}: {exc}"
        _UNREACHABLE[url] = reason
    return _UNREACHABLE[url]


def download_allowed() -> tuple[bool, str]:
    """(True, "") when downloads may be tried; else (False, why not) for messages."""
    if offline_requested():
        return False, offline_reason()
    reason = unreachable()
    return (False, offline_reason(reason)) if reason else (True, "")


def endpoint() -> str:
    """The Hub that downloads come from (``$HF_ENDPOINT``, read by huggingface_hub)."""
    import huggingface_hub.constants as hub_constants

    return hub_constants.ENDPOINT


def offline_reason(unreachable: str = "") -> str:
    """Why nothing was downloaded, for messages."""
    if offline_requested():
        return "HF_HUB_OFFLINE is set"
    return f"the Hub at {endpoint()} could not be reached ({unreachable or 'no network'})"


def is_connection_error(exc: BaseException) -> bool:
    """Whether ``exc`` (or what it was raised from) means the Hub was not reachable."""
    import httpx
    from huggingface_hub.errors import LocalEntryNotFoundError, OfflineModeIsEnabled

    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, (httpx.ConnectError, httpx.TimeoutException, OfflineModeIsEnabled)):
            return True
        if isinstance(
            exc, ConnectionError | TimeoutError | LocalEntryNotFoundError | HubUnreachable
        ):
            return True
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return False


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"


def download_model(hf_id: str) -> Path:
    """The snapshot folder of Hub model ``hf_id`` (main revision), downloaded into the
    Hugging Face cache where missing, with huggingface_hub's progress bar. Raises
    ``HubUnreachable`` when the Hub cannot be reached and the snapshot is not cached, and
    ``ConfigError`` when the Hub refuses (no such repo, gated, bad token)."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import GatedRepoError, HfHubHTTPError, RepositoryNotFoundError

    try:
        return Path(snapshot_download(hf_id, allow_patterns=MODEL_FILES))
    except GatedRepoError as exc:
        raise ConfigError(
            f"{hf_id} is gated on {endpoint()}: accept its terms on the Hub, then set HF_TOKEN "
            f"(or `hf auth login`) ({first_line(exc)})"
        ) from exc
    except RepositoryNotFoundError as exc:
        raise ConfigError(
            f"{hf_id} was not found on {endpoint()} (or needs a token: set HF_TOKEN) "
            f"({first_line(exc)})"
        ) from exc
    except Exception as exc:
        if is_connection_error(exc):
            raise HubUnreachable(first_line(exc)) from exc
        if isinstance(exc, HfHubHTTPError | OSError):
            raise ConfigError(
                f"downloading {hf_id} from {endpoint()} failed: {first_line(exc)}"
            ) from exc
        raise


def download_model_config(hf_id: str) -> None:
    """Fetch only ``config.json`` of ``hf_id`` into the cache (a few kB), so that the
    pre-flight memory check sees the real shape before gigabytes of weights come. Does
    nothing offline; failures are left to the full download that follows."""
    from huggingface_hub import hf_hub_download

    if not download_allowed()[0]:
        return
    try:
        hf_hub_download(hf_id, "config.json")
    except Exception:  # unreachable, not found, gated: download_model says which
        return


def cached_model_config(hf_id: str) -> Path | None:
    """The cached ``config.json`` of Hub model ``hf_id`` (main revision), offline; None when
    it is not in the cache."""
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(hf_id, "config.json")
    return Path(found) if isinstance(found, str) else None
