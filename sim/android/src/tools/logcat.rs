//! `logcat` over the phone's log ring (`Phone::logcat`, appended to by the system
//! and the apps): `-v threadtime` lines, buffers (`-b main,system,crash|all|default`,
//! the buffer of a line derived from its writer), `-d`, `-c`, `-t`/`-T` with a
//! count or a time (`MM-DD hh:mm:ss.mmm`, `YYYY-MM-DD hh:mm:ss.mmm`, `sec.ms`),
//! `--pid`, `-s` and `TAG:L` filterspecs, and follow mode (stream until the reader
//! goes away). Each line of a multi-line message gets its own header, and the
//! output announces buffers with `--------- beginning of X` / `switch to X`, as
//! logd does.

use std::time::Duration;

use serde_json::json;
use tokio::io::{AsyncWrite, AsyncWriteExt};

use super::{Ctx, Res};
use crate::phone::LogLine;

const BUFFERS: [&str; 3] = ["main", "system", "crash"];
const LEVELS: &str = "VDIWEFS";

/// Which buffer logd would have put the line in: system_server writes `system`,
/// an uncaught exception (`AndroidRuntime` at E/F) is `crash`, apps write `main`.
pub fn buffer_of(l: &LogLine) -> &'static str {
    if l.tag == "AndroidRuntime" && matches!(l.level, 'E' | 'F') {
        "crash"
    } else if l.pid == 1000 {
        "system"
    } else {
        "main"
    }
}

/// Where the output starts: the last N lines, or the lines at/after a time.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Start {
    All,
    Last(usize),
    Since(u64),
}

struct Opts {
    clear: bool,
    dump: bool,
    start: Start,
    pid: Option<u32>,
    buffers: Vec<&'static str>,
    default_level: char,
    specs: Vec<(String, char)>,
}

fn parse_level(s: &str) -> Option<char> {
    let c = s.chars().next()?.to_ascii_uppercase();
    (s.len() == 1 && LEVELS.contains(c)).then_some(c)
}

fn rank(c: char) -> usize {
    LEVELS.find(c).unwrap_or(0)
}

/// Days since 1970-01-01 of a civil date (proleptic Gregorian).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m as i64 + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146097 + doe - 719468
}

fn current_year() -> i64 {
    let days = (crate::device::now_ms() / 86_400_000) as i64;
    // Invert days_from_civil by trying the neighbouring years (enough for "now").
    let mut y = 1970 + days / 366;
    while days_from_civil(y + 1, 1, 1) <= days {
        y += 1;
    }
    y
}

/// A logcat time argument as Unix ms (UTC, the device's zone).
fn parse_time(s: &str) -> Option<u64> {
    if let Some((secs, ms)) = s.split_once('.')
        && !s.contains(' ')
    {
        let secs: u64 = secs.parse().ok()?;
        let ms: u64 = format!("{ms:0<3}")[..3].parse().ok()?;
        return Some(secs * 1000 + ms);
    }
    if s.bytes().all(|b| b.is_ascii_digit()) {
        return None; // a count, not a time
    }
    let (date, time) = s.trim().split_once(' ')?;
    let parts: Vec<&str> = date.split('-').collect();
    let (y, mo, d) = match parts.as_slice() {
        [m, d] => (current_year(), m.parse().ok()?, d.parse().ok()?),
        [y, m, d] => (y.parse().ok()?, m.parse().ok()?, d.parse().ok()?),
        _ => return None,
    };
    let (hms, frac) = time.split_once('.').unwrap_or((time, "0"));
    let t: Vec<u64> = hms.split(':').map(|x| x.parse().ok()).collect::<Option<_>>()?;
    let [h, mi, se] = t.as_slice() else { return None };
    let ms: u64 = format!("{frac:0<3}")[..3].parse().ok()?;
    let days = days_from_civil(y, mo, d);
    Some(days as u64 * 86_400_000 + (h * 3600 + mi * 60 + se) * 1000 + ms)
}

fn start_of(v: &str) -> Result<Start, String> {
    if let Ok(n) = v.parse::<usize>() {
        return Ok(Start::Last(n));
    }
    parse_time(v).map(Start::Since).ok_or_else(|| format!("logcat: invalid time or count '{v}'\n"))
}

fn parse(args: &[String]) -> Result<Opts, String> {
    let mut o = Opts { clear: false, dump: false, start: Start::All, pid: None, buffers: vec![], default_level: 'V', specs: vec![] };
    let mut i = 0;
    let value = |i: &mut usize, flag: &str| -> Result<String, String> {
        *i += 1;
        args.get(*i).cloned().ok_or_else(|| format!("logcat: option requires an argument -- '{}'\n", flag.trim_start_matches('-')))
    };
    while i < args.len() {
        let a = args[i].as_str();
        match a {
            "-c" | "--clear" => o.clear = true,
            "-d" => o.dump = true,
            "-s" => o.default_level = 'S',
            "-t" => {
                o.start = start_of(&value(&mut i, a)?)?;
                o.dump = true;
            }
            "-T" => o.start = start_of(&value(&mut i, a)?)?,
            "-v" => {
                let f = value(&mut i, a)?;
                if f != "threadtime" {
                    return Err(format!("logcat: format '{f}' is not supported by the simulator (threadtime only)\n"));
                }
            }
            "--pid" => o.pid = Some(value(&mut i, a)?.parse().map_err(|_| "logcat: --pid needs a number\n".to_string())?),
            "-b" => {
                let v = value(&mut i, a)?;
                add_buffers(&mut o.buffers, &v)?;
            }
            _ if a.starts_with("--pid=") => o.pid = Some(a[6..].parse().map_err(|_| "logcat: --pid needs a number\n".to_string())?),
            _ if a.starts_with("--buffer=") => add_buffers(&mut o.buffers, &a[9..])?,
            _ if a.starts_with("--format=") => {
                if &a[9..] != "threadtime" {
                    return Err(format!("logcat: format '{}' is not supported by the simulator (threadtime only)\n", &a[9..]));
                }
            }
            _ if a.starts_with('-') => return Err(format!("logcat: invalid option -- '{}'\nUsage: logcat [options] [filterspecs]\n", a.trim_start_matches('-'))),
            spec => {
                let (tag, level) = match spec.rsplit_once(':') {
                    Some((t, l)) => (t, parse_level(l).ok_or_else(|| format!("logcat: Invalid filter expression '{spec}'\n"))?),
                    None => (spec, 'V'),
                };
                if tag == "*" {
                    o.default_level = level;
                } else {
                    o.specs.push((tag.to_string(), level));
                }
            }
        }
        i += 1;
    }
    if o.buffers.is_empty() {
        o.buffers = BUFFERS.to_vec();
    }
    Ok(o)
}

fn add_buffers(into: &mut Vec<&'static str>, v: &str) -> Result<(), String> {
    for b in v.split(',') {
        let names: &[&'static str] = match b {
            "all" | "default" => &BUFFERS,
            "main" => &["main"],
            "system" => &["system"],
            "crash" => &["crash"],
            // Buffers the simulator never writes: valid names, always empty.
            "radio" | "events" | "kernel" | "security" | "stats" => &[],
            other => return Err(format!("logcat: unknown buffer '{other}'\n")),
        };
        for n in names {
            if !into.contains(n) {
                into.push(n);
            }
        }
    }
    Ok(())
}

impl Opts {
    fn passes(&self, l: &LogLine) -> bool {
        if !self.buffers.contains(&buffer_of(l)) || self.pid.is_some_and(|p| p != l.pid) {
            return false;
        }
        let min = self.specs.iter().rev().find(|(t, _)| *t == l.tag).map(|(_, lv)| *lv).unwrap_or(self.default_level);
        min != 'S' && rank(l.level) >= rank(min)
    }
}

/// Renders lines in `threadtime`, announcing buffer changes like logd.
#[derive(Default)]
struct Printer {
    seen: Vec<&'static str>,
    last: Option<&'static str>,
}

impl Printer {
    fn print(&mut self, l: &LogLine, out: &mut String) {
        let b = buffer_of(l);
        if self.last != Some(b) {
            if self.seen.contains(&b) {
                out.push_str(&format!("--------- switch to {b}\n"));
            } else {
                out.push_str(&format!("--------- beginning of {b}\n"));
                self.seen.push(b);
            }
            self.last = Some(b);
        }
        for part in l.message.split('\n') {
            let one = LogLine { at_ms: l.at_ms, pid: l.pid, tid: l.tid, level: l.level, tag: l.tag.clone(), message: part.to_string() };
            out.push_str(&crate::dumpsys::logcat_line(&one));
        }
    }
}

/// The app's own `android.util.Log` calls: a tap action's `log` capture record
/// also lands in logcat, under the app's pid.
pub fn app_writes(ph: &mut crate::phone::Phone, pid: u32, effects: &serde_json::Value) {
    for rec in effects.as_array().into_iter().flatten().filter_map(|e| e.get("log")) {
        let level = match rec.get("level").and_then(|v| v.as_str()).unwrap_or("info") {
            "verbose" => 'V',
            "debug" => 'D',
            "warn" | "warning" => 'W',
            "error" => 'E',
            "fatal" | "assert" => 'F',
            _ => 'I',
        };
        let tag = rec.get("tag").and_then(|v| v.as_str()).unwrap_or("app").to_string();
        let message = rec.get("message").and_then(|v| v.as_str()).unwrap_or("").to_string();
        ph.log(pid, level, &tag, &message);
    }
}

pub async fn run(ctx: &Ctx, args: &[String], w: &mut (dyn AsyncWrite + Unpin + Send)) -> Res {
    let dev = &ctx.dev;
    let o = match parse(args) {
        Ok(o) => o,
        Err(e) => return Res::fail(1, e),
    };
    if o.clear {
        let mut ph = dev.phone.lock().unwrap();
        ph.logcat.retain(|l| !o.buffers.contains(&buffer_of(l)));
        drop(ph);
        dev.record("logcat-clear", json!({ "buffers": o.buffers }));
        return Res::ok("");
    }
    let mut printer = Printer::default();
    // `seen` counts every line ever written, so follow mode survives ring eviction and `-c`.
    let (mut text, mut seen) = {
        let ph = dev.phone.lock().unwrap();
        let picked: Vec<&LogLine> = ph.logcat.iter().filter(|l| o.passes(l)).collect();
        let from = match o.start {
            Start::All => 0,
            Start::Last(n) => picked.len().saturating_sub(n),
            Start::Since(ms) => picked.iter().position(|l| l.at_ms >= ms).unwrap_or(picked.len()),
        };
        let mut text = String::new();
        for l in &picked[from..] {
            printer.print(l, &mut text);
        }
        (text, ph.logcat_total)
    };
    if o.dump {
        return Res::ok(text);
    }
    loop {
        if !text.is_empty() && w.write_all(text.as_bytes()).await.is_err() {
            return Res::ok("");
        }
        if w.flush().await.is_err() {
            return Res::ok("");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        text.clear();
        let ph = dev.phone.lock().unwrap();
        let fresh = (ph.logcat_total - seen).min(ph.logcat.len() as u64) as usize;
        for l in &ph.logcat[ph.logcat.len() - fresh..] {
            if o.passes(l) {
                printer.print(l, &mut text);
            }
        }
        seen = ph.logcat_total;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(pid: u32, level: char, tag: &str) -> LogLine {
        LogLine { at_ms: 0, pid, tid: pid, level, tag: tag.into(), message: "m".into() }
    }

    #[test]
    fn filterspecs_buffers_and_times() {
        let o = parse(&["-s".into(), "Login:I".into()]).unwrap();
        assert!(o.passes(&line(4001, 'I', "Login")) && !o.passes(&line(4001, 'D', "Login")) && !o.passes(&line(4001, 'E', "Other")));
        let o = parse(&["*:W".into(), "-b".into(), "main".into()]).unwrap();
        assert!(o.passes(&line(4001, 'E', "X")) && !o.passes(&line(4001, 'I', "X")) && !o.passes(&line(1000, 'E', "X")));
        assert_eq!(parse_time("1764633600.5"), Some(1_764_633_600_500));
        assert_eq!(parse_time("2025-12-02 00:00:00.000"), Some(1_764_633_600_000));
        assert_eq!(start_of("12").unwrap(), Start::Last(12));
        assert!(parse(&["-v".into(), "brief".into()]).is_err());
    }
}
