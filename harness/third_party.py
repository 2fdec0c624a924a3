"""Other libraries' warnings and logs go to a file in the run folder, not the terminal.

A default `run` or `compare` prints forge-zoo's own progress and results only. vLLM,
torch, Triton and the rest warn a dozen times on the way (through Python logging, the
``warnings`` module, tqdm bars, and C++ code writing straight to file descriptor 2);
``routed_to(path)`` sends all of it to ``path`` while the run lasts:

- Python logging: a file handler on the root logger; vLLM is told not to install its own
  console handler (``VLLM_CONFIGURE_LOGGING=0``), and console handlers it installed
  earlier in this process are detached for the duration;
- ``warnings``: captured into logging (``logging.captureWarnings``);
- tqdm bars of other libraries: off (``TQDM_DISABLE=1``; forge-zoo's bars are rich's);
- file descriptor 2 (C and C++ libraries, and child processes, which inherit it): the
  log file; ``sys.stderr`` keeps writing to the terminal, so forge-zoo's own messages
  and any traceback still show.

``--verbose`` skips all of this.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path

LOG_NAME = "third_party.log"


@contextlib.contextmanager
def routed_to(path: Path, verbose: bool = False) -> Iterator[None]:
    """While inside, third-party output goes to ``path`` (appended); see the module
    docstring. With ``verbose`` it does nothing."""
    if verbose:
        yield
        return
    created = not path.parent.exists()
    path.parent.mkdir(parents=True, exist_ok=True)
    env = {"VLLM_CONFIGURE_LOGGING": "0", "TQDM_DISABLE": "1"}
    saved_env = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    handler = _LossyFileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    detached = _detach_console_handlers()
    logging.captureWarnings(True)
    sys.stdout.flush()
    sys.stderr.flush()
    terminal_fd = os.dup(2)
    saved_stderr = sys.stderr
    sys.stderr = io.TextIOWrapper(
        os.fdopen(terminal_fd, "wb", buffering=0, closefd=False),
        encoding=getattr(saved_stderr, "encoding", None) or "utf-8",
        errors="backslashreplace",
        line_buffering=True,
    )
    log_fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(log_fd, 2)
    os.close(log_fd)
    try:
        yield
    except BaseException:
        # A run refused before it started leaves nothing behind (no folder with a log).
        if created and [p.name for p in path.parent.iterdir()] == [path.name]:
            path.unlink()
            path.parent.rmdir()
        raise
    finally:
        sys.stderr.flush()
        os.dup2(terminal_fd, 2)
        os.close(terminal_fd)
        sys.stderr = saved_stderr
        logging.captureWarnings(False)
        for logger, h in detached:
            logger.addHandler(h)
        root.removeHandler(handler)
        handler.close()
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class _LossyFileHandler(logging.FileHandler):
    """A file handler that drops what the disk refuses. On a full disk a lost third-party
    log line is no loss, but logging's default prints "--- Logging error ---" with a
    traceback for each one, and the final flush at ``close`` raises, replacing the run's
    own one-line error (zoo.run.runlog's StorageError) with a traceback."""

    def handleError(self, record: logging.LogRecord) -> None:
        pass

    def close(self) -> None:
        # FileHandler.close closes the stream and unregisters the handler in finally
        # clauses, so they are done when its flush raises.
        with contextlib.suppress(OSError):
            super().close()


def _detach_console_handlers() -> list[tuple[logging.Logger, logging.Handler]]:
    """Remove handlers that print to the terminal from loggers other than the root (vLLM
    installs one when imported before ``routed_to``); returned to be put back."""
    detached = []
    for logger in [logging.getLogger(n) for n in list(logging.root.manager.loggerDict)]:
        if not isinstance(logger, logging.Logger):
            continue
        for h in list(logger.handlers):
            stream = getattr(h, "stream", None)
            if isinstance(h, logging.StreamHandler) and stream in (sys.stdout, sys.stderr):
                logger.removeHandler(h)
                detached.append((logger, h))
    return detached
