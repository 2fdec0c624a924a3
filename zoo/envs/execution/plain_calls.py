"""Calls from the test process to the candidate's process, carrying plain data only.

This file is standard-library Python with no imports at all (not even ``json`` or ``re``,
which would add ~8 ms to every sandbox start): ``zoo.envs.execution.verdict`` sends its source text
into both sandboxed processes of a verdict, and the host imports it for its own tests.
The candidate's process runs ``serve_candidate``; the test process binds
``CandidateFunction`` proxies and runs the hidden tests.

Values are encoded by exact type (``type(v) is int``, never ``isinstance``), so no
subclass and no object with its own ``__eq__``, ``__hash__`` or ``__str__`` can be sent.
Each value is one tag byte and its body:

    N None   T True   F False
    i<hex>;  int      f<float.hex>;  float      c<hex>,<hex>;  complex
    s<n>:<n bytes of UTF-8>  str (lone surrogates kept)   b<n>:<n bytes>  bytes
    l<n>:<n values> list   t<n>:... tuple   S<n>:... set   Z<n>:... frozenset
    d<n>:<n key, value pairs> dict

Integers and floats travel as hex text: exact, NaN and infinities included, and free of
the interpreter's limit on decimal digits. ``decode`` rebuilds exactly these builtin types
and raises ``WireError`` on anything else (unknown tag, bad count, trailing bytes, nesting
deeper than ``MAX_DEPTH``). A message is a frame: 10 ASCII digits giving the length, a
space, then one encoded value. A request is ``("call", id, name, args, kwargs)``; a reply
``("return", id, value)`` or ``("raise", id, exception class name, message)``.
"""

import builtins
import os
import sys

FRAME_DIGITS = 10
MAX_FRAME_BYTES = 64 << 20
"""Largest reply the test side reads (64 MiB); a bigger one is a failure, not a wait."""
MAX_DEPTH = 100
"""Deepest nesting either side encodes or decodes."""
MAX_MESSAGE_CHARS = 2000
"""An exception message is cut to this many characters."""


class WireError(Exception):
    """A value that is not plain data, or a malformed message."""


class CandidateGone(Exception):
    """The candidate's process ended, or broke the protocol, before it replied."""


class CandidateError(Exception):
    """The candidate raised an exception that is not a builtin ``Exception``."""


# --- values ---------------------------------------------------------------------------

_CONTAINER_TAGS = {list: b"l", tuple: b"t", set: b"S", frozenset: b"Z"}
_BUILD = {b"l": list, b"t": tuple, b"S": set, b"Z": frozenset}


def encode(value):
    """``value`` as bytes; ``WireError`` unless it is plain data (module docstring)."""
    out = []
    _encode(value, out, 0)
    return b"".join(out)


def _encode(value, out, depth):
    if depth > MAX_DEPTH:
        raise WireError(f"nested deeper than {MAX_DEPTH} levels")
    kind = type(value)
    if value is None:
        out.append(b"N")
    elif kind is bool:
        out.append(b"T" if value else b"F")
    elif kind is int:
        out.append(b"i%x;" % value)
    elif kind is float:
        out.append(b"f" + value.hex().encode() + b";")
    elif kind is complex:
        out.append(b"c" + value.real.hex().encode() + b"," + value.imag.hex().encode() + b";")
    elif kind is str:
        data = value.encode("utf-8", "surrogatepass")
        out.append(b"s%d:" % len(data) + data)
    elif kind is bytes:
        out.append(b"b%d:" % len(value) + value)
    elif kind in _CONTAINER_TAGS:
        out.append(_CONTAINER_TAGS[kind] + b"%d:" % len(value))
        for item in value:
            _encode(item, out, depth + 1)
    elif kind is dict:
        out.append(b"d%d:" % len(value))
        for key, item in value.items():
            _encode(key, out, depth + 1)
            _encode(item, out, depth + 1)
    else:
        raise WireError(f"a {_type_name(value)} is not plain data")


def _type_name(value):
    try:
        return str(type.__getattribute__(type(value), "__qualname__"))
    except BaseException:
        return "value of unknown type"


def decode(data):
    """The plain value ``encode`` produced ``data`` from; ``WireError`` on anything else."""
    try:
        value, end = _decode(data, 0, 0)
    except (IndexError, ValueError, TypeError, OverflowError, UnicodeDecodeError) as exc:
        raise WireError(f"malformed value: {exc}") from None
    if end != len(data):
        raise WireError("trailing bytes after the value")
    return value


def _until(data, pos, stop):
    end = data.index(stop, pos)
    return data[pos:end], end + 1


def _decode(data, pos, depth):
    if depth > MAX_DEPTH:
        raise WireError(f"nested deeper than {MAX_DEPTH} levels")
    tag, pos = data[pos : pos + 1], pos + 1
    if tag == b"N":
        return None, pos
    if tag in (b"T", b"F"):
        return tag == b"T", pos
    if tag == b"i":
        text, pos = _until(data, pos, b";")
        return int(text, 16), pos
    if tag == b"f":
        text, pos = _until(data, pos, b";")
        return float.fromhex(text.decode("ascii")), pos
    if tag == b"c":
        text, pos = _until(data, pos, b";")
        real, imag = text.decode("ascii").split(",")
        return complex(float.fromhex(real), float.fromhex(imag)), pos
    count_text, pos = _until(data, pos, b":")
    if not count_text.isdigit():
        raise WireError("malformed count")
    count = int(count_text)
    if tag in (b"s", b"b"):
        body = data[pos : pos + count]
        if len(body) != count:
            raise WireError("truncated value")
        return (body.decode("utf-8", "surrogatepass") if tag == b"s" else bytes(body)), pos + count
    if tag in _BUILD:
        items = []
        for _ in range(count):
            item, pos = _decode(data, pos, depth + 1)
            items.append(item)
        return _BUILD[tag](items), pos
    if tag == b"d":
        out = {}
        for _ in range(count):
            key, pos = _decode(data, pos, depth + 1)
            out[key], pos = _decode(data, pos, depth + 1)
        return out, pos
    raise WireError(f"unknown tag {tag!r}")


# --- frames ---------------------------------------------------------------------------


def send(fd, message):
    """Write ``message`` (plain data) as one frame."""
    send_encoded(fd, encode(message))


def send_encoded(fd, data):
    view = memoryview(b"%0*d " % (FRAME_DIGITS, len(data)) + data)
    while view:
        view = view[os.write(fd, view) :]


def _read_exact(fd, n):
    chunks, left = [], n
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def receive(fd, max_bytes=MAX_FRAME_BYTES):
    """The next message, or None at end of file; ``WireError`` on a malformed frame."""
    header = _read_exact(fd, FRAME_DIGITS + 1)
    if header is None:
        return None
    if not header[:FRAME_DIGITS].isdigit() or header[FRAME_DIGITS:] != b" ":
        raise WireError("malformed frame header")
    size = int(header[:FRAME_DIGITS])
    if size > max_bytes:
        raise WireError(f"a frame of {size} bytes exceeds the limit of {max_bytes}")
    body = _read_exact(fd, size)
    if body is None:
        return None
    return decode(body)


# --- the candidate's side ---------------------------------------------------------------


CANDIDATE_MODULE = "__candidate__"
"""The name the candidate's code runs under. Not ``__main__``: a solution's ``if __name__ ==
"__main__":`` block (``unittest.main()``, ``input()``) is its own demonstration, which the
data sets' harnesses never run (they ``exec`` the code with another ``__name__``), and
running it made correct answers exit or wait for input."""


def serve_candidate(request_fd, reply_fd, source):
    """Run the candidate's ``source`` as the module ``CANDIDATE_MODULE`` (registered in
    ``sys.modules``, so classes and pickling find their module), then answer calls to its
    top-level names until the test process closes its end. Runs inside the candidate's
    sandbox: the candidate can change anything here, and can only change its own replies
    by it."""
    module = type(sys)(CANDIDATE_MODULE)
    sys.modules[CANDIDATE_MODULE] = module
    namespace = module.__dict__
    namespace["__builtins__"] = builtins
    exec(compile(source, "<candidate>", "exec", dont_inherit=True), namespace)
    while True:
        request = receive(request_fd)
        if request is None:
            break
        _, call_id, name, args, kwargs = request
        function = namespace.get(name)
        try:
            if function is None:
                raise NameError(f"name {name!r} is not defined")
            # A value that cannot be sent fails here, as the call's exception.
            reply = encode(("return", call_id, function(*args, **kwargs)))
        except BaseException as exc:  # the test side decides what a failure means
            reply = encode(("raise", call_id, _type_name(exc), _message(exc)))
        send_encoded(reply_fd, reply)
    for stream in (sys.stdout, sys.stderr):  # what it printed, for whoever reads the logs
        try:  # noqa: SIM105 (contextlib would be one more import at every start)
            stream.flush()
        except BaseException:
            pass
    os._exit(0)


def _message(exc):
    try:
        return str(exc)[:MAX_MESSAGE_CHARS]
    except BaseException:
        return "(an exception whose message could not be read)"


# --- the test process's side -------------------------------------------------------------


class Connection:
    """The test process's end: numbered requests, each answered before the next."""

    def __init__(self, request_fd, reply_fd):
        self.request_fd, self.reply_fd, self.next_id = request_fd, reply_fd, 0

    def call(self, name, args, kwargs):
        self.next_id += 1
        call_id = self.next_id
        try:
            send(self.request_fd, ("call", call_id, name, tuple(args), dict(kwargs)))
            reply = receive(self.reply_fd)
        except OSError as exc:
            raise CandidateGone(f"the candidate's process is gone ({exc})") from None
        except WireError as exc:
            raise CandidateGone(f"the candidate broke the protocol: {exc}") from None
        if reply is None:
            raise CandidateGone("the candidate's process ended before it replied")
        if type(reply) is not tuple or len(reply) < 3 or reply[1] != call_id:
            raise CandidateGone("the candidate replied out of turn")
        if reply[0] == "return" and len(reply) == 3:
            return reply[2]
        if reply[0] == "raise" and len(reply) == 4:
            raise rebuild_exception(reply[2], reply[3])
        raise CandidateGone("the candidate's reply is malformed")


def rebuild_exception(name, message):
    """The test side's copy of a candidate's exception: the builtin ``Exception`` subclass
    of that name (from this process's own, untouched builtins) with the message, or
    ``CandidateError`` for anything else (``SystemExit`` included)."""
    if type(name) is not str or type(message) is not str:
        return CandidateGone("the candidate's exception report is malformed")
    message = message[:MAX_MESSAGE_CHARS]
    cls = vars(builtins).get(name)
    if isinstance(cls, type) and issubclass(cls, Exception):
        try:
            return cls(message)
        except Exception:
            pass
    return CandidateError(f"{name}: {message}")


class CandidateFunction:
    """Stands in, on the test side, for one of the candidate's top-level functions."""

    def __init__(self, connection, name):
        self._connection, self.__name__ = connection, name

    def __call__(self, *args, **kwargs):
        return self._connection.call(self.__name__, args, kwargs)

    def __repr__(self):
        return f"<candidate function {self.__name__}>"
