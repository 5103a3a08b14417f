# aab Intent agent worker (persistent, one per autonomous Intent). Loads the agent
# module once, then answers one `decide` frame per decision turn on stdout (JSON
# lines). The module's own prints go to stderr.
import json
import sys
import traceback

_out = sys.stdout
sys.stdout = sys.stderr


def send(frame):
    _out.write(json.dumps(frame, separators=(",", ":")) + "\n")
    _out.flush()


class Signal:
    """Stands for the abort signal: the host kills this process on pause and cancel."""
    aborted = False


path = sys.argv[1]
name = sys.argv[2] if len(sys.argv) > 2 else "agent.py"
ns = {"__name__": "aab_agent", "__file__": name}
try:
    with open(path, encoding="utf-8") as f:
        source = f.read()
    exec(compile(source, name, "exec"), ns)
except BaseException as e:  # noqa: BLE001 - any load failure is reported
    send({"type": "fail", "error": "agent_adapter_unavailable", "message": "loading the agent module failed: " + "".join(traceback.format_exception_only(type(e), e)).strip()})
    sys.exit(1)
decide = ns.get("decide")
if not callable(decide):
    send({"type": "fail", "error": "agent_adapter_unavailable", "message": "the agent module exports no decide(signal) function"})
    sys.exit(1)
send({"type": "ready"})

for line in sys.stdin:
    try:
        frame = json.loads(line)
    except ValueError:
        sys.exit(2)
    if not isinstance(frame, dict) or frame.get("type") != "decide":
        continue
    turn = frame.get("turn")
    given = dict(frame.get("input") or {})
    given["signal"] = Signal()
    try:
        value = decide(given)
    except Exception as e:  # noqa: BLE001
        send({"type": "fail", "turn": turn, "error": "agent_threw", "message": str(e), "stack": traceback.format_exc()})
        continue
    try:
        text = json.dumps({"type": "decision", "turn": turn, "value": value}, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as e:
        send({"type": "fail", "turn": turn, "error": "agent_reply_invalid", "message": str(e)})
        continue
    _out.write(text + "\n")
    _out.flush()
