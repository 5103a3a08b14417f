'use strict';
// aab Script SDK for JavaScript (aab.script-sdk/v1), shipped with the host.
// Usage: node sdk.js <main.js>. Frames are newline-delimited JSON on stdin (host → child)
// and stdout (child → host). console output goes to stderr (host diagnostics).
const path = require('path');
const util = require('util');
const readline = require('readline');

const out = process.stdout;
for (const name of ['log', 'info', 'debug', 'warn', 'error', 'trace']) {
  console[name] = (...args) => { process.stderr.write(util.format(...args) + '\n'); };
}

let nextId = 0;
const waiting = new Map();
let control = { status: 'running' };
let resumeState = null;
let startResolve;
const started = new Promise((resolve) => { startResolve = resolve; });

function send(frame) {
  out.write(JSON.stringify(frame) + '\n');
}

function request(type, prefix, body) {
  nextId += 1;
  const id = `${prefix}${nextId}`;
  return new Promise((resolve) => {
    waiting.set(id, resolve);
    send({ type, id, ...body });
  });
}

const input = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
input.on('line', (line) => {
  let frame;
  try { frame = JSON.parse(line); } catch (_) { return; }
  if (!frame || typeof frame !== 'object') return;
  if (frame.control) control = frame.control;
  if (frame.type === 'start') { startResolve(frame); return; }
  if (frame.type === 'control') return;
  const resolve = waiting.get(frame.id);
  if (resolve) {
    waiting.delete(frame.id);
    resolve(frame.type === 'control-state' ? frame.control : frame.value);
  }
});
// The host is gone (stopped or killed): nothing can answer any more.
input.on('close', () => process.exit(0));

// The host may die while the program never yields (a synchronous loop keeps the
// stdin handler above from running): a watchdog thread with its own event loop
// kills this process group once we are reparented. (On Linux the host also sets
// PR_SET_PDEATHSIG.)
try {
  const { Worker } = require('worker_threads');
  const watchdog = new Worker(`
    const { workerData } = require('worker_threads');
    setInterval(() => {
      if (process.ppid !== workerData.parent) {
        try { process.kill(-workerData.group, 'SIGKILL'); } catch (_) {}
        try { process.kill(workerData.self, 'SIGKILL'); } catch (_) {}
      }
    }, 250);
  `, { eval: true, workerData: { parent: process.ppid, group: process.pid, self: process.pid } });
  watchdog.on('error', () => {});
  watchdog.unref();
} catch (_) { /* no worker_threads: stdin EOF and PDEATHSIG remain */ }

const ctx = {
  inputs: {},
  call(command, args = {}, options = {}) { return request('call', 'c', { command, args, options }); },
  assert(assertion) { return request('assert', 'a', { assertion }); },
  progress(event) { send({ type: 'progress', event }); return Promise.resolve(); },
  checkpoint(name, state) { return request('checkpoint', 'k', { name, state }); },
  askAgent(req) { return request('ask', 'q', { request: req }); },
  controlPoint() { return request('control-point', 's', {}); },
  resume() { return resumeState; },
  get control() { return control; },
};

(async () => {
  const start = await started;
  ctx.inputs = start.inputs || {};
  resumeState = start.resume === undefined ? null : start.resume;
  let mod;
  try {
    mod = require(path.resolve(process.argv[2]));
  } catch (e) {
    send({ type: 'fail', error: 'script_load_failed', message: String((e && e.message) || e), diagnostic: String((e && e.stack) || e) });
    return;
  }
  const entry = start.entrypoint || 'main';
  const fn = (mod && typeof mod[entry] === 'function') ? mod[entry] : (typeof mod === 'function' && entry === 'main' ? mod : null);
  if (!fn) {
    send({ type: 'fail', error: 'unsupported_entrypoint', message: `the script exports no function \`${entry}\`` });
    return;
  }
  let result;
  try {
    result = await fn(ctx);
  } catch (e) {
    send({ type: 'fail', error: 'script_failed', message: String((e && e.message) || e), diagnostic: String((e && e.stack) || e) });
    return;
  }
  try {
    send({ type: 'return', result: result === undefined ? null : result });
  } catch (e) {
    send({ type: 'fail', error: 'result_not_json', message: String((e && e.message) || e) });
  }
})();
send({ type: 'ready', sdk: 'aab.script-sdk/v1', language: 'javascript' });
