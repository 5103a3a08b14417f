//! The host side of the UIA runtime (aab-protocols §3): the runtime bundle
//! (`aab.uia.bundle.v1`: manifest + jar, hash checked before anything touches a
//! device), deployment (API check, content-addressed push into the phone root
//! with on-device verification and `mv -n`, start through `app_process`), the
//! descriptor (`aab.uia.runtime.v1`, read with a shell `cat` that never fails on
//! absence), the authenticated transport (`adb forward` to
//! `localabstract:aab-uia-<epoch>`, `POST /v1` with the bearer token, which
//! never leaves this module), snapshots (`observe` → compact nodes with
//! `aab.uia.target/v1` references) and the managed click (`aab.uia.execution.v1`:
//! action record → `prepare` → dispatch mark → `start` → `query` every 25 ms →
//! one `cancel` at the deadline → receipt verified by its SHA-256 → stored
//! durably → `acknowledge`).

use std::io::Read;
use std::time::Duration;

use aab_plugin_api::host::Durability;
use aab_plugin_api::{Context, Invocation, ProviderError};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use crate::adb::Deadline;
use crate::adb::device::{Device, quote};
use crate::sdk::http;

pub const ROOT_V1: &str = "/data/local/tmp/ai-app-bridge-uia/v1";
pub const MAIN_CLASS: &str = "io.github.mobileaidev.aiappbridge.uia.UiaRuntime";
pub const BUNDLE_SCHEMA: &str = "aab.uia.bundle.v1";
pub const RUNTIME_SCHEMA: &str = "aab.uia.runtime.v1";
pub const EXECUTION_SCHEMA: &str = "aab.uia.execution.v1";
pub const TARGET_SCHEMA: &str = "aab.uia.target/v1";
/// Where the bundle is when `bundleDir` is not given.
pub const ENV_BUNDLE_DIR: &str = "AI_APP_BRIDGE_UIA_BUNDLE_DIR";
/// Durable host copies of UIA receipts, written before `acknowledge`.
pub const RECEIPT_STREAM: &str = "android.uia.receipts";
const MAX_JAR: u64 = 2 * 1024 * 1024;
const MAX_MANIFEST: u64 = 64 * 1024;
const MIN_API: u64 = 25;
const POLL: Duration = Duration::from_millis(25);

pub mod codes {
    pub const BUNDLE_INVALID: &str = "uia_runtime_bundle_invalid";
    pub const API_REQUIRED: &str = "uia_android_api_25_required";
    pub const NOT_RUNNING: &str = "uia_runtime_not_running";
    pub const UNREACHABLE: &str = "uia_runtime_unreachable";
    pub const DEPLOY_FAILED: &str = "uia_runtime_deploy_failed";
    pub const START_FAILED: &str = "uia_runtime_start_failed";
    pub const PROTOCOL: &str = "uia_protocol_error";
    pub const SELECTOR_NOT_FOUND: &str = "uia_selector_not_found";
    pub const SELECTOR_AMBIGUOUS: &str = "uia_selector_ambiguous";
    pub const REOBSERVE: &str = "reobserve_required";
    pub const PENDING: &str = "uia_action_pending";
    pub const RECEIPT_INVALID: &str = "uia_receipt_invalid";
}

fn fail(code: &str, message: impl Into<String>) -> ProviderError {
    ProviderError::new(code, message).not_dispatched()
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

fn is_hex64(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// `root`: the release root or a test root (`…-test-<[a-z0-9-]>`).
pub fn root_schema() -> Value {
    json!({"type": "string", "pattern": "^/data/local/tmp/ai-app-bridge-uia(/v1|-test-[a-z0-9-]{1,64})$", "description": format!("Phone root of the UIA runtime (default {ROOT_V1})")})
}

// ---- bundle -----------------------------------------------------------------

/// A verified runtime bundle.
pub struct Bundle {
    pub dir: String,
    pub jar: Vec<u8>,
    pub sha256: String,
    pub min_api: u64,
}

fn read_bounded(path: &std::path::Path, max: u64) -> std::io::Result<Vec<u8>> {
    let mut buf = Vec::new();
    std::fs::File::open(path)?.take(max + 1).read_to_end(&mut buf)?;
    if buf.len() as u64 > max {
        return Err(std::io::Error::other(format!("larger than {max} bytes")));
    }
    Ok(buf)
}

/// Load and verify the bundle in `dir` (else `$AI_APP_BRIDGE_UIA_BUNDLE_DIR`):
/// `manifest.json` of `aab.uia.bundle.v1` naming the jar, whose SHA-256 must be
/// the manifest's. Everything here is before any device access.
pub fn load_bundle(dir: Option<&str>) -> Result<Bundle, ProviderError> {
    let dir = match dir.map(str::to_string).or_else(|| std::env::var(ENV_BUNDLE_DIR).ok().filter(|d| !d.is_empty())) {
        Some(d) => d,
        None => return Err(fail(codes::BUNDLE_INVALID, format!("no UIA runtime bundle: pass bundleDir or set {ENV_BUNDLE_DIR} to the directory of an aab.uia.bundle.v1 manifest.json and its jar")).with_field("bundleDir")),
    };
    let bad = |why: String| fail(codes::BUNDLE_INVALID, format!("the UIA runtime bundle in {dir} is invalid: {why}")).with_field("bundleDir").with_details(json!({"bundleDir": dir}));
    let base = std::path::Path::new(&dir);
    let text = read_bounded(&base.join("manifest.json"), MAX_MANIFEST).map_err(|e| bad(format!("manifest.json: {e}")))?;
    let m: Value = serde_json::from_slice(&text).map_err(|e| bad(format!("manifest.json is not JSON: {e}")))?;
    if m["schemaVersion"] != BUNDLE_SCHEMA {
        return Err(bad(format!("schemaVersion is {}, not {BUNDLE_SCHEMA}", m["schemaVersion"])));
    }
    if m["mainClass"] != MAIN_CLASS {
        return Err(bad(format!("mainClass is {}, not {MAIN_CLASS}", m["mainClass"])));
    }
    let artifact = m["artifact"].as_str().filter(|a| !a.is_empty() && !a.contains('/') && a != &"." && a != &"..").ok_or_else(|| bad("artifact must be a file name".into()))?;
    let want = m["sha256"].as_str().filter(|s| is_hex64(s)).ok_or_else(|| bad("sha256 must be 64 lower-case hex digits".into()))?;
    let min_api = m["minApi"].as_u64().unwrap_or(MIN_API).max(MIN_API);
    let jar = read_bounded(&base.join(artifact), MAX_JAR).map_err(|e| bad(format!("{artifact}: {e}")))?;
    let got = sha256_hex(&jar);
    if got != want {
        return Err(bad(format!("{artifact} has sha256 {got}, the manifest says {want}")));
    }
    Ok(Bundle { dir, jar, sha256: got, min_api })
}

// ---- descriptor and transport -----------------------------------------------

async fn sh(device: &Device, command: &str, deadline: Deadline) -> Result<crate::adb::device::ShellOutput, ProviderError> {
    device.shell(command, None, deadline).await
}

/// The runtime descriptor of `root`, or None when there is none.
pub async fn descriptor(device: &Device, root: &str, deadline: Deadline) -> Result<Option<Value>, ProviderError> {
    let f = format!("{root}/runtime.json");
    let out = sh(device, &format!("if [ -f {f} ]; then cat {f}; else printf %s null; fi", f = quote(&f)), deadline).await?;
    let v: Value = serde_json::from_slice(&out.stdout).map_err(|e| fail(codes::PROTOCOL, format!("{f} is not JSON: {e}")))?;
    if v.is_null() {
        return Ok(None);
    }
    let ok = v["schemaVersion"] == RUNTIME_SCHEMA
        && v["socketName"].as_str().is_some_and(|s| s.starts_with("aab-uia-"))
        && v["token"].as_str().is_some_and(|t| t.len() == 64)
        && v["runtimeEpoch"].is_string()
        && v["bootId"].is_string();
    if !ok {
        return Err(fail(codes::PROTOCOL, format!("{f} is not an {RUNTIME_SCHEMA} descriptor")));
    }
    Ok(Some(v))
}

/// The descriptor without its secret.
pub fn public(descriptor: &Value) -> Value {
    let mut d = descriptor.clone();
    if let Some(o) = d.as_object_mut() {
        o.remove("token");
    }
    d
}

/// A reachable runtime: its descriptor and the verified forward to its socket.
pub struct Runtime {
    /// The device it runs on (recovery of its journal after it is gone).
    pub device: Device,
    pub serial: String,
    pub root: String,
    pub descriptor: Value,
    pub port: u16,
    token: String,
}

impl Runtime {
    pub fn epoch(&self) -> &str {
        self.descriptor["runtimeEpoch"].as_str().unwrap_or_default()
    }
    pub fn boot_id(&self) -> &str {
        self.descriptor["bootId"].as_str().unwrap_or_default()
    }

    /// One op. The runtime's own refusals (`ok:false`) come back as values;
    /// transport failures and 4xx/5xx as errors with the runtime's code.
    pub async fn op(&self, body: Value, deadline: Deadline) -> Result<Value, ProviderError> {
        let auth = format!("Bearer {}", self.token);
        match http::request_with(self.port, "POST", "/v1", &[("Authorization", &auth), ("Content-Type", "application/json")], Some(&body), deadline).await {
            Ok(r) => Ok(r.body),
            Err(e) => {
                let device_code = e.details.as_ref().and_then(|d| d.pointer("/body/error")).and_then(Value::as_str).map(str::to_string);
                let code = device_code.unwrap_or_else(|| codes::UNREACHABLE.to_string());
                let mut out = ProviderError::new(code, format!("the UIA runtime did not answer {}: {}", body["op"], e.message)).with_details(json!({"op": body["op"], "transport": e.error, "device": e.details}));
                if e.dispatched == Some(false) {
                    out = out.not_dispatched();
                }
                Err(out)
            }
        }
    }
}

/// The running runtime of `root` on `device`, reached through a verified forward.
pub async fn connect(device: &Device, root: &str, deadline: Deadline) -> Result<Runtime, ProviderError> {
    let Some(d) = descriptor(device, root, deadline).await? else {
        return Err(fail(codes::NOT_RUNNING, format!("no UIA runtime was ever started in {root} on {} (uia-runtime --operation start)", device.serial)));
    };
    if d["running"] != true {
        return Err(fail(codes::NOT_RUNNING, format!("the UIA runtime of {root} on {} is stopped (uia-runtime --operation start)", device.serial)).with_details(json!({"descriptor": public(&d)})));
    }
    let socket = d["socketName"].as_str().unwrap_or_default().to_string();
    let fwd = crate::sdk::forward::ensure(&device.server, &device.serial, &socket, None, deadline).await.map_err(|e| e.not_dispatched())?;
    let token = d["token"].as_str().unwrap_or_default().to_string();
    Ok(Runtime { device: device.clone(), serial: device.serial.clone(), root: root.to_string(), descriptor: d, port: fwd.port, token })
}

// ---- deployment ---------------------------------------------------------------

pub async fn api_level(device: &Device, deadline: Deadline) -> Result<u64, ProviderError> {
    let out = sh(device, "getprop ro.build.version.sdk", deadline).await?;
    Ok(out.stdout_text().trim().parse().unwrap_or(0))
}

/// SHA-256 of a phone file with the first hash tool that works (sha256sum, toybox, busybox).
async fn phone_sha256(device: &Device, path: &str, deadline: Deadline) -> Result<Option<String>, ProviderError> {
    let cmd = format!("for t in sha256sum 'toybox sha256sum' 'busybox sha256sum'; do o=$($t {p} 2>/dev/null) && {{ echo \"$o\"; exit 0; }}; done; exit 127", p = quote(path));
    let out = sh(device, &cmd, deadline).await?;
    Ok(out.stdout_text().split_whitespace().next().filter(|h| is_hex64(h)).map(str::to_string))
}

/// What `start` did.
pub struct Started {
    pub descriptor: Value,
    pub pushed: bool,
    pub jar: String,
}

/// Deploy the bundle's jar (content-addressed, verified on the phone) and start
/// the runtime; waits for a new running descriptor of this jar. The caller has
/// marked the dispatch.
pub async fn deploy_and_start(device: &Device, root: &str, bundle: &Bundle, previous_epoch: Option<&str>, deadline: Deadline) -> Result<Started, ProviderError> {
    let failed = |code: &str, message: String| ProviderError::new(code, message).settled_after_dispatch();
    let mk = sh(device, &format!("mkdir -p {r} && chmod 700 {r}", r = quote(root)), deadline).await?;
    if mk.exit_code != 0 {
        return Err(failed(codes::DEPLOY_FAILED, format!("mkdir {root} failed: {}", mk.stderr_text().trim())));
    }
    let jar = format!("{root}/runtime-{}.jar", bundle.sha256);
    let mut pushed = false;
    if phone_sha256(device, &jar, deadline).await?.as_deref() != Some(bundle.sha256.as_str()) {
        let mut nonce = [0u8; 8];
        let _ = getrandom::fill(&mut nonce);
        let tmp = format!("{root}/runtime-{}.{}.tmp", bundle.sha256, nonce.iter().map(|b| format!("{b:02x}")).collect::<String>());
        device.push(&tmp, 0o600, &bundle.jar, 0, deadline).await?;
        if phone_sha256(device, &tmp, deadline).await?.as_deref() != Some(bundle.sha256.as_str()) {
            let _ = sh(device, &format!("rm -f {}", quote(&tmp)), deadline).await;
            return Err(failed(codes::DEPLOY_FAILED, format!("the pushed jar {tmp} does not hash to {}", bundle.sha256)));
        }
        let _ = sh(device, &format!("mv -n {t} {j}; rm -f {t}", t = quote(&tmp), j = quote(&jar)), deadline).await?;
        if phone_sha256(device, &jar, deadline).await?.as_deref() != Some(bundle.sha256.as_str()) {
            return Err(failed(codes::DEPLOY_FAILED, format!("{jar} does not hash to {} after the move", bundle.sha256)));
        }
        pushed = true;
    }
    let log = format!("{root}/startup.log");
    let start = format!("CLASSPATH={j} setsid nohup app_process /system/bin {MAIN_CLASS} {r} {s} >{l} 2>&1 </dev/null &", j = quote(&jar), r = quote(root), s = bundle.sha256, l = quote(&log));
    sh(device, &start, deadline).await?;
    loop {
        if let Some(d) = descriptor(device, root, deadline).await?
            && d["running"] == true
            && d["dexSha256"] == bundle.sha256.as_str()
            && d["runtimeEpoch"].as_str() != previous_epoch
        {
            return Ok(Started { descriptor: d, pushed, jar });
        }
        // The runtime refused (artifact mismatch, owner lock, …): its stderr JSON is in the log.
        let out = sh(device, &format!("cat {} 2>/dev/null", quote(&log)), deadline).await?;
        let refusal = out.stdout_text().lines().filter_map(|l| serde_json::from_str::<Value>(l).ok()).find(|v| v["ok"] == false);
        if let Some(r) = refusal {
            let code = r["error"].as_str().unwrap_or(codes::START_FAILED).to_string();
            return Err(failed(&code, format!("the UIA runtime refused to start: {}", r["message"].as_str().unwrap_or(""))).with_details(json!({"startupLog": r})));
        }
        if deadline.remaining() <= Duration::from_millis(100) {
            return Err(ProviderError::new(codes::START_FAILED, format!("the UIA runtime wrote no running descriptor in {root} before the deadline")).with_details(json!({"startupLog": out.stdout_text()})));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

// ---- snapshots ---------------------------------------------------------------

/// `observe` → the snapshot and its compact nodes (each with its target reference).
pub async fn observe(rt: &Runtime, deadline: Deadline) -> Result<(Value, Vec<Value>), ProviderError> {
    let snap = rt.op(json!({"op": "observe"}), deadline).await?;
    if snap["ok"] != true {
        let code = snap["error"].as_str().unwrap_or(codes::PROTOCOL).to_string();
        return Err(fail(&code, format!("the UIA runtime refused the snapshot: {}", snap["message"].as_str().unwrap_or(""))).with_details(json!({"device": snap})));
    }
    let nodes = nodes(&snap)?;
    Ok((snap, nodes))
}

fn bounds(s: &str) -> Value {
    // "[l,t][r,b]"
    let n: Vec<i64> = s.split(|c: char| !(c.is_ascii_digit() || c == '-')).filter(|p| !p.is_empty()).filter_map(|p| p.parse().ok()).collect();
    if n.len() == 4 { json!({"left": n[0], "top": n[1], "right": n[2], "bottom": n[3]}) } else { Value::Null }
}

/// The snapshot XML as compact nodes in document order.
pub fn nodes(snap: &Value) -> Result<Vec<Value>, ProviderError> {
    let xml = snap["xml"].as_str().ok_or_else(|| fail(codes::PROTOCOL, "the UIA snapshot has no xml"))?;
    let doc = roxmltree::Document::parse(xml).map_err(|e| fail(codes::PROTOCOL, format!("the UIA snapshot XML does not parse: {e}")))?;
    let root = doc.root_element();
    let attr = |n: &roxmltree::Node, k: &str| n.attribute(k).unwrap_or("").to_string();
    let flag = |n: &roxmltree::Node, k: &str| n.attribute(k) == Some("true");
    let (boot, epoch, snapshot) = (attr(&root, "aab-boot-id"), attr(&root, "aab-runtime-epoch"), attr(&root, "aab-snapshot-id"));
    if snapshot.is_empty() || snapshot != snap["snapshotId"].as_str().unwrap_or_default() {
        return Err(fail(codes::PROTOCOL, "the UIA snapshot XML does not carry its snapshotId"));
    }
    let mut out = vec![];
    for n in root.descendants().filter(|n| n.has_tag_name("node")) {
        let depth = n.ancestors().filter(|a| a.has_tag_name("node")).count() - 1;
        out.push(json!({
            "nodeRef": attr(&n, "aab-ref"),
            "targetRef": {"schemaVersion": TARGET_SCHEMA, "bootId": boot, "runtimeEpoch": epoch, "snapshotId": snapshot, "nodeRef": attr(&n, "aab-ref")},
            "text": attr(&n, "text"), "contentDescription": attr(&n, "content-desc"), "resourceName": attr(&n, "resource-id"),
            "className": attr(&n, "class"), "packageName": attr(&n, "package"), "bounds": bounds(&attr(&n, "bounds")),
            "enabled": flag(&n, "enabled"), "visible": flag(&n, "visible-to-user"), "clickable": flag(&n, "clickable"),
            "checkable": flag(&n, "checkable"), "checked": flag(&n, "checked"), "scrollable": flag(&n, "scrollable"), "depth": depth,
        }));
    }
    Ok(out)
}

/// What a click aims at: a node of a fresh snapshot by selector, or an observed reference.
pub enum Aim<'a> {
    Selector { kind: &'a str, value: &'a str, exact: bool, package: Option<&'a str> },
    Ref(&'a Value),
}

fn matches(node: &Value, kind: &str, value: &str, exact: bool) -> bool {
    let field = match kind {
        "text" => "text",
        "contentDescription" => "contentDescription",
        _ => "resourceName",
    };
    let have = node[field].as_str().unwrap_or_default();
    if exact { have == value } else { have.to_lowercase().contains(&value.to_lowercase()) }
}

/// `(snapshotId, nodeRef, selector)` of the one node an aim names.
pub async fn bind(rt: &Runtime, aim: &Aim<'_>, package: Option<&str>, deadline: Deadline) -> Result<(String, String, Value, Value), ProviderError> {
    match aim {
        Aim::Ref(r) => {
            if r["bootId"] != rt.boot_id() || r["runtimeEpoch"] != rt.epoch() {
                return Err(fail(codes::REOBSERVE, "the targetRef belongs to another UIA runtime or boot: observe again (uia-tree)").with_field("targetRef").with_details(json!({"targetRef": r, "runtimeEpoch": rt.epoch()})));
            }
            let node_ref = r["nodeRef"].as_str().unwrap_or_default().to_string();
            let selector = json!({"kind": "nodeRef", "value": node_ref, "exact": true, "packageName": package});
            Ok((r["snapshotId"].as_str().unwrap_or_default().to_string(), node_ref, selector, Value::Null))
        }
        Aim::Selector { kind, value, exact, package: want } => {
            let (snap, nodes) = observe(rt, deadline).await?;
            let hits: Vec<&Value> = nodes.iter().filter(|n| n["visible"] == true && matches(n, kind, value, *exact) && want.is_none_or(|p| n["packageName"] == p)).collect();
            match hits.as_slice() {
                [one] => {
                    let node_ref = one["targetRef"]["nodeRef"].as_str().unwrap_or_default().to_string();
                    let selector = json!({"kind": kind, "value": value, "exact": exact, "packageName": want});
                    Ok((snap["snapshotId"].as_str().unwrap_or_default().to_string(), node_ref, selector, (*one).clone()))
                }
                [] => Err(fail(codes::SELECTOR_NOT_FOUND, format!("no visible node of the focused window has {kind} {value:?}")).with_field("selector").with_details(json!({"window": snap["window"], "nodeCount": snap["nodeCount"]}))),
                many => Err(fail(codes::SELECTOR_AMBIGUOUS, format!("{} visible nodes have {kind} {value:?}: use a targetRef from uia-tree", many.len())).with_field("selector").with_details(json!({"candidates": many.iter().take(20).map(|n| json!({"targetRef": n["targetRef"], "text": n["text"], "resourceName": n["resourceName"], "bounds": n["bounds"]})).collect::<Vec<_>>()}))),
            }
        }
    }
}

// ---- the managed click ---------------------------------------------------------

fn terminal(envelope: &Value) -> bool {
    envelope["settled"] == true && envelope["receiptJson"].is_string()
}

/// A verified receipt of exactly this request.
fn receipt_of(envelope: &Value, request_sha: &str, action_id: &str) -> Result<(Value, String), ProviderError> {
    let json_text = envelope["receiptJson"].as_str().unwrap_or_default();
    let sha = sha256_hex(json_text.as_bytes());
    let receipt: Value = serde_json::from_str(json_text).unwrap_or(Value::Null);
    let ok = envelope["receiptSha256"] == sha.as_str() && receipt["requestSha256"] == request_sha && receipt["actionId"] == action_id && receipt["settled"] == true && receipt["dispatched"].is_boolean();
    if !ok {
        return Err(ProviderError::new(codes::RECEIPT_INVALID, "the UIA runtime's receipt does not match its hash or this request: the outcome is unknown").with_details(json!({"envelope": envelope})));
    }
    Ok((receipt, sha))
}

/// One managed click; the reply names the binding, receipt and settlement proof.
#[allow(clippy::too_many_arguments)]
pub async fn click(ctx: &Context<'_>, inv: &Invocation, command: &str, rt: &Runtime, aim: Aim<'_>, package: Option<&str>, click_policy: &str, deadline: Deadline) -> Result<Value, ProviderError> {
    let (snapshot_id, node_ref, selector, node) = bind(rt, &aim, package, deadline).await?;
    let action_id = inv.action_id.clone();
    let timeout_ms = (deadline.remaining().as_millis() as u64).saturating_sub(500).clamp(1, 60_000);
    let request = json!({
        "schemaVersion": EXECUTION_SCHEMA, "bootId": rt.boot_id(), "runtimeEpoch": rt.epoch(), "actionId": action_id, "timeoutMs": timeout_ms,
        "target": {"snapshotId": snapshot_id, "ref": node_ref, "selector": selector}, "clickPolicy": click_policy,
    });
    let request_json = request.to_string();
    let request_sha = sha256_hex(request_json.as_bytes());
    let body = |op: &str| json!({"op": op, "requestJson": request_json, "requestSha256": request_sha});
    let device = json!({"root": rt.root, "bootId": rt.boot_id(), "runtimeEpoch": rt.epoch(), "actionId": action_id, "requestJson": request_json, "requestSha256": request_sha, "socketName": rt.descriptor["socketName"]});
    crate::action_record::append(ctx, &action_id, &crate::action_record::record("uia", command, &rt.serial, package, device))?;
    // prepare writes the phone's record and changes nothing: refusals are not dispatched.
    let prepared = rt.op(body("prepare"), deadline).await?;
    if prepared["ok"] == false && prepared["error"] != codes::PENDING {
        let code = prepared["error"].as_str().unwrap_or(codes::PROTOCOL).to_string();
        return Err(fail(&code, format!("the UIA runtime refused the action: {}", prepared["message"].as_str().unwrap_or(""))).with_details(json!({"device": prepared})));
    }
    ctx.mark_dispatched();
    let (mut envelope, mut unreachable) = match rt.op(body("start"), deadline).await {
        Ok(e) => (e, 0),
        Err(e) => (json!({"transport": e.error, "message": e.message}), 1),
    };
    // Polling stops early when the runtime stopped answering (it died or restarted):
    // its phone journal is then the only place the outcome can come from.
    while !terminal(&envelope) && deadline.remaining() > Duration::from_millis(600) && unreachable < 4 {
        tokio::time::sleep(POLL).await;
        match rt.op(body("query"), deadline).await {
            Ok(e) => {
                envelope = e;
                unreachable = 0;
            }
            Err(_) => unreachable += 1,
        }
    }
    if !terminal(&envelope) {
        // One cancel: before admission it settles the action; after, it changes nothing.
        if let Ok(e) = rt.op(body("cancel"), Deadline::after(Duration::from_millis(500))).await {
            envelope = e;
        }
    }
    if !terminal(&envelope) && unreachable > 0 {
        // Recover from the journal of the runtime's epoch (`recover-record`): an action
        // it prepared but never admitted settles as `recovered_before_admission`.
        let recover_by = Deadline::after(deadline.remaining().saturating_sub(Duration::from_millis(200)).min(Duration::from_secs(10)));
        if let Ok(e) = recover_record(&rt.device, &rt.root, rt.boot_id(), rt.epoch(), &action_id, &request_sha, recover_by).await {
            envelope = e;
        }
    }
    if !terminal(&envelope) {
        return Err(ProviderError::new(codes::PENDING, "the UIA action did not settle before the deadline: its outcome is unknown (device unresolved; run device-ownership reconcile)")
            .with_details(json!({"actionId": action_id, "runtimeEpoch": rt.epoch(), "ambiguous": true, "last": envelope})));
    }
    let (receipt, receipt_sha) = receipt_of(&envelope, &request_sha, &action_id)?;
    // The host's durable copy first, then the phone may forget it.
    let stored = ctx.facts().append(RECEIPT_STREAM, &action_id, &json!({"receipt": receipt, "receiptSha256": receipt_sha, "requestSha256": request_sha}), Durability::Sync).is_ok();
    let acknowledged = stored
        && if envelope.get("recovered").is_some() {
            // Its runtime is gone: the one running now acknowledges the old epoch's record.
            let identity = json!({"bootId": rt.boot_id(), "runtimeEpoch": rt.epoch(), "actionId": action_id, "requestSha256": request_sha, "receiptSha256": receipt_sha});
            match connect(&rt.device, &rt.root, Deadline::after(Duration::from_secs(2))).await {
                Ok(now) => now.op(json!({"op": "acknowledge-record", "identity": identity}), Deadline::after(Duration::from_secs(2))).await.is_ok_and(|a| a["ok"] == true),
                Err(_) => false,
            }
        } else {
            rt.op(json!({"op": "acknowledge", "requestJson": request_json, "requestSha256": request_sha, "receiptSha256": receipt_sha}), Deadline::after(Duration::from_secs(2)))
                .await
                .is_ok_and(|a| a["acknowledged"] == true)
        };
    let proof = json!({"kind": "uia", "settled": true, "actionId": action_id, "runtimeEpoch": rt.epoch(), "requestSha256": request_sha, "receiptSha256": receipt_sha,
                       "completion": receipt["completion"], "dispatched": receipt["dispatched"], "acknowledged": acknowledged});
    if receipt["ok"] == true {
        let mut out = Map::new();
        for (k, v) in [
            ("ok", json!(true)), ("serial", json!(rt.serial)), ("actionId", json!(action_id)), ("runtimeEpoch", json!(rt.epoch())), ("route", json!("uia")),
            ("receipt", receipt.clone()), ("binding", receipt["binding"].clone()), ("acknowledged", json!(acknowledged)), ("proof", proof),
        ] {
            out.insert(k.into(), v);
        }
        if !node.is_null() {
            out.insert("bound".into(), node);
        }
        return Ok(Value::Object(out));
    }
    let code = receipt["error"].as_str().unwrap_or("uia_action_failed").to_string();
    let e = ProviderError::new(code, format!("the UIA runtime settled the action as failed ({})", receipt["completion"].as_str().unwrap_or(""))).with_details(json!({"receipt": receipt, "proof": proof}));
    Err(if receipt["dispatched"] == false { e.not_dispatched() } else { e.settled_after_dispatch() })
}

/// Reconcile a recorded UIA action: the live runtime's `query`, else the phone
/// journal through `recover-record`; settles only from a terminal receipt.
pub async fn reconcile(device: &Device, record: &Value, deadline: Deadline) -> Result<Value, Value> {
    let unsettled = |reason: &str, answer: Value| json!({"status": "unsettled", "reason": reason, "answer": answer});
    let d = &record["device"];
    let (Some(root), Some(epoch), Some(request_json), Some(request_sha), Some(action_id)) =
        (d["root"].as_str(), d["runtimeEpoch"].as_str(), d["requestJson"].as_str(), d["requestSha256"].as_str(), d["actionId"].as_str())
    else {
        return Err(unsettled("action_record_invalid", record.clone()));
    };
    let live = match connect(device, root, deadline).await {
        Ok(rt) if rt.epoch() == epoch => Some(rt),
        _ => None,
    };
    let envelope = match live {
        Some(rt) => {
            let e = rt.op(json!({"op": "query", "requestJson": request_json, "requestSha256": request_sha}), deadline).await.map_err(|e| unsettled("uia_runtime_unreachable", json!({"error": e.error})))?;
            if terminal(&e)
                && let Ok((_, sha)) = receipt_of(&e, request_sha, action_id)
            {
                let _ = rt.op(json!({"op": "acknowledge", "requestJson": request_json, "requestSha256": request_sha, "receiptSha256": sha}), deadline).await;
            }
            e
        }
        // The runtime of that epoch is gone: its phone journal answers.
        None => recover_record(device, root, d["bootId"].as_str().unwrap_or_default(), epoch, action_id, request_sha, deadline).await?,
    };
    if !terminal(&envelope) {
        return Err(unsettled("uia_action_not_terminal", envelope));
    }
    let (receipt, sha) = receipt_of(&envelope, request_sha, action_id).map_err(|e| unsettled(&e.error, envelope.clone()))?;
    Ok(json!({"device": receipt, "proof": {"kind": "uia", "settled": true, "actionId": action_id, "runtimeEpoch": epoch, "requestSha256": request_sha, "receiptSha256": sha, "completion": receipt["completion"], "dispatched": receipt["dispatched"]}}))
}

/// The terminal envelope of an action of a runtime epoch that is gone, from its
/// phone journal (`recover-record`: a prepared, never admitted action becomes
/// `recovered_before_admission`); `Err` = the unsettled answer.
async fn recover_record(device: &Device, root: &str, boot: &str, epoch: &str, action_id: &str, request_sha: &str, deadline: Deadline) -> Result<Value, Value> {
    let unsettled = |reason: &str, answer: Value| json!({"status": "unsettled", "reason": reason, "answer": answer});
    let identity = json!({"bootId": boot, "runtimeEpoch": epoch, "actionId": action_id, "requestSha256": request_sha}).to_string();
    let Ok(Some(sha)) = phone_sha256_of_jar(device, root, deadline).await else { return Err(unsettled("uia_runtime_jar_missing", Value::Null)) };
    let cmd = format!("CLASSPATH={j} app_process /system/bin {MAIN_CLASS} {r} {sha} recover-record {i}", j = quote(&format!("{root}/runtime-{sha}.jar")), r = quote(root), i = quote(&identity));
    let out = device.shell(&cmd, None, deadline).await.map_err(|e| unsettled("device_unreachable", json!({"error": e.error})))?;
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(json!({"stdout": out.stdout_text(), "stderr": out.stderr_text()}));
    if !v["receiptJson"].is_string() {
        let reason = v["disposition"].as_str().unwrap_or("uia_record_unrecoverable").to_string();
        return Err(unsettled(&reason, v));
    }
    Ok(json!({"settled": true, "receiptJson": v["receiptJson"], "receiptSha256": v["receiptSha256"], "recovered": v["disposition"]}))
}

/// The hash of the one deployed runtime jar of `root` (for the maintenance modes).
async fn phone_sha256_of_jar(device: &Device, root: &str, deadline: Deadline) -> Result<Option<String>, ProviderError> {
    let out = device.shell(&format!("ls {} 2>/dev/null", quote(root)), None, deadline).await?;
    Ok(out.stdout_text().split_whitespace().filter_map(|f| f.strip_prefix("runtime-")?.strip_suffix(".jar")).find(|h| is_hex64(h)).map(str::to_string))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_xml_becomes_compact_nodes_with_target_refs() {
        let xml = r#"<?xml version="1.0"?><hierarchy aab-schema="aab.uia.snapshot.v1" aab-boot-id="b" aab-runtime-epoch="e" aab-snapshot-id="s"><node index="0" aab-ref="r0" package="p" class="c" text="" content-desc="" resource-id="" bounds="[0,0][10,20]" enabled="true" visible-to-user="true" clickable="false" checkable="false" checked="false" scrollable="false"><node index="0" aab-ref="r1" package="p" class="android.widget.Button" text="Allow" content-desc="" resource-id="p:id/allow" bounds="[1,2][3,4]" enabled="true" visible-to-user="true" clickable="true" checkable="false" checked="false" scrollable="false"/></node></hierarchy>"#;
        let n = nodes(&json!({"snapshotId": "s", "xml": xml})).unwrap();
        assert_eq!(n.len(), 2);
        assert_eq!(n[1]["targetRef"], json!({"schemaVersion": TARGET_SCHEMA, "bootId": "b", "runtimeEpoch": "e", "snapshotId": "s", "nodeRef": "r1"}));
        assert_eq!((n[1]["text"].clone(), n[1]["clickable"].clone(), n[1]["depth"].clone(), n[1]["bounds"]["right"].clone()), (json!("Allow"), json!(true), json!(1), json!(3)));
        assert!(nodes(&json!({"snapshotId": "other", "xml": xml})).is_err(), "the XML must be the named snapshot");
        assert!(matches(&n[1], "text", "allow", false) && !matches(&n[1], "text", "allow", true));
    }

    #[test]
    fn a_bundle_is_refused_unless_its_jar_hashes_to_the_manifest() {
        let dir = tempfile::tempdir().unwrap();
        let jar = b"not really a dex jar";
        std::fs::write(dir.path().join("rt.jar"), jar).unwrap();
        let manifest = |sha: &str| json!({"schemaVersion": BUNDLE_SCHEMA, "mainClass": MAIN_CLASS, "artifact": "rt.jar", "sha256": sha, "minApi": 25}).to_string();
        std::fs::write(dir.path().join("manifest.json"), manifest(&sha256_hex(jar))).unwrap();
        let b = load_bundle(Some(dir.path().to_str().unwrap())).unwrap();
        assert_eq!((b.sha256.clone(), b.jar.len()), (sha256_hex(jar), jar.len()));
        std::fs::write(dir.path().join("manifest.json"), manifest(&"0".repeat(64))).unwrap();
        let e = load_bundle(Some(dir.path().to_str().unwrap())).err().unwrap();
        assert_eq!((e.error.as_str(), e.field.as_deref(), e.dispatched), (codes::BUNDLE_INVALID, Some("bundleDir"), Some(false)));
        std::fs::write(dir.path().join("manifest.json"), json!({"schemaVersion": BUNDLE_SCHEMA, "mainClass": MAIN_CLASS, "artifact": "../x", "sha256": sha256_hex(jar)}).to_string()).unwrap();
        assert_eq!(load_bundle(Some(dir.path().to_str().unwrap())).err().unwrap().error, codes::BUNDLE_INVALID);
    }
}
