//! `aab-bench-android --actions`: round trips of the Android actions, side by side
//! in one run on the same simulated phone, each call verified against the
//! simulator's ground truth after it returned (outside the timed window): the
//! effect happened exactly once (one `tap` record at the requested point, one
//! `text`, one `launch`), and for aab the reply says the execution succeeded.
//!   - `tap` on the SDK path (app scope: the app's own managed action and its
//!     settled receipt) via MCP and via the CLI, and on the shell path
//!     (`--scope device`: the shell worker runs `input tap`) via MCP;
//!   - a coordinate tap through mobile-mcp (`mobile_click_on_screen_at_coordinates`);
//!   - `input-text` (focus by coordinates, then type) vs mobile-mcp `mobile_type_keys`;
//!   - `launch-app` vs mobile-mcp `mobile_launch_app`.
//!
//! The target: an SDK tap with its verified receipt in ≤ 15 ms.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::mcp::run_command as run;
use super::{Mcp, PKG, World, port_protocol_shell, skip, stats};

/// Taps land below the form's controls: recorded, no screen change.
const TAP: (i64, i64) = (540, 1300);
/// The form's email field (editable): input-text focuses it there.
const EMAIL: (i64, i64) = (540, 470);

/// The simulator's truth log, read forward from a cursor.
struct Truth {
    seq: u64,
}

impl Truth {
    fn new(w: &World) -> Result<Truth, String> {
        let mut t = Truth { seq: 0 };
        t.take(w)?;
        Ok(t)
    }

    /// Everything recorded since the last call.
    fn take(&mut self, w: &World) -> Result<Vec<Value>, String> {
        let items = w.control(json!({"op": "truth", "since": self.seq}))?["items"].as_array().cloned().unwrap_or_default();
        if let Some(last) = items.last() {
            self.seq = last["seq"].as_u64().unwrap_or(self.seq);
        }
        Ok(items)
    }

    /// The new records must hold exactly one `kind` record and it must satisfy `check`.
    fn once(&mut self, w: &World, what: &str, kind: &str, check: impl Fn(&Value) -> bool) -> Result<(), String> {
        let items = self.take(w)?;
        let hits: Vec<&Value> = items.iter().filter(|r| r["kind"] == kind).collect();
        if hits.len() != 1 || !check(&hits[0]["data"]) {
            return Err(format!("{what}: expected exactly one matching `{kind}` on the phone, saw {}", Value::Array(hits.into_iter().cloned().collect())));
        }
        Ok(())
    }
}

fn tapped_at(x: i64, y: i64) -> impl Fn(&Value) -> bool {
    move |d: &Value| d["x"] == json!(x) && d["y"] == json!(y)
}


/// Times `calls` rounds of `act`, verifying each with `verify` after the clock stopped.
fn measure(calls: usize, mut act: impl FnMut(usize) -> Result<(), String>, mut verify: impl FnMut(usize) -> Result<(), String>) -> Result<Vec<Duration>, String> {
    let mut samples = Vec::with_capacity(calls);
    for i in 0..calls {
        let t = Instant::now();
        act(i)?;
        samples.push(t.elapsed());
        verify(i)?;
    }
    Ok(samples)
}

pub fn run_actions(w: &World, calls: usize, rows: &mut Vec<Value>, aab: &mut Mcp, mut mobile: Option<&mut Mcp>) -> Result<(), String> {
    let advertised = |command: &str| w.aab_json(&["--help", command]).is_ok_and(|(v, _)| v["ok"] != json!(false) && v.get("execution").is_none_or(|e| e["ok"] != json!(false)));
    let serial = w.serial.clone();
    let mut truth = Truth::new(w)?;
    let (x, y) = TAP;

    // ---- tap: SDK path (MCP, CLI), shell path (MCP); mobile-mcp's coordinate tap
    if advertised("tap") {
        let sdk = json!({"packageName": PKG, "serial": serial, "scope": "app", "tapX": x, "tapY": y});
        // One warm-up each (forward, descriptor, worker preparation) outside the figures.
        run(aab, "tap", sdk.clone())?;
        truth.once(w, "warm-up SDK tap", "tap", tapped_at(x, y))?;
        let samples = measure(calls, |_| run(aab, "tap", sdk.clone()).map(drop), |_| {
            let items = truth.take(w)?;
            let taps = items.iter().filter(|r| r["kind"] == "tap" && tapped_at(x, y)(&r["data"])).count();
            let sdk_actions = items.iter().filter(|r| r["kind"] == "sdk-action" && r["data"]["ok"] == json!(true)).count();
            if (taps, sdk_actions) != (1, 1) {
                return Err(format!("SDK tap: expected one tap through one SDK action, saw {taps} taps / {sdk_actions} SDK actions"));
            }
            Ok(())
        })?;
        stats(rows, "aab tap, app scope (SDK action + receipt) via MCP", samples, None);
        breakdown(w, calls, rows, aab)?;

        let args: Vec<String> = ["tap", "--package-name", PKG, "--serial", &serial, "--scope", "app", "--tap-x", &x.to_string(), "--tap-y", &y.to_string()].iter().map(|s| s.to_string()).collect();
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let samples = measure((calls / 2).max(10), |_| {
            let (v, _) = w.aab_json(&argv)?;
            if v["execution"]["ok"] != json!(true) {
                return Err(format!("tap via CLI: {v}"));
            }
            Ok(())
        }, |_| truth.once(w, "SDK tap via CLI", "tap", tapped_at(x, y)))?;
        stats(rows, "aab tap, app scope (SDK) via CLI (a process per call)", samples, None);

        let device = json!({"serial": serial, "scope": "device", "tapX": x, "tapY": y});
        match run(aab, "tap", device.clone()) {
            Ok(_) => {
                truth.once(w, "warm-up device tap", "tap", tapped_at(x, y))?;
                let samples = measure(calls, |_| run(aab, "tap", device.clone()).map(drop), |_| truth.once(w, "device-scope tap", "tap", tapped_at(x, y)))?;
                stats(rows, "aab tap --scope device (shell worker, `input tap`) via MCP", samples, None);
            }
            Err(e) => {
                truth.take(w)?;
                skip(rows, "aab tap --scope device via MCP", &format!("not available in this build: {}", e.chars().take(300).collect::<String>()));
            }
        }
    } else {
        skip(rows, "aab tap via MCP / CLI", "`tap` is not advertised by this build");
    }
    if let Some(m) = mobile.as_deref_mut() {
        let click = json!({"device": serial, "x": x, "y": y});
        m.tool("mobile_click_on_screen_at_coordinates", click.clone())?;
        truth.once(w, "warm-up mobile-mcp click", "tap", tapped_at(x, y))?;
        let samples = measure(calls, |_| m.tool("mobile_click_on_screen_at_coordinates", click.clone()).map(drop), |_| truth.once(w, "mobile-mcp click", "tap", tapped_at(x, y)))?;
        stats(rows, "mobile-mcp mobile_click_on_screen_at_coordinates (adb shell input tap)", samples, None);
    }

    // ---- text: aab input-text (focus the email field by coordinates, type) vs mobile-mcp type keys
    let text_of = |i: usize| format!("bench{i}");
    if advertised("input-text") {
        let args = |i: usize| json!({"packageName": PKG, "serial": serial, "text": text_of(i), "tapX": EMAIL.0, "tapY": EMAIL.1});
        run(aab, "input-text", args(calls))?;
        truth.once(w, "warm-up input-text", "text", |d| d["text"] == json!(text_of(calls)))?;
        let samples = measure(calls, |i| run(aab, "input-text", args(i)).map(drop), |i| truth.once(w, "input-text", "text", |d| d["text"] == json!(text_of(i))))?;
        stats(rows, "aab input-text (tap to focus + type) via MCP", samples, None);
    } else {
        skip(rows, "aab input-text via MCP", "`input-text` is not advertised by this build");
    }
    if let Some(m) = mobile.as_deref_mut() {
        // The email field is focused (by aab's input-text, or by this tap).
        w.control(json!({"op": "tap", "x": EMAIL.0, "y": EMAIL.1}))?;
        truth.take(w)?;
        let samples = measure(calls, |i| m.tool("mobile_type_keys", json!({"device": serial, "text": text_of(i), "submit": false})).map(drop), |i| truth.once(w, "mobile-mcp type keys", "text", |d| d["text"] == json!(text_of(i))))?;
        stats(rows, "mobile-mcp mobile_type_keys (adb shell input text, focused field)", samples, None);
    }

    // ---- launch: aab launch-app vs mobile-mcp launch app (the app is already running)
    let launched = |d: &Value| d["package"] == json!(PKG);
    if advertised("launch-app") {
        let args = json!({"packageName": PKG, "serial": serial});
        run(aab, "launch-app", args.clone())?;
        truth.once(w, "warm-up launch-app", "launch", launched)?;
        let samples = measure((calls / 2).max(10), |_| run(aab, "launch-app", args.clone()).map(drop), |_| truth.once(w, "launch-app", "launch", launched))?;
        stats(rows, "aab launch-app (am start -W + foreground check) via MCP", samples, None);
    } else {
        skip(rows, "aab launch-app via MCP", "`launch-app` is not advertised by this build");
    }
    if let Some(m) = mobile {
        let samples = measure((calls / 2).max(10), |_| m.tool("mobile_launch_app", json!({"device": serial, "packageName": PKG})).map(drop), |_| truth.once(w, "mobile-mcp launch app", "launch", launched))?;
        stats(rows, "mobile-mcp mobile_launch_app (adb shell monkey -p)", samples, None);
    }
    Ok(())
}

/// Where an SDK tap's time goes, measured piece by piece on the same phone: the SDK
/// sequence alone (`status`: descriptor, forward check, `GET /v1/status`), the device
/// services of the foreground check a tap adds before dispatch (over the adb port
/// protocol, as the plugin opens them), and one durable journal write of the kind the
/// host makes around every mutation (pending, dispatch mark, settlement).
fn breakdown(w: &World, calls: usize, rows: &mut Vec<Value>, aab: &mut Mcp) -> Result<(), String> {
    let samples = measure(calls, |_| run(aab, "status", json!({"packageName": PKG, "serial": w.serial})).map(drop), |_| Ok(()))?;
    stats(rows, "  of which: aab status via MCP (SDK sequence, no action)", samples, None);
    let state = w.control(json!({"op": "state"}))?;
    let pid = state["apps"].as_array().and_then(|a| a.iter().find(|a| a["package"] == json!(PKG))).and_then(|a| a["pid"].as_u64()).ok_or("no app pid")?;
    let proc_read = format!("cat /proc/sys/kernel/random/boot_id /proc/{pid}/stat /proc/{pid}/status");
    let package = format!("dumpsys package {PKG}");
    for (label, command, per_tap) in [("dumpsys window -a", "dumpsys window -a", 2), ("boot id + /proc/PID/stat,status", proc_read.as_str(), 2), ("dumpsys package PKG", package.as_str(), 1)] {
        let samples = measure(calls, |_| port_protocol_shell(w.adb_port, &w.serial, command).map(drop), |_| Ok(()))?;
        stats(rows, &format!("  of which: foreground check `{label}` (x{per_tap} per tap)"), samples, None);
    }
    let dir = w.dir.path().join("fsync-probe");
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let samples = measure(calls, |i| {
        use std::io::Write;
        let (tmp, path) = (dir.join(format!("j.{i}.tmp")), dir.join("j.json"));
        let mut f = std::fs::File::create(&tmp).map_err(|e| e.to_string())?;
        f.write_all(&[b'x'; 600]).and_then(|_| f.sync_all()).map_err(|e| e.to_string())?;
        std::fs::rename(&tmp, &path).and_then(|_| std::fs::File::open(&dir)?.sync_all()).map_err(|e| e.to_string())
    }, |_| Ok(()))?;
    stats(rows, "  of which: one durable journal write (fsync file + dir), host side", samples, None);
    Ok(())
}
