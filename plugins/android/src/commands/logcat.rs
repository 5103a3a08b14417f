//! `logcat`: the device log read over one shell v2 connection (`logcat -v
//! threadtime …`, aab-protocols §2.2), parsed into records `{time, pid, tid,
//! level, tag, message}`. A dump (`-d`) by default; `follow` streams for a bounded
//! window (`durationSec`, at most 60 s and always inside the host deadline), then
//! drops the connection, which ends logcat on the device. With `packageName` the
//! app's pid comes from `pidof` and filters the log (`--pid`). Pid, buffers, tag
//! and level filter on the device; `grep` and the `lines` cap apply here, so
//! `lines` counts matching records. `clear` first runs `logcat -c` through the
//! managed shell worker (aab-protocols §2.3/§2.4).

use aab_plugin_api::codes::INVALID_ARGUMENT;
use aab_plugin_api::{Command, CommandSpec, Context, Invocation, ProviderError, Reply};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::time::Duration;

use super::{Budget, cancellable, device};
use crate::AndroidProvider;
use crate::adb::Deadline;
use crate::adb::device::{Device, command_line};
use crate::manifest::{object, package_name, props};

/// The app named by `packageName` has no running process (`pidof` found none).
pub const APP_NOT_RUNNING: &str = "app_not_running";
/// logcat on the device refused the request (exit status ≠ 0; its stderr in details).
pub const LOGCAT_FAILED: &str = "logcat_failed";

const DEFAULT_LINES: u32 = 200;
const MAX_LINES: u32 = 100_000;
const DEFAULT_FOLLOW_SEC: f64 = 5.0;
const MAX_FOLLOW_SEC: f64 = 60.0;
/// Kept free at the end of the host deadline for parsing and the reply.
const REPLY_MARGIN: Duration = Duration::from_millis(1000);
/// Output cap of one read (a dump of all buffers of a busy phone is a few MiB).
const OUTPUT_LIMIT: usize = 32 * 1024 * 1024;
const BUFFERS: [&str; 10] = ["main", "system", "crash", "events", "radio", "kernel", "security", "stats", "all", "default"];
const LEVELS: [&str; 12] = ["V", "D", "I", "W", "E", "F", "verbose", "debug", "info", "warn", "error", "fatal"];
/// `since`: logcat's time forms (`MM-DD hh:mm:ss.mmm`, with an optional year, or
/// Unix `seconds.millis`); a bare number would be a line count to logcat.
const SINCE_PATTERN: &str = "^((\\d{4}-)?\\d{2}-\\d{2} \\d{2}:\\d{2}:\\d{2}(\\.\\d{1,3})?|\\d{1,12}\\.\\d{1,3})$";

fn spec() -> CommandSpec {
    let buffer = json!({"type": "string", "enum": BUFFERS});
    CommandSpec::query("logcat")
        .platform("android")
        .domain("diagnostics")
        .target_kind("android-device")
        .summary("Read the device log (logcat threadtime) as records {time, pid, tid, level, tag, message}: a dump of the last lines, or a bounded follow window; filter by app (pid via pidof), pid, tag, level, buffers and text.")
        .permission("capture.read")
        .target_key("serial")
        .lane("observation")
        // `clear: true` changes the device: journaled per serial like every mutation.
        .mutating_flag("clear")
        .device_key("serial")
        .timeouts(30_000, 120_000)
        .input_schema(clear_needs_serial(object(
            props(json!({
                "packageName": package_name(),
                "pid": {"type": "integer", "minimum": 1, "maximum": 2147483647, "description": "Only this process's lines (logcat --pid)"},
                "appPid": {"type": "boolean", "description": "With packageName: filter to the app's running process, pid from `pidof` (default true); false reads the whole device log"},
                "tag": {"type": "string", "minLength": 1, "maxLength": 128, "pattern": "^[^\\s:*]+$", "description": "Only this tag (filterspec TAG:LEVEL *:S)"},
                "level": {"type": "string", "enum": LEVELS, "description": "Minimum priority (V D I W E F or its name)"},
                "grep": {"type": "string", "minLength": 1, "maxLength": 1024, "description": "Keep records whose tag or message contains this text (case-insensitive unless grepCaseSensitive)"},
                "grepCaseSensitive": {"type": "boolean"},
                "lines": {"type": "integer", "minimum": 1, "maximum": MAX_LINES, "description": "Return at most this many (the most recent) matching records; default 200"},
                "since": {"type": "string", "pattern": SINCE_PATTERN, "description": "Only lines at or after this device time: 'MM-DD hh:mm:ss.mmm', 'YYYY-MM-DD hh:mm:ss.mmm' or Unix 'seconds.millis' (logcat -T)"},
                "follow": {"type": "boolean", "description": "Stream new lines for durationSec instead of a dump"},
                "durationSec": {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_FOLLOW_SEC, "description": "Follow window in seconds (default 5, at most 60; also ends 1 s before the command deadline)"},
                "deviceLogScope": {"type": "string", "enum": ["app", "device"], "description": "app (default with packageName): the app's log; device (default without): the whole device log"},
                "clear": {"type": "boolean", "description": "First clear the log (logcat -c through the managed shell worker: a device mutation with its receipt in `cleared`)"},
                "deviceLogBuffers": {"anyOf": [buffer.clone(), {"type": "array", "items": buffer, "minItems": 1, "maxItems": 10, "uniqueItems": true}], "description": "logcat buffers (-b); default main, system, crash"},
            })),
            &[],
        )))
}

/// A clearing call names its device: the ownership journal is per serial.
fn clear_needs_serial(mut schema: Value) -> Value {
    schema["if"] = json!({"properties": {"clear": {"const": true}}, "required": ["clear"]});
    schema["then"] = json!({"required": ["serial"]});
    schema
}

#[derive(Deserialize)]
#[serde(untagged)]
pub enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct LogcatArgs {
    pub serial: Option<String>,
    pub package_name: Option<String>,
    pub pid: Option<u32>,
    pub app_pid: Option<bool>,
    pub tag: Option<String>,
    pub level: Option<String>,
    pub grep: Option<String>,
    pub grep_case_sensitive: Option<bool>,
    pub lines: Option<u32>,
    pub since: Option<String>,
    pub follow: Option<bool>,
    pub duration_sec: Option<f64>,
    pub device_log_scope: Option<String>,
    pub device_log_buffers: Option<OneOrMany>,
    pub clear: Option<bool>,
    pub adb: Option<String>,
    pub adb_timeout_ms: Option<u64>,
}

/// One logcat `threadtime` line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Record {
    /// Device local time `MM-DD hh:mm:ss.mmm` (logcat prints no year).
    pub time: String,
    pub pid: u32,
    pub tid: u32,
    /// Priority letter: V D I W E F (A for assert on old releases).
    pub level: String,
    pub tag: String,
    pub message: String,
    #[serde(skip)]
    pub raw: String,
}

fn token(s: &str) -> Option<(&str, &str)> {
    let s = s.trim_start_matches(' ');
    let end = s.find(' ')?;
    Some((&s[..end], &s[end..]))
}

fn is_time(t: &str) -> bool {
    let b = t.as_bytes();
    b.len() == 18 && b.iter().enumerate().all(|(i, c)| match i {
        2 => *c == b'-',
        5 => *c == b' ',
        8 | 11 => *c == b':',
        14 => *c == b'.',
        _ => c.is_ascii_digit(),
    })
}

/// Parse one `threadtime` line: `MM-DD hh:mm:ss.mmm  PID  TID L TAG     : message`.
/// The tag ends at the first `": "` after the priority (tags with `": "` in them
/// are ambiguous in this format and split there, as every logcat reader does).
pub fn parse_line(line: &str) -> Option<Record> {
    let line = line.strip_suffix('\r').unwrap_or(line);
    let time = line.get(..18).filter(|t| is_time(t))?;
    let (pid, rest) = token(&line[18..])?;
    let (tid, rest) = token(rest)?;
    let (level, rest) = token(rest)?;
    if level.len() != 1 || !"VDIWEFA".contains(level) {
        return None;
    }
    let rest = rest.strip_prefix(' ')?;
    let (tag, message) = match rest.find(": ") {
        Some(i) => (&rest[..i], &rest[i + 2..]),
        None => (rest.strip_suffix(':')?, ""),
    };
    Some(Record { time: time.to_string(), pid: pid.parse().ok()?, tid: tid.parse().ok()?, level: level.to_string(), tag: tag.trim_end().to_string(), message: message.to_string(), raw: line.to_string() })
}

/// Parsed output: the records, and how many non-separator lines did not parse.
/// With `complete_only`, a last line without its newline (cut by the end of a
/// follow window) is left out.
pub fn parse_threadtime(text: &str, complete_only: bool) -> (Vec<Record>, usize) {
    let body = match (complete_only, text.rfind('\n')) {
        (true, Some(i)) => &text[..=i],
        (true, None) => "",
        (false, _) => text,
    };
    let mut records = Vec::new();
    let mut unparsed = 0;
    for line in body.lines() {
        if line.is_empty() || line.starts_with("--------- ") {
            continue;
        }
        match parse_line(line) {
            Some(r) => records.push(r),
            None => unparsed += 1,
        }
    }
    (records, unparsed)
}

fn level_letter(level: &str) -> &'static str {
    match level {
        "V" | "verbose" => "V",
        "D" | "debug" => "D",
        "I" | "info" => "I",
        "W" | "warn" => "W",
        "E" | "error" => "E",
        _ => "F",
    }
}

fn invalid(field: &str, message: impl Into<String>) -> ProviderError {
    ProviderError::new(INVALID_ARGUMENT, message).with_field(field).not_dispatched()
}

/// What the call asks for, checked against itself before anything reaches adb.
struct Plan {
    scope: &'static str,
    app_pid: bool,
    buffers: Vec<String>,
    follow_ms: Option<u64>,
    lines: usize,
}

fn plan(a: &LogcatArgs) -> Result<Plan, ProviderError> {
    let scope = match (a.device_log_scope.as_deref(), &a.package_name) {
        (Some("device"), Some(_)) => return Err(invalid("deviceLogScope", "deviceLogScope \"device\" reads the whole device log; leave out packageName (or use scope \"app\")")),
        (Some("app"), None) => return Err(invalid("packageName", "deviceLogScope \"app\" needs packageName")),
        (Some("device"), None) | (None, None) => "device",
        _ => "app",
    };
    if a.app_pid.is_some() && a.package_name.is_none() {
        return Err(invalid("appPid", "appPid filters to the process of packageName; give packageName"));
    }
    let app_pid = scope == "app" && a.app_pid.unwrap_or(true);
    if app_pid && a.pid.is_some() {
        return Err(invalid("pid", "pid and the app's pid (packageName) both choose the process; give one, or appPid:false"));
    }
    if a.duration_sec.is_some() && a.follow != Some(true) {
        return Err(invalid("durationSec", "durationSec is the follow window; set follow:true"));
    }
    let buffers = match &a.device_log_buffers {
        None => vec![],
        Some(OneOrMany::One(b)) => vec![b.clone()],
        Some(OneOrMany::Many(v)) => v.clone(),
    };
    let follow_ms = (a.follow == Some(true)).then(|| (a.duration_sec.unwrap_or(DEFAULT_FOLLOW_SEC).min(MAX_FOLLOW_SEC) * 1000.0).ceil() as u64);
    Ok(Plan { scope, app_pid, buffers, follow_ms, lines: a.lines.unwrap_or(DEFAULT_LINES) as usize })
}

/// The device-side argv: format, buffers, pid, start point and filterspecs.
/// Without `grep` the device already cuts to the last `lines` (`-t`/`-T N`);
/// with it, every line since the start point comes back and the cut happens here.
fn logcat_argv(a: &LogcatArgs, p: &Plan, pid: Option<u32>) -> Vec<String> {
    let mut v: Vec<String> = ["logcat", "-v", "threadtime"].map(String::from).to_vec();
    for b in &p.buffers {
        v.extend(["-b".to_string(), b.clone()]);
    }
    if let Some(pid) = pid {
        v.push(format!("--pid={pid}"));
    }
    if p.follow_ms.is_none() {
        v.push("-d".into());
    }
    match (&a.since, &a.grep) {
        (Some(since), _) => v.extend(["-T".to_string(), since.clone()]),
        (None, None) => v.extend([if p.follow_ms.is_some() { "-T" } else { "-t" }.to_string(), p.lines.to_string()]),
        (None, Some(_)) => {}
    }
    match (&a.tag, &a.level) {
        (Some(tag), level) => v.extend([format!("{tag}:{}", level.as_deref().map(level_letter).unwrap_or("V")), "*:S".to_string()]),
        (None, Some(level)) => v.push(format!("*:{}", level_letter(level))),
        (None, None) => {}
    }
    v
}

/// The pid of a running app (`pidof -s`); none is `app_not_running`.
async fn app_pid(device: &Device, package: &str, deadline: Deadline) -> Result<u32, ProviderError> {
    let out = device.shell(&command_line(&["pidof", "-s", package]), None, deadline).await?;
    match out.stdout_text().split_whitespace().next().and_then(|p| p.parse::<u32>().ok()) {
        Some(pid) if out.exit_code == 0 => Ok(pid),
        _ => Err(ProviderError::new(APP_NOT_RUNNING, format!("{package} has no running process (pidof found none)")).with_field("packageName").with_details(json!({"packageName": package})).not_dispatched()),
    }
}

fn logcat_failed(argv: &[String], exit: Option<u8>, stderr: &str, stdout: &str) -> ProviderError {
    let said = if stderr.trim().is_empty() { stdout.trim() } else { stderr.trim() };
    ProviderError::new(LOGCAT_FAILED, format!("logcat on the device failed: {said}")).with_details(json!({"argv": argv, "exitCode": exit, "stderr": stderr})).not_dispatched()
}

pub struct Logcat;
impl Command for Logcat {
    type Provider = AndroidProvider;
    type Args = LogcatArgs;
    fn spec() -> CommandSpec {
        spec()
    }
    async fn run(_: &AndroidProvider, ctx: &Context<'_>, inv: &Invocation, args: LogcatArgs) -> Result<Reply, ProviderError> {
        let plan = plan(&args)?;
        let budget = Budget::new(ctx, args.adb_timeout_ms);
        cancellable(ctx, async {
            let device = device(args.adb.as_deref(), args.serial.as_deref(), &budget).await?;
            // `clear`: `logcat -c` as a shell-worker job before the read.
            let cleared = match args.clear {
                Some(true) => crate::shell_exec::command_action(ctx, &inv.action_id, &device, &budget, "logcat", None, &["logcat", "-c"]).await?.execution(),
                _ => Value::Null,
            };
            let pid = match (&args.package_name, plan.app_pid) {
                (Some(pkg), true) => Some(app_pid(&device, pkg, budget.adb()).await?),
                _ => args.pid,
            };
            let argv = logcat_argv(&args, &plan, pid);
            let refs: Vec<&str> = argv.iter().map(String::as_str).collect();
            let line = command_line(&refs);
            let (text, follow) = match plan.follow_ms {
                None => {
                    let out = device.shell_limited(&line, None, OUTPUT_LIMIT, budget.adb()).await?;
                    if out.exit_code != 0 {
                        return Err(logcat_failed(&argv, Some(out.exit_code), &out.stderr_text(), &out.stdout_text()));
                    }
                    (out.stdout_text(), Value::Null)
                }
                Some(requested) => {
                    let window = Duration::from_millis(requested).min(budget.deadline.remaining().saturating_sub(REPLY_MARGIN));
                    let started = std::time::Instant::now();
                    let w = device.shell_window(&line, Deadline::after(window), OUTPUT_LIMIT, budget.deadline).await?;
                    if let Some(code) = w.exit_code.filter(|c| *c != 0) {
                        return Err(logcat_failed(&argv, Some(code), &String::from_utf8_lossy(&w.stderr), &String::from_utf8_lossy(&w.stdout)));
                    }
                    let ended = if w.truncated { "limit" } else if w.exit_code.is_some() { "exit" } else { "window" };
                    let follow = json!({"requestedMs": requested, "windowMs": window.as_millis() as u64, "collectedMs": started.elapsed().as_millis() as u64, "endedBy": ended});
                    (String::from_utf8_lossy(&w.stdout).into_owned(), follow)
                }
            };
            let (mut records, unparsed) = parse_threadtime(&text, plan.follow_ms.is_some());
            if let Some(g) = &args.grep {
                let sensitive = args.grep_case_sensitive == Some(true);
                let needle = if sensitive { g.clone() } else { g.to_lowercase() };
                records.retain(|r| {
                    let hay = format!("{}\n{}", r.tag, r.message);
                    if sensitive { hay.contains(&needle) } else { hay.to_lowercase().contains(&needle) }
                });
            }
            let dropped = records.len().saturating_sub(plan.lines);
            records.drain(..dropped);
            let text: String = records.iter().map(|r| format!("{}\n", r.raw)).collect();
            Ok(json!({
                "ok": true,
                "serial": device.serial,
                "scope": plan.scope,
                "packageName": args.package_name,
                "pid": pid,
                "buffers": if plan.buffers.is_empty() { json!(["main", "system", "crash"]) } else { json!(plan.buffers) },
                "follow": follow,
                "count": records.len(),
                "dropped": dropped,
                "unparsedLines": unparsed,
                "records": records,
                "text": text,
                "cleared": cleared,
            }))
        })
        .await
        .map(Reply::Json)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Real `logcat -v threadtime` output of an Android 14 emulator (pids, tags and
    // padding as logd prints them), with a buffer banner and a multi-line crash.
    const FIXTURE: &str = "--------- beginning of main\n\
12-02 03:14:07.123  4012  4012 I ActivityThread: Binding application com.example.aab.sample\n\
12-02 03:14:07.456  4012  4031 D OpenGLRenderer: RenderThread::requireGlContext()\n\
12-02 03:14:08.001  4012  4012 I Login   : signed in as a@b.c\n\
12-02 03:14:08.002  4012  4012 W Login   : \n\
--------- beginning of system\n\
12-02 03:14:09.777  1000  1187 I ActivityManager: Start proc 4012:com.example.aab.sample/u0a123 for activity\n\
--------- beginning of crash\n\
12-02 03:14:10.010  4012  4012 E AndroidRuntime: FATAL EXCEPTION: main\n\
12-02 03:14:10.010  4012  4012 E AndroidRuntime: Process: com.example.aab.sample, PID: 4012\n\
12-02 03:14:10.011 12345 12346 F libc    : Fatal signal 6 (SIGABRT): time: 12:00\n\
12-02 03:14:10.0";

    #[test]
    fn threadtime_lines_parse_into_records() {
        let (records, unparsed) = parse_threadtime(FIXTURE, false);
        assert_eq!(unparsed, 1, "the cut last line does not parse");
        assert_eq!(records.len(), 8);
        assert_eq!(records[0], Record { time: "12-02 03:14:07.123".into(), pid: 4012, tid: 4012, level: "I".into(), tag: "ActivityThread".into(), message: "Binding application com.example.aab.sample".into(), raw: records[0].raw.clone() });
        assert_eq!((records[1].tid, records[1].tag.as_str(), records[1].message.as_str()), (4031, "OpenGLRenderer", "RenderThread::requireGlContext()"));
        assert_eq!((records[2].tag.as_str(), records[2].message.as_str()), ("Login", "signed in as a@b.c"));
        assert_eq!((records[3].level.as_str(), records[3].message.as_str()), ("W", ""), "an empty message");
        assert_eq!((records[4].pid, records[4].tid), (1000, 1187));
        assert_eq!(records[6].message, "Process: com.example.aab.sample, PID: 4012");
        assert_eq!((records[7].pid, records[7].level.as_str(), records[7].tag.as_str(), records[7].message.as_str()), (12345, "F", "libc", "Fatal signal 6 (SIGABRT): time: 12:00"));
        // A follow window cut the last line: it is left out rather than miscounted.
        let (records, unparsed) = parse_threadtime(FIXTURE, true);
        assert_eq!((records.len(), unparsed), (8, 0));
        assert_eq!(parse_line("not a log line"), None);
        assert_eq!(parse_line("12-02 03:14:07.123  4012  4012 Q Tag: x"), None, "unknown priority");
    }

    fn args(v: Value) -> LogcatArgs {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn arguments_become_one_logcat_command() {
        let a = args(json!({"packageName": "com.x.y", "tag": "Login", "level": "warn"}));
        let p = plan(&a).unwrap();
        assert_eq!((p.scope, p.app_pid), ("app", true));
        assert_eq!(logcat_argv(&a, &p, Some(42)).join(" "), "logcat -v threadtime --pid=42 -d -t 200 Login:W *:S");
        let a = args(json!({"deviceLogBuffers": ["main", "crash"], "grep": "x", "since": "12-02 03:14:07.000", "level": "E"}));
        let p = plan(&a).unwrap();
        assert_eq!(p.scope, "device");
        assert_eq!(logcat_argv(&a, &p, None), ["logcat", "-v", "threadtime", "-b", "main", "-b", "crash", "-d", "-T", "12-02 03:14:07.000", "*:E"]);
        let a = args(json!({"follow": true, "durationSec": 90, "lines": 5}));
        let p = plan(&a).unwrap();
        assert_eq!(p.follow_ms, Some(60_000), "capped at 60 s");
        assert_eq!(logcat_argv(&a, &p, None).join(" "), "logcat -v threadtime -T 5");
    }

    #[test]
    fn contradictory_arguments_are_refused_with_their_field() {
        let field = |v: Value| plan(&args(v)).err().map(|e| e.field.unwrap_or_default());
        assert_eq!(field(json!({"packageName": "com.x.y", "deviceLogScope": "device"})), Some("deviceLogScope".into()));
        assert_eq!(field(json!({"deviceLogScope": "app"})), Some("packageName".into()));
        assert_eq!(field(json!({"appPid": true})), Some("appPid".into()));
        assert_eq!(field(json!({"packageName": "com.x.y", "pid": 7})), Some("pid".into()));
        assert_eq!(field(json!({"durationSec": 2})), Some("durationSec".into()));
        assert_eq!(field(json!({"packageName": "com.x.y", "pid": 7, "appPid": false})), None);
    }
}
