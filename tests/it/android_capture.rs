//! Android capture streams (`logs`, `state`, `network`, `events`) and `screenshot`
//! through the public CLI (and MCP once), against the simulated phone behind the
//! real adb server. The phone runs `sim/android/scenarios/capture.json`: a shop
//! app whose buttons log, set state, emit events and post network records (the
//! SDK redacts them when stored). Every reply is checked against ground truth:
//! the records the app really holds (simulator control `state`), the PNG decoded
//! against the simulator's screen size and compared byte for byte with what the
//! `adb` binary's own `exec-out screencap -p` returns, and the files on disk.

use std::io::{Read, Write};
use std::path::Path;
use std::process::Command;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::android::{World, app_state, control, simulated_with};

const SHOP: &str = "com.example.aab.shop";
const SCENARIO: &str = include_str!("../../sim/android/scenarios/capture.json");
// Centres of the cart screen's controls (scenario bounds).
const ADD: (i64, i64) = (360, 450);
const COUPON: (i64, i64) = (360, 310);
const CHECKOUT: (i64, i64) = (360, 590);

/// The simulator with the shop scenario, one device, connected to this world's server.
fn shop(w: &World) -> aab_android_sim::Simulator {
    simulated_with(w, aab_android_sim::Scenario::parse(SCENARIO).expect("capture scenario parses"))
}


/// Ground truth: the shop app's entry in the simulator's state (capture records, runtimeEpoch).
fn app_truth(w: &World, sim: &aab_android_sim::Simulator) -> Value {
    app_state(w, sim, SHOP)
}

fn tap(w: &World, sim: &aab_android_sim::Simulator, (x, y): (i64, i64)) {
    control(w, sim, json!({"op": "tap", "x": x, "y": y}));
}

fn ids(items: &Value) -> Vec<u64> {
    items.as_array().unwrap().iter().map(|i| i["id"].as_u64().unwrap()).collect()
}

fn newer(items: &Value, since: u64) -> Value {
    Value::Array(items.as_array().unwrap().iter().filter(|i| i["id"].as_u64().unwrap() > since).cloned().collect())
}

#[test]
fn android_logs_state_and_events_are_what_the_app_recorded() {
    let w = World::new();
    let mut sim = shop(&w);

    // At start: the records the app made while starting.
    let logs = w.ok("logs", json!({"packageName": SHOP}));
    let truth = app_truth(&w, &sim);
    assert_eq!(logs["items"], truth["capture"]["logs"], "{logs}");
    assert_eq!((logs["count"].clone(), logs["hasMore"].clone(), logs["runtimeEpoch"].clone()), (json!(2), json!(false), truth["runtimeEpoch"].clone()), "{logs}");
    let since = logs["nextSinceId"].as_u64().unwrap();
    assert_eq!(since, *ids(&truth["capture"]["logs"]).last().unwrap());

    // The user adds an item, types a coupon and checks out on the touchscreen.
    tap(&w, &sim, ADD);
    tap(&w, &sim, COUPON);
    control(&w, &sim, json!({"op": "text", "text": "SAVE10"}));
    tap(&w, &sim, CHECKOUT);
    let truth = app_truth(&w, &sim);
    assert_eq!(truth["screen"], json!("done"), "the taps landed");

    // sinceId is exclusive: exactly the records made after the first read.
    let later = w.ok("logs", json!({"packageName": SHOP, "sinceId": since}));
    assert_eq!(later["items"], newer(&truth["capture"]["logs"], since), "{later}");
    let messages: Vec<&str> = later["items"].as_array().unwrap().iter().map(|i| i["message"].as_str().unwrap()).collect();
    assert_eq!(messages, ["item added", "recommendations unavailable for o-77"]);

    // state: every record, and the latest value per namespace.key.
    let state = w.ok("state", json!({"packageName": SHOP}));
    assert_eq!(state["items"], truth["capture"]["state"], "{state}");
    assert_eq!(state["values"], json!({"cart.count": 0, "app.signedIn": true}), "{state}");
    // limit cuts the page and says so; nextSinceId continues where it stopped.
    let first = w.ok("state", json!({"packageName": SHOP, "limit": 2}));
    assert_eq!((ids(&first["items"]).len(), first["hasMore"].clone()), (2, json!(true)), "{first}");
    let rest = w.ok("state", json!({"packageName": SHOP, "sinceId": first["nextSinceId"]}));
    let mut both = ids(&first["items"]);
    both.extend(ids(&rest["items"]));
    assert_eq!(both, ids(&truth["capture"]["state"]));
    assert_eq!(rest["hasMore"], json!(false));
    // sinceMs is inclusive.
    let last_ms = truth["capture"]["state"].as_array().unwrap().last().unwrap()["timestampMs"].as_u64().unwrap();
    let recent = w.ok("state", json!({"packageName": SHOP, "sinceMs": last_ms}));
    let expected: Vec<u64> = truth["capture"]["state"].as_array().unwrap().iter().filter(|i| i["timestampMs"].as_u64().unwrap() >= last_ms).map(|i| i["id"].as_u64().unwrap()).collect();
    assert_eq!(ids(&recent["items"]), expected);

    // events: the app's own events, with the typed coupon in the data.
    let events = w.ok("events", json!({"packageName": SHOP}));
    assert_eq!(events["items"], truth["capture"]["events"], "{events}");
    let names: Vec<&str> = events["items"].as_array().unwrap().iter().map(|i| i["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["add_to_cart", "checkout"]);
    assert_eq!(events["items"][1]["data"], json!({"orderId": "o-77", "coupon": "SAVE10"}));
    assert_eq!((events["hiddenActions"].clone(), events["includeActions"].clone()), (json!(0), json!(false)));

    // A restarted app starts a new runtime: the reply names it, ids start again.
    control(&w, &sim, json!({"op": "restart", "package": SHOP}));
    let fresh = w.ok("logs", json!({"packageName": SHOP, "sinceId": since}));
    let truth = app_truth(&w, &sim);
    assert_eq!(fresh["runtimeEpoch"], truth["runtimeEpoch"]);
    assert_ne!(fresh["runtimeEpoch"], logs["runtimeEpoch"]);
    assert_eq!(fresh["items"], newer(&truth["capture"]["logs"], since));
    sim.shutdown();
}

#[test]
fn android_network_filters_and_shapes_the_apps_redacted_records() {
    let w = World::new();
    let mut sim = shop(&w);
    tap(&w, &sim, COUPON);
    control(&w, &sim, json!({"op": "text", "text": "SAVE10"}));
    tap(&w, &sim, CHECKOUT);
    let truth = app_truth(&w, &sim)["capture"]["network"].clone();
    let t = truth.as_array().unwrap();
    assert_eq!(t.len(), 2, "{truth}");
    // What the app stored is redacted by its SDK (§1.10); the typed coupon is not sensitive.
    let stored = truth.to_string();
    assert!(!stored.contains("secret") && stored.contains("auth_token=[redacted]") && stored.contains("SAVE10"), "{stored}");

    let all = w.ok("network", json!({"packageName": SHOP}));
    assert_eq!(all["items"], truth, "{all}");
    assert!(!all.to_string().contains("secret"));

    let only = |args: Value| -> Value {
        let mut a = json!({"packageName": SHOP});
        a.as_object_mut().unwrap().extend(args.as_object().unwrap().clone());
        w.ok("network", a)
    };
    assert_eq!(only(json!({"method": "post"}))["items"], json!([t[0]]));
    assert_eq!(only(json!({"statusCode": 503}))["items"], json!([t[1]]));
    assert_eq!(only(json!({"urlFilter": "RECOMMENDATIONS"}))["items"], json!([t[1]]));
    let none = only(json!({"urlFilter": "/v2/", "method": "GET"}));
    assert_eq!((none["count"].clone(), none["scanned"].clone(), none["filters"]["urlFilter"].clone()), (json!(0), json!(2), json!("/v2/")), "{none}");

    // compact: only the summary fields, same values as stored.
    let compact = only(json!({"compact": true}));
    for (got, want) in compact["items"].as_array().unwrap().iter().zip(t) {
        let keys: Vec<&str> = got.as_object().unwrap().keys().map(String::as_str).collect();
        assert!(keys.iter().all(|k| ["id", "type", "timestampMs", "method", "url", "statusCode", "durationMs", "error", "actionId"].contains(k)), "{got}");
        for k in keys {
            assert_eq!(got[k], want[k]);
        }
    }
    // noBodies: everything but the bodies.
    let bare = only(json!({"noBodies": true}));
    let mut expected = truth.clone();
    for i in expected.as_array_mut().unwrap() {
        i.as_object_mut().unwrap().retain(|k, _| k != "requestBody" && k != "responseBody");
    }
    assert_eq!(bare["items"], expected);
    // bodyMaxBytes: a UTF-8 prefix of the stored body, never a broken character.
    let cut = only(json!({"bodyMaxBytes": 36, "method": "POST"}));
    let item = &cut["items"][0];
    let stored_body = t[0]["responseBody"].as_str().unwrap();
    let mut end = 36;
    while !stored_body.is_char_boundary(end) {
        end -= 1;
    }
    assert!(end < 36, "byte 36 falls inside a character of {stored_body:?}");
    assert_eq!(item["responseBody"].as_str(), Some(&stored_body[..end]));
    assert_eq!((item["responseBodyTruncated"].clone(), item["responseBodyBytes"].clone()), (json!(true), json!(stored_body.len())));

    // The same read through MCP.
    let mut mcp = w.env.mcp();
    let (body, is_error) = mcp.call_tool("run", json!({"command": "network", "arguments": {"packageName": SHOP, "method": "GET", "statusCode": 503}, "extract": null}));
    assert!(!is_error, "{body}");
    assert_eq!(body.pointer("/value/items"), Some(&json!([t[1]])), "{body}");
    sim.shutdown();
}

#[test]
fn android_events_hide_managed_action_records_unless_asked() {
    let w = World::new();
    let mut sim = shop(&w);
    // A managed tap through the SDK itself (its execution envelope), the way an
    // action command reaches the app: the SDK records `native.action.settled`.
    let fwd = w.ok("forward", json!({"packageName": SHOP}));
    let body = json!({"x": ADD.0, "y": ADD.1, "actionId": "act-capture-1", "execution": {"schemaVersion": "aab.native-execution/v1", "actionId": "act-capture-1", "runtimeEpoch": fwd["runtimeEpoch"], "timeoutMs": 5000}}).to_string();
    let mut s = std::net::TcpStream::connect(("127.0.0.1", fwd["port"].as_u64().unwrap() as u16)).unwrap();
    s.write_all(format!("POST /v1/action/tap HTTP/1.1\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: {}\r\n\r\n{body}", body.len()).as_bytes()).unwrap();
    let mut reply = String::new();
    s.read_to_string(&mut reply).unwrap();
    assert!(reply.contains("\"settled\":true"), "{reply}");

    let truth = app_truth(&w, &sim)["capture"]["events"].clone();
    let (actions, own): (Vec<Value>, Vec<Value>) = truth.as_array().unwrap().iter().cloned().partition(|e| e.get("actionId").is_some_and(|a| a.is_string()));
    assert_eq!(actions.len(), 1, "{truth}");
    assert_eq!(actions[0]["name"], json!("native.action.settled"));
    assert!(!own.is_empty(), "the tap's own event: {truth}");

    let events = w.ok("events", json!({"packageName": SHOP}));
    assert_eq!((events["items"].clone(), events["hiddenActions"].clone()), (Value::Array(own), json!(1)), "{events}");
    let all = w.ok("events", json!({"packageName": SHOP, "includeActions": true}));
    assert_eq!((all["items"].clone(), all["hiddenActions"].clone()), (truth, json!(0)), "{all}");
    sim.shutdown();
}

/// `adb exec-out screencap -p` through the real adb binary (ground truth bytes).
fn adb_screencap(w: &World, serial: &str) -> Vec<u8> {
    let out = Command::new("adb").args(["-P", &w.port.to_string(), "-s", serial, "exec-out", "screencap", "-p"]).env("HOME", w.home()).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    out.stdout
}

fn decoded_size(bytes: &[u8]) -> (u32, u32) {
    let mut reader = png::Decoder::new(std::io::Cursor::new(bytes.to_vec())).read_info().expect("a PNG");
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).expect("PNG image data decodes");
    (info.width, info.height)
}

fn sha256(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

fn screencaps(w: &World, sim: &aab_android_sim::Simulator) -> usize {
    control(w, sim, json!({"op": "truth", "kind": "screencap"}))["items"].as_array().unwrap().len()
}

#[track_caller]
fn check_file(path: &Path, reply: &Value, screen: (u32, u32)) -> Vec<u8> {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!((json!(bytes.len()), json!(sha256(&bytes))), (reply["bytes"].clone(), reply["sha256"].clone()), "{reply}");
    assert_eq!(decoded_size(&bytes), screen, "the file is a PNG of the simulator's screen");
    assert_eq!((reply["width"].as_u64(), reply["height"].as_u64()), (Some(screen.0 as u64), Some(screen.1 as u64)));
    bytes
}

fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir).map(|d| d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect()).unwrap_or_default();
    names.sort();
    names
}

#[test]
fn android_screenshot_writes_the_screen_as_a_png_file() {
    let w = World::new();
    // The default location is under the runtime's temp dir: keep it inside this test.
    let tmp = w.env.root.join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    w.env.set_env("TMPDIR", tmp.to_string_lossy());
    let mut sim = shop(&w);
    let serial = sim.devices[0].serial.clone();
    let screen = {
        let ph = sim.devices[0].phone.lock().unwrap();
        (ph.width, ph.height)
    };
    assert_eq!(screen, (720, 1560), "the scenario's screen");

    // outFile, relative to the caller's directory; with packageName a foreground probe.
    std::fs::create_dir_all(w.env.work.join("shots")).unwrap();
    let before = screencaps(&w, &sim);
    let shot = w.ok("screenshot", json!({"outFile": "shots/cart.png", "packageName": SHOP}));
    let path = w.env.work.join("shots/cart.png");
    assert_eq!(shot["path"], json!(path), "{shot}");
    let cart = check_file(&path, &shot, screen);
    assert_eq!(screencaps(&w, &sim), before + 1, "ground truth: one screencap ran on the phone");
    assert_eq!(cart, adb_screencap(&w, &serial), "the same bytes as adb exec-out screencap -p");
    assert_eq!((shot["foreground"]["packageName"].clone(), shot["foreground"]["matches"].clone()), (json!(SHOP), json!(true)), "{shot}");
    assert_eq!(listing(&w.env.work.join("shots")), ["cart.png"], "no temp file left");
    let other = w.ok("screenshot", json!({"outFile": "shots/cart.png", "packageName": "com.example.elsewhere"}));
    assert_eq!(other["foreground"]["matches"], json!(false), "{other}");

    // The screen changes: a new file in artifactDir (created), with the new picture.
    tap(&w, &sim, CHECKOUT);
    let shot = w.ok("screenshot", json!({"artifactDir": "artifacts/run1", "serial": serial}));
    let path = Path::new(shot["path"].as_str().unwrap()).to_path_buf();
    assert!(path.starts_with(w.env.work.join("artifacts/run1")) && path.extension().is_some_and(|e| e == "png"), "{shot}");
    let done = check_file(&path, &shot, screen);
    assert_ne!(done, cart, "the screen changed");
    assert_eq!(done, adb_screencap(&w, &serial));
    assert!(shot.get("foreground").is_none(), "no probe without packageName");

    // Neither outFile nor artifactDir: a new file under <temp dir>/aab-screenshots.
    let shot = w.ok("screenshot", json!({}));
    let path = Path::new(shot["path"].as_str().unwrap()).to_path_buf();
    assert!(path.starts_with(tmp.join("aab-screenshots")), "{shot}");
    check_file(&path, &shot, screen);

    // A broken screencap (an error text instead of an image) is refused; nothing is written.
    control(&w, &sim, json!({"op": "faults", "set": {"screencapNotPng": 1}}));
    let files = listing(&w.env.work.join("artifacts/run1"));
    let facts = w.fails("screenshot", json!({"artifactDir": "artifacts/run1"}), "screenshot_not_png");
    assert!(facts.to_string().contains("failed to capture the display"), "{facts}");
    assert_eq!(listing(&w.env.work.join("artifacts/run1")), files);

    // A bad outFile fails before the device is asked.
    let before = screencaps(&w, &sim);
    let facts = w.fails("screenshot", json!({"outFile": "missing/dir/x.png"}), "screenshot_write_failed");
    assert_eq!(facts["field"], json!("outFile"), "{facts}");
    let facts = w.fails("screenshot", json!({"outFile": "a.png", "artifactDir": "d"}), "unsupported_argument");
    assert_eq!(facts["field"], json!("artifactDir"), "the schema refuses the pair: {facts}");
    assert_eq!(screencaps(&w, &sim), before, "ground truth: no screencap for refused arguments");
    sim.shutdown();
}
