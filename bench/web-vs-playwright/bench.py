#!/usr/bin/env python3
# Side-by-side: aab Web provider (through `aab mcp`) vs Playwright MCP (@playwright/mcp,
# pinned in package.json), same pages, same /usr/bin/chromium, same machine, one run.
# Extended from plugins/web/tools/measure.py.
#
#   cd bench/web-vs-playwright && npm install && python3 bench.py [iterations] [target-dir]
#
# Operations: snapshot of the sample sign-up form (~20 controls), snapshot of a generated
# 1000-row page, click round trip, input round trip. Reply bytes = UTF-8 bytes of the
# MCP tool result's text content. Warm-up calls are excluded.
import json, os, subprocess, sys, time, statistics, tempfile, shutil, re, threading, http.server, socketserver
HERE = os.path.dirname(os.path.abspath(__file__))
N = int(sys.argv[1]) if len(sys.argv) > 1 else 40
TARGET = sys.argv[2] if len(sys.argv) > 2 else os.path.join(HERE, '..', '..', 'target', 'debug')
WARM = 3
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
env = dict(os.environ, AI_APP_BRIDGE_RUNTIME_HOME=f'{root}/home', AI_APP_BRIDGE_FACT_STORE_DIR=f'{root}/facts',
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
    def call(self, name, arguments):
        t = time.perf_counter()
        r = self.rpc('tools/call', {"name": name, "arguments": arguments})
        dt = (time.perf_counter() - t) * 1000
        res = r.get('result') or {}
        text = ''.join(c.get('text', '') for c in res.get('content', []) if c.get('type') == 'text')
        if 'error' in r or res.get('isError'):
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
    r = dict(n=n, median=statistics.median(times), p95=times[max(0, int(round(0.95 * n)) - 1)], min=times[0],
             bytes=int(statistics.median(sizes)), bytes_min=min(sizes), bytes_max=max(sizes))
    results[(op, tool)] = r
    print(f"{tool:10s} {op:26s} n={n} median={r['median']:8.2f} ms p95={r['p95']:8.2f} ms min={r['min']:8.2f} ms bytes={r['bytes']}", flush=True)

# --- pages -------------------------------------------------------------------------
def rows_html(sdk_base):
    rows = ''.join(f'<tr><td>{i}</td><td>Item {i} — order {100000 + i * 7}</td><td>{(i * 37) % 1000 / 10:.1f} EUR</td>'
                   f'<td><button type="button" class="open" data-row="{i}">Open {i}</button></td></tr>\n' for i in range(1, 1001))
    return f'''<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>aab bench — 1000 rows</title>
<script src="{sdk_base}sdk/ai-app-bridge-web.js"></script>
<script src="{sdk_base}sample/app.js"></script></head>
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
    info['aab_version'] = subprocess.run([AAB, '--version'], env=env, capture_output=True, text=True).stdout.strip()
    info['chromium'] = subprocess.run([BROWSER, '--version'], capture_output=True, text=True).stdout.strip()

    # ---------------- aab ----------------
    aab = Mcp([AAB, 'mcp'], env, root); mcps.append(aab)
    info['aab_server'] = aab.server
    def run(command, arguments):
        text, dt, n = aab.call('run', {"command": command, "arguments": arguments, "extract": None,
                                       "output": {"maxBytes": 262144}})
        body = json.loads(text)
        if not body['execution']['ok']: raise RuntimeError(f'{command}: {text[:800]}')
        return body, dt, n
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
    aab.close()

    # ---------------- Playwright MCP ----------------
    pw = Mcp([PW, *PW_ARGS, '--output-dir', f'{root}/pwout'], dict(os.environ, PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD='1', HOME=f'{root}/uh'), HERE)
    mcps.append(pw); info['pw_server'] = pw.server; info['pw_args'] = PW_ARGS
    pw.call('browser_navigate', {"url": form_url + frag('pw-form')})
    def pw_snap(i):
        text, dt, n = pw.call('browser_snapshot', {}); pw_snap.last = text; return dt, n
    series('snapshot: form', 'playwright', pw_snap)
    info['pw_form_snapshot_head'] = pw_snap.last[:1500]
    ref_name = ref_of(pw_snap.last, r'textbox "Full name"')
    ref_demo = ref_of(pw_snap.last, r'button "Fill with demo data"')
    def pw_type(i):
        text, dt, n = pw.call('browser_type', {"element": "Full name textbox", "target": ref_name, "text": f"Ada Lovelace {i}"}); pw_type.last = text; return dt, n
    series('input round trip', 'playwright', pw_type)
    info['pw_type_reply_head'] = pw_type.last[:800]
    def pw_click(i):
        text, dt, n = pw.call('browser_click', {"element": "Demo data button", "target": ref_demo}); pw_click.last = text; return dt, n
    series('click round trip', 'playwright', pw_click)
    info['pw_click_reply_head'] = pw_click.last[:800]
    pw.call('browser_navigate', {"url": rows_url + frag('pw-rows')})
    series('snapshot: 1000 rows', 'playwright', pw_snap)
    pw.call('browser_close', {})
    pw.close()
finally:
    for p in chromes: kill_chrome(p)
    for m in mcps:
        if m.p.poll() is None: m.close()
    if httpd: httpd.shutdown()
    if True:  # stop the private runtime whether or not start succeeded
        print('runtime stop:', json.dumps(cli('runtime', '--operation', 'stop').get('value')))
    shutil.rmtree(root, ignore_errors=True)

# ---------------- report ----------------
ops = ['snapshot: form', 'snapshot: 1000 rows', 'snapshot: 1000 rows (maxControls=1000)', 'click round trip', 'input round trip']
lines = ['| operation | aab median ms | aab p95 ms | aab bytes | Playwright MCP median ms | Playwright MCP p95 ms | Playwright MCP bytes |',
         '|---|---:|---:|---:|---:|---:|---:|']
for op in ops:
    a, p = results.get((op, 'aab')), results.get((op, 'playwright'))
    f = lambda r: (f"{r['median']:.1f}", f"{r['p95']:.1f}", f"{r['bytes']}") if r else ('—', '—', '—')
    lines.append(f"| {op} | " + ' | '.join(f(a) + f(p)) + ' |')
table = '\n'.join(lines)
print(table)
out = os.environ.get('BENCH_JSON')
if out:
    with open(out, 'w') as fh: json.dump({'n': N, 'target': os.path.abspath(TARGET), 'results': {f'{k[1]}|{k[0]}': v for k, v in results.items()}, 'info': info, 'table': table}, fh, indent=1, default=str)
