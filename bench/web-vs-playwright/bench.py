#!/usr/bin/env python3
# Side-by-side: aab Web provider (through `aab mcp`), aab `web-executor` (engine cdp, through
# `aab mcp`, no SDK in the page) and Playwright MCP (@playwright/mcp, pinned in package.json),
# same pages, same /usr/bin/chromium, same machine, one run. Extended from
# plugins/web/tools/measure.py.
#
#   cd bench/web-vs-playwright && npm install && python3 bench.py [iterations] [target-dir]
#
# The plugin is copied from <target-dir>/libaab_plugin_web.so into a private plugin dir.
# Operations: snapshot of the sample sign-up form (~20 controls), snapshot of a generated
# 1000-row page, click round trip, input round trip. Reply bytes = UTF-8 bytes of the
# MCP tool result's text content. Warm-up calls are excluded.
#
# Two page variants are served: the SDK pages (the sample app + the Web SDK, connected to
# aab: what the Web provider needs) and the same pages with the SDK and the sample app script
# removed ("plain": what web-executor and Playwright need; the page's own behaviour, e.g. the
# demo-data button, kept by a three-line stub). Playwright MCP is measured on both, so every
# aab row has a Playwright row on the very same page. Skip the executor rows with
# BENCH_EXECUTOR=0, the SDK rows with BENCH_SDK=0.
import json, os, subprocess, sys, time, statistics, tempfile, shutil, re, threading, http.server, socketserver, urllib.request
HERE = os.path.dirname(os.path.abspath(__file__))
N = int(sys.argv[1]) if len(sys.argv) > 1 else 40
# Absolute: the aab CLI runs with the private world's root as its working directory.
TARGET = os.path.abspath(sys.argv[2] if len(sys.argv) > 2 else os.path.join(HERE, '..', '..', 'target', 'debug'))
WARM = 3
SDK_ROWS = os.environ.get('BENCH_SDK', '1') != '0'
EXECUTOR_ROWS = os.environ.get('BENCH_EXECUTOR', '1') != '0'
AAB = os.path.join(TARGET, 'aab')
PLUGIN = os.path.join(TARGET, 'libaab_plugin_web.so')
BROWSER = '/usr/bin/chromium'
PW = os.path.join(HERE, 'node_modules', '.bin', 'playwright-mcp')
PW_ARGS = ['--browser', 'chromium', '--executable-path', BROWSER, '--headless', '--isolated', '--no-sandbox',
           '--viewport-size', '1280,1400']
PW_ARGS += os.environ.get('PW_EXTRA_ARGS', '').split()

root = tempfile.mkdtemp(prefix='aab-vs-pw-')
for d in ['home', 'facts', 'plugins', 'ownership', 'uh', 'pages', 'pwout']: os.makedirs(f'{root}/{d}')
shutil.copy(PLUGIN, f'{root}/plugins/libaab_plugin_web.so')
# Both aab's executor and Playwright launch this very Chromium.
env = dict(os.environ, AAB_CHROMIUM=BROWSER, AI_APP_BRIDGE_RUNTIME_HOME=f'{root}/home', AI_APP_BRIDGE_FACT_STORE_DIR=f'{root}/facts',
           AI_APP_BRIDGE_PLUGIN_DIR=f'{root}/plugins', AI_APP_BRIDGE_DEVICE_OWNERSHIP_DIR=f'{root}/ownership', HOME=f'{root}/uh')

def cli(*args):
    out = subprocess.run([AAB, *args], env=env, capture_output=True, text=True, cwd=root)
    return json.loads(out.stdout)

class Mcp:
    def __init__(self, argv, env, cwd):
        self.p = subprocess.Popen(argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                  text=True, cwd=cwd, start_new_session=True)
        self.nid = 0
        r = self.rpc('initialize', {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}})
        self.server = r['result'].get('serverInfo')
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized", "params": {}})
    def send(self, m):
        self.p.stdin.write(json.dumps(m) + "\n"); self.p.stdin.flush()
    def rpc(self, method, params):
        self.nid += 1
        self.send({"jsonrpc": "2.0", "id": self.nid, "method": method, "params": params})
        while True:
            line = self.p.stdout.readline()
            if not line: raise RuntimeError(f'{method}: server closed stdout')
            m = json.loads(line)
            if m.get('id') == self.nid: return m
    def call(self, name, arguments, allow_error=False):
        t = time.perf_counter()
        r = self.rpc('tools/call', {"name": name, "arguments": arguments})
        dt = (time.perf_counter() - t) * 1000
        res = r.get('result') or {}
        text = ''.join(c.get('text', '') for c in res.get('content', []) if c.get('type') == 'text')
        if 'error' in r or (res.get('isError') and not allow_error):
            raise RuntimeError(f'{name} failed: {r.get("error") or text[:500]}')
        return text, dt, len(text.encode())
    def close(self):
        try: self.p.stdin.close()
        except Exception: pass
        try: self.p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self.p.pid, 15)
            try: self.p.wait(timeout=5)
            except subprocess.TimeoutExpired: os.killpg(self.p.pid, 9); self.p.wait()

results = {}  # (op, tool) -> dict
def series(op, tool, fn, n=N):
    times, sizes = [], []
    for i in range(WARM + n):
        dt, b = fn(i)
        if i >= WARM: times.append(dt); sizes.append(b)
    times.sort()
    pick = lambda q: times[max(0, int(round(q * n)) - 1)]
    r = dict(n=n, median=statistics.median(times), p90=pick(0.90), p95=pick(0.95), min=times[0],
             bytes=int(statistics.median(sizes)), bytes_min=min(sizes), bytes_max=max(sizes))
    results[(op, tool)] = r
    print(f"{tool:14s} {op:40s} n={n} median={r['median']:8.2f} ms p90={r['p90']:8.2f} ms p95={r['p95']:8.2f} ms bytes={r['bytes']}", flush=True)

# --- pages -------------------------------------------------------------------------
# The plain pages' stand-in for sample/app.js: runs the page's own code, no bridge.
STUB = ('<script>window.sampleApp = { ready: function (f) { f({ registerStateProvider: function () {}, '
        'recordState: function () {}, recordEvent: function () {} }); } };</script>')

def rows_html(sdk_base, sdk=True):
    head = (f'<script src="{sdk_base}sdk/ai-app-bridge-web.js"></script>\n<script src="{sdk_base}sample/app.js"></script>' if sdk else STUB)
    rows = ''.join(f'<tr><td>{i}</td><td>Item {i} — order {100000 + i * 7}</td><td>{(i * 37) % 1000 / 10:.1f} EUR</td>'
                   f'<td><button type="button" class="open" data-row="{i}">Open {i}</button></td></tr>\n' for i in range(1, 1001))
    return f'''<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>aab bench — 1000 rows</title>
{head}</head>
<body><header><strong>aab bench</strong> <span id="bridge-status" role="status">Bridge: starting</span></header>
<main><h1>1000 rows</h1><p id="picked" role="status"></p>
<table id="rows"><thead><tr><th>#</th><th>Item</th><th>Price</th><th>Action</th></tr></thead><tbody>
{rows}</tbody></table></main>
<script>
sampleApp.ready(function (bridge) {{
  document.getElementById('rows').addEventListener('click', function (e) {{
    var b = e.target.closest('button.open'); if (b) document.getElementById('picked').textContent = 'Opened row ' + b.dataset.row;
  }});
}});
</script></body></html>
'''

class Quiet(http.server.SimpleHTTPRequestHandler):
    def __init__(self, *a, **k): super().__init__(*a, directory=f'{root}/pages', **k)
    def log_message(self, *a): pass

chromes, mcps, httpd = [], [], None
def chrome(url, tag):
    prof = tempfile.mkdtemp(prefix=f'chrome-{tag}-', dir=root)
    p = subprocess.Popen([BROWSER, '--headless=new', '--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking',
                          '--disable-component-update', '--disable-sync', '--window-size=1280,1400', f'--user-data-dir={prof}', url],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    chromes.append(p); return p

def kill_chrome(p):
    if p.poll() is None:
        os.killpg(p.pid, 9)
    p.wait()

def wait_session(sid):
    for _ in range(200):
        s = [x for x in cli('web-sessions')['value']['sessions'] if x['sessionId'] == sid and x['connected']]
        if s: return {"sessionId": sid, "runtimeEpoch": s[0]['runtimeEpoch']}
        time.sleep(0.1)
    raise RuntimeError(f'session {sid} never connected')

def ref_of(snapshot, pattern):
    m = re.search(pattern + r'[^\n]*?\[ref=([^\]]+)\]', snapshot)
    if not m: raise RuntimeError(f'no ref for {pattern!r} in snapshot:\n{snapshot[:3000]}')
    return m.group(1)

started_runtime = False
info = {}
try:
    r = cli('web-session-start', '--web-port', '0', '--sample-app', 'true')
    if 'value' not in r: raise RuntimeError(f'web-session-start: {json.dumps(r)[:1500]}')
    v = r['value']
    started_runtime = True
    base = v['sampleAppUrl'].rsplit('sample/', 1)[0]  # http://127.0.0.1:PORT/
    frag = lambda sid: f"#endpoint={v['endpoint']}&token={v['token']}&session={sid}"
    with open(f'{root}/pages/rows.html', 'w') as f: f.write(rows_html(base))
    httpd = socketserver.ThreadingTCPServer(('127.0.0.1', 0), Quiet); httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    rows_url = f'http://127.0.0.1:{httpd.server_address[1]}/rows.html'
    form_url = f"{v['sampleAppUrl']}form.html"
    # The plain pages: the same markup and page behaviour, no SDK, no sample app script.
    fetch = lambda url: urllib.request.urlopen(url, timeout=10).read().decode()
    form_plain = (fetch(form_url).replace('<script src="/sdk/ai-app-bridge-web.js"></script>', '')
                  .replace('<script src="/sample/app.js"></script>', STUB).replace('/sample/style.css', 'style.css'))
    if 'ai-app-bridge' in form_plain or 'app.js' in form_plain: raise RuntimeError('the plain form still loads the SDK')
    with open(f'{root}/pages/form-plain.html', 'w') as f: f.write(form_plain)
    with open(f'{root}/pages/style.css', 'w') as f: f.write(fetch(f"{v['sampleAppUrl']}style.css"))
    with open(f'{root}/pages/rows-plain.html', 'w') as f: f.write(rows_html(base, sdk=False))
    plain_form_url = f'http://127.0.0.1:{httpd.server_address[1]}/form-plain.html'
    plain_rows_url = f'http://127.0.0.1:{httpd.server_address[1]}/rows-plain.html'
    info['aab_version'] = subprocess.run([AAB, '--version'], env=env, capture_output=True, text=True).stdout.strip()
    info['chromium'] = subprocess.run([BROWSER, '--version'], capture_output=True, text=True).stdout.strip()

    # ---------------- aab ----------------
    aab = Mcp([AAB, 'mcp'], env, root); mcps.append(aab)
    info['aab_server'] = aab.server
    by_reference = {}
    def run(command, arguments, allow_reference=False):
        text, dt, n = aab.call('run', {"command": command, "arguments": arguments, "extract": None,
                                       "output": {"maxBytes": 262144}}, allow_error=True)
        body = json.loads(text)
        if not body['execution']['ok']: raise RuntimeError(f'{command}: {text[:800]}')
        if body.get('failureStage') == 'delivery' and body.get('delivery', {}).get('status') == 'reference' and allow_reference:
            by_reference[command] = body['delivery']  # over the output budget: kept by reference, not in the reply
        elif 'failureStage' in body:
            raise RuntimeError(f'{command}: {text[:3000]}')
        return body, dt, n
    if SDK_ROWS:
        c = chrome(form_url + frag('bench-form'), 'form'); tgt = wait_session('bench-form')
        def aab_dom(i, extra={}):
            body, dt, n = run('web-dom', dict(tgt, **extra)); aab_dom.last = body; return dt, n
        series('snapshot: form', 'aab', aab_dom)
        d = aab_dom.last['value']['dom']; info['aab_form_controls'] = d.get('controlCount')
        name = [x for x in d['controls'] if x.get('id') == 'name'][0]
        series('input round trip', 'aab', lambda i: run('web-input', dict(tgt, selector={"elementId": name['elementId']}, value=f"Ada Lovelace {i}"))[1:])
        series('click round trip', 'aab', lambda i: run('web-click', dict(tgt, selector={"css": "#fill-demo"}))[1:])
        kill_chrome(c)
        c = chrome(rows_url + frag('bench-rows'), 'rows'); tgt = wait_session('bench-rows')
        series('snapshot: 1000 rows', 'aab', aab_dom)
        d = aab_dom.last['value']['dom']; info['aab_rows_default'] = {k: d.get(k) for k in ('controlCount',)} | {'described': len(d.get('controls', [])), 'truncated': aab_dom.last.get('delivery')}
        series('snapshot: 1000 rows (maxControls=1000)', 'aab', lambda i: aab_dom(i, {"maxControls": 1000}))
        d = aab_dom.last['value']['dom']; info['aab_rows_max'] = {'described': len(d.get('controls', [])), 'delivery': aab_dom.last.get('delivery')}
        # Intent summary of the same page (issue 6 benchmark): size, nodes, truncation.
        body, dt, n = run('intent', {"operation": "start", "goal": "Pick item 500", "target": {"platform": "web", **tgt}})
        summ = body['value'].get('summary', {})
        info['intent_rows_summary'] = {'startMs': round(dt, 1), 'summaryBytes': len(json.dumps(summ, separators=(',', ':')).encode()),
                                       'nodes': len(summ.get('nodes', [])), 'truncated': summ.get('truncated'), 'reason': summ.get('reason')}
        run('intent', {"operation": "cancel", "operationId": body['value']['operationId']})
        kill_chrome(c)

    # ---------------- aab web-executor (engine cdp, plain pages, same MCP session) ----------------
    if EXECUTOR_ROWS:
        def wx(arguments, allow_reference=False):
            body, dt, n = run('web-executor', arguments, allow_reference)
            if 'value' not in body and allow_reference: return body, dt, n
            if body['value'].get('ok') is not True: raise RuntimeError(f'web-executor: {json.dumps(body)[:800]}')
            return body['value'], dt, n
        sid = 'bench-wx'
        opened, dt, _ = wx({"operation": "open", "engine": "cdp", "sessionId": sid, "url": plain_form_url,
                            "viewport": {"width": 1280, "height": 1400}})
        info['wx_open'] = {'ms': round(dt, 1), 'engine': opened.get('engine'), 'openedMs': opened.get('openedMs'),
                           'engineDetails': opened.get('engineDetails'), 'scripting': opened.get('scripting')}
        def wx_observe(i, extra={}, allow_reference=False):
            value, dt, n = wx(dict({"operation": "observe", "sessionId": sid}, **extra), allow_reference); wx_observe.last = value; return dt, n
        series('snapshot: form', 'executor', wx_observe)
        o = wx_observe.last
        if o.get('injected'): raise RuntimeError('web-executor injected the renderer again on a warm page')
        info['wx_form_controls'] = {'controlCount': o.get('controlCount'), 'listed': len(o.get('controls', [])), 'truncated': o.get('truncated')}
        by_id = {c.get('id'): c for c in o.get('controls', [])}
        if 'name' not in by_id or 'fill-demo' not in by_id: raise RuntimeError(f"observe lists no #name / #fill-demo: {sorted(k for k in by_id if k)}")
        snap = o['snapshotId']  # bound like Playwright's refs: resolved in the observation, page identity checked
        def wx_act(action, selector, bound=True):
            args = {"operation": "act", "sessionId": sid, "action": action, "selector": selector}
            if bound: args["snapshotId"] = snap
            value, dt, n = wx(args)
            if value.get('status') != 'settled': raise RuntimeError(f'act not settled: {json.dumps(value)[:800]}')
            wx_act.last = value; return dt, n
        series('input round trip', 'executor', lambda i: wx_act({"type": "input", "text": f"Ada Lovelace {i}"}, {"by": "elementId", "value": by_id['name']['elementId']}))
        info['wx_input_receipt'] = wx_act.last.get('receipt')
        # Checked outside the timed windows, in a fresh observation of the page: the field holds
        # the last text typed; after the clicks, the demo data the button's handler wrote.
        def wx_name():
            wx_observe(0); return [c for c in wx_observe.last['controls'] if c.get('id') == 'name'][0].get('value')
        if wx_name() != f"Ada Lovelace {WARM + N - 1}": raise RuntimeError(f'the page does not hold the last typed text: {wx_name()!r}')
        series('click round trip', 'executor', lambda i: wx_act({"type": "click"}, {"by": "elementId", "value": by_id['fill-demo']['elementId']}))
        info['wx_click_receipt'] = wx_act.last.get('receipt')
        series('click round trip (css, no snapshotId)', 'executor', lambda i: wx_act({"type": "click"}, {"by": "css", "value": "#fill-demo"}, bound=False))
        if wx_name() != 'Grace Hopper': raise RuntimeError(f'the demo-data clicks did not reach the page: {wx_name()!r}')
        wx({"operation": "navigate", "sessionId": sid, "url": plain_rows_url})
        series('snapshot: 1000 rows', 'executor', wx_observe)
        o = wx_observe.last; info['wx_rows_default'] = {'controlCount': o.get('controlCount'), 'listed': len(o.get('controls', [])), 'truncated': o.get('truncated')}
        # 1000 controls + body text can exceed the 256 KiB output budget: then the reply is the
        # reference to the stored response (its size is what the agent gets), recorded below.
        by_reference.clear()
        series('snapshot: 1000 rows (maxControls=1000)', 'executor', lambda i: wx_observe(i, {"maxControls": 1000}, allow_reference=True))
        if 'web-executor' in by_reference:
            results[('snapshot: 1000 rows (maxControls=1000)', 'executor')]['by_reference'] = by_reference['web-executor']
        o = wx_observe.last
        info['wx_rows_max'] = {'controlCount': o.get('controlCount'), 'listed': len(o.get('controls', [])), 'truncated': o.get('truncated'),
                               'delivery': o.get('delivery') if 'value' not in o and 'controls' not in o else 'inline'}
        closed, _, _ = wx({"operation": "close", "sessionId": sid})
        info['wx_close'] = {k: closed.get(k) for k in ('closed', 'remote')}
    aab.close()

    # ---------------- Playwright MCP ----------------
    pw = Mcp([PW, *PW_ARGS, '--output-dir', f'{root}/pwout'], dict(os.environ, PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD='1', HOME=f'{root}/uh'), HERE)
    mcps.append(pw); info['pw_server'] = pw.server; info['pw_args'] = PW_ARGS
    def pw_snap(i):
        text, dt, n = pw.call('browser_snapshot', {}); pw_snap.last = text; return dt, n
    def pw_page(tool, form, rows):
        pw.call('browser_navigate', {"url": form})
        series('snapshot: form', tool, pw_snap)
        info[f'{tool}_form_snapshot_head'] = pw_snap.last[:1500]
        ref_name = ref_of(pw_snap.last, r'textbox "Full name"')
        ref_demo = ref_of(pw_snap.last, r'button "Fill with demo data"')
        def pw_type(i):
            text, dt, n = pw.call('browser_type', {"element": "Full name textbox", "target": ref_name, "text": f"Ada Lovelace {i}"}); pw_type.last = text; return dt, n
        series('input round trip', tool, pw_type)
        info[f'{tool}_type_reply_head'] = pw_type.last[:800]
        def pw_click(i):
            text, dt, n = pw.call('browser_click', {"element": "Demo data button", "target": ref_demo}); pw_click.last = text; return dt, n
        series('click round trip', tool, pw_click)
        info[f'{tool}_click_reply_head'] = pw_click.last[:800]
        pw.call('browser_navigate', {"url": rows})
        series('snapshot: 1000 rows', tool, pw_snap)
    if SDK_ROWS: pw_page('playwright', form_url + frag('pw-form'), rows_url + frag('pw-rows'))
    if EXECUTOR_ROWS: pw_page('playwright-plain', plain_form_url, plain_rows_url)
    pw.call('browser_close', {})
    pw.close()
finally:
    for p in chromes: kill_chrome(p)
    for m in mcps:
        if m.p.poll() is None: m.close()
    if httpd: httpd.shutdown()
    try:  # stop the private runtime whether or not start succeeded
        print('runtime stop:', json.dumps(cli('runtime', '--operation', 'stop').get('value')))
    except Exception as e:
        print('runtime stop failed:', e)
    shutil.rmtree(root, ignore_errors=True)

# ---------------- report ----------------
ops = ['snapshot: form', 'snapshot: 1000 rows', 'snapshot: 1000 rows (maxControls=1000)', 'click round trip',
       'click round trip (css, no snapshotId)', 'input round trip']
tools = [('aab', 'aab Web SDK provider (SDK page)'), ('playwright', 'Playwright MCP (SDK page)'),
         ('executor', 'aab web-executor (plain page)'), ('playwright-plain', 'Playwright MCP (plain page)')]
tools = [t for t in tools if any((op, t[0]) in results for op in ops)]
def cell(r):
    if not r: return '—'
    ref = r.get('by_reference')
    size = f"{r['bytes']} B" if not ref else f"{r['bytes']} B (over budget: {ref.get('attemptedBytes')} B kept by reference)"
    return f"{r['median']:.1f} / {r['p90']:.1f} ms, {size}"
lines = ['| operation (median / p90, reply bytes) | ' + ' | '.join(t[1] for t in tools) + ' |', '|---|' + '---:|' * len(tools)]
for op in ops:
    if any((op, t[0]) in results for t in tools):
        lines.append(f"| {op} | " + ' | '.join(cell(results.get((op, t[0]))) for t in tools) + ' |')
table = '\n'.join(lines)
print(table)
out = os.environ.get('BENCH_JSON')
if out:
    with open(out, 'w') as fh: json.dump({'n': N, 'target': os.path.abspath(TARGET), 'results': {f'{k[1]}|{k[0]}': v for k, v in results.items()}, 'info': info, 'table': table}, fh, indent=1, default=str)
