#!/usr/bin/env python3
# Measures Web provider round trips in real headless Chromium: web-dom on the sample
# sign-up form, web-input, web-click and a decision-window capture read, each through
# one `aab mcp` session (runtime round trip without process start), plus web-dom
# through the CLI (with process start). Prints medians; asserts nothing.
#
#   cargo build && python3 plugins/web/tools/measure.py [iterations]
#
# Uses a private runtime home, FactStore and plugin dir in a temp directory, an
# OS-assigned Web port, and stops everything it started.
import json, os, subprocess, sys, time, statistics, tempfile, shutil
HERE = os.path.dirname(os.path.abspath(__file__))
TARGET = os.environ.get('AAB_TARGET_DIR', os.path.join(HERE, '..', '..', '..', 'target', 'debug'))
AAB = os.path.join(TARGET, 'aab')
PLUGIN = os.path.join(TARGET, 'libaab_plugin_web.so')
BROWSER = shutil.which('chromium') or shutil.which('chromium-browser') or shutil.which('google-chrome')
if not BROWSER:
    sys.exit('Chromium is required: apt-get install -y chromium')
root = tempfile.mkdtemp(prefix='aab-measure-')
for d in ['home','facts','plugins','ownership','uh']: os.makedirs(f'{root}/{d}')
shutil.copy(PLUGIN, f'{root}/plugins/libaab_plugin_web.so')
env = dict(os.environ, AI_APP_BRIDGE_RUNTIME_HOME=f'{root}/home', AI_APP_BRIDGE_FACT_STORE_DIR=f'{root}/facts', AI_APP_BRIDGE_PLUGIN_DIR=f'{root}/plugins', AI_APP_BRIDGE_DEVICE_OWNERSHIP_DIR=f'{root}/ownership', HOME=f'{root}/uh')
def cli(*args):
    out = subprocess.run([AAB, *args], env=env, capture_output=True, text=True, cwd=root)
    return json.loads(out.stdout)
mcp = subprocess.Popen([AAB, 'mcp'], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=root)
nid = [0]
def rpc(method, params):
    nid[0] += 1
    mcp.stdin.write(json.dumps({"jsonrpc":"2.0","id":nid[0],"method":method,"params":params})+"\n"); mcp.stdin.flush()
    while True:
        line = mcp.stdout.readline()
        m = json.loads(line)
        if m.get('id') == nid[0]: return m
rpc('initialize', {"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"m","version":"0"}})
mcp.stdin.write(json.dumps({"jsonrpc":"2.0","method":"notifications/initialized","params":{}})+"\n"); mcp.stdin.flush()
def run(command, arguments):
    t = time.perf_counter()
    r = rpc('tools/call', {"name":"run","arguments":{"command":command,"arguments":arguments,"extract":None}})
    dt = (time.perf_counter()-t)*1000
    text = r['result']['content'][0]['text']
    return json.loads(text), dt, len(text)
v = cli('web-session-start','--web-port','0','--sample-app','true')['value']
prof = tempfile.mkdtemp(prefix='aab-measure-chrome-')
url = f"{v['sampleAppUrl']}form.html#endpoint={v['endpoint']}&token={v['token']}&session=measure-1"
chrome = subprocess.Popen([BROWSER,'--headless=new','--no-sandbox','--disable-gpu','--no-first-run','--disable-background-networking','--disable-component-update','--disable-sync','--window-size=1280,1400',f'--user-data-dir={prof}',url], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
try:
    for _ in range(100):
        s = cli('web-sessions')['value']['sessions']
        s = [x for x in s if x['sessionId']=='measure-1' and x['connected']]
        if s: break
        time.sleep(0.1)
    tgt = {"sessionId":"measure-1","runtimeEpoch":s[0]['runtimeEpoch']}
    N = int(sys.argv[1]) if len(sys.argv)>1 else 50
    def series(name, command, args):
        times=[]; sizes=[]; dom=None
        for i in range(N):
            body, dt, n = run(command, dict(tgt, **args))
            assert body['execution']['ok'], body
            times.append(dt); sizes.append(n); dom = body
        times.sort()
        print(f"{name:28s} n={N} median={statistics.median(times):6.2f} ms  p90={times[int(N*0.9)-1]:6.2f} ms  min={times[0]:6.2f} ms  reply={statistics.median(sizes):.0f} B")
        return dom
    dom = series('web-dom (form, MCP)', 'web-dom', {})
    print('  controls', dom['value']['dom']['controlCount'], 'value bytes', dom['delivery'].get('valueBytes'))
    name = [c for c in dom['value']['dom']['controls'] if c['id']=='name'][0]
    series('web-input (MCP)', 'web-input', {"selector":{"elementId":name['elementId']},"value":"Ada Lovelace"})
    series('web-click Demo data (MCP)', 'web-click', {"selector":{"css":"#fill-demo"}})
    series('web-logs decision-window', 'web-logs', {})
    # CLI end to end (process start + client + runtime)
    times=[]
    for i in range(20):
        t=time.perf_counter(); cli('web-dom','--session-id','measure-1','--runtime-epoch',tgt['runtimeEpoch']); times.append((time.perf_counter()-t)*1000)
    times.sort(); print(f"{'web-dom (CLI process)':28s} n=20 median={statistics.median(times):6.2f} ms min={times[0]:6.2f} ms")
finally:
    os.killpg(chrome.pid, 9); chrome.wait()
    mcp.stdin.close(); mcp.wait()
    cli('runtime','--operation','stop')
    shutil.rmtree(prof, ignore_errors=True); shutil.rmtree(root, ignore_errors=True)
