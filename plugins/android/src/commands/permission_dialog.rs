//! `permission-dialog` (the begin call of its managed Intent: prove that the
//! app's runtime-permission request is the top-resumed Activity and freeze the
//! permission's state) and `permission-dialog-status` (the settle call: has the
//! requester Activity closed, and does `dumpsys package` now show what the
//! requested outcome needs). The Agent answers the dialog through intent
//! decide on the `uia` provider; no button label or id table lives here.
//!
//! Outcome table (docs/COMMAND_CONTRACT.md): allow → granted, no ONE_TIME;
//! allow-once → granted with ONE_TIME; deny → not granted with USER_SET, after
//! an observed tap; dismiss → grant and flags unchanged (a tap or Back).

use aab_plugin_api::{Command, CommandSpec, Context, Invocation, ProviderError, Reply};
use serde::Deserialize;
use serde_json::{Value, json};

use super::permission_state::{current_user, read};
use super::{Budget, cancellable, device};
use crate::AndroidProvider;
use crate::adb::Deadline;
use crate::adb::device::Device;
use crate::manifest::{object, package_name, permission_name, props, user_id};

pub const NOT_SHOWN: &str = "permission_dialog_not_shown";
pub const NOT_RUNTIME: &str = "permission_not_runtime";
pub const CLOSED_WITHOUT_ACTION: &str = "permission_dialog_closed_without_action";
pub const OUTCOME_MISMATCH: &str = "permission_outcome_mismatch";
pub const LAYOUT_UNSUPPORTED: &str = "permission_dialog_layout_unsupported";

/// The permission controller packages (AOSP and Google builds).
const CONTROLLERS: &[&str] = &["com.android.permissioncontroller", "com.google.android.permissioncontroller"];

fn outcome_schema() -> Value {
    json!({"type": "string", "enum": ["allow", "allow-once", "deny", "dismiss"], "description": "What the answer must leave: allow (granted, not one-time), allow-once (granted, ONE_TIME), deny (not granted, USER_SET; a tap), dismiss (grant and flags unchanged; a tap or back)"})
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct DialogArgs {
    pub serial: String,
    pub package_name: String,
    pub permission: String,
    pub outcome: String,
    pub user_id: Option<u32>,
    pub adb: Option<String>,
    pub adb_timeout_ms: Option<u64>,
    #[allow(dead_code)]
    pub recording_dir: Option<String>,
    #[allow(dead_code)]
    pub operation_id: Option<String>,
    // Settle-only facts (permission-dialog-status).
    pub requester: Option<Value>,
    pub initial: Option<Value>,
    pub actions: Option<u64>,
    pub last_action: Option<String>,
}

/// The top-resumed Activity and the task it sits in (`dumpsys activity activities`).
#[derive(Debug, PartialEq)]
pub struct Top {
    pub record: String,
    pub component: String,
    pub user: u32,
    pub task: u64,
    /// `A=<uid>:<package>` of that task: the app that started the request.
    pub task_uid: Option<u64>,
    pub task_package: Option<String>,
}

pub fn top_resumed(text: &str) -> Result<Option<Top>, ProviderError> {
    let tops: Vec<&str> = text.lines().filter_map(|l| l.trim().strip_prefix("topResumedActivity=")).collect();
    if tops.len() > 1 {
        return Err(ProviderError::new(LAYOUT_UNSUPPORTED, format!("{} top-resumed activities (several displays): not supported", tops.len())).not_dispatched());
    }
    let Some(record) = tops.first().map(|s| s.trim().to_string()) else { return Ok(None) };
    if record == "null" {
        return Ok(None);
    }
    // ActivityRecord{3c0a1b2 u0 com.android.permissioncontroller/.permission.ui.GrantPermissionsActivity t12}
    let inner = record.trim_start_matches("ActivityRecord{").trim_end_matches('}');
    let parts: Vec<&str> = inner.split_whitespace().collect();
    let (Some(user), Some(component), Some(task)) = (
        parts.iter().find_map(|p| p.strip_prefix('u').and_then(|u| u.parse::<u32>().ok())),
        parts.iter().find(|p| p.contains('/')).map(|s| s.to_string()),
        parts.iter().find_map(|p| p.strip_prefix('t').and_then(|t| t.parse::<u64>().ok())),
    ) else {
        return Err(ProviderError::new(LAYOUT_UNSUPPORTED, format!("cannot read the top-resumed activity record {record:?}")).not_dispatched());
    };
    let task_line = text.lines().map(str::trim).find(|l| l.starts_with("* Task{") && l.contains(&format!("#{task} ")));
    let (task_uid, task_package) = match task_line.and_then(|l| l.split_whitespace().find_map(|w| w.strip_prefix("A="))) {
        Some(a) => match a.split_once(':') {
            Some((uid, pkg)) => (uid.parse().ok(), Some(pkg.to_string())),
            None => (None, None),
        },
        None => (None, None),
    };
    Ok(Some(Top { record, component, user, task, task_uid, task_package }))
}

fn is_request(top: &Top, package: &str) -> bool {
    let (pkg, class) = top.component.split_once('/').unwrap_or(("", ""));
    CONTROLLERS.contains(&pkg) && class.ends_with("GrantPermissionsActivity") && top.task_package.as_deref() == Some(package)
}

async fn activities(dev: &Device, deadline: Deadline) -> Result<String, ProviderError> {
    Ok(dev.shell("dumpsys activity activities", None, deadline).await?.stdout_text())
}

fn flags(state: &Value) -> Vec<String> {
    state["flags"].as_array().map(|a| a.iter().filter_map(|f| f.as_str().map(str::to_string)).collect()).unwrap_or_default()
}

pub struct PermissionDialog;
impl Command for PermissionDialog {
    type Provider = AndroidProvider;
    type Args = DialogArgs;
    fn spec() -> CommandSpec {
        CommandSpec::query("permission-dialog")
            .platform("android")
            .domain("app")
            .target_kind("android-app")
            .role("execution")
            .summary("Answer an app's runtime-permission dialog as a managed Intent (provider uia): requires the app's GrantPermissionsActivity to be the top-resumed Activity (dumpsys activity activities), freezes the permission's state (dumpsys package), then the Agent picks the control through intent observe/decide; the Intent completes only when the Activity has closed and dumpsys package shows the requested outcome.")
            .target_key("serial")
            .target_key("packageName")
            .timeouts(60_000, 600_000)
            .input_schema(object(
                props(json!({
                    "packageName": package_name(), "permission": permission_name(), "outcome": outcome_schema(), "userId": user_id(),
                    "recordingDir": {"type": "string", "minLength": 1, "maxLength": 4096, "description": "Not available in this build (recording_unavailable)"},
                    "operationId": {"type": "string", "minLength": 1, "maxLength": 200, "description": "Id of the Intent (default: generated; never reused)"}
                })),
                &["serial", "packageName", "permission", "outcome"],
            ))
    }
    async fn run(_: &AndroidProvider, ctx: &Context<'_>, _: &Invocation, a: DialogArgs) -> Result<Reply, ProviderError> {
        let budget = Budget::new(ctx, a.adb_timeout_ms);
        cancellable(ctx, async {
            let dev = device(a.adb.as_deref(), Some(&a.serial), &budget).await?;
            let user = match a.user_id {
                Some(u) => u,
                None => current_user(&dev, &budget).await?,
            };
            let initial = read(&dev, &a.package_name, &a.permission, user, &budget).await?;
            if initial["kind"] != "runtime" {
                return Err(ProviderError::new(NOT_RUNTIME, format!("{} is not a runtime permission of {} (it is {})", a.permission, a.package_name, initial["kind"])).with_field("permission").with_details(json!({"state": initial})).not_dispatched());
            }
            let text = activities(&dev, budget.adb()).await?;
            let top = top_resumed(&text)?;
            match &top {
                Some(t) if is_request(t, &a.package_name) && t.user == user => {
                    let requester = json!({"activityRecord": t.record, "component": t.component, "taskId": t.task, "uid": t.task_uid, "packageName": t.task_package, "userId": t.user});
                    Ok(Reply::Json(json!({"ok": true, "serial": dev.serial,
                        "permissionDialog": {"status": "dialog_open", "pending": "dialog_open", "packageName": a.package_name, "permission": a.permission, "outcome": a.outcome, "userId": user, "requester": requester, "initial": initial}})))
                }
                _ => {
                    let reason = if initial["granted"] == true {
                        "already_granted"
                    } else if flags(&initial).iter().any(|f| f == "USER_FIXED") {
                        "user_fixed"
                    } else {
                        "no_request_activity"
                    };
                    Err(ProviderError::new(NOT_SHOWN, format!("no runtime-permission request of {} is the top-resumed Activity ({reason}); trigger it through the app's own flow first", a.package_name))
                        .with_details(json!({"reason": reason, "state": initial, "userId": user, "topResumedActivity": top.as_ref().map(|t| &t.record)}))
                        .not_dispatched())
                }
            }
        })
        .await
    }
}

pub struct PermissionDialogStatus;
impl Command for PermissionDialogStatus {
    type Provider = AndroidProvider;
    type Args = DialogArgs;
    fn spec() -> CommandSpec {
        CommandSpec::query("permission-dialog-status")
            .platform("android")
            .domain("app")
            .target_kind("android-app")
            .summary("The settle call of a permission-dialog Intent: whether the requester Activity is still open (dumpsys activity activities), and once it closed, whether dumpsys package shows the outcome against the frozen initial state.")
            .permission("app.read")
            .target_key("serial")
            .target_key("packageName")
            .lane("observation")
            .timeouts(15_000, 60_000)
            .input_schema(object(
                props(json!({
                    "packageName": package_name(), "permission": permission_name(), "outcome": outcome_schema(), "userId": user_id(),
                    "requester": {"type": "object", "description": "permissionDialog.requester of the begin call"},
                    "initial": {"type": "object", "description": "permissionDialog.initial of the begin call"},
                    "actions": {"type": "integer", "minimum": 0, "maximum": 100000, "description": "Actions the Intent dispatched"},
                    "lastAction": {"type": "string", "maxLength": 64, "description": "The last dispatched action (tap | back)"}
                })),
                &["serial", "packageName", "permission", "outcome", "requester", "initial"],
            ))
    }
    async fn run(_: &AndroidProvider, ctx: &Context<'_>, _: &Invocation, a: DialogArgs) -> Result<Reply, ProviderError> {
        let budget = Budget::new(ctx, a.adb_timeout_ms);
        cancellable(ctx, async {
            let dev = device(a.adb.as_deref(), Some(&a.serial), &budget).await?;
            let requester = a.requester.clone().unwrap_or(Value::Null);
            let initial = a.initial.clone().unwrap_or(Value::Null);
            let record = requester["activityRecord"].as_str().unwrap_or_default();
            let text = activities(&dev, budget.adb()).await?;
            let base = json!({"packageName": a.package_name, "permission": a.permission, "outcome": a.outcome, "requester": requester, "initial": initial});
            let with = |v: Value| super::with_defaults(v, &base);
            if top_resumed(&text)?.is_some_and(|t| t.record == record) {
                return Ok(Reply::Json(with(json!({"ok": true, "settled": false, "status": "dialog_open", "pending": "dialog_open"}))));
            }
            // Closed but Android still retires the record: verification waits.
            let short = record.trim_start_matches("ActivityRecord{").trim_end_matches('}');
            if !short.is_empty() && text.lines().any(|l| l.contains(short) && !l.contains("mLastPausedActivity")) {
                return Ok(Reply::Json(with(json!({"ok": true, "settled": false, "status": "waiting_for_observation", "pending": "activity_closure"}))));
            }
            let user = a.user_id.unwrap_or(0);
            let state = read(&dev, &a.package_name, &a.permission, user, &budget).await?;
            let fl = flags(&state);
            let granted = state["granted"] == true;
            let has = |f: &str| fl.iter().any(|x| x == f);
            if a.actions.unwrap_or(0) == 0 {
                return Ok(Reply::Json(with(json!({"ok": true, "succeeded": false, "settled": true, "status": "failed", "error": CLOSED_WITHOUT_ACTION,
                    "message": "the request closed without an action of this Intent: its outcome is not this Intent's", "state": state}))));
            }
            let last = a.last_action.as_deref().unwrap_or("");
            let (met, expected) = match a.outcome.as_str() {
                "allow" => (granted && !has("ONE_TIME"), "granted:true, ONE_TIME absent"),
                "allow-once" => (granted && has("ONE_TIME"), "granted:true, ONE_TIME present"),
                "deny" => (!granted && has("USER_SET") && last == "tap", "granted:false, USER_SET present, after a tap"),
                _ => (state["granted"] == initial["granted"] && state["flags"] == initial["flags"], "grant and flags unchanged"),
            };
            Ok(Reply::Json(if met {
                with(json!({"ok": true, "succeeded": true, "settled": true, "status": "verified", "state": state, "expected": expected, "userFixed": has("USER_FIXED")}))
            } else {
                with(json!({"ok": true, "succeeded": false, "settled": true, "status": "failed", "error": OUTCOME_MISMATCH, "message": format!("dumpsys package shows granted={granted} flags={fl:?}; {} needs {expected}", a.outcome), "state": state, "expected": expected}))
            }))
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_requester_is_read_from_the_top_resumed_record_and_its_task() {
        let text = "Display #0 (activities from top to bottom):\n  * Task{4d3c2b1 #12 type=standard A=10123:com.example.shop U=0 visible=true}\n    * Hist  #1: ActivityRecord{3c02345 u0 com.android.permissioncontroller/.permission.ui.GrantPermissionsActivity t12}\n  topResumedActivity=ActivityRecord{3c02345 u0 com.android.permissioncontroller/.permission.ui.GrantPermissionsActivity t12}\n";
        let t = top_resumed(text).unwrap().unwrap();
        assert_eq!((t.user, t.task, t.task_uid, t.task_package.as_deref()), (0, 12, Some(10123), Some("com.example.shop")));
        assert!(is_request(&t, "com.example.shop"));
        assert!(!is_request(&t, "com.example.other"));
        let two = format!("{text}  topResumedActivity=ActivityRecord{{1 u0 a/.B t3}}\n");
        assert_eq!(top_resumed(&two).unwrap_err().error, LAYOUT_UNSUPPORTED);
    }
}
