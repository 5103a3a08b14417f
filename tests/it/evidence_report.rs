//! `evidence --operation render`: real Script and Intent archives exported
//! through the public CLI (fixture plugin), rendered to one HTML file, and read
//! the way a person would — in real headless Chromium (visible text, images,
//! a captured screenshot's pixels) — before and after the archive is tampered.

use std::path::Path;
use std::time::Duration;

use aab_e2e::chromium::{Chromium, Tab};
use aab_e2e::{TestEnv, error_code, kebab};
use base64::Engine as _;
use serde_json::{Value, json};

const HOSTILE: &str = "<script>alert(1)</script>";
/// The report's colours (inline CSS): verified border, failure marks.
const GREEN: [u8; 3] = [0x2e, 0x7d, 0x32];
const RED: [u8; 3] = [0xc6, 0x28, 0x28];

fn render(env: &TestEnv, archive: &Path, output: &Path, sha: Option<&str>) -> Value {
    let mut args = vec!["evidence", "--operation", "render", "--archive-dir", archive.to_str().unwrap(), "--output-file", output.to_str().unwrap()];
    if let Some(sha) = sha {
        args.extend_from_slice(&["--manifest-sha256", sha]);
    }
    env.aab_ok(&args)["value"].clone()
}

/// What a person sees of the report at `path`: its text, its images, a screenshot.
struct Seen {
    text: String,
    scripts: u64,
    images: Vec<(u64, u64)>,
    screenshot: Vec<u8>,
}

fn look(browser: &mut Chromium, path: &Path) -> Seen {
    let tab: Tab = browser.open(&format!("file://{}", path.display()));
    // A new tab starts on a complete about:blank: wait for the report itself.
    browser.wait_for(&tab, "location.protocol === 'file:' && document.readyState === 'complete' && document.getElementById('verdict') !== null", Duration::from_secs(20));
    // Decode every image (a data: URI decodes without the network).
    browser.eval(&tab, "Promise.all([...document.images].map(i => i.decode().catch(() => null))).then(() => true)");
    // Open every <details> so the screenshot and innerText show full records.
    browser.eval(&tab, "document.querySelectorAll('details').forEach(d => d.open = true); true");
    // Bring the first screenshot (if any) on screen for the capture below.
    browser.eval(&tab, "if (document.images[0]) document.images[0].scrollIntoView(); true");
    let text = browser.eval(&tab, "document.body.innerText").as_str().unwrap_or_default().to_string();
    let scripts = browser.eval(&tab, "document.querySelectorAll('script').length").as_u64().unwrap_or(99);
    let images = browser.eval(&tab, "[...document.images].map(i => [i.naturalWidth, i.naturalHeight])");
    let images = images.as_array().into_iter().flatten().map(|p| (p[0].as_u64().unwrap_or(0), p[1].as_u64().unwrap_or(0))).collect();
    let shot = browser.call("Page.captureScreenshot", json!({"format": "png"}), Some(&tab.session_id)).expect("Page.captureScreenshot");
    let screenshot = base64::engine::general_purpose::STANDARD.decode(shot["data"].as_str().expect("screenshot data")).expect("base64");
    browser.close(&tab);
    Seen { text, scripts, images, screenshot }
}

/// Pixels of exactly `rgb` in a PNG, and its size.
fn pixels_of(png_bytes: &[u8], rgb: [u8; 3]) -> (usize, (u32, u32)) {
    let mut reader = png::Decoder::new(std::io::Cursor::new(png_bytes.to_vec())).read_info().expect("a PNG");
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).expect("PNG data decodes");
    let step = info.color_type.samples();
    assert!(step >= 3 && info.bit_depth == png::BitDepth::Eight, "{info:?}");
    let n = buf[..info.buffer_size()].chunks(step).filter(|p| p[..3] == rgb).count();
    (n, (info.width, info.height))
}

fn export(env: &TestEnv, namespace: &str, id: &str, out: &Path, payloads: bool) -> String {
    let mut args = vec!["evidence", "--operation", "export", "--namespace", namespace, "--operation-id", id, "--output-dir", out.to_str().unwrap()];
    if payloads {
        args.extend_from_slice(&["--include-recorded-payloads", "true"]);
    }
    env.aab_ok(&args)["value"]["manifestSha256"].as_str().expect("manifestSha256").to_string()
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

const SCRIPT: &str = r#"
exports.main = async (ctx) => {
  const first = await ctx.call('fixture-sleep', { durationMs: 0, lane: 'rep', tag: 'one' });
  const verdict = await ctx.assert({ name: 'first call ok <script>alert(1)</script>', condition: first.ok, evidence: first.evidence });
  const second = await ctx.call('fixture-sleep', { durationMs: 0, lane: 'rep', tag: 'two' });
  return { verdict: verdict.verdict, second: second.ok };
};
"#;

#[test]
fn evidence_report_of_a_script_archive_reads_in_chromium_and_marks_tampering() {
    let env = TestEnv::new();
    env.install_fixtures();
    let spec = json!({"schemaVersion": "aab.code-script/v1", "language": "javascript", "source": SCRIPT, "target": {"platform": "fixture", "screen": "rep-screen"}});
    let rec = env.root.join("rep-recording");
    env.aab_ok(&["script", "--operation", "start", "--operation-id", "rep", "--recording-dir", rec.to_str().unwrap(), "--script", &spec.to_string()]);
    let done = loop {
        let v = env.aab_ok(&["script", "--operation", "wait", "--operation-id", "rep", "--wait-ms", "5000"])["value"].clone();
        if ["completed", "failed", "cancelled"].contains(&v["status"].as_str().unwrap_or_default()) {
            break v;
        }
    };
    assert_eq!(done["status"], json!("completed"), "{done}");
    let archive = env.root.join("rep-archive");
    let sha = export(&env, "script", "rep", &archive, true);
    let tampered = env.root.join("rep-archive-tampered");
    copy_dir(&archive, &tampered);

    // Untouched archive, checked against the known manifest hash.
    let report = env.root.join("rep.html");
    let out = render(&env, &archive, &report, Some(&sha));
    assert_eq!((&out["integrity"], &out["manifestChecked"], &out["markedRecords"]), (&json!("verified"), &json!(true), &json!(0)), "{out}");
    let html = std::fs::read_to_string(&report).unwrap();
    assert!(!html.contains("<script") && !html.contains("src=\"http") && !html.contains("href="), "self-contained, no script");
    // An existing path is never replaced.
    let again = env.aab(&["evidence", "--operation", "render", "--archive-dir", archive.to_str().unwrap(), "--output-file", report.to_str().unwrap()]);
    assert_eq!(error_code(&env.json_of(&again)), Some("output_exists"), "{}", env.json_of(&again));
    assert_eq!(std::fs::read_to_string(&report).unwrap(), html, "the first report is unchanged");

    let mut browser = Chromium::launch();
    let seen = look(&mut browser, &report);
    assert!(seen.text.contains("Verification: VERIFIED"), "{}", seen.text);
    assert!(seen.text.contains("manifest.json matches the known manifest hash"), "{}", seen.text);
    for want in ["fixture-sleep", "script-assertion", "attachment", "first call ok <script>alert(1)</script>", " UTC"] {
        assert!(seen.text.contains(want), "the report shows `{want}`:\n{}", seen.text);
    }
    assert_eq!(seen.scripts, 0, "hostile strings stay text");
    assert!(seen.images.iter().all(|(w, h)| *w > 0 && *h > 0), "{:?}", seen.images);
    let (green, size) = pixels_of(&seen.screenshot, GREEN);
    let (red, _) = pixels_of(&seen.screenshot, RED);
    assert!(size.0 > 0 && green > 100 && red == 0, "the verified banner is visible and nothing is marked: green {green}, red {red}, {size:?}");

    // Tamper: one record gains a hostile field; one recorded document changes.
    let records_path = tampered.join("records.json");
    let mut records: Vec<Value> = serde_json::from_slice(&std::fs::read(&records_path).unwrap()).unwrap();
    let victim = records[1]["payload"]["evidenceId"].as_str().unwrap().to_string();
    records[1]["payload"]["note"] = json!(HOSTILE);
    std::fs::write(&records_path, serde_json::to_vec(&records).unwrap()).unwrap();
    let doc = std::fs::read_dir(&tampered).unwrap().flatten().map(|e| e.path()).find(|p| p.extension().is_some_and(|x| x == "json") && p.file_name().unwrap().to_string_lossy().starts_with("payload-")).expect("a recorded document");
    let mut bytes = std::fs::read(&doc).unwrap();
    bytes.extend_from_slice(b" ");
    std::fs::write(&doc, bytes).unwrap();

    let bad_report = env.root.join("rep-tampered.html");
    let out = render(&env, &tampered, &bad_report, None);
    assert_eq!((&out["integrity"], &out["manifestChecked"]), (&json!("failed"), &json!(false)), "{out}");
    assert_eq!(out["verificationError"]["code"], json!("records_checksum_mismatch"), "{out}");
    assert!(out["markedRecords"].as_u64().unwrap() >= 2 && out["markedPayloads"] == json!(1), "{out}");
    let seen = look(&mut browser, &bad_report);
    assert!(seen.text.contains("Verification: FAILED"), "{}", seen.text);
    assert!(seen.text.contains("not checked against a known manifest hash"), "{}", seen.text);
    assert!(seen.text.contains("records.json differs"), "{}", seen.text);
    assert!(seen.text.contains("TAMPERED") && seen.text.contains("PAYLOAD TAMPERED"), "{}", seen.text);
    assert!(seen.text.contains(&victim) && seen.text.contains(HOSTILE), "the tampered record and its hostile text are shown as text");
    assert_eq!(seen.scripts, 0, "the hostile field did not become markup");
    let (red, _) = pixels_of(&seen.screenshot, RED);
    assert!(red > 100, "the failure is visible in red: {red} pixels");
    drop(browser);
}

/// `aab intent --operation OP --flags…`, which must succeed.
fn intent_ok(env: &TestEnv, op: &str, args: Value) -> Value {
    let mut argv = vec!["intent".to_string(), "--operation".into(), op.into()];
    for (k, v) in args.as_object().expect("object") {
        argv.push(format!("--{}", kebab(k)));
        argv.push(match v {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        });
    }
    let refs: Vec<&str> = argv.iter().map(String::as_str).collect();
    let run = env.aab(&refs);
    let body = env.json_of(&run);
    assert!(body.pointer("/execution/ok") == Some(&json!(true)), "intent {op}: {body}");
    body["value"].clone()
}

#[test]
fn evidence_report_of_an_intent_archive_reads_in_chromium() {
    let env = TestEnv::new();
    env.set_env("AAB_FIXTURE_RECEIPTS", env.root.join("receipts").display().to_string());
    env.install_fixtures();
    let goal = format!("press Increment {HOSTILE}");
    intent_ok(&env, "start", json!({"goal": goal, "target": {"platform": "fixture", "screen": "r1"}, "operationId": "rep-intent"}));
    let press = json!({"action": "press", "selector": {"text": "Increment"}});
    intent_ok(&env, "decide", json!({"operationId": "rep-intent", "decision": {"decisionId": "d-1", "basedOnRevision": 1, "agentDecision": "act", "action": press}}));
    let done = intent_ok(&env, "decide", json!({"operationId": "rep-intent", "decision": {"decisionId": "d-2", "basedOnRevision": 2, "agentDecision": "complete"}}));
    assert_eq!(done["status"], json!("completed"), "{done}");
    let truth = env.aab_ok(&["fixture-screen", "--screen", "r1"])["value"].clone();
    assert_eq!(truth["count"], json!(1), "{truth}");

    let archive = env.root.join("intent-archive");
    export(&env, "intent", "rep-intent", &archive, false);
    let report = env.root.join("intent.html");
    let out = render(&env, &archive, &report, None);
    assert_eq!((&out["integrity"], &out["markedRecords"]), (&json!("verified"), &json!(0)), "{out}");

    let mut browser = Chromium::launch();
    let seen = look(&mut browser, &report);
    assert!(seen.text.contains("Verification: VERIFIED"), "{}", seen.text);
    assert!(seen.text.contains("not checked against a known manifest hash"), "{}", seen.text);
    for want in ["observation", "decision", "dispatch-marker", "action-receipt", "Increment", "fixture-press", "rep-intent", &goal] {
        assert!(seen.text.contains(want), "the report shows `{want}`:\n{}", seen.text);
    }
    assert_eq!(seen.scripts, 0);
    let (green, _) = pixels_of(&seen.screenshot, GREEN);
    assert!(green > 100, "the verified banner is visible: {green}");
    drop(browser);
}

/// Screenshots: a real v2 archive (FactStore + recording + export, the library the
/// runtime uses) holding a real Chromium screenshot and a non-PNG `.png` payload.
#[test]
fn evidence_report_inlines_recorded_screenshots_and_refuses_non_png() {
    use aab_facts::recording::{RecordedCall, Recording, Screenshot};
    use aab_facts::{FactStore, Namespace, Profile};

    let env = TestEnv::new();
    let mut browser = Chromium::launch();
    let page = env.root.join("page.html");
    std::fs::write(&page, "<html><body style='background:#8e24aa'><h1 style='color:#fff'>recorded page</h1></body></html>").unwrap();
    let tab = browser.open(&format!("file://{}", page.display()));
    browser.wait_for(&tab, "location.protocol === 'file:' && document.readyState === 'complete'", Duration::from_secs(20));
    let shot = browser.call("Page.captureScreenshot", json!({"format": "png"}), Some(&tab.session_id)).expect("screenshot");
    browser.close(&tab);
    let png_bytes = base64::engine::general_purpose::STANDARD.decode(shot["data"].as_str().unwrap()).unwrap();
    let shot_path = env.root.join("shot.png");
    std::fs::write(&shot_path, &png_bytes).unwrap();
    let sha = aab_facts::canonical::sha256_hex(&png_bytes);

    let store = FactStore::open(&env.root.join("facts"), Profile::Standard).expect("store");
    let mut recording = Recording::create(&env.root.join("rec"), Namespace::Script, "shots").expect("recording");
    let data = json!({"call": "web-screenshot", "dom": format!("<div id=\"x\">{HOSTILE}</div>")});
    let shots = [Screenshot { path: shot_path.clone(), sha256: sha.clone() }];
    recording.record(&store, &RecordedCall { sequence: 1, revision: 0, kind: "script-call", target: None, data: &data, screenshots: &shots, parent_fact_id: None }).expect("record");
    let archive = env.root.join("shots-archive");
    let exported = aab_facts::archive::export(&store, Namespace::Script, "shots", &archive, true).expect("export");
    drop(store);

    let report = env.root.join("shots.html");
    let out = render(&env, &archive, &report, Some(&exported.manifest_sha256));
    assert_eq!((&out["integrity"], &out["inlinedImages"]), (&json!("verified"), &json!(1)), "{out}");
    let seen = look(&mut browser, &report);
    assert_eq!(seen.images.len(), 1, "{}", seen.text);
    assert!(seen.images[0].0 > 0 && seen.images[0].1 > 0, "the screenshot decodes: {:?}", seen.images);
    // The recorded DOM excerpt is shown as JSON text (its quotes escaped), never as markup.
    assert!(seen.text.contains(&format!("<div id=\\\"x\\\">{HOSTILE}</div>")) && seen.scripts == 0, "the DOM excerpt is text:\n{}", seen.text);
    let (purple, _) = pixels_of(&seen.screenshot, [0x8e, 0x24, 0xaa]);
    assert!(purple > 1000, "the inlined screenshot is on screen: {purple} pixels of its background colour (used nowhere else)");

    // The same bytes replaced by text that is not a PNG: marked, never an image.
    let tampered = env.root.join("shots-tampered");
    copy_dir(&archive, &tampered);
    std::fs::write(tampered.join(format!("payload-{sha}.png")), format!("{HOSTILE} not a png")).unwrap();
    let out = render(&env, &tampered, &env.root.join("shots-tampered.html"), Some(&exported.manifest_sha256));
    assert_eq!((&out["integrity"], &out["inlinedImages"], &out["markedPayloads"]), (&json!("failed"), &json!(0), &json!(1)), "{out}");
    let seen = look(&mut browser, &env.root.join("shots-tampered.html"));
    assert!(seen.images.is_empty() && seen.text.contains("PAYLOAD TAMPERED"), "{}", seen.text);
    drop(browser);
}
