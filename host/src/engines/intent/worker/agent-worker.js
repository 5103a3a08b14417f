'use strict';
// aab Intent agent worker (persistent, one per autonomous Intent). Loads the agent
// module once, then answers one `decide` frame per decision turn on stdout (JSON
// lines). The module's own stdout/console output goes to stderr.
const fs = require('fs');
const vm = require('vm');
const path = require('path');
const readline = require('readline');
const { createRequire } = require('module');

const out = process.stdout.write.bind(process.stdout);
process.stdout.write = process.stderr.write.bind(process.stderr);
for (const k of ['log', 'info', 'debug', 'warn', 'trace']) console[k] = console.error;
const send = (frame) => out(JSON.stringify(frame) + '\n');

const file = process.argv[2];
const name = process.argv[3] || 'agent.js';
let decide;
try {
  const source = fs.readFileSync(file, 'utf8');
  const mod = { exports: {} };
  const fn = vm.compileFunction(source + '\n;return (typeof decide === "function") ? decide : undefined;',
    ['module', 'exports', 'require', '__filename', '__dirname'], { filename: name });
  const local = fn(mod, mod.exports, createRequire(path.join(process.cwd(), name)), name, process.cwd());
  const e = mod.exports;
  if (e && typeof e.decide === 'function') decide = e.decide.bind(e);
  else if (typeof e === 'function') decide = e;
  else decide = local;
} catch (err) {
  send({ type: 'fail', error: 'agent_adapter_unavailable', message: 'loading the agent module failed: ' + String(err && err.stack || err) });
  process.exit(1);
}
if (typeof decide !== 'function') {
  send({ type: 'fail', error: 'agent_adapter_unavailable', message: 'the agent module exports no decide(signal) function' });
  process.exit(1);
}
send({ type: 'ready' });

const rl = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
rl.on('line', async (line) => {
  let frame;
  try { frame = JSON.parse(line); } catch (e) { process.exit(2); }
  if (!frame || frame.type !== 'decide') return;
  const controller = new AbortController();
  const input = Object.assign({}, frame.input, { signal: controller.signal });
  let value;
  try {
    value = await decide(input);
  } catch (err) {
    send({ type: 'fail', turn: frame.turn, error: 'agent_threw', message: String(err && err.message || err), stack: String(err && err.stack || '') });
    return;
  }
  let text;
  try {
    if (value === undefined) throw new Error('decide returned undefined');
    text = JSON.stringify({ type: 'decision', turn: frame.turn, value });
  } catch (err) {
    send({ type: 'fail', turn: frame.turn, error: 'agent_reply_invalid', message: String(err && err.message || err) });
    return;
  }
  out(text + '\n');
});
rl.on('close', () => process.exit(0));
