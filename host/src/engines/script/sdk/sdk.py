# aab Script SDK for Python (aab.script-sdk/v1), shipped with the host.
# Usage: python3 sdk.py <main.py>. Frames are newline-delimited JSON on stdin (host -> child)
# and stdout (child -> host). print() goes to stderr (host diagnostics).
import asyncio
import inspect
import json
import os
import sys
import threading
import traceback

_channel = sys.stdout
sys.stdout = sys.stderr
_lock = threading.Lock()
_next_id = 0


def _send(frame):
    line = json.dumps(frame, separators=(",", ":"), allow_nan=False)
    with _lock:
        _channel.write(line + "\n")
        _channel.flush()


def _read():
    line = sys.stdin.readline()
    if not line:
        # The host is gone (stopped or killed): nothing can answer any more.
        os._exit(0)
    return json.loads(line)


class Context:
    def __init__(self, inputs, resume_state):
        self.inputs = inputs
        self._resume = resume_state
        self.control = {"status": "running"}

    def _request(self, kind, prefix, body):
        global _next_id
        _next_id += 1
        rid = prefix + str(_next_id)
        frame = {"type": kind, "id": rid}
        frame.update(body)
        _send(frame)
        while True:
            reply = _read()
            if isinstance(reply, dict) and reply.get("control") is not None:
                self.control = reply["control"]
            if isinstance(reply, dict) and reply.get("id") == rid:
                return reply.get("control") if reply.get("type") == "control-state" else reply.get("value")

    def call(self, command, args=None, options=None):
        return self._request("call", "c", {"command": command, "args": args or {}, "options": options or {}})

    def assert_(self, assertion):
        return self._request("assert", "a", {"assertion": assertion})

    def progress(self, event):
        _send({"type": "progress", "event": event})

    def checkpoint(self, name, state):
        return self._request("checkpoint", "k", {"name": name, "state": state})

    def askAgent(self, request):
        return self._request("ask", "q", {"request": request})

    ask_agent = askAgent

    def controlPoint(self):
        return self._request("control-point", "s", {})

    control_point = controlPoint

    def resume(self):
        return self._resume


def _watch_parent():
    # The host may die without closing our stdin in time (kill -9 while user code runs
    # and never reads): exit once we are reparented.
    # Its own process group goes too (the host leads the child into a new group).
    parent = os.getppid()
    while True:
        threading.Event().wait(0.25)
        if os.getppid() != parent:
            try:
                os.killpg(os.getpgid(0), 9)
            except OSError:
                pass
            os._exit(0)


def _main():
    threading.Thread(target=_watch_parent, name="aab-parent-watch", daemon=True).start()
    _send({"type": "ready", "sdk": "aab.script-sdk/v1", "language": "python"})
    start = _read()
    ctx = Context(start.get("inputs") or {}, start.get("resume"))
    path = os.path.abspath(sys.argv[1])
    entry = start.get("entrypoint") or "main"
    namespace = {"__name__": "__aab_script__", "__file__": path}
    try:
        with open(path, "r", encoding="utf-8") as f:
            code = compile(f.read(), path, "exec")
        exec(code, namespace)
    except BaseException as e:  # noqa: BLE001 - reported to the host
        _send({"type": "fail", "error": "script_load_failed", "message": str(e), "diagnostic": traceback.format_exc()})
        return
    fn = namespace.get(entry)
    if not callable(fn):
        _send({"type": "fail", "error": "unsupported_entrypoint", "message": "the script defines no function `%s`" % entry})
        return
    try:
        result = fn(ctx)
        if inspect.iscoroutine(result):
            result = asyncio.run(result)
    except BaseException as e:  # noqa: BLE001 - reported to the host
        _send({"type": "fail", "error": "script_failed", "message": str(e), "diagnostic": traceback.format_exc()})
        return
    try:
        _send({"type": "return", "result": result})
    except (TypeError, ValueError) as e:
        _send({"type": "fail", "error": "result_not_json", "message": str(e)})


_main()
