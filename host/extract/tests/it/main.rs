//! Integration tests of aab-extract against real `node` and `python3` children:
//! the happy path, hostile scripts in both languages (each must end with its
//! specific error within its timeout), pre-dispatch checks that never run
//! top-level code, the concurrency limit — and after every extraction, proof that
//! no process and no temp dir was left behind.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use aab_extract::{ExtractError, Language, PreparedScript, ScriptSpec, Settings, codes};
use serde_json::{Value, json};

use Language::{JavaScript as JS, Python as PY};

/// Slack on top of a timeout before a test calls an extraction hung. Generous:
/// the machine is shared, and timing is measured by the bench, not asserted here.
const SLACK: Duration = Duration::from_millis(3000);
/// The timeout of hostile scripts that must be stopped by it.
const HOSTILE_TIMEOUT_MS: u64 = 1000;

/// The slot counter and the leftover checks are process-wide, so extractions in
/// this binary run one test at a time.
fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// This binary's private parent for `aab-extract-*` dirs: everything under it and
/// every process naming it belongs to these tests.
fn temp_root() -> &'static Path {
    static ROOT: OnceLock<PathBuf> = OnceLock::new();
    ROOT.get_or_init(|| {
        remove_stale_dirs();
        let root = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("extract-it-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        fs::create_dir_all(&root).unwrap();
        root
    })
}

/// Dirs of earlier runs of this binary whose process is gone (each run uses its
/// pid, so concurrent runs never share one).
fn remove_stale_dirs() {
    let Ok(entries) = fs::read_dir(env!("CARGO_TARGET_TMPDIR")) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let pid = name.strip_prefix("extract-it-scratch-").or_else(|| name.strip_prefix("extract-it-"));
        if let Some(pid) = pid.and_then(|p| p.parse::<u32>().ok())
            && pid != std::process::id()
            && !Path::new(&format!("/proc/{pid}")).exists()
        {
            let _ = fs::remove_dir_all(entry.path());
        }
    }
}

/// A scratch dir for files the tests themselves own (markers, pid files, sources).
fn scratch(name: &str) -> PathBuf {
    temp_root();
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("extract-it-scratch-{}", std::process::id()))
        .join(name);
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    dir
}

fn settings() -> Settings {
    Settings {
        temp_dir: Some(temp_root().to_path_buf()),
        ..Settings::from_env()
    }
}

fn spec(language: Language, source: &str, timeout_ms: u64) -> ScriptSpec {
    ScriptSpec {
        language,
        source: Some(source.to_string()),
        source_path: None,
        timeout_ms,
    }
}

fn prepare(language: Language, source: &str, timeout_ms: u64) -> Result<PreparedScript, ExtractError> {
    aab_extract::prepare_with(spec(language, source, timeout_ms), &std::env::current_dir().unwrap(), &settings())
}

fn prepared(language: Language, source: &str, timeout_ms: u64) -> PreparedScript {
    prepare(language, source, timeout_ms).unwrap_or_else(|e| panic!("prepare failed: {e}\n{:#?}", e.diagnostic))
}

fn inputs() -> Value {
    aab_extract::build_inputs(
        "json",
        json!({"items": [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}], "title": "T"}),
        json!({"ok": true, "dispatched": true}),
        json!({"cursor": "c1"}),
    )
}

/// Run and prove the run left nothing behind.
fn run_clean(script: &PreparedScript, inputs: &Value) -> (Result<Value, ExtractError>, Duration) {
    let started = Instant::now();
    let result = aab_extract::run(script, inputs);
    let took = started.elapsed();
    assert_clean();
    (result, took)
}

/// Run a script that must fail with `code` within its timeout (+ slack).
fn expect_code(language: Language, source: &str, timeout_ms: u64, code: &str) -> ExtractError {
    let script = prepared(language, source, timeout_ms);
    let (result, took) = run_clean(&script, &inputs());
    let error = match result {
        Ok(v) => panic!("{language:?} script should fail with {code}, returned {v}\n{source}"),
        Err(e) => e,
    };
    assert_eq!(error.code, code, "{language:?}: {error}\n{:#?}\n{source}", error.diagnostic);
    assert!(took < Duration::from_millis(timeout_ms) + SLACK, "{language:?} {code} took {took:?}");
    error
}

fn diagnostic<'a>(error: &'a ExtractError, key: &str) -> &'a Value {
    error.diagnostic.as_ref().and_then(|d| d.get(key)).unwrap_or(&Value::Null)
}

/// Processes whose parent is this test process.
fn children() -> Vec<String> {
    let me = std::process::id().to_string();
    let mut found = Vec::new();
    for entry in fs::read_dir("/proc").unwrap().flatten() {
        let Ok(stat) = fs::read_to_string(entry.path().join("stat")) else { continue };
        // `pid (comm) state ppid ...`; comm may contain anything, so split after the last `)`.
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else { continue };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if fields.get(1) == Some(&me.as_str()) {
            found.push(stat);
        }
    }
    found
}

/// Live processes whose command line names this binary's temp root (workers and
/// anything they started with a path inside their dir).
fn workers() -> Vec<String> {
    let root = temp_root().to_string_lossy().into_owned();
    let mut found = Vec::new();
    for entry in fs::read_dir("/proc").unwrap().flatten() {
        let Ok(cmdline) = fs::read(entry.path().join("cmdline")) else { continue };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains(&root) && !is_zombie(&entry.path()) {
            found.push(format!("{}: {cmdline}", entry.file_name().to_string_lossy()));
        }
    }
    found
}

fn is_zombie(proc_dir: &Path) -> bool {
    fs::read_to_string(proc_dir.join("stat"))
        .map(|s| s.rfind(')').is_some_and(|i| s[i + 1..].trim_start().starts_with('Z')))
        .unwrap_or(true)
}

fn pid_gone(pid: i32) -> bool {
    let dir = PathBuf::from(format!("/proc/{pid}"));
    !dir.exists() || is_zombie(&dir)
}

fn assert_clean() {
    let dirs: BTreeSet<String> = fs::read_dir(temp_root())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(dirs.is_empty(), "temp dirs left behind: {dirs:?}");
    assert!(children().is_empty(), "child processes left behind: {:?}", children());
    // SIGKILLed processes vanish asynchronously; allow a moment.
    let until = Instant::now() + Duration::from_secs(2);
    while !workers().is_empty() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(workers().is_empty(), "worker processes left behind: {:?}", workers());
}

// ---------------------------------------------------------------- happy paths

#[test]
fn javascript_happy_path_sees_ctx_inputs() {
    let _serial = serial();
    let script = prepared(
        JS,
        r#"
        function main(ctx) {
          const { kind, response, execution, control } = ctx.inputs;
          return { kind, names: response.items.map((i) => i.name), ok: execution.ok, cursor: control.cursor, keys: Object.keys(ctx.inputs).sort() };
        }
        "#,
        5000,
    );
    assert_eq!(
        script.runtime_version().map(|v| v.split('.').next().unwrap().parse::<u32>().unwrap() >= 16),
        Some(true)
    );
    let (result, _) = run_clean(&script, &inputs());
    assert_eq!(
        result.unwrap(),
        json!({"kind": "json", "names": ["a", "b"], "ok": true, "cursor": "c1", "keys": ["control", "execution", "kind", "response"]})
    );
}

#[test]
fn python_happy_path_sees_ctx_inputs() {
    let _serial = serial();
    let script = prepared(
        PY,
        r#"
def main(ctx):
    i = ctx.inputs
    return {"kind": i["kind"], "names": [x["name"] for x in i["response"]["items"]], "ok": i["execution"]["ok"],
            "cursor": i["control"]["cursor"], "keys": sorted(i)}
"#,
        5000,
    );
    let (result, _) = run_clean(&script, &inputs());
    assert_eq!(
        result.unwrap(),
        json!({"kind": "json", "names": ["a", "b"], "ok": true, "cursor": "c1", "keys": ["control", "execution", "kind", "response"]})
    );
}

#[test]
fn async_main_and_other_entry_forms() {
    let _serial = serial();
    let cases = [
        (
            JS,
            "async function main(ctx) { await new Promise((r) => setTimeout(r, 10)); return ctx.inputs.response.title; }",
            json!("T"),
        ),
        (
            JS,
            "module.exports = { main: (ctx) => [1, 2.5, 'x', null, true, {a: {}}] };",
            json!([1, 2.5, "x", null, true, {"a": {}}]),
        ),
        (JS, "module.exports = function (ctx) { return ctx.inputs.kind; };", json!("json")),
        (JS, "const main = (ctx) => ({n: -0});", json!({"n": 0})),
        (
            PY,
            "import asyncio\nasync def main(ctx):\n    await asyncio.sleep(0.01)\n    return ctx.inputs['response']['title']\n",
            json!("T"),
        ),
        (
            PY,
            "main = lambda ctx: [1, 2.5, 'x', None, True, {'a': {}}]",
            json!([1, 2.5, "x", null, true, {"a": {}}]),
        ),
    ];
    for (language, source, expected) in cases {
        let (result, _) = run_clean(&prepared(language, source, 5000), &inputs());
        assert_eq!(result.unwrap_or_else(|e| panic!("{source}: {e}")), expected, "{source}");
    }
}

#[test]
fn strict_json_boundaries_are_accepted() {
    let _serial = serial();
    let expected = json!([9007199254740991i64, -9007199254740991i64, 1.5, "é😀\u{0}", {"": [[]]}, {"__proto__": 1}]);
    let js = "function main() { return [2 ** 53 - 1, -(2 ** 53 - 1), 1.5, 'é😀\\u0000', {'': [[]]}, JSON.parse('{\"__proto__\": 1}')]; }";
    let (result, _) = run_clean(&prepared(JS, js, 5000), &inputs());
    assert_eq!(result.unwrap(), expected);
    let py = "def main(ctx):\n    return [2**53 - 1, -(2**53 - 1), 1.5, 'é😀\\x00', {'': [[]]}, {'__proto__': 1}]\n";
    let (result, _) = run_clean(&prepared(PY, py, 5000), &inputs());
    assert_eq!(result.unwrap(), expected);
    // A Python float is not an integer however large; JavaScript has no such
    // distinction, so 1e300 is an unsafe integer there (see the type-error test).
    let (result, _) = run_clean(&prepared(PY, "def main(ctx):\n    return 1.5e300\n", 5000), &inputs());
    assert_eq!(result.unwrap(), json!(1.5e300));
    // 64 levels of nesting is the limit, not an error.
    let (result, _) = run_clean(
        &prepared(JS, "function main() { let v = 1; for (let i = 0; i < 64; i++) v = [v]; return v; }", 5000),
        &inputs(),
    );
    assert!(result.is_ok(), "{result:?}");
}

#[test]
fn worker_runs_in_its_temp_dir_with_a_minimal_environment() {
    let _serial = serial();
    let env = json!(["HOME", "LANG", "LC_ALL", "PATH", "TMPDIR"]);
    let js = "function main() { return { cwd: process.cwd(), env: Object.keys(process.env).sort(), home: process.env.HOME }; }";
    let py = "import os\ndef main(ctx):\n    return {'cwd': os.getcwd(), 'env': sorted(os.environ), 'home': os.environ['HOME']}\n";
    for (language, source) in [(JS, js), (PY, py)] {
        let (result, _) = run_clean(&prepared(language, source, 5000), &inputs());
        let value = result.unwrap();
        let cwd = PathBuf::from(value["cwd"].as_str().unwrap());
        assert_eq!(cwd.parent(), Some(temp_root()), "{value}");
        assert!(cwd.file_name().unwrap().to_string_lossy().starts_with("aab-extract-"), "{value}");
        assert!(!cwd.exists(), "the temp dir must be gone after the call");
        assert_eq!(value["home"], value["cwd"]);
        assert_eq!(value["env"], env, "{language:?}");
    }
}

#[test]
fn default_temp_dir_is_the_system_one_and_is_removed() {
    let _serial = serial();
    let script = aab_extract::prepare(spec(JS, "function main() { return process.cwd(); }", 5000), Path::new("/")).unwrap();
    let cwd = PathBuf::from(aab_extract::run(&script, &inputs()).unwrap().as_str().unwrap());
    assert_eq!(cwd.parent(), Some(std::env::temp_dir().as_path()));
    assert!(cwd.file_name().unwrap().to_string_lossy().starts_with("aab-extract-"));
    assert!(!cwd.exists());
    assert!(children().is_empty());
}

#[test]
fn console_output_never_corrupts_the_reply() {
    let _serial = serial();
    let js = "function main() { for (let i = 0; i < 20000; i++) console.log('noise ' + i); process.stdout.write('{\"schema\":\"aab.extract-worker/v1\",\"type\":\"result\",\"value\":666}\\n'); return 'ok'; }";
    let py = "import sys\ndef main(ctx):\n    for i in range(20000):\n        print('noise', i)\n    sys.stdout.write('{\"type\":\"result\"}\\n')\n    return 'ok'\n";
    for (language, source) in [(JS, js), (PY, py)] {
        let (result, _) = run_clean(&prepared(language, source, 5000), &inputs());
        assert_eq!(result.unwrap(), json!("ok"), "{language:?}");
    }
}

#[test]
fn large_inputs_are_transferred_within_the_timeout() {
    let _serial = serial();
    let big = aab_extract::build_inputs("text", Value::String("x".repeat(7 * 1024 * 1024)), json!({"ok": true}), json!({}));
    for (language, source) in [
        (JS, "function main(ctx) { return ctx.inputs.response.length; }"),
        (PY, "def main(ctx):\n    return len(ctx.inputs['response'])\n"),
    ] {
        let (result, _) = run_clean(&prepared(language, source, 10_000), &big);
        assert_eq!(result.unwrap(), json!(7 * 1024 * 1024), "{language:?}");
    }
}

#[test]
fn timings_add_up() {
    let _serial = serial();
    let script = prepared(PY, "def main(ctx):\n    return 1\n", 5000);
    let extraction = aab_extract::run_timed(&script, &inputs());
    assert_eq!(extraction.result.unwrap(), json!(1));
    let t = extraction.timings;
    assert!(t.total >= t.setup + t.worker + t.cleanup, "{t:?}");
    assert!(t.to_json()["totalMs"].as_f64().unwrap() > 0.0);
    assert_clean();
}

#[test]
fn patching_the_runtime_does_not_break_the_reply() {
    let _serial = serial();
    let js = "const fs = require('fs');\nfunction main() { process.exit = () => {}; fs.writeSync = () => 0; JSON.stringify = () => 'garbage'; return {a: 1}; }";
    let py = "import os, json\ndef main(ctx):\n    os.write = None\n    os._exit = None\n    json.dumps = None\n    return {'a': 1}\n";
    for (language, source) in [(JS, js), (PY, py)] {
        let (result, _) = run_clean(&prepared(language, source, 5000), &inputs());
        assert_eq!(result.unwrap(), json!({"a": 1}), "{language:?}");
    }
}

// ---------------------------------------------------------------- hostile scripts

#[test]
fn infinite_loops_time_out() {
    let _serial = serial();
    for (language, source) in [
        (JS, "function main() { for (;;) {} }"),
        (JS, "for (;;) {}\nfunction main() { return 1; }"),
        (PY, "def main(ctx):\n    while True:\n        pass\n"),
        (PY, "while True:\n    pass\ndef main(ctx):\n    return 1\n"),
    ] {
        let e = expect_code(language, source, HOSTILE_TIMEOUT_MS, codes::TIMEOUT);
        assert_eq!(diagnostic(&e, "timeoutMs"), &json!(HOSTILE_TIMEOUT_MS));
    }
}

#[test]
fn reading_stdin_sees_eof_and_reading_forever_times_out() {
    let _serial = serial();
    let (result, _) = run_clean(
        &prepared(JS, "function main() { return require('fs').readFileSync(0, 'utf8'); }", 5000),
        &inputs(),
    );
    assert_eq!(result.unwrap(), json!(""), "stdin holds nothing beyond the request");
    let (result, _) = run_clean(&prepared(PY, "import sys\ndef main(ctx):\n    return sys.stdin.read()\n", 5000), &inputs());
    assert_eq!(result.unwrap(), json!(""));
    let js = "function main() { const fs = require('fs'); const b = Buffer.alloc(16); for (;;) { try { fs.readSync(0, b, 0, 16, null); } catch (e) {} } }";
    expect_code(JS, js, HOSTILE_TIMEOUT_MS, codes::TIMEOUT);
    expect_code(
        PY,
        "import sys\ndef main(ctx):\n    while True:\n        sys.stdin.buffer.read(1)\n",
        HOSTILE_TIMEOUT_MS,
        codes::TIMEOUT,
    );
}

#[test]
fn huge_results_are_refused() {
    let _serial = serial();
    for (language, source) in [
        (JS, "function main() { return 'x'.repeat(300 * 1024); }"),
        (JS, "function main() { return Array.from({length: 100000}, (_, i) => ({i})); }"),
        // Shared references: tiny in memory, 2^40 elements as JSON.
        (JS, "function main() { let a = [1]; for (let i = 0; i < 40; i++) a = [a, a]; return a; }"),
        (PY, "def main(ctx):\n    return 'x' * (300 * 1024)\n"),
        (PY, "def main(ctx):\n    a = [1]\n    for _ in range(40):\n        a = [a, a]\n    return a\n"),
    ] {
        expect_code(language, source, 5000, codes::OUTPUT_TOO_LARGE);
    }
    // Exactly at the limit is fine: a string of 256 KiB − 2 bytes plus its quotes.
    let (result, _) = run_clean(&prepared(PY, "def main(ctx):\n    return 'x' * (256 * 1024 - 2)\n", 5000), &inputs());
    assert_eq!(result.unwrap().as_str().map(str::len), Some(256 * 1024 - 2));
}

#[test]
fn javascript_non_json_values_are_type_errors() {
    let _serial = serial();
    let cases = [
        ("return 2 ** 53;", ""),
        ("return [-(2 ** 53)];", "/0"),
        ("return 1e300;", ""),
        ("return NaN;", ""),
        ("return {a: Infinity};", "/a"),
        ("return undefined;", ""),
        ("", ""),
        ("return {a: undefined};", "/a"),
        ("return [undefined];", "/0"),
        ("return () => 1;", ""),
        ("return {f() {}};", "/f"),
        ("return 10n;", ""),
        ("return Symbol('s');", ""),
        ("return {[Symbol('k')]: 1};", ""),
        ("return new Date(0);", ""),
        ("return new Set([1]);", ""),
        ("return {m: new Map()};", "/m"),
        ("return [1, , 3];", "/1"),
        ("const a = {}; a.self = a; return a;", "/self"),
        ("const a = []; a.push([a]); return a;", "/0/0"),
        ("return new (class Foo {})();", ""),
        ("return /x/;", ""),
        ("return new Uint8Array(2);", ""),
        ("return '\\ud800';", ""),
        ("let v = 1; for (let i = 0; i < 65; i++) v = [v]; return v;", ""),
    ];
    for (body, path) in cases {
        let source = format!("function main(ctx) {{ {body} }}");
        let e = expect_code(JS, &source, 5000, codes::TYPE_ERROR);
        if !path.is_empty() {
            assert_eq!(diagnostic(&e, "path"), &json!(path), "{body}: {e}");
        }
    }
}

#[test]
fn python_non_json_values_are_type_errors() {
    let _serial = serial();
    let cases = [
        ("return 2 ** 53", ""),
        ("return [-(2 ** 53)]", "/0"),
        ("return float('nan')", ""),
        ("return {'a': float('inf')}", "/a"),
        ("return (1, 2)", ""),
        ("return {'k': (1,)}", "/k"),
        ("return {1, 2}", ""),
        ("return frozenset()", ""),
        ("return {1: 'a'}", ""),
        ("return {None: 'a'}", ""),
        ("a = []\n    a.append(a)\n    return a", "/0"),
        ("d = {}\n    d['me'] = d\n    return d", "/me"),
        ("return b'x'", ""),
        ("import datetime\n    return datetime.date(2020, 1, 1)", ""),
        ("return object()", ""),
        ("return print", ""),
        ("return 1j", ""),
        ("return '\\ud800'", ""),
        ("v = 1\n    for _ in range(65):\n        v = [v]\n    return v", ""),
    ];
    for (body, path) in cases {
        let source = format!("def main(ctx):\n    {body}\n");
        let e = expect_code(PY, &source, 5000, codes::TYPE_ERROR);
        if !path.is_empty() {
            assert_eq!(diagnostic(&e, "path"), &json!(path), "{body}: {e}");
        }
    }
}

#[test]
fn crashing_workers_report_how_they_ended() {
    let _serial = serial();
    let e = expect_code(JS, "function main() { process.exit(3); }", 5000, codes::WORKER_EXITED);
    assert_eq!(diagnostic(&e, "exitCode"), &json!(3));
    let e = expect_code(PY, "import os\ndef main(ctx):\n    os._exit(3)\n", 5000, codes::WORKER_EXITED);
    assert_eq!(diagnostic(&e, "exitCode"), &json!(3));
    let e = expect_code(PY, "import sys\ndef main(ctx):\n    sys.exit(4)\n", 5000, codes::WORKER_EXITED);
    assert_eq!(diagnostic(&e, "exitCode"), &json!(4));
    let e = expect_code(JS, "function main() { process.kill(process.pid, 'SIGKILL'); }", 5000, codes::WORKER_EXITED);
    assert_eq!(diagnostic(&e, "signal"), &json!(9));
    let e = expect_code(
        PY,
        "import os, signal\ndef main(ctx):\n    os.kill(os.getpid(), signal.SIGSEGV)\n",
        5000,
        codes::WORKER_EXITED,
    );
    assert_eq!(diagnostic(&e, "signal"), &json!(11));
    // Closing the reply channel and carrying on is reported at once, not at the deadline.
    let started = Instant::now();
    let e = expect_code(
        PY,
        "import os\ndef main(ctx):\n    os.close(3)\n    while True:\n        pass\n",
        10_000,
        codes::WORKER_EXITED,
    );
    assert!(started.elapsed() < Duration::from_secs(5), "{e}");
    assert!(e.message.contains("closed its reply channel"), "{e}");
}

#[test]
fn thrown_errors_carry_stack_and_line() {
    let _serial = serial();
    let e = expect_code(JS, "function main(ctx) {\n  const x = null;\n  return x.y;\n}\n", 5000, codes::FAILED);
    assert_eq!(diagnostic(&e, "line"), &json!(3), "{e}");
    assert_eq!(diagnostic(&e, "name"), &json!("TypeError"));
    assert!(diagnostic(&e, "stack").as_str().unwrap().contains("extract.js:3"), "{:?}", e.diagnostic);
    assert!(
        !diagnostic(&e, "stack").as_str().unwrap().contains("extract-worker"),
        "worker frames are hidden: {:?}",
        e.diagnostic
    );
    let e = expect_code(
        PY,
        "def helper():\n    raise ValueError('bad value')\n\ndef main(ctx):\n    helper()\n",
        5000,
        codes::FAILED,
    );
    assert_eq!(diagnostic(&e, "line"), &json!(2), "{e}");
    assert!(e.message.contains("ValueError: bad value"), "{e}");
    assert!(
        diagnostic(&e, "stack").as_str().unwrap().contains("raise ValueError"),
        "linecache shows the frozen source: {:?}",
        e.diagnostic
    );
    // Deep recursion: the stack is capped at 20 frames and 8 KiB.
    let e = expect_code(
        JS,
        "function f(n) { if (n === 0) throw new Error('deep'); return f(n - 1); }\nfunction main() { return f(100); }",
        5000,
        codes::FAILED,
    );
    let stack = diagnostic(&e, "stack").as_str().unwrap();
    assert!(stack.lines().filter(|l| l.trim_start().starts_with("at ")).count() <= 20, "{stack}");
    let e = expect_code(
        PY,
        "def f(n):\n    if n == 0:\n        raise RuntimeError('deep')\n    return f(n - 1)\ndef main(ctx):\n    return f(100)\n",
        5000,
        codes::FAILED,
    );
    let stack = diagnostic(&e, "stack").as_str().unwrap();
    assert!(
        stack.lines().filter(|l| l.trim_start().starts_with("File ")).count() <= 20 && stack.len() <= 8 * 1024 + 3,
        "{stack}"
    );
    // Top-level throws, async throws, promises that never settle, no main.
    expect_code(JS, "throw new Error('at load');\nfunction main() { return 1; }", 5000, codes::FAILED);
    expect_code(PY, "raise KeyError('at load')\ndef main(ctx):\n    return 1\n", 5000, codes::FAILED);
    let e = expect_code(
        JS,
        "function main() { setTimeout(() => { throw new Error('late'); }, 5); return new Promise(() => {}); }",
        5000,
        codes::FAILED,
    );
    assert!(e.message.contains("late"), "{e}");
    let e = expect_code(JS, "async function main() { await null; throw new RangeError('async'); }", 5000, codes::FAILED);
    assert_eq!(diagnostic(&e, "name"), &json!("RangeError"));
    let e = expect_code(JS, "function main() { return new Promise(() => {}); }", 5000, codes::FAILED);
    assert!(e.message.contains("never settled"), "{e}");
    expect_code(JS, "function main() { throw 'a string'; }", 5000, codes::FAILED);
    let e = expect_code(JS, "const notMain = 1;", 5000, codes::FAILED);
    assert!(e.message.contains("no function `main`"), "{e}");
    expect_code(PY, "main = 5\n", 5000, codes::FAILED);
}

#[test]
fn output_tail_is_kept_for_diagnostics() {
    let _serial = serial();
    let js = "function main() { console.error('x'.repeat(20000)); console.error('LAST LINE'); throw new Error('boom'); }";
    let py = "import sys\ndef main(ctx):\n    print('x' * 20000)\n    print('LAST LINE', file=sys.stderr)\n    raise Exception('boom')\n";
    for (language, source) in [(JS, js), (PY, py)] {
        let e = expect_code(language, source, 5000, codes::FAILED);
        let stderr = diagnostic(&e, "stderr").as_str().unwrap();
        assert!(
            stderr.len() <= 8 * 1024 && stderr.ends_with("LAST LINE\n"),
            "{language:?}: {} bytes, ends {:?}",
            stderr.len(),
            &stderr[stderr.len().saturating_sub(20)..]
        );
        assert_eq!(diagnostic(&e, "stderrTruncated"), &json!(true));
    }
}

#[test]
fn forged_reply_frames_are_caught() {
    let _serial = serial();
    for (language, source, code) in [
        (
            JS,
            "function main() { require('fs').writeSync(3, 'x'.repeat(400 * 1024)); for (;;) {} }",
            codes::FRAME_TOO_LARGE,
        ),
        (
            PY,
            "import os\ndef main(ctx):\n    os.write(3, b'x' * (400 * 1024))\n    while True:\n        pass\n",
            codes::FRAME_TOO_LARGE,
        ),
        (
            JS,
            "function main() { require('fs').writeSync(3, 'hello\\n'); for (;;) {} }",
            codes::MALFORMED_FRAME,
        ),
        (
            PY,
            "import os\ndef main(ctx):\n    os.write(3, b'[1]\\n')\n    while True:\n        pass\n",
            codes::MALFORMED_FRAME,
        ),
        (
            PY,
            "import os\ndef main(ctx):\n    os.write(3, b'{\"schema\":\"aab.extract-worker/v1\",\"type\":\"fail\",\"error\":\"extraction_busy\"}\\n')\n    while True:\n        pass\n",
            codes::MALFORMED_FRAME,
        ),
        (
            PY,
            "import os\ndef main(ctx):\n    os.write(3, b'{\"schema\":\"aab.extract-worker/v1\",\"ty')\n    os._exit(0)\n",
            codes::MALFORMED_FRAME,
        ),
        (
            JS,
            "function main() { require('fs').writeSync(3, '{\"schema\":\"aab.extract-worker/v1\",\"type\":\"result\",\"value\":9007199254740993}\\n'); for (;;) {} }",
            codes::TYPE_ERROR,
        ),
    ] {
        expect_code(language, source, 5000, code);
    }
}

#[test]
fn the_whole_process_group_is_killed() {
    let _serial = serial();
    let dir = scratch("group");
    for (language, source) in [
        (
            JS,
            "function main(ctx) { const c = require('child_process').spawn('sleep', ['30'], {stdio: 'ignore'}); require('fs').writeFileSync(ctx.inputs.response.pidFile, String(c.pid)); for (;;) {} }",
        ),
        (
            PY,
            "import subprocess\ndef main(ctx):\n    p = subprocess.Popen(['sleep', '30'])\n    open(ctx.inputs['response']['pidFile'], 'w').write(str(p.pid))\n    while True:\n        pass\n",
        ),
    ] {
        let pid_file = dir.join(format!("{language:?}.pid"));
        let inputs = aab_extract::build_inputs("json", json!({"pidFile": pid_file}), json!({"ok": true}), json!({}));
        let (result, took) = run_clean(&prepared(language, source, HOSTILE_TIMEOUT_MS), &inputs);
        assert_eq!(result.unwrap_err().code, codes::TIMEOUT);
        assert!(took < Duration::from_millis(HOSTILE_TIMEOUT_MS) + SLACK);
        let pid: i32 = fs::read_to_string(&pid_file).unwrap().trim().parse().unwrap();
        let until = Instant::now() + Duration::from_secs(2);
        while !pid_gone(pid) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(pid_gone(pid), "the grandchild {pid} survived");
    }
}

// ---------------------------------------------------------------- pre-dispatch checks

#[test]
fn syntax_errors_are_caught_without_running_top_level_code() {
    let _serial = serial();
    let dir = scratch("syntax");
    let marker = dir.join("ran");
    let marker_js = serde_json::to_string(&marker).unwrap();
    let cases = [
        (
            JS,
            format!("require('fs').writeFileSync({marker_js}, 'top-level code ran');\nfunction main(ctx) {{ return 1 +; }}\n"),
            2,
        ),
        (PY, format!("open({marker_js}, 'w').write('top-level code ran')\ndef main(ctx) return 1\n"), 2),
        (
            JS,
            format!("require('fs').writeFileSync({marker_js}, 'x');\nfunction main(ctx) {{\n  return [1, 2;\n}}\n"),
            3,
        ),
        (PY, format!("open({marker_js}, 'w').write('x')\ndef main(ctx):\n    return [1, 2\n"), 3),
    ];
    for (language, source, line) in cases {
        let e = prepare(language, &source, 5000).expect_err("a syntax error");
        assert_eq!(e.code, codes::SYNTAX_ERROR, "{e}");
        assert_eq!(diagnostic(&e, "line"), &json!(line), "{language:?}: {e} {:?}", e.diagnostic);
        assert!(!marker.exists(), "prepare ran top-level code of {source}");
        assert_clean();
    }
    // A valid script: prepare still runs nothing; run does.
    for language in [JS, PY] {
        let source = match language {
            JS => format!("require('fs').writeFileSync({marker_js}, 'ran');\nfunction main() {{ return 'done'; }}\n"),
            PY => format!("open({marker_js}, 'w').write('ran')\ndef main(ctx):\n    return 'done'\n"),
        };
        let script = prepared(language, &source, 5000);
        assert!(!marker.exists(), "prepare must not execute top-level code");
        assert_clean();
        let (result, _) = run_clean(&script, &inputs());
        assert_eq!(result.unwrap(), json!("done"));
        assert!(marker.exists(), "run executes the script");
        fs::remove_file(&marker).unwrap();
    }
    // Unexpected end of input is pinned to the source's last line, not the worker's suffix.
    let e = prepare(JS, "function main(ctx) {\n  return 1;\n", 5000).unwrap_err();
    assert_eq!((e.code, diagnostic(&e, "line")), (codes::SYNTAX_ERROR, &json!(2)), "{e}");
    let e = prepare(PY, "def main(ctx):\n    return '\\x00'\n\0", 5000).unwrap_err();
    assert_eq!(e.code, codes::SYNTAX_ERROR, "{e}");
}

#[test]
fn source_path_is_resolved_against_cwd_and_frozen() {
    let _serial = serial();
    let cwd = scratch("source-path");
    fs::create_dir_all(cwd.join("scripts")).unwrap();
    let file = cwd.join("scripts/x.py");
    fs::write(&file, "def main(ctx):\n    return 'v1'\n").unwrap();
    let spec = ScriptSpec {
        language: PY,
        source: None,
        source_path: Some("scripts/x.py".into()),
        timeout_ms: 5000,
    };
    let script = aab_extract::prepare_with(spec, &cwd, &settings()).unwrap();
    assert_eq!(script.source_path(), Some(file.as_path()));
    // Changed (then deleted) after prepare: the frozen text still runs.
    fs::write(&file, "def main(ctx):\n    return 'v2'\n").unwrap();
    fs::remove_file(&file).unwrap();
    let (result, _) = run_clean(&script, &inputs());
    assert_eq!(result.unwrap(), json!("v1"));

    // Stacks name the file.
    let js = cwd.join("boom.js");
    fs::write(&js, "function main() {\n  throw new Error('boom');\n}\n").unwrap();
    let spec = ScriptSpec {
        language: JS,
        source: None,
        source_path: Some(js.to_string_lossy().into_owned()),
        timeout_ms: 5000,
    };
    let script = aab_extract::prepare_with(spec, Path::new("/"), &settings()).unwrap();
    let (result, _) = run_clean(&script, &inputs());
    let e = result.unwrap_err();
    assert!(e.message.contains(&format!("{}:2", js.display())), "{e}");

    let unavailable = |path: &str| {
        let spec = ScriptSpec {
            language: PY,
            source: None,
            source_path: Some(path.into()),
            timeout_ms: 5000,
        };
        let e = aab_extract::prepare_with(spec, &cwd, &settings()).unwrap_err();
        assert_eq!((e.code, e.field), (codes::SOURCE_UNAVAILABLE, Some("extract.sourcePath")), "{path}: {e}");
        diagnostic(&e, "reason").as_str().unwrap().to_string()
    };
    assert_eq!(unavailable("missing.py"), "unreadable");
    assert_eq!(unavailable("scripts"), "not_a_file");
    fs::write(cwd.join("big.py"), "#".repeat(64 * 1024 + 1)).unwrap();
    assert_eq!(unavailable("big.py"), "too_large");
    fs::write(cwd.join("latin1.py"), b"# caf\xe9\n").unwrap();
    assert_eq!(unavailable("latin1.py"), "not_utf8");
    fs::write(cwd.join("empty.py"), "").unwrap();
    assert_eq!(unavailable("empty.py"), "empty");
    let fifo = cwd.join("fifo");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let started = Instant::now();
    assert_eq!(unavailable("fifo"), "not_a_file");
    assert!(started.elapsed() < Duration::from_secs(2), "a FIFO must not block prepare");
    assert_eq!(unavailable("/dev/zero"), "not_a_file");
    // Exactly 64 KiB is accepted.
    let mut exact = String::from("def main(ctx):\n    return 'exact'\n");
    exact.push_str(&"#".repeat(64 * 1024 - exact.len()));
    fs::write(cwd.join("exact.py"), &exact).unwrap();
    let spec = ScriptSpec {
        language: PY,
        source: None,
        source_path: Some("exact.py".into()),
        timeout_ms: 5000,
    };
    assert!(aab_extract::prepare_with(spec, &cwd, &settings()).is_ok());
    assert_clean();
}

#[test]
fn request_fields_are_checked() {
    let _serial = serial();
    let check = |spec: ScriptSpec| aab_extract::prepare_with(spec, Path::new("/"), &settings()).unwrap_err();
    let both = ScriptSpec {
        language: JS,
        source: Some("function main(){}".into()),
        source_path: Some("x.js".into()),
        timeout_ms: 2000,
    };
    assert_eq!(check(both).code, codes::INVALID_ARGUMENT);
    let neither = ScriptSpec {
        language: JS,
        source: None,
        source_path: None,
        timeout_ms: 2000,
    };
    assert_eq!(check(neither).field, Some("extract.source"));
    for timeout_ms in [0, 10_001] {
        let e = check(spec(JS, "function main() { return 1; }", timeout_ms));
        assert_eq!((e.code, e.field), (codes::INVALID_ARGUMENT, Some("extract.timeoutMs")));
    }
    let mut long = String::from("function main() { return 1; }\n");
    long.push_str(&"/".repeat(64 * 1024));
    let e = check(spec(JS, &long, 2000));
    assert_eq!((e.code, e.field), (codes::INVALID_ARGUMENT, Some("extract.source")));
    // 30 000 three-byte characters: under 65 536 characters, over 64 KiB of UTF-8.
    let wide = format!("# {}\ndef main(ctx):\n    return 1\n", "é".repeat(30_000) + &"€".repeat(30_000));
    assert_eq!(check(spec(PY, &wide, 2000)).field, Some("extract.source"));
    assert_eq!(check(spec(PY, "", 2000)).field, Some("extract.source"));
    let mut exact = String::from("function main() { return 1; }\n");
    exact.push_str(&"/".repeat(64 * 1024 - exact.len()));
    assert!(aab_extract::prepare_with(spec(JS, &exact, 2000), Path::new("/"), &settings()).is_ok());
    assert_clean();
}

#[test]
fn missing_or_broken_runtimes_are_unavailable() {
    let _serial = serial();
    let with = |settings: Settings, language: Language| {
        let source = match language {
            JS => "function main() { return 1; }",
            PY => "def main(ctx):\n    return 1\n",
        };
        aab_extract::prepare_with(spec(language, source, 2000), Path::new("/"), &settings)
    };
    let e = with(
        Settings {
            node: Some("/nonexistent/node".into()),
            ..settings()
        },
        JS,
    )
    .unwrap_err();
    assert_eq!(e.code, codes::RUNTIME_UNAVAILABLE);
    assert!(e.message.contains("AI_APP_BRIDGE_NODE"), "{e}");
    let e = with(
        Settings {
            search_path: Some("/nonexistent".into()),
            ..settings()
        },
        PY,
    )
    .unwrap_err();
    assert_eq!(e.code, codes::RUNTIME_UNAVAILABLE);
    assert!(e.message.contains("python3, python"), "{e}");
    // An executable that is not the runtime it should be.
    let e = with(
        Settings {
            python: Some("/bin/false".into()),
            ..settings()
        },
        PY,
    )
    .unwrap_err();
    assert_eq!(e.code, codes::RUNTIME_UNAVAILABLE, "{e}");
    assert_clean();
    // A name is looked up on PATH.
    assert!(
        with(
            Settings {
                python: Some("python3".into()),
                ..settings()
            },
            PY
        )
        .is_ok()
    );
    // A launcher in front of the interpreter (pyenv's shim is a bash script) is
    // used for the check only; runs start the interpreter it reported.
    let dir = scratch("runtime");
    let launcher = dir.join("python-launcher");
    fs::write(&launcher, "#!/bin/sh\nexport LAUNCHER_WAS_HERE=1\nexec python3 \"$@\"\n").unwrap();
    fs::set_permissions(&launcher, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let script = with(
        Settings {
            python: Some(launcher.clone().into()),
            ..settings()
        },
        PY,
    )
    .unwrap();
    assert_ne!(script.runtime(), launcher.as_path());
    assert!(script.runtime().is_absolute());
    let (result, _) = run_clean(&script, &inputs());
    assert_eq!(result.unwrap(), json!(1));
}

#[test]
fn oversized_inputs_are_refused_before_a_worker_starts() {
    let _serial = serial();
    let script = prepared(JS, "function main() { return 1; }", 2000);
    let big = aab_extract::build_inputs("text", Value::String("x".repeat(8 * 1024 * 1024)), json!({}), json!({}));
    let started = Instant::now();
    let (result, _) = run_clean(&script, &big);
    assert_eq!(result.unwrap_err().code, codes::INPUT_TOO_LARGE);
    assert!(started.elapsed() < Duration::from_secs(2));
}

// ---------------------------------------------------------------- concurrency

#[test]
fn a_third_concurrent_extraction_is_busy() {
    let _serial = serial();
    let slow_js = prepared(
        JS,
        "function main() { Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 1500); return 'js'; }",
        8000,
    );
    let slow_py = prepared(PY, "import time\ndef main(ctx):\n    time.sleep(1.5)\n    return 'py'\n", 8000);
    let quick = prepared(JS, "function main() { return 'quick'; }", 2000);
    let input = inputs();
    std::thread::scope(|scope| {
        let a = scope.spawn(|| aab_extract::run(&slow_js, &input));
        let b = scope.spawn(|| aab_extract::run(&slow_py, &input));
        let until = Instant::now() + Duration::from_secs(5);
        while aab_extract::active_extractions() < 2 && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(2));
        }
        assert_eq!(aab_extract::active_extractions(), 2);
        // The leftover detector sees live workers (so its silence elsewhere means something).
        let until = Instant::now() + Duration::from_secs(5);
        while workers().len() < 2 && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(workers().len(), 2, "{:?}", workers());
        assert_eq!(children().len(), 2);
        let started = Instant::now();
        let busy = aab_extract::run(&quick, &input).unwrap_err();
        assert_eq!(busy.code, codes::BUSY);
        assert!(
            started.elapsed() < Duration::from_millis(500),
            "busy must be immediate, took {:?}",
            started.elapsed()
        );
        assert_eq!(a.join().unwrap().unwrap(), json!("js"));
        assert_eq!(b.join().unwrap().unwrap(), json!("py"));
    });
    assert_eq!(aab_extract::active_extractions(), 0);
    let (result, _) = run_clean(&quick, &input);
    assert_eq!(result.unwrap(), json!("quick"), "slots are released");
}
