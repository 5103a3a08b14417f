# aab script-extraction worker for Python (protocol aab.extract-worker/v1).
#
# The host (crate aab-extract) starts one fresh `python3 -I -B -u` process per call
# with this file as its program. It owns nothing but this one call:
#   * fd 0 carries exactly one request frame (a compact JSON object and "\n"),
#     then end-of-file, so user code that reads stdin sees EOF, never more input;
#   * fd 3 is the reply channel: this worker writes exactly one JSON frame and "\n";
#   * fd 1 and fd 2 go to the host's diagnostic pipe (its last 8 KiB are kept), so
#     print() can never corrupt a frame.
# Request `type:"check"` only compile()s the source (the pre-dispatch syntax check;
# no top-level code runs); `type:"start"` executes the source, calls `main(ctx)`
# with `ctx.inputs`, and checks that the result is strict JSON *before* serialising
# it. See host/extract/src/lib.rs for the whole contract.
import sys

SCHEMA = "aab.extract-worker/v1"
REPLY_FD = 3
MAX_VALUE_BYTES = 256 * 1024
MAX_DEPTH = 64
MAX_SAFE_INTEGER = 2**53 - 1
MAX_STACK_FRAMES = 20
MAX_STACK_BYTES = 8 * 1024
MAX_MESSAGE_BYTES = 4 * 1024
MIN_PYTHON = (3, 9)

import json  # noqa: E402  (the version constants above document the contract first)
import os  # noqa: E402

# Taken before any user code runs: a script that patches these (trusted code
# can) must not be able to silence or reroute the reply. The host re-checks
# whatever arrives anyway.
_os_write = os.write
_os_exit = os._exit
_dumps = json.dumps

_replied = False


def _clip(text, limit):
    data = text.encode("utf-8", "replace")
    if len(data) <= limit:
        return text
    return data[:limit].decode("utf-8", "ignore") + "\u2026"


def _reply(frame, value_json=None):
    """Send the one reply frame and end the process. `value_json`, when given, is
    the already-serialised result, spliced in verbatim (no second dumps)."""
    global _replied
    if _replied:
        return
    _replied = True
    frame = dict(frame)
    frame["schema"] = SCHEMA
    text = _dumps(frame, ensure_ascii=False, separators=(",", ":"))
    if value_json is not None:
        text = text[:-1] + ',"value":' + value_json + "}"
    data = (text + "\n").encode("utf-8")
    try:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
    except Exception:
        pass
    try:
        view = memoryview(data)
        while view:
            written = _os_write(REPLY_FD, view)
            view = view[written:]
    except OSError:
        pass  # the host went away or closed the channel; nothing is left to tell it
    # os._exit: no atexit hooks or lingering non-daemon threads of user code may
    # delay or alter the end of this call.
    _os_exit(0)


def _fail(code, message, diagnostic=None):
    frame = {"type": "fail", "error": code, "message": _clip(str(message), MAX_MESSAGE_BYTES)}
    if diagnostic:
        frame["diagnostic"] = diagnostic
    _reply(frame)


def _safe_str(value):
    try:
        return str(value)
    except Exception:
        return "<unprintable %s>" % type(value).__name__


def _describe_exception(exc, source_name):
    """The user's frames (not this worker's), innermost last, at most 20 and 8 KiB,
    and the innermost line in the user's source."""
    import traceback

    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename != __file__]
    line = None
    for f in reversed(frames):
        if f.filename == source_name:
            line = f.lineno
            break
    kept = frames[-MAX_STACK_FRAMES:]
    text = "Traceback (most recent call last):\n" + "".join(traceback.format_list(kept))
    text += "".join(traceback.format_exception_only(type(exc), exc))
    diagnostic = {"name": type(exc).__name__, "stack": _clip(text, MAX_STACK_BYTES)}
    if line is not None:
        diagnostic["line"] = line
    return diagnostic


def _report_thrown(exc, source_name, what):
    diagnostic = _describe_exception(exc, source_name)
    at = " (%s:%d)" % (source_name, diagnostic["line"]) if "line" in diagnostic else ""
    _fail("extraction_failed", "%s raised %s: %s%s" % (what, type(exc).__name__, _safe_str(exc), at), diagnostic)


class _StrictError(Exception):
    def __init__(self, code, message, path):
        super().__init__(message)
        self.code = code
        self.path = path


def _pointer(path, key):
    return path + "/" + str(key).replace("~", "~0").replace("/", "~1")


def _where(path):
    return "the result" if path == "" else "the result at `%s`" % path


def _strict_copy(root):
    """Walk the result and build a plain copy of exactly what was checked, so the
    serialised text cannot differ from the validated value. A running byte
    estimate stops values that are (or expand through shared references to) far
    more than the limit early."""
    import math

    state = {"budget": MAX_VALUE_BYTES}
    on_path = set()

    def type_error(message, path):
        return _StrictError("extraction_type_error", message, path)

    def charge(n, path):
        state["budget"] -= n
        if state["budget"] < 0:
            raise _StrictError("extraction_output_too_large", "the result is larger than %d bytes of JSON" % MAX_VALUE_BYTES, path)

    def text(value, path, what):
        try:
            size = len(value.encode("utf-8"))
        except UnicodeEncodeError:
            raise type_error("%s is %s with a lone surrogate, which is not valid Unicode" % (_where(path), what), path)
        return str(value), size

    def walk(value, path, depth):
        if value is None:
            charge(4, path)
            return None
        if isinstance(value, bool):
            charge(5, path)
            return bool(value)
        if isinstance(value, int):
            if value > MAX_SAFE_INTEGER or value < -MAX_SAFE_INTEGER:
                raise type_error("%s is an integer outside \u00b1(2^53\u22121); return it as a string" % _where(path), path)
            charge(len(repr(int(value))), path)
            return int(value)
        if isinstance(value, float):
            if not math.isfinite(value):
                raise type_error("%s is %r; NaN and Infinity are not JSON" % (_where(path), value), path)
            charge(len(repr(float(value))), path)
            return float(value)
        if isinstance(value, str):
            copy, size = text(value, path, "a string")
            charge(size + 2, path)
            return copy
        if isinstance(value, (list, dict)):
            if depth >= MAX_DEPTH:
                raise type_error("%s is nested deeper than %d levels of lists and dicts" % (_where(path), MAX_DEPTH), path)
            if id(value) in on_path:
                raise type_error("%s refers back to one of its own containers (a cycle)" % _where(path), path)
            on_path.add(id(value))
            charge(2, path)
            if isinstance(value, list):
                copy = []
                for i, item in enumerate(value):
                    copy.append(walk(item, _pointer(path, i), depth + 1))
                    charge(1, path)
            else:
                copy = {}
                for key, item in value.items():
                    if not isinstance(key, str):
                        raise type_error("%s has the key %s of type %s; dict keys must be strings" % (_where(path), _clip(repr(key), 200), type(key).__name__), path)
                    at = _pointer(path, key)
                    key_copy, size = text(key, at, "a key")
                    charge(size + 4, at)
                    copy[key_copy] = walk(item, at, depth + 1)
            on_path.discard(id(value))
            return copy
        if isinstance(value, tuple):
            raise type_error("%s is a tuple; use a list" % _where(path), path)
        if isinstance(value, (set, frozenset)):
            raise type_error("%s is a %s, which is not JSON; use a list" % (_where(path), type(value).__name__), path)
        if isinstance(value, (bytes, bytearray, memoryview)):
            raise type_error("%s is %s, which is not JSON; decode it to a string" % (_where(path), type(value).__name__), path)
        raise type_error("%s is a %s.%s, which is not JSON" % (_where(path), type(value).__module__, type(value).__qualname__), path)

    return walk(root, "", 0)


def _deliver(result, source_name):
    try:
        copy = _strict_copy(result)
    except _StrictError as err:
        # Where a bad value sits helps; where the size budget ran out does not.
        _fail(err.code, str(err), {"path": err.path} if err.path and err.code == "extraction_type_error" else None)
        return
    except Exception as err:
        # A custom container (dict/list subclass) raised while being read.
        _report_thrown(err, source_name, "reading the result")
        return
    value_json = _dumps(copy, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    size = len(value_json.encode("utf-8"))
    if size > MAX_VALUE_BYTES:
        _fail(
            "extraction_output_too_large",
            "the result is %d bytes of JSON; the limit is %d" % (size, MAX_VALUE_BYTES),
            {"valueBytes": size, "limitBytes": MAX_VALUE_BYTES},
        )
        return
    _reply({"type": "result"}, value_json)


def _compile(source, source_name):
    return compile(source, source_name, "exec", dont_inherit=True)


def _check(request, source):
    name = request.get("sourceName") or "extract.py"
    try:
        _compile(source, name)
    except SyntaxError as err:
        diagnostic = {}
        at = ""
        if err.lineno:
            diagnostic["line"] = err.lineno
            at = " at %s:%d" % (name, err.lineno)
            if err.offset:
                diagnostic["column"] = err.offset
                at += ":%d" % err.offset
            if err.text:
                diagnostic["excerpt"] = _clip(err.text.rstrip("\n"), 512)
        _fail("extraction_syntax_error", "%s: %s%s" % (type(err).__name__, err.msg, at), diagnostic)
        return
    except (ValueError, RecursionError, MemoryError) as err:
        # Null bytes in the source, or nesting too deep for the compiler.
        _fail("extraction_syntax_error", "the source cannot be compiled: %s: %s" % (type(err).__name__, _safe_str(err)))
        return
    runtime = {"name": "python", "version": "%d.%d.%d" % sys.version_info[:3], "executable": sys.executable}
    _reply({"type": "checked", "runtime": runtime})


class _Ctx:
    """What `main(ctx)` receives; extraction has only `ctx.inputs`."""

    __slots__ = ("inputs",)

    def __init__(self, inputs):
        self.inputs = inputs

    def __repr__(self):
        return "ctx(inputs=...)"


def _start(request, source):
    import builtins
    import linecache

    name = request.get("sourceName") or "extract.py"
    # Tracebacks show the frozen source lines even though no file has this name.
    linecache.cache[name] = (len(source), None, source.splitlines(True), name)
    try:
        code = _compile(source, name)
    except (SyntaxError, ValueError) as err:
        # prepare() already checked the syntax; only a changed runtime gets here.
        _fail("extraction_syntax_error", "%s: %s" % (type(err).__name__, _safe_str(err)))
        return
    namespace = {"__name__": "__aab_extract__", "__file__": name, "__builtins__": builtins}
    try:
        exec(code, namespace)
    except Exception as err:
        _report_thrown(err, name, "the top-level code")
        return
    main = namespace.get("main")
    if not callable(main):
        _fail("extraction_failed", "%s defines no function `main`: declare `def main(ctx): ...`" % name)
        return
    try:
        result = main(_Ctx(request.get("inputs")))
        # Anything awaitable (a coroutine from `async def main`, a Future, ...);
        # `inspect` would cost ~10 ms of imports on every call.
        if hasattr(result, "__await__"):
            import asyncio

            async def settle(awaitable):
                return await awaitable

            result = asyncio.run(settle(result))
    except Exception as err:
        _report_thrown(err, name, "main")
        return
    # SystemExit and KeyboardInterrupt are deliberately not caught: sys.exit() in
    # a script ends the worker, which the host reports as extraction_worker_exited.
    _deliver(result, name)


def _run():
    if sys.version_info < MIN_PYTHON:
        version = "%d.%d.%d" % sys.version_info[:3]
        _fail(
            "extraction_runtime_unavailable",
            "python %s is too old; script extraction needs python %d.%d or newer" % ((version,) + MIN_PYTHON),
            {"version": version},
        )
        return
    try:
        request = json.loads(sys.stdin.buffer.read().decode("utf-8"))
        if not isinstance(request, dict) or request.get("schema") != SCHEMA:
            raise ValueError("expected a %s request frame" % SCHEMA)
        with open("main.py", "rb") as f:
            source = f.read().decode("utf-8")
    except Exception as err:
        _fail("extraction_worker_failed", "the worker could not read its request: %s" % _safe_str(err))
        return
    kind = request.get("type")
    if kind == "check":
        _check(request, source)
    elif kind == "start":
        _start(request, source)
    else:
        _fail("extraction_worker_failed", "unknown request type %r" % (kind,))


_run()
