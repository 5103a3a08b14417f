//! aab-extract owns script extraction (`extract: {mode:"script", ...}` of a public
//! request): the pre-dispatch checks of a script ([`prepare`]) and its execution
//! over a completed command's result ([`run`]) in a fresh `node` or `python3`
//! child process per call. It knows nothing about commands, plugins or replies;
//! the host builds `ctx.inputs` and turns an [`ExtractError`] into the reply's
//! `extraction` block.
//!
//! # Life of one extraction
//!
//! 1. **Before dispatch** the host calls [`prepare`] with the caller's cwd. It
//!    checks the timeout range, freezes the source (inline text, or `sourcePath`
//!    resolved against the cwd and read now, ≤ 65 536 UTF-16 units and ≤ 64 KiB of
//!    UTF-8), finds the runtime (`$AI_APP_BRIDGE_NODE` / `$AI_APP_BRIDGE_PYTHON`,
//!    else `node` / `python3`, `python` on `PATH`) and compiles the source in a
//!    child without running any of it (JavaScript: `vm.compileFunction`, never
//!    called; Python: `compile()`). Failures: `invalid_argument`,
//!    `extraction_source_unavailable`, `extraction_runtime_unavailable`,
//!    `extraction_syntax_error`.
//! 2. **After the command completed** the host calls [`run`] (blocking; call it
//!    from a blocking thread). At most [`MAX_CONCURRENT`] extractions run in a
//!    process; another one fails at once with `extraction_busy` (no queue). The
//!    timeout (default 2000 ms, 1..=10000) starts when `run` is entered, so it
//!    covers the temp dir, worker start and input transfer.
//!
//! # The worker and its protocol (`aab.extract-worker/v1`)
//!
//! Each call gets a new directory `$TMPDIR/aab-extract-*` (0700) holding the
//! worker program (`worker/extract-worker.{js,py}`, embedded in this crate) and
//! the frozen source (`main.js` / `main.py`). The child runs with that directory
//! as cwd, a cleared environment (`PATH=/usr/local/bin:/usr/bin:/bin`,
//! `HOME`/`TMPDIR` = the directory, `LANG`/`LC_ALL=C.UTF-8`; Python also gets
//! `-I -B -u`) and in its own process group. The directory is removed after
//! every call, whatever happened; if removal fails the call reports
//! `extraction_cleanup_failed`.
//!
//! Frames are compact JSON objects, one per line (`\n`-terminated; JSON text
//! never contains a raw newline), each with `"schema":"aab.extract-worker/v1"`:
//!
//! * host → worker, on **stdin**, exactly one frame, then end-of-file (a script
//!   that reads stdin sees EOF; one that keeps reading is ended by the timeout):
//!   `{"type":"check","sourceName"}` or
//!   `{"type":"start","entrypoint":"main","sourceName","extraction":{"mode":"script","language","timeoutMs"},"inputs"}`.
//!   At most 8 MiB + 64 KiB; `inputs` itself at most 8 MiB
//!   (`extraction_input_too_large`).
//! * worker → host, on **fd 3**, exactly one frame: `{"type":"checked","runtime"}`,
//!   `{"type":"result","value"}` or `{"type":"fail","error","message","diagnostic"?}`
//!   where `error` is `extraction_failed` (the script threw), `extraction_type_error`,
//!   `extraction_output_too_large`, `extraction_syntax_error`,
//!   `extraction_runtime_unavailable` (runtime too old) or `extraction_worker_failed`.
//!   At most 256 KiB + 64 KiB (`extraction_frame_too_large`); anything that is not
//!   such a frame is `extraction_malformed_frame`. A separate fd keeps the channel
//!   clean: the child's stdout and stderr both go to one diagnostic pipe whose
//!   last 8 KiB are kept (`diagnostic.stderr`).
//!
//! The worker checks the result is strict JSON **before** serialising it
//! (integers beyond ±(2^53−1), NaN/Infinity, `undefined`, functions, BigInt,
//! Symbols, Date/Set/Map and other non-plain objects, sparse arrays, cycles,
//! non-string keys, tuples, sets, bytes, lone surrogates, nesting deeper than 64
//! → `extraction_type_error`) and that it is at most 256 KiB of JSON
//! (`extraction_output_too_large`). The host re-checks integers, depth and size of
//! what arrives, because a script can write to fd 3 itself.
//!
//! When the frame arrives, the deadline passes or the channel closes, the host
//! sends SIGKILL to the child's whole process group *before* reaping the child
//! (so the group id cannot have been reused), then reaps it. A worker that closes
//! the channel without a frame is `extraction_worker_exited` (with its exit code
//! or signal). Limitation: a process that leaves the group (`setsid`,
//! `setpgid`) escapes the kill.

mod frame;
mod runtime;
mod source;
mod worker;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};

pub use runtime::Settings;

/// Schema id of the host↔worker frames.
pub const PROTOCOL: &str = "aab.extract-worker/v1";
/// `extract.timeoutMs` when absent, and its accepted range.
pub const DEFAULT_TIMEOUT_MS: u64 = 2000;
pub const MIN_TIMEOUT_MS: u64 = 1;
pub const MAX_TIMEOUT_MS: u64 = 10_000;
/// The syntax check in [`prepare`] has its own deadline: compiling a 64 KiB
/// source is fast, so running out of it means the runtime itself is stuck.
pub const CHECK_TIMEOUT_MS: u64 = 5000;
/// Source limits: UTF-16 code units (JavaScript's `length`) and UTF-8 bytes.
pub const MAX_SOURCE_CHARS: usize = 65_536;
pub const MAX_SOURCE_BYTES: usize = 64 * 1024;
/// Longest accepted `sourcePath` (Linux `PATH_MAX`).
pub const MAX_SOURCE_PATH_CHARS: usize = 4096;
/// `ctx.inputs` as compact JSON, and the frame room around it.
pub const MAX_INPUT_BYTES: usize = 8 * 1024 * 1024;
pub const FRAME_OVERHEAD_BYTES: usize = 64 * 1024;
pub const MAX_REQUEST_FRAME_BYTES: usize = MAX_INPUT_BYTES + FRAME_OVERHEAD_BYTES;
/// The result value as compact JSON, and the reply frame around it.
pub const MAX_VALUE_BYTES: usize = 256 * 1024;
pub const MAX_REPLY_FRAME_BYTES: usize = MAX_VALUE_BYTES + FRAME_OVERHEAD_BYTES;
/// Deepest nesting of objects/arrays in a result (the contract's JSON nesting limit).
pub const MAX_VALUE_DEPTH: usize = 64;
/// Child stdout+stderr kept for diagnostics (the tail).
pub const MAX_STDERR_BYTES: usize = 8 * 1024;
/// A reported stack: at most this many frames and bytes.
pub const MAX_STACK_FRAMES: usize = 20;
pub const MAX_STACK_BYTES: usize = 8 * 1024;
/// Extractions running at once in this process; more get `extraction_busy`.
pub const MAX_CONCURRENT: usize = 2;

/// Every error code this crate produces.
pub mod codes {
    /// A request field is out of range (timeout, inline source size, source choice).
    pub const INVALID_ARGUMENT: &str = "invalid_argument";
    pub const BUSY: &str = "extraction_busy";
    pub const TIMEOUT: &str = "extraction_timeout";
    pub const WORKER_EXITED: &str = "extraction_worker_exited";
    pub const FRAME_TOO_LARGE: &str = "extraction_frame_too_large";
    pub const MALFORMED_FRAME: &str = "extraction_malformed_frame";
    /// The script threw (at top level, in `main`, or in an async callback).
    pub const FAILED: &str = "extraction_failed";
    pub const TYPE_ERROR: &str = "extraction_type_error";
    pub const OUTPUT_TOO_LARGE: &str = "extraction_output_too_large";
    pub const WORKER_FAILED: &str = "extraction_worker_failed";
    pub const CLEANUP_FAILED: &str = "extraction_cleanup_failed";
    pub const RUNTIME_UNAVAILABLE: &str = "extraction_runtime_unavailable";
    pub const SYNTAX_ERROR: &str = "extraction_syntax_error";
    pub const SOURCE_UNAVAILABLE: &str = "extraction_source_unavailable";
    pub const INPUT_TOO_LARGE: &str = "extraction_input_too_large";
}

/// The script language of an extraction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Language {
    JavaScript,
    Python,
}

impl Language {
    /// The contract's name (`"javascript"` / `"python"`).
    pub fn from_name(name: &str) -> Option<Language> {
        match name {
            "javascript" => Some(Language::JavaScript),
            "python" => Some(Language::Python),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Language::JavaScript => "javascript",
            Language::Python => "python",
        }
    }

    /// The environment variable that names this language's runtime executable.
    pub fn env_var(self) -> &'static str {
        match self {
            Language::JavaScript => "AI_APP_BRIDGE_NODE",
            Language::Python => "AI_APP_BRIDGE_PYTHON",
        }
    }
}

/// A script extraction as the public request states it (exactly one of `source`
/// and `source_path`; `timeout_ms` with the default already applied).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScriptSpec {
    pub language: Language,
    pub source: Option<String>,
    pub source_path: Option<String>,
    pub timeout_ms: u64,
}

/// A checked script with its source frozen: everything [`run`] needs. Cheap to
/// clone; the host keeps it from before dispatch until the command completed.
#[derive(Clone, Debug)]
pub struct PreparedScript {
    language: Language,
    source: Arc<str>,
    /// The name stacks and syntax errors show: the resolved `sourcePath`, or
    /// `extract.js` / `extract.py` for inline source.
    source_name: Arc<str>,
    source_path: Option<PathBuf>,
    runtime: PathBuf,
    runtime_version: Option<String>,
    timeout: Duration,
    temp_dir: Option<PathBuf>,
}

impl PreparedScript {
    /// One worker run of this script (the syntax check or the extraction itself).
    fn job<'a>(&'a self, request: &'a [u8], deadline: Instant) -> worker::Job<'a> {
        worker::Job { language: self.language, runtime: &self.runtime, source: &self.source, request, deadline, temp_dir: self.temp_dir.as_deref() }
    }

    pub fn language(&self) -> Language {
        self.language
    }

    /// The frozen source text.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The file the source was read from (absolute), for `sourcePath` specs.
    pub fn source_path(&self) -> Option<&Path> {
        self.source_path.as_deref()
    }

    /// The runtime executable that will run the script: the interpreter that
    /// checked it (as it reported its own path), which is the resolved runtime
    /// unless that is a launcher script.
    pub fn runtime(&self) -> &Path {
        &self.runtime
    }

    /// The runtime's version as the syntax check reported it.
    pub fn runtime_version(&self) -> Option<&str> {
        self.runtime_version.as_deref()
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }
}

/// Why an extraction could not be prepared or did not produce a value.
#[derive(Clone, Debug, PartialEq)]
pub struct ExtractError {
    /// A stable code from [`codes`].
    pub code: &'static str,
    pub message: String,
    /// The request field at fault (`extract.source`, `extract.sourcePath`,
    /// `extract.timeoutMs`), for errors found by [`prepare`].
    pub field: Option<&'static str>,
    /// Details for a person fixing the script: `stderr` (tail, ≤ 8 KiB),
    /// `stack` (≤ 20 frames / 8 KiB), `line`, `column`, `excerpt`, `path` (JSON
    /// Pointer of a bad value), `exitCode`, `signal`, `timeoutMs`, ...
    pub diagnostic: Option<Value>,
}

impl ExtractError {
    pub(crate) fn new(code: &'static str, message: impl Into<String>) -> ExtractError {
        ExtractError {
            code,
            message: message.into(),
            field: None,
            diagnostic: None,
        }
    }

    pub(crate) fn with_field(mut self, field: &'static str) -> ExtractError {
        self.field = Some(field);
        self
    }

    /// Add one diagnostic entry (creating the object on first use).
    pub(crate) fn with(mut self, key: &str, value: impl Into<Value>) -> ExtractError {
        let map = match &mut self.diagnostic {
            Some(Value::Object(map)) => map,
            _ => {
                self.diagnostic = Some(Value::Object(Map::new()));
                let Some(Value::Object(map)) = &mut self.diagnostic else {
                    unreachable!("just set to an object")
                };
                map
            }
        };
        map.insert(key.to_string(), value.into());
        self
    }

    /// `{error, message, field?, diagnostic?}` — the shape of a failed reply's
    /// `extraction` block, minus `status`/`mode`/`language`.
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("error".into(), Value::String(self.code.into()));
        m.insert("message".into(), Value::String(self.message.clone()));
        if let Some(field) = self.field {
            m.insert("field".into(), Value::String(field.into()));
        }
        if let Some(d) = &self.diagnostic {
            m.insert("diagnostic".into(), d.clone());
        }
        Value::Object(m)
    }
}

impl fmt::Display for ExtractError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for ExtractError {}

/// Where the time of one [`run`] went (host clock).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Timings {
    /// Temp dir, files and process spawn.
    pub setup: Duration,
    /// Spawn until the reply frame (or the end): runtime start, input transfer,
    /// loading the source, `main`, the strict-JSON check.
    pub worker: Duration,
    /// Killing and reaping the process group, removing the temp dir.
    pub cleanup: Duration,
    /// Everything, from entering `run` to returning.
    pub total: Duration,
}

impl Timings {
    /// `{setupMs, workerMs, cleanupMs, totalMs}` (milliseconds, 0.1 ms precision)
    /// for the reply's `extraction.timings`.
    pub fn to_json(&self) -> Value {
        let ms = |d: Duration| (d.as_secs_f64() * 10_000.0).round() / 10.0;
        json!({"setupMs": ms(self.setup), "workerMs": ms(self.worker), "cleanupMs": ms(self.cleanup), "totalMs": ms(self.total)})
    }
}

/// The outcome of [`run_timed`].
#[derive(Clone, Debug)]
pub struct Extraction {
    pub result: Result<Value, ExtractError>,
    pub timings: Timings,
}

/// `ctx.inputs` for a completed command: `kind` (`json`/`text`/`bytes`), the
/// `response` value (a string for text, base64 for bytes), and the reply's
/// `execution` and `control` objects.
pub fn build_inputs(kind: &str, response: Value, execution: Value, control: Value) -> Value {
    json!({"kind": kind, "response": response, "execution": execution, "control": control})
}

/// Pre-dispatch checks with the runtimes named by the environment (see
/// [`Settings::from_env`]). Never runs the script's top-level code.
pub fn prepare(spec: ScriptSpec, cwd: &Path) -> Result<PreparedScript, ExtractError> {
    prepare_with(spec, cwd, &Settings::from_env())
}

/// [`prepare`] with explicit settings; the returned script keeps its runtime
/// and temp dir parent for [`run`].
pub fn prepare_with(spec: ScriptSpec, cwd: &Path, settings: &Settings) -> Result<PreparedScript, ExtractError> {
    if !(MIN_TIMEOUT_MS..=MAX_TIMEOUT_MS).contains(&spec.timeout_ms) {
        return Err(ExtractError::new(
            codes::INVALID_ARGUMENT,
            format!(
                "`extract.timeoutMs` must be an integer ≥ {MIN_TIMEOUT_MS} and ≤ {MAX_TIMEOUT_MS}, got {}",
                spec.timeout_ms
            ),
        )
        .with_field("extract.timeoutMs"));
    }
    let frozen = source::freeze(&spec, cwd)?;
    let runtime = settings.resolve(spec.language)?;
    let mut prepared = PreparedScript {
        language: spec.language,
        source: frozen.text.into(),
        source_name: frozen.name.into(),
        source_path: frozen.path,
        runtime,
        runtime_version: None,
        timeout: Duration::from_millis(spec.timeout_ms),
        temp_dir: settings.temp_dir.clone(),
    };
    let checked = syntax_check(&prepared)?;
    prepared.runtime_version = checked.get("version").and_then(Value::as_str).map(str::to_string);
    // Run the interpreter that did the check directly: a launcher in front of it
    // (a pyenv shim, a wrapper script) would cost a process start and leak its
    // environment into every call. A venv keeps working: its `sys.executable` is
    // the venv's own path.
    if let Some(executable) = checked.get("executable").and_then(Value::as_str).map(PathBuf::from)
        && executable.is_absolute()
        && runtime::is_executable(&executable)
    {
        prepared.runtime = executable;
    }
    Ok(prepared)
}

/// Run a prepared script over `inputs` (see [`build_inputs`]) and return its
/// strict-JSON result. Blocking: call it off async workers.
pub fn run(prepared: &PreparedScript, inputs: &Value) -> Result<Value, ExtractError> {
    run_timed(prepared, inputs).result
}

/// [`run`] with a breakdown of where the time went.
pub fn run_timed(prepared: &PreparedScript, inputs: &Value) -> Extraction {
    let started = Instant::now();
    let deadline = started + prepared.timeout;
    let finish = |result: Result<Value, ExtractError>, mut timings: Timings| {
        timings.total = started.elapsed();
        Extraction { result, timings }
    };
    let Some(_slot) = Slot::acquire() else {
        let error = ExtractError::new(
            codes::BUSY,
            format!("{MAX_CONCURRENT} extractions are already running in this process; retry later (for example with `response read` on the snapshot ref)"),
        )
        .with("limit", MAX_CONCURRENT as u64);
        return finish(Err(error), Timings::default());
    };
    let request = match frame::start_request(prepared, inputs) {
        Ok(request) => request,
        Err(e) => return finish(Err(e), Timings::default()),
    };
    match worker::run(&prepared.job(&request, deadline)) {
        Err(e) => finish(Err(e), Timings::default()),
        Ok(report) => {
            let timings = report.timings;
            finish(interpret(report, Mode::Run { timeout: prepared.timeout }), timings)
        }
    }
}

/// How many extractions are running in this process right now.
pub fn active_extractions() -> usize {
    ACTIVE.load(Ordering::SeqCst)
}

static ACTIVE: AtomicUsize = AtomicUsize::new(0);

/// One of the [`MAX_CONCURRENT`] extraction slots, released on drop.
struct Slot;

impl Slot {
    fn acquire() -> Option<Slot> {
        ACTIVE
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| (n < MAX_CONCURRENT).then_some(n + 1))
            .ok()
            .map(|_| Slot)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        ACTIVE.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Compile the source in the runtime without running it. Returns what the
/// runtime said about itself (`{name, version, executable}`).
fn syntax_check(prepared: &PreparedScript) -> Result<Value, ExtractError> {
    let request = frame::check_request(&prepared.source_name);
    let deadline = Instant::now() + Duration::from_millis(CHECK_TIMEOUT_MS);
    let report = worker::run(&prepared.job(&request, deadline))?;
    interpret(
        report,
        Mode::Check {
            runtime: &prepared.runtime,
            language: prepared.language,
        },
    )
}

#[derive(Clone, Copy)]
enum Mode<'a> {
    Check { runtime: &'a Path, language: Language },
    Run { timeout: Duration },
}

/// Turn what the worker did into the call's result, with the output tail and
/// any cleanup failure attached.
fn interpret(report: worker::Report, mode: Mode<'_>) -> Result<Value, ExtractError> {
    use worker::End;
    let result = match report.end {
        End::Frame(line) => match (frame::parse_reply(&line), mode) {
            (Ok(frame::Reply::Result(value)), Mode::Run { .. }) => frame::check_value(value),
            (Ok(frame::Reply::Checked(runtime)), Mode::Check { .. }) => Ok(runtime),
            (Ok(frame::Reply::Fail(error)), _) if frame::worker_may_report(error.code, matches!(mode, Mode::Check { .. })) => Err(error),
            (Ok(other), _) => Err(ExtractError::new(
                codes::MALFORMED_FRAME,
                format!("the worker sent an unexpected {} frame", other.kind()),
            )),
            (Err(why), _) => {
                Err(ExtractError::new(codes::MALFORMED_FRAME, format!("the worker's reply is not a valid frame: {why}")).with("excerpt", frame::excerpt(&line)))
            }
        },
        End::Timeout => match mode {
            Mode::Run { timeout } => Err(ExtractError::new(
                codes::TIMEOUT,
                format!(
                    "the script did not finish within {} ms (the limit covers worker start, input transfer and main); its process group was killed",
                    timeout.as_millis()
                ),
            )
            .with("timeoutMs", timeout.as_millis() as u64)),
            Mode::Check { .. } => Err(ExtractError::new(
                codes::TIMEOUT,
                format!("the syntax check did not finish within {CHECK_TIMEOUT_MS} ms"),
            )),
        },
        End::Exited { exit, still_running } => {
            let how = match exit {
                Some(worker::Exit::Code(code)) => format!("exited with code {code} before replying (did the script call process.exit, sys.exit or os._exit?)"),
                Some(worker::Exit::Signal(signal)) => {
                    format!("was killed by signal {signal} before replying (a crash, or a kill from outside; see diagnostic.stderr)")
                }
                None if still_running => "closed its reply channel (fd 3) without replying".to_string(),
                None => "ended without replying".to_string(),
            };
            let error = ExtractError::new(codes::WORKER_EXITED, format!("the worker {how}"));
            Err(match exit {
                Some(worker::Exit::Code(code)) => error.with("exitCode", code),
                Some(worker::Exit::Signal(signal)) => error.with("signal", signal),
                None => error,
            })
        }
        End::FrameTooLarge { bytes } => Err(ExtractError::new(
            codes::FRAME_TOO_LARGE,
            format!("the worker's reply frame exceeded {MAX_REPLY_FRAME_BYTES} bytes (read {bytes} without a frame end)"),
        )
        .with("limitBytes", MAX_REPLY_FRAME_BYTES as u64)),
        End::Truncated { bytes } => Err(ExtractError::new(
            codes::MALFORMED_FRAME,
            format!("the worker's reply channel closed in the middle of a frame ({bytes} bytes)"),
        )),
        End::Broken(message) => Err(ExtractError::new(codes::WORKER_FAILED, message)),
    };
    // In the syntax check, anything but a verdict means the executable does not
    // behave like the runtime it should be.
    let result = match (result, mode) {
        (Err(e), Mode::Check { runtime, language }) if ![codes::SYNTAX_ERROR, codes::RUNTIME_UNAVAILABLE, codes::WORKER_FAILED].contains(&e.code) => {
            let mut unavailable = ExtractError::new(
                codes::RUNTIME_UNAVAILABLE,
                format!(
                    "{} could not check the {} source ({}: {}); set {} to a working runtime",
                    runtime.display(),
                    language.name(),
                    e.code,
                    e.message,
                    language.env_var()
                ),
            );
            unavailable.diagnostic = e.diagnostic;
            Err(unavailable.with("runtime", runtime.display().to_string()))
        }
        (other, _) => other,
    };
    let result = match result {
        Err(mut e) => {
            if !report.output.is_empty() {
                e = e.with("stderr", report.output.clone());
                if report.output_truncated {
                    e = e.with("stderrTruncated", true);
                }
            }
            Err(e)
        }
        ok => ok,
    };
    match (result, report.cleanup_error) {
        (result, None) => result,
        (Ok(_), Some(cleanup)) => Err(ExtractError::new(
            codes::CLEANUP_FAILED,
            format!("the extraction's temporary directory could not be removed: {cleanup}"),
        )),
        (Err(e), Some(cleanup)) => Err(e.with("cleanupError", cleanup)),
    }
}
