// aab script-extraction worker for JavaScript (protocol aab.extract-worker/v1).
//
// The host (crate aab-extract) starts one fresh `node` process per call with this
// file as its program. It owns nothing but this one call:
//   * fd 0 carries exactly one request frame (a compact JSON object and "\n"),
//     then end-of-file, so user code that reads stdin sees EOF, never more input;
//   * fd 3 is the reply channel: this worker writes exactly one JSON frame and "\n";
//   * fd 1 and fd 2 go to the host's diagnostic pipe (its last 8 KiB are kept), so
//     console output can never corrupt a frame.
// Request `type:"check"` compiles the source without running any of it (the
// pre-dispatch syntax check); `type:"start"` loads the source, calls
// `main(ctx)` with `ctx.inputs`, and checks that the result is strict JSON
// *before* serialising it. See host/extract/src/lib.rs for the whole contract.
'use strict';

const fs = require('fs');
const path = require('path');
const vm = require('vm');
const { createRequire } = require('module');

const SCHEMA = 'aab.extract-worker/v1';
const REPLY_FD = 3;
const MAX_VALUE_BYTES = 256 * 1024;
const MAX_DEPTH = 64;
const MAX_STACK_FRAMES = 20;
const MAX_STACK_BYTES = 8 * 1024;
const MAX_MESSAGE_BYTES = 4 * 1024;
const MIN_NODE_MAJOR = 16;
// The source runs as the body of a CommonJS-style function. A top-level
// `function main` is local to that body, so this suffix hands it back to us; the
// leading newline and semicolon end any trailing comment or expression.
const PARAMS = ['exports', 'require', 'module', '__filename', '__dirname'];
const SUFFIX = '\n;return typeof main === "function" ? main : undefined;';

// Taken before any user code runs: a script that patches these (trusted code
// can) must not be able to silence or reroute the reply. The host re-checks
// whatever arrives anyway.
const writeSync = fs.writeSync;
const exit = process.exit.bind(process);
const stringify = JSON.stringify;

let replied = false;

function byteLength(text) {
  return Buffer.byteLength(text, 'utf8');
}

// Cut a string to at most `max` UTF-8 bytes without splitting a character.
function clip(text, max) {
  if (byteLength(text) <= max) return text;
  let out = Buffer.from(text, 'utf8').subarray(0, max).toString('utf8');
  // A cut multi-byte sequence decodes to U+FFFD at the end; drop it.
  while (out.endsWith('\ufffd')) out = out.slice(0, -1);
  return out + '…';
}

function writeAll(fd, text) {
  const data = Buffer.from(text, 'utf8');
  let offset = 0;
  while (offset < data.length) {
    offset += writeSync(fd, data, offset, data.length - offset);
  }
}

// Send the one reply frame and end the process. `valueJson`, when given, is the
// already-serialised result and is spliced in verbatim (no second stringify).
function reply(frame, valueJson) {
  if (replied) return;
  replied = true;
  let text = stringify(Object.assign({ schema: SCHEMA }, frame));
  if (valueJson !== undefined) text = text.slice(0, -1) + ',"value":' + valueJson + '}';
  try {
    writeAll(REPLY_FD, text + '\n');
  } catch (e) {
    // The host went away or closed the channel; nothing is left to tell it.
  }
  exit(0);
}

function fail(code, message, diagnostic) {
  const frame = { type: 'fail', error: code, message: clip(String(message), MAX_MESSAGE_BYTES) };
  if (diagnostic && Object.keys(diagnostic).length > 0) frame.diagnostic = diagnostic;
  reply(frame);
}

function escapeRegExp(text) {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

// Keep the user's frames (not this worker's, not Node's internals), at most 20
// of them and 8 KiB, and find the innermost line/column in the user's source.
function describeStack(stack, sourceName) {
  const lines = String(stack).split('\n');
  const frames = [];
  let line = null;
  let column = null;
  const here = new RegExp(escapeRegExp(sourceName) + ':(\\d+):(\\d+)');
  for (const raw of lines) {
    if (!/^\s+at /.test(raw)) continue;
    if (raw.includes(__filename) || raw.includes('node:internal') || /\(node:[a-z_]+:\d+:\d+\)/.test(raw)) continue;
    if (line === null) {
      const m = here.exec(raw);
      if (m) {
        line = Number(m[1]);
        column = Number(m[2]);
      }
    }
    if (frames.length < MAX_STACK_FRAMES) frames.push(raw.trim());
  }
  const header = lines.find((l) => !/^\s+at /.test(l) && l.trim() !== '') || '';
  return { stack: clip([header].concat(frames.map((f) => '    ' + f)).join('\n'), MAX_STACK_BYTES), line, column };
}

function safeString(value) {
  try {
    return String(value);
  } catch (e) {
    return Object.prototype.toString.call(value);
  }
}

// A thrown value (from loading or from main) → an extraction_failed frame.
function reportThrown(err, sourceName, what) {
  if (err !== null && typeof err === 'object' && typeof err.stack === 'string') {
    const name = safeString(err.name || 'Error');
    const message = safeString(err.message);
    const described = describeStack(err.stack, sourceName);
    const diagnostic = { name, stack: described.stack };
    if (described.line !== null) {
      diagnostic.line = described.line;
      diagnostic.column = described.column;
    }
    const at = described.line !== null ? ` (${sourceName}:${described.line}:${described.column})` : '';
    fail('extraction_failed', `${what} threw ${name}: ${message}${at}`, diagnostic);
  } else {
    fail('extraction_failed', `${what} threw a non-Error value: ${clip(safeString(err), 1024)}`, { name: typeof err });
  }
}

// `file:LINE` on the first stack line and the caret under the offending column:
// that is how V8 reports a SyntaxError raised while compiling.
function syntaxLocation(err, source) {
  const lines = String(err.stack || '').split('\n');
  const m = /:(\d+)\s*$/.exec(lines[0] || '');
  if (!m) return { line: null, column: null };
  const sourceLines = source.split('\n');
  let line = Number(m[1]);
  let column = null;
  const caret = lines[2] || '';
  if (/^\s*\^+\s*$/.test(caret)) column = caret.indexOf('^') + 1;
  if (line > sourceLines.length) {
    // The error surfaced in the suffix this worker appends: the source ended
    // early. Point just past its last non-blank line.
    line = sourceLines.length;
    while (line > 1 && sourceLines[line - 1].trim() === '') line -= 1;
    column = sourceLines[line - 1].length + 1;
  }
  return { line, column };
}

function compile(source, sourceName) {
  return vm.compileFunction(source + SUFFIX, PARAMS, { filename: sourceName });
}

function check(request, source) {
  try {
    compile(source, request.sourceName);
  } catch (err) {
    if (err instanceof SyntaxError || (err && err.name === 'SyntaxError')) {
      const where = syntaxLocation(err, source);
      const diagnostic = {};
      let at = '';
      if (where.line !== null) {
        diagnostic.line = where.line;
        if (where.column !== null) diagnostic.column = where.column;
        diagnostic.excerpt = clip(source.split('\n')[where.line - 1] || '', 512);
        at = ` at ${request.sourceName}:${where.line}` + (where.column !== null ? `:${where.column}` : '');
      }
      fail('extraction_syntax_error', `SyntaxError: ${err.message}${at}`, diagnostic);
      return;
    }
    fail('extraction_syntax_error', `the source could not be compiled: ${safeString(err && err.message)}`, {});
    return;
  }
  reply({ type: 'checked', runtime: { name: 'node', version: process.versions.node, executable: process.execPath } });
}

function pointer(path, key) {
  return path + '/' + String(key).replace(/~/g, '~0').replace(/\//g, '~1');
}

function where(path) {
  return path === '' ? 'the result' : `the result at \`${path}\``;
}

function typeName(value) {
  if (value instanceof Date) return 'a Date';
  if (value instanceof Map) return 'a Map';
  if (value instanceof Set) return 'a Set';
  if (value instanceof WeakMap) return 'a WeakMap';
  if (value instanceof WeakSet) return 'a WeakSet';
  if (value instanceof RegExp) return 'a RegExp';
  if (value instanceof Promise) return 'a Promise (did you forget `await`?)';
  if (value instanceof Error) return 'an Error';
  if (ArrayBuffer.isView(value) || value instanceof ArrayBuffer) return `a ${value.constructor ? value.constructor.name : 'binary buffer'}`;
  if (value instanceof Number || value instanceof String || value instanceof Boolean) return `a boxed ${typeof value.valueOf()}`;
  const ctor = value && value.constructor && value.constructor.name;
  return ctor ? `an instance of ${ctor}` : 'an object with a custom prototype';
}

class StrictError extends Error {
  constructor(code, message, path) {
    super(message);
    this.code = code;
    this.path = path;
  }
}

const isWellFormed =
  typeof String.prototype.isWellFormed === 'function'
    ? (s) => s.isWellFormed()
    : (s) => !/[\ud800-\udbff](?![\udc00-\udfff])|(?:[^\ud800-\udbff]|^)[\udc00-\udfff]/.test(s);

// Walk the result and build a plain copy of exactly what was checked, so the
// serialised bytes cannot differ from the validated value (getters, proxies and
// toJSON are never consulted twice). A running byte estimate stops values that
// are (or expand through shared references to) far more than the limit early.
function strictCopy(root) {
  const type = (message, path) => new StrictError('extraction_type_error', message, path);
  const ancestors = new Set();
  let budget = MAX_VALUE_BYTES;
  const charge = (n, path) => {
    budget -= n;
    if (budget < 0) throw new StrictError('extraction_output_too_large', `the result is larger than ${MAX_VALUE_BYTES} bytes of JSON`, path);
  };
  function walk(value, path, depth) {
    switch (typeof value) {
      case 'string':
        if (!isWellFormed(value)) throw type(`${where(path)} is a string with an unpaired surrogate, which is not valid Unicode`, path);
        charge(byteLength(value) + 2, path);
        return value;
      case 'number':
        if (!Number.isFinite(value)) throw type(`${where(path)} is ${value}; NaN and Infinity are not JSON`, path);
        if (Number.isInteger(value) && !Number.isSafeInteger(value)) {
          throw type(`${where(path)} is the integer ${value}, outside ±(2^53−1); return it as a string`, path);
        }
        charge(String(value).length, path);
        return value;
      case 'boolean':
        charge(5, path);
        return value;
      case 'undefined':
        throw type(path === '' ? 'the result is undefined; `main` must return a JSON value (did it forget `return`?)' : `${where(path)} is undefined, which is not JSON`, path);
      case 'function':
        throw type(`${where(path)} is a function, which is not JSON`, path);
      case 'bigint':
        throw type(`${where(path)} is a BigInt, which is not JSON; return it as a string`, path);
      case 'symbol':
        throw type(`${where(path)} is a Symbol, which is not JSON`, path);
      default:
        break;
    }
    if (value === null) {
      charge(4, path);
      return null;
    }
    if (depth >= MAX_DEPTH) throw type(`${where(path)} is nested deeper than ${MAX_DEPTH} levels of objects and arrays`, path);
    if (ancestors.has(value)) throw type(`${where(path)} refers back to one of its own containers (a cycle)`, path);
    ancestors.add(value);
    let copy;
    if (Array.isArray(value)) {
      copy = [];
      const length = value.length;
      charge(2, path);
      for (let i = 0; i < length; i++) {
        if (!(i in value)) throw type(`${where(path)} is a sparse array (index ${i} is a hole)`, pointer(path, i));
        copy.push(walk(value[i], pointer(path, i), depth + 1));
        charge(1, path);
      }
      const extra = Object.keys(value).length - length;
      if (extra > 0) throw type(`${where(path)} is an array with ${extra} non-index propert${extra === 1 ? 'y' : 'ies'}, which JSON would drop`, path);
    } else {
      const proto = Object.getPrototypeOf(value);
      if (proto !== Object.prototype && proto !== null) throw type(`${where(path)} is ${typeName(value)}; only plain objects and arrays are JSON`, path);
      if (Object.getOwnPropertySymbols(value).some((s) => Object.prototype.propertyIsEnumerable.call(value, s))) {
        throw type(`${where(path)} has Symbol keys; object keys must be strings`, path);
      }
      copy = {};
      charge(2, path);
      for (const key of Object.keys(value)) {
        const at = pointer(path, key);
        if (!isWellFormed(key)) throw type(`${where(at)} has a key with an unpaired surrogate, which is not valid Unicode`, at);
        charge(byteLength(key) + 4, at);
        // defineProperty, not assignment: a key named `__proto__` must stay data.
        Object.defineProperty(copy, key, { value: walk(value[key], at, depth + 1), enumerable: true, writable: true, configurable: true });
      }
    }
    ancestors.delete(value);
    return copy;
  }
  return walk(root, '', 0);
}

function deliver(result) {
  let json;
  try {
    json = stringify(strictCopy(result));
  } catch (err) {
    if (err instanceof StrictError) {
      // Where a bad value sits helps; where the size budget ran out does not.
      fail(err.code, err.message, err.code === 'extraction_type_error' && err.path !== '' ? { path: err.path } : {});
      return;
    }
    // A getter or proxy trap of the result threw while being read.
    reportThrown(err, currentSourceName, 'reading the result');
    return;
  }
  const bytes = byteLength(json);
  if (bytes > MAX_VALUE_BYTES) {
    fail('extraction_output_too_large', `the result is ${bytes} bytes of JSON; the limit is ${MAX_VALUE_BYTES}`, { valueBytes: bytes, limitBytes: MAX_VALUE_BYTES });
    return;
  }
  reply({ type: 'result' }, json);
}

let currentSourceName = 'extract.js';

function start(request, source) {
  const sourceName = request.sourceName;
  currentSourceName = sourceName;
  const sourcePath = path.resolve('main.js');
  let loader;
  try {
    loader = compile(source, sourceName);
  } catch (err) {
    // prepare() already checked the syntax; this only happens if the runtime
    // changed in between.
    fail('extraction_syntax_error', `SyntaxError: ${err && err.message}`, {});
    return;
  }
  const module = { exports: {} };
  let main;
  try {
    const declared = loader.call(module.exports, module.exports, createRequire(sourcePath), module, sourceName, path.dirname(sourcePath));
    main = [declared, module.exports && module.exports.main, module.exports].find((f) => typeof f === 'function');
  } catch (err) {
    reportThrown(err, sourceName, 'the top-level code');
    return;
  }
  if (typeof main !== 'function') {
    fail('extraction_failed', `${sourceName} defines no function \`main\`: declare \`function main(ctx) { ... }\` (or export one as module.exports.main)`, {});
    return;
  }
  const ctx = Object.freeze({ inputs: request.inputs });
  let result;
  try {
    result = main(ctx);
  } catch (err) {
    reportThrown(err, sourceName, 'main');
    return;
  }
  if (result !== null && (typeof result === 'object' || typeof result === 'function') && typeof result.then === 'function') {
    Promise.resolve(result).then(deliver, (err) => reportThrown(err, sourceName, 'main'));
  } else {
    deliver(result);
  }
}

function run() {
  const major = Number(process.versions.node.split('.')[0]);
  if (!(major >= MIN_NODE_MAJOR)) {
    fail('extraction_runtime_unavailable', `node ${process.versions.node} is too old; script extraction needs node ${MIN_NODE_MAJOR} or newer`, { version: process.versions.node });
    return;
  }
  let request;
  try {
    request = JSON.parse(fs.readFileSync(0, 'utf8'));
    if (request === null || typeof request !== 'object' || request.schema !== SCHEMA) throw new Error(`expected a ${SCHEMA} request frame`);
  } catch (err) {
    fail('extraction_worker_failed', `the worker could not read its request: ${err && err.message}`, {});
    return;
  }
  let source;
  try {
    source = fs.readFileSync('main.js', 'utf8');
  } catch (err) {
    fail('extraction_worker_failed', `the worker could not read the source: ${err && err.message}`, {});
    return;
  }
  Error.stackTraceLimit = 50;
  // Errors thrown after main returned (timers, rejected promises nobody awaited)
  // still belong to this extraction.
  process.on('uncaughtException', (err) => reportThrown(err, request.sourceName || 'extract.js', 'an asynchronous callback'));
  process.on('unhandledRejection', (err) => reportThrown(err, request.sourceName || 'extract.js', 'a promise'));
  // Node ends quietly when nothing is left to wait for; an async main whose
  // promise can never settle would otherwise look like a crash.
  process.on('beforeExit', () => fail('extraction_failed', 'main returned a promise that never settled', {}));
  if (request.type === 'check') check(request, source);
  else if (request.type === 'start') start(request, source);
  else fail('extraction_worker_failed', `unknown request type ${JSON.stringify(request.type)}`, {});
}

run();
