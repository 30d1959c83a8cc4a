"""What runs inside the sandbox: the candidate (generated code) and the judge (the benchmark's tests).

Standard library only, Python 3.8+: ``code_exec`` hands this file's source to
``python -I -S -c`` inside bubblewrap, so neither the project nor its
dependencies need to be readable from inside.  Two processes, two sandboxes:

- the **candidate** runs the generated program (prompt + completion), then
  answers calls to the functions it defined;
- the **judge** runs the benchmark's own test code; every call of a function
  the candidate defined becomes a message to the candidate.  The judge alone
  writes the verdict, to a file descriptor the candidate never holds, so
  nothing the generated code prints, exits with or returns can make a failed
  test pass.

Messages between them are length-prefixed JSON over pipes, plain values only.

Only data crosses the boundary: None, bool, int, float (NaN and infinities
included), str, bytes, bytearray, complex, list, tuple, set, frozenset and
dict, nested.  Subclasses travel as their base type, so a value that
overrides ``__eq__`` arrives as the plain value it claims to be.  Anything
else the candidate returns stays in the candidate's process; the judge gets
an opaque ``Handle`` it can pass back as an argument but never compare with
anything except the same handle.  Standard library only (runs inside the
sandbox with ``python -I -S``).
"""

import base64
import json
import os
import struct

MAX_MESSAGE = 16 * 1024 * 1024
_HEADER = struct.Struct(">I")


class WireError(Exception):
    """A malformed, oversized or truncated message, or a value that cannot cross."""


class Handle:
    """An object that stayed in the candidate's process (judge side)."""

    __slots__ = ("ref",)

    def __init__(self, ref):
        self.ref = ref

    def __eq__(self, other):
        return isinstance(other, Handle) and other.ref == self.ref

    def __hash__(self):
        return hash(("contam-handle", self.ref))

    def __repr__(self):
        return "<object of the candidate #%d>" % self.ref


def encode(value, refs=None, depth=0):
    """A JSON-ready form of ``value``; ``refs`` (a list) keeps what cannot cross, else WireError."""
    if depth > 200:
        raise WireError("value nested too deeply")
    if value is None or isinstance(value, bool):
        return value if value is None else bool(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        value = float(value)
        if value != value or value in (float("inf"), float("-inf")):
            return {"$f": repr(value)}
        return value
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, Handle):
        return {"$r": value.ref}
    nxt = depth + 1
    if isinstance(value, list):
        return [encode(v, refs, nxt) for v in list.__iter__(value)]
    if isinstance(value, tuple):
        return {"$t": [encode(v, refs, nxt) for v in tuple.__iter__(value)]}
    if isinstance(value, frozenset):
        return {"$F": [encode(v, refs, nxt) for v in frozenset.__iter__(value)]}
    if isinstance(value, set):
        return {"$s": [encode(v, refs, nxt) for v in set.__iter__(value)]}
    if isinstance(value, dict):
        return {"$d": [[encode(k, refs, nxt), encode(v, refs, nxt)] for k, v in dict.items(value)]}
    if isinstance(value, bytearray):
        return {"$B": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, bytes):
        return {"$b": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, complex):
        return {"$c": [encode(value.real, refs, nxt), encode(value.imag, refs, nxt)]}
    if refs is None:
        raise WireError("a %s cannot be passed to the candidate" % type(value).__name__)
    refs.append(value)
    return {"$r": len(refs) - 1}


_BUILD = {"$t": tuple, "$F": frozenset, "$s": set}


def decode(obj, refs=None):
    """The value ``encode`` described; ``refs`` (candidate side) resolves handles to the objects kept."""
    if isinstance(obj, list):
        return [decode(v, refs) for v in obj]
    if not isinstance(obj, dict):
        return obj
    if len(obj) != 1:
        raise WireError("malformed value")
    (tag, body), = obj.items()
    if tag in _BUILD:
        return _BUILD[tag](decode(v, refs) for v in body)
    if tag == "$d":
        return {decode(k, refs): decode(v, refs) for k, v in body}
    if tag == "$f":
        return float(body)
    if tag == "$b":
        return base64.b64decode(body)
    if tag == "$B":
        return bytearray(base64.b64decode(body))
    if tag == "$c":
        return complex(decode(body[0]), decode(body[1]))
    if tag == "$r":
        if refs is None:
            return Handle(int(body))
        if not isinstance(body, int) or not 0 <= body < len(refs):
            raise WireError("unknown object reference")
        return refs[body]
    raise WireError("unknown tag %r" % tag)


def send(fd, message):
    data = json.dumps(message, ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode("ascii")
    if len(data) > MAX_MESSAGE:
        raise WireError("message of %d bytes is over the %d-byte limit" % (len(data), MAX_MESSAGE))
    view = memoryview(_HEADER.pack(len(data)) + data)
    while view:
        view = view[os.write(fd, view):]


def _read_exactly(fd, n):
    chunks, left = [], n
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise WireError("the other side closed the channel")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def recv(fd):
    (size,) = _HEADER.unpack(_read_exactly(fd, _HEADER.size))
    if size > MAX_MESSAGE:
        raise WireError("message of %d bytes is over the %d-byte limit" % (size, MAX_MESSAGE))
    try:
        message = json.loads(_read_exactly(fd, size).decode("ascii"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise WireError("not a JSON message: %s" % exc)
    if not isinstance(message, dict):
        raise WireError("a message must be a JSON object")
    return message


def set_limits(limits):
    """rlimits as ``[name, soft, hard]``; a limit that cannot be set stops the process before any program runs."""
    import resource

    for name, soft, hard in limits:
        resource.setrlimit(getattr(resource, name), (soft, hard))


def _tail(text, n=2000):
    return text[-n:]


# --- the candidate ---------------------------------------------------------------------------


def candidate_main(req_fd, rep_fd, limits):
    """Run the program read from stdin, report what it defined, then serve calls until told to stop."""
    import builtins
    import sys
    import traceback
    import types

    set_limits(limits)
    source = sys.stdin.read()
    sys.stdin.close()
    namespace = {"__name__": "__candidate__", "__builtins__": builtins}
    try:
        exec(compile(source, "program.py", "exec"), namespace)
    except BaseException:  # SystemExit included: the program never finished loading
        send(rep_fd, {"load_error": _tail(traceback.format_exc())})
        return
    callables, modules, values, refs = [], {}, {}, []
    for name, value in list(namespace.items()):
        if name.startswith("__"):
            continue
        if isinstance(value, types.ModuleType):
            modules[name] = value.__name__
        elif callable(value):
            callables.append(name)
        else:  # data the program (MBPP: its test_setup_code) built, e.g. a tree the tests pass back in
            try:
                values[name] = encode(value, refs)
            except (WireError, RecursionError, ValueError):
                pass
    send(rep_fd, {"ready": {"callables": sorted(callables), "modules": modules, "values": values}})
    while True:
        message = recv(req_fd)
        if "call" not in message:
            return
        try:
            function = namespace[message["call"]]
            args = decode(message.get("args", []), refs)
            kwargs = decode(message.get("kwargs", {"$d": []}), refs)
            reply = {"ok": encode(function(*args, **kwargs), refs)}
        except BaseException as exc:
            reply = {"raised": _tail("%s: %s" % (type(exc).__name__, exc), 500)}
        send(rep_fd, reply)


# --- the judge -------------------------------------------------------------------------------


class CandidateError(Exception):
    """The generated function raised (its type and message are in the text)."""


class _Channel:
    def __init__(self, req_fd, rep_fd):
        self.req_fd, self.rep_fd = req_fd, rep_fd
        self.broken = None  # why the candidate can no longer be trusted to answer

    def call(self, name, args, kwargs):
        if self.broken:
            raise WireError(self.broken)
        message = {"call": name, "args": encode(list(args)), "kwargs": encode(dict(kwargs))}
        try:
            send(self.req_fd, message)
            reply = recv(self.rep_fd)
            if "ok" in reply:
                return decode(reply["ok"])
            if "raised" in reply:
                raise CandidateError(str(reply["raised"]))
            raise WireError("unexpected reply from the candidate")
        except (WireError, OSError) as exc:
            self.broken = "the candidate stopped answering: %s" % exc
            raise WireError(self.broken)


class _Remote:
    """Stands in for a function the candidate defined; calling it asks the candidate."""

    def __init__(self, name, channel):
        self.__name__ = self.__qualname__ = name
        self._channel = channel

    def __call__(self, *args, **kwargs):
        return self._channel.call(self.__name__, args, kwargs)

    def __repr__(self):
        return "<function %s of the candidate>" % self.__name__


def _failed(detail):
    return {"status": "failed", "detail": _tail(detail)}


def _where(tb_text):
    lines = [ln for ln in tb_text.strip().splitlines() if ln.strip()]
    return " | ".join(lines[-3:])


def judge(spec, channel):
    """The verdict for one item: the benchmark's tests, run here, against the candidate's functions."""
    import importlib
    import sys
    import traceback

    try:
        hello = recv(channel.rep_fd)
    except (WireError, OSError) as exc:
        return _failed("the generated code exited before it finished loading (%s)" % exc)
    if "load_error" in hello:
        return _failed("the generated code did not run: %s" % hello["load_error"])
    ready = hello.get("ready")
    if not isinstance(ready, dict):
        return _failed("unexpected first message from the candidate")
    callables = [n for n in ready.get("callables", []) if isinstance(n, str)]
    modules = ready.get("modules") if isinstance(ready.get("modules"), dict) else {}
    entry = spec.get("entry")
    if entry and entry not in callables:
        return _failed("the generated code does not define %s" % entry)
    import linecache

    for filename in ("benchmark_setup.py", "benchmark_tests.py"):
        text = spec.get("setup" if filename == "benchmark_setup.py" else "tests", "")
        linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
    namespace = {"__name__": "__judge__"}
    try:
        exec(compile(spec.get("setup", ""), "benchmark_setup.py", "exec"), namespace)
    except BaseException:
        return {"status": "error", "detail": "the benchmark's own setup code failed: " + _where(traceback.format_exc())}
    stdlib = getattr(sys, "stdlib_module_names", ())
    for alias, module in modules.items():
        # `import math` in the generated code makes `math` visible to MBPP's assert lines; mirror stdlib imports.
        if isinstance(module, str) and alias not in namespace and module.split(".")[0] in stdlib:
            try:
                namespace[alias] = importlib.import_module(module)
            except BaseException:
                pass
    for name in callables:
        if name == entry or name not in namespace:
            namespace[name] = _Remote(name, channel)
    values = ready.get("values") if isinstance(ready.get("values"), dict) else {}
    for name, value in values.items():
        if isinstance(name, str) and name not in namespace:
            try:
                namespace[name] = decode(value)
            except (WireError, ValueError, TypeError):
                return _failed("the candidate sent a malformed value for %s" % name)
    try:
        exec(compile(spec.get("tests", ""), "benchmark_tests.py", "exec"), namespace)
        if entry:
            namespace["check"](namespace[entry])
    except AssertionError:
        return _failed("a test failed: " + _where(traceback.format_exc()))
    except CandidateError as exc:
        return _failed("the generated code raised %s" % exc)
    except WireError as exc:
        return _failed(str(exc))
    except BaseException:
        return _failed(_where(traceback.format_exc()))
    if channel.broken:  # a test swallowed the error; the run still did not complete cleanly
        return _failed(channel.broken)
    return {"status": "passed", "detail": ""}


def judge_main(req_fd, rep_fd, verdict_fd, limits):
    import sys

    set_limits(limits)
    spec = json.loads(sys.stdin.read())
    sys.stdin.close()
    sys.stdout = sys.stderr  # whatever the tests print never reaches the verdict
    verdict = judge(spec, _Channel(req_fd, rep_fd))
    os.write(verdict_fd, json.dumps(verdict).encode("utf-8"))
    os.close(verdict_fd)
    try:
        send(req_fd, {"bye": True})
    except (WireError, OSError):
        pass


# --- the self-check --------------------------------------------------------------------------


def selfcheck_main():
    """What the sandbox looks like from inside (code_exec.sandbox_status checks it)."""
    import sys

    pids = [p for p in os.listdir("/proc") if p.isdigit()]
    with open("/proc/net/dev") as fh:
        interfaces = [line.split(":")[0].strip() for line in fh.readlines()[2:]]
    try:
        with open("/contam-probe-write", "w"):
            pass
        root_writable = True
    except OSError:
        root_writable = False
    report = {"version": list(sys.version_info[:3]), "pids": len(pids), "interfaces": interfaces,
              "root_writable": root_writable, "environ": sorted(os.environ)}
    print(json.dumps(report))


if __name__ == "__main__":
    import sys

    _role, _args = sys.argv[1], sys.argv[2:]
    if _role == "candidate":
        candidate_main(int(_args[0]), int(_args[1]), json.loads(_args[2]))
    elif _role == "judge":
        judge_main(int(_args[0]), int(_args[1]), int(_args[2]), json.loads(_args[3]))
    else:
        selfcheck_main()
