//! The host side of Flutter-hosted WebViews (aab-protocols §7 "Flutter H5
//! adapters", seed 000 "Flutter H5"), reached only through the Flutter action
//! route of the Android SDK: the read `h5Dom{adapterId}` (a
//! fresh action id and `aab.flutter-execution/v1` envelope, but no action
//! record: they change nothing and the Dart side never asks permission for
//! them) and the managed mutations `h5Control` / `h5Eval` through
//! [`crate::flutter::act`] (action record, dispatch mark, one POST, one cancel
//! after a lost reply, never a resend).
//!
//! The snapshot is the shared renderer's (`flutter_h5_` prefix) with a
//! `aab.flutter-h5-target/v1` pageRef binding the Dart runtime epoch, the
//! adapter id, its registration generation, the document and the URL. Every
//! mutation is bound on the host to a FRESH snapshot of the same adapter and,
//! with `expectedTarget` / `expectedPage`, to the caller's observation, with the
//! selector rules of Android H5 ([`crate::h5::select`]).

use aab_plugin_api::{Context, Invocation, ProviderError};
use serde_json::{Map, Value, json};

use crate::adb::Deadline;
use crate::flutter::{EXECUTION_SCHEMA, FLUTTER_UNAVAILABLE};
use crate::h5::{Aim, SnapshotShape, bind_in, check_snapshot_as, element, expected_target_with, summary};
use crate::native_exec::App;
use crate::sdk::http;

pub const TARGET_SCHEMA: &str = "aab.flutter-h5-target/v1";
pub const PREFIX: &str = "flutter_h5_";
pub const ACTION_ROUTE: &str = "/v1/flutter/action";
/// The snapshot answer is not the Flutter H5 shape.
pub const INVALID_SNAPSHOT: &str = "invalid_flutter_h5_snapshot";
const PAGE_REF_KEYS: [&str; 6] = ["schemaVersion", "runtimeEpoch", "adapterId", "adapterGeneration", "documentId", "url"];
/// How long the Dart side may take for a read (the command's deadline caps it).
const READ_TIMEOUT_MS: u64 = 10_000;

// ---- schema pieces ----------------------------------------------------------

pub fn adapter_id_schema() -> Value {
    json!({"type": "string", "minLength": 1, "maxLength": 1024, "description": "The Flutter H5 adapter to use (adapterId from flutter-h5-dom); default: the single visible adapter"})
}

/// The `pageRef` of an earlier `flutter-h5-dom` (`aab.flutter-h5-target/v1`, exactly its 6 fields).
pub fn page_ref_schema() -> Value {
    let text = |desc: &str| json!({"type": "string", "minLength": 1, "maxLength": 65536, "description": desc});
    json!({
        "type": "object", "additionalProperties": false, "required": PAGE_REF_KEYS,
        "description": "pageRef of an earlier flutter-h5-dom, unchanged",
        "properties": {
            "schemaVersion": {"const": TARGET_SCHEMA},
            "runtimeEpoch": text("Dart runtime epoch"), "adapterId": text("Adapter id"),
            "adapterGeneration": {"type": "integer", "minimum": 1, "maximum": 9007199254740991u64, "description": "The adapter's registration"},
            "documentId": text("Renderer document id"), "url": text("Document URL")
        }
    })
}

/// `expectedTarget`: the page and control an earlier `flutter-h5-dom` showed.
pub fn expected_target_schema() -> Value {
    expected_target_with(page_ref_schema(), "The observed binding: pageRef and the control's identity fields from an earlier flutter-h5-dom; refused (reobserve_required / flutter_h5_target_changed) unless the fresh snapshot still shows them")
}

// ---- reads ------------------------------------------------------------------

/// A fresh id for a read on the action route (its receipt is never kept).
fn read_id() -> String {
    let mut b = [0u8; 16];
    let _ = getrandom::fill(&mut b);
    format!("read-{}", b.iter().map(|x| format!("{x:02x}")).collect::<String>())
}

/// The Dart runtime epoch a `GET /v1/status` names (`flutter.runtimeEpoch`): the
/// status must be ok and of this package.
fn epoch_in(package: &str, status: &Value) -> Result<String, ProviderError> {
    if status.get("ok") != Some(&Value::Bool(true)) {
        let code = status.get("error").and_then(Value::as_str).unwrap_or(http::BRIDGE_PROTOCOL_ERROR).to_string();
        return Err(ProviderError::new(code, format!("the SDK of {package} refused the status read")).with_details(json!({"body": status})).not_dispatched());
    }
    if let Some(found) = status.pointer("/app/packageName").and_then(Value::as_str)
        && found != package
    {
        return Err(ProviderError::new(crate::sdk::endpoint::codes::BRIDGE_PACKAGE_MISMATCH, format!("the SDK status belongs to {found:?}, not {package:?}")).not_dispatched());
    }
    match status.pointer("/flutter/runtimeEpoch").and_then(Value::as_str) {
        Some(e) if !e.is_empty() && e.len() <= 256 => Ok(e.to_string()),
        _ => Err(ProviderError::new(FLUTTER_UNAVAILABLE, format!("{package} shows no Flutter view (no Dart runtime in the status)")).not_dispatched()),
    }
}

/// The Dart runtime epoch, read from `GET /v1/status` through the forward on `port`.
pub async fn dart_epoch(port: u16, package: &str, deadline: Deadline) -> Result<String, ProviderError> {
    let status = http::request(port, "GET", "/v1/status", None, deadline).await.map_err(|e| e.not_dispatched())?.body;
    epoch_in(package, &status)
}

/// One read payload (`h5Dom`; the Dart side also answers `h5Adapters`) on the action route.
async fn read(port: u16, epoch: &str, mut payload: Map<String, Value>, deadline: Deadline) -> Result<Value, ProviderError> {
    let id = read_id();
    let timeout_ms = (deadline.remaining().as_millis() as u64).clamp(1, READ_TIMEOUT_MS);
    payload.insert("actionId".into(), json!(id));
    payload.insert("execution".into(), json!({"schemaVersion": EXECUTION_SCHEMA, "actionId": id, "runtimeEpoch": epoch, "timeoutMs": timeout_ms}));
    let body = Value::Object(payload);
    Ok(http::request(port, "POST", ACTION_ROUTE, Some(&body), deadline).await.map_err(|e| e.not_dispatched())?.body)
}

/// `h5Dom{adapterId?}`: the checked snapshot.
pub async fn snapshot(port: u16, epoch: &str, adapter_id: Option<&str>, deadline: Deadline) -> Result<Value, ProviderError> {
    let mut p = Map::new();
    p.insert("action".into(), json!("h5Dom"));
    if let Some(id) = adapter_id {
        p.insert("adapterId".into(), json!(id));
    }
    let body = read(port, epoch, p, deadline).await?;
    check_snapshot(&body)?;
    Ok(body)
}

const SHAPE: SnapshotShape = SnapshotShape {
    schema: TARGET_SCHEMA,
    page_keys: &PAGE_REF_KEYS,
    prefix: PREFIX,
    invalid: INVALID_SNAPSHOT,
    view_codes: "flutter_h5_adapter_",
    id_field: "adapterId",
    candidates: "adapters",
};

/// An `ok:false` read keeps the Dart side's code (adapter not found / ambiguous /
/// not visible with the registered `adapters`, runtime changed…), never dispatched.
pub fn check_snapshot(body: &Value) -> Result<(), ProviderError> {
    check_snapshot_as(body, &SHAPE)
}

// ---- mutations --------------------------------------------------------------

/// One Flutter H5 mutation: open (foreground, the Dart runtime), a fresh
/// snapshot of the adapter (the explicit id, else the observed one, else the
/// single visible), bind (same Dart runtime; the observed page and element),
/// then the managed `h5Control` / `h5Eval` with the bound `expectedTarget` /
/// `expectedPage`. `payload` holds `action` and its own fields.
pub async fn act(ctx: &Context<'_>, inv: &Invocation, command: &str, app: &App, adapter_id: Option<&str>, aim: Aim<'_>, mut payload: Map<String, Value>) -> Result<Value, ProviderError> {
    // The foreground proof and the Dart runtime from the light status read: the
    // Flutter widget tree is not needed to act in a WebView.
    let (session, _) = crate::native_exec::open_with(ctx, app, &crate::flutter::FAMILY, "/v1/status", epoch_in).await?;
    let which = adapter_id.or(aim.observed_web_view());
    let snap = snapshot(session.route.forward.port, &session.epoch, which, session.budget.adb()).await?;
    let bound = bind_in(snap, &session.epoch, &aim, PREFIX)?;
    match &bound.control {
        Some(c) => {
            payload.insert("expectedTarget".into(), json!({"pageRef": bound.page, "element": element(c)}));
        }
        None => {
            payload.insert("expectedPage".into(), bound.page.clone());
        }
    }
    let mut out = crate::flutter::act(ctx, inv, command, &session, payload).await?;
    out["pageRef"] = bound.page;
    out["adapter"] = bound.snapshot["adapter"].clone();
    if let Some(c) = &bound.control {
        out["bound"] = summary(c);
    }
    out["provider"] = json!("flutter-h5");
    Ok(out)
}


#[cfg(test)]
mod tests {
    use super::*;

    fn snap() -> Value {
        json!({"ok": true, "h5TargetSchema": TARGET_SCHEMA,
               "pageRef": {"schemaVersion": TARGET_SCHEMA, "runtimeEpoch": "1-a", "adapterId": "help", "adapterGeneration": 1, "documentId": "d", "url": "http://x/"},
               "dom": {"controls": [{"elementId": "e1"}, {"elementId": "e2"}]}, "adapter": {"adapterId": "help"}})
    }

    #[test]
    fn the_dart_runtime_epoch_comes_from_an_ok_status_of_this_package() {
        let st = json!({"ok": true, "app": {"packageName": "a.b"}, "flutter": {"runtimeEpoch": "1-a"}});
        assert_eq!(epoch_in("a.b", &st).unwrap(), "1-a");
        assert_eq!(epoch_in("c.d", &st).unwrap_err().error, "bridge_package_mismatch");
        assert_eq!(epoch_in("a.b", &json!({"ok": true, "app": {"packageName": "a.b"}, "flutter": null})).unwrap_err().error, FLUTTER_UNAVAILABLE);
        let e = epoch_in("a.b", &json!({"ok": false, "error": "no_current_activity"})).unwrap_err();
        assert_eq!((e.error.as_str(), e.dispatched), ("no_current_activity", Some(false)));
    }

    #[test]
    fn snapshots_are_checked_and_refusals_keep_their_code() {
        assert!(check_snapshot(&snap()).is_ok());
        let mut s = snap();
        s["pageRef"]["webViewId"] = json!("x");
        assert_eq!(check_snapshot(&s).unwrap_err().error, INVALID_SNAPSHOT);
        let mut s = snap();
        s["dom"]["controls"][1]["elementId"] = json!("e1");
        assert_eq!(check_snapshot(&s).unwrap_err().error, INVALID_SNAPSHOT);
        let mut s = snap();
        s["h5TargetSchema"] = json!("aab.android-h5-target/v1");
        assert_eq!(check_snapshot(&s).unwrap_err().error, "flutter_h5_target_schema_unsupported");
        let amb = json!({"ok": false, "error": "flutter_h5_adapter_ambiguous", "message": "m", "adapters": [{"adapterId": "a"}, {"adapterId": "b"}]});
        let e = check_snapshot(&amb).unwrap_err();
        assert_eq!((e.error.as_str(), e.field.as_deref(), e.dispatched), ("flutter_h5_adapter_ambiguous", Some("adapterId"), Some(false)));
        assert_eq!(e.details.unwrap()["adapters"][1]["adapterId"], "b");
    }

    #[test]
    fn a_changed_generation_or_document_requires_a_new_observation() {
        let s = snap();
        let mut old = s["pageRef"].clone();
        old["adapterGeneration"] = json!(2);
        let e = bind_in(s.clone(), "1-a", &Aim::Page { expected: Some(&old) }, PREFIX).err().unwrap();
        assert_eq!((e.error.as_str(), e.field.as_deref()), ("reobserve_required", Some("expectedPage")));
        assert_eq!(e.details.unwrap()["changed"], json!(["adapterGeneration"]));
        let e = bind_in(s.clone(), "2-b", &Aim::Page { expected: None }, PREFIX).err().unwrap();
        assert_eq!(e.error, "reobserve_required", "the page of another Dart runtime than the snapshot session");
        let e = bind_in(s, "1-a", &Aim::Element { selector: &json!({"text": "Nope"}), expected: None, editable: false }, PREFIX).err().unwrap();
        assert_eq!(e.error, "flutter_h5_selector_not_found");
    }
}
