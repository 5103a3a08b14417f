//! Runtime permission requests (an app's `requestPermissions`): control
//! `permission-request {package, permission}`. Like Android: a granted
//! permission, one the user fixed ("don't ask again", flag `USER_FIXED`) or one
//! the app did not request shows no dialog; otherwise the permission
//! controller's `GrantPermissionsActivity` shows on top of the app's task
//! (`dumpsys activity activities`, `dumpsys window`, `uiautomator dump`) with
//! "Allow" / "Don't allow" (API ≥ 30: a second denial sets `USER_FIXED`) or,
//! below API 30, "Allow" / "Deny" and after one denial also
//! "Deny & don't ask again". The answer updates the permission state and its
//! flags (`dumpsys package`).

use std::sync::Arc;

use serde_json::{Value, json};

use crate::device::Device;
use crate::phone::Phone;
use crate::system_dialog::{DialogAction, DialogButton, PermissionChoice, SystemDialog};

pub const CONTROLLER_PKG: &str = "com.android.permissioncontroller";
pub const GRANT_ACTIVITY: &str = "com.android.permissioncontroller.permission.ui.GrantPermissionsActivity";

fn describe(perm: &str) -> &'static str {
    match perm.rsplit('.').next().unwrap_or("") {
        "CAMERA" => "take pictures and record video",
        "RECORD_AUDIO" => "record audio",
        "ACCESS_FINE_LOCATION" | "ACCESS_COARSE_LOCATION" | "ACCESS_BACKGROUND_LOCATION" => "access this device's location",
        "READ_CONTACTS" | "WRITE_CONTACTS" | "GET_ACCOUNTS" => "access your contacts",
        "READ_CALENDAR" | "WRITE_CALENDAR" => "access your calendar",
        "POST_NOTIFICATIONS" => "send you notifications",
        "READ_PHONE_STATE" | "CALL_PHONE" | "READ_CALL_LOG" | "WRITE_CALL_LOG" => "make and manage phone calls",
        "SEND_SMS" | "RECEIVE_SMS" | "READ_SMS" => "send and view SMS messages",
        "READ_EXTERNAL_STORAGE" | "WRITE_EXTERNAL_STORAGE" | "READ_MEDIA_IMAGES" | "READ_MEDIA_VIDEO" | "READ_MEDIA_AUDIO" => "access photos and media on your device",
        _ => "use this permission",
    }
}

/// Control `permission-request {package, permission}`.
pub fn request(dev: &Arc<Device>, req: &Value) -> Value {
    let (Some(pkg), Some(perm)) = (req.get("package").and_then(Value::as_str), req.get("permission").and_then(Value::as_str)) else {
        return json!({ "ok": false, "error": "missing_argument", "message": "package, permission" });
    };
    let mut ph = dev.phone.lock().unwrap();
    let Some(i) = ph.app_index(pkg) else { return json!({ "ok": false, "error": "unknown_package", "message": pkg }) };
    if ph.foreground != Some(i) || ph.apps[i].process.is_none() {
        return json!({ "ok": false, "error": "not_foreground", "message": format!("{pkg} is not the foreground app") });
    }
    if ph.system_dialog.is_some() {
        return json!({ "ok": false, "error": "dialog_showing", "message": "another system dialog is shown" });
    }
    let app = &ph.apps[i];
    let flags = app.perm_flags.get(perm).cloned().unwrap_or_default();
    let no_dialog = if app.spec.install_permissions.iter().any(|p| p == perm) {
        Some(("granted", "install_permission"))
    } else {
        match app.permissions.get(perm) {
            None => Some(("denied", "not_requested")),
            Some(true) => Some(("granted", "already_granted")),
            Some(false) if flags.user_fixed => Some(("denied", "user_fixed")),
            Some(false) => None,
        }
    };
    if let Some((result, reason)) = no_dialog {
        let pid = app.process.as_ref().map(|p| p.pid).unwrap_or(0);
        ph.log(pid, 'I', "Permissions", &format!("requestPermissions {perm}: {result} without a dialog ({reason})"));
        drop(ph);
        let v = json!({ "package": pkg, "permission": perm, "shown": false, "result": result, "reason": reason });
        dev.record("permission-request", v.clone());
        let mut out = json!({ "ok": true });
        out.as_object_mut().unwrap().extend(v.as_object().unwrap().clone());
        return out;
    }
    let label = pkg.rsplit('.').next().unwrap_or(pkg).to_string();
    let label = label[..1].to_uppercase() + &label[1..];
    let old = ph.sdk_int < 30;
    let b = |text: &str, id: &str, choice: PermissionChoice| DialogButton {
        text: text.into(),
        resource_id: Some(id.into()),
        permission: None,
        action: Some(DialogAction::Permission { package: pkg.into(), permission: perm.into(), choice }),
    };
    let mut buttons = vec![b("Allow", "permission_allow_button", PermissionChoice::Allow)];
    if !old {
        buttons.push(b("Only this time", "permission_allow_one_time_button", PermissionChoice::AllowOnce));
    }
    if old {
        buttons.push(b("Deny", "permission_deny_button", PermissionChoice::Deny));
        if flags.denials > 0 {
            buttons.push(b("Deny & don't ask again", "permission_deny_and_dont_ask_again_button", PermissionChoice::DenyDontAsk));
        }
    } else {
        buttons.push(b("Don't allow", "permission_deny_button", PermissionChoice::Deny));
    }
    let dialog = SystemDialog {
        package: CONTROLLER_PKG.into(),
        title: format!("Allow {label} to {}?", describe(perm)),
        message: None,
        buttons,
        window_id: 0,
        activity: Some(format!("{CONTROLLER_PKG}/{GRANT_ACTIVITY}")),
    };
    let texts: Vec<String> = dialog.buttons.iter().map(|b| b.text.clone()).collect();
    let title = dialog.title.clone();
    let win = crate::system_dialog::show(&mut ph, dialog);
    let (pid, uid) = (ph.apps[i].process.as_ref().map(|p| p.pid).unwrap_or(0), ph.apps[i].uid());
    ph.log(1000, 'I', "ActivityTaskManager", &format!("START u0 {{act=android.content.pm.action.REQUEST_PERMISSIONS pkg={CONTROLLER_PKG} cmp={CONTROLLER_PKG}/.permission.ui.GrantPermissionsActivity}} from uid {uid} pid {pid}"));
    drop(ph);
    let v = json!({ "package": pkg, "permission": perm, "shown": true, "result": null, "reason": null, "title": title, "buttons": texts, "windowId": win });
    dev.record("permission-request", v.clone());
    dev.record("system-dialog", json!({ "package": CONTROLLER_PKG, "title": title, "windowId": win }));
    let mut out = json!({ "ok": true });
    out.as_object_mut().unwrap().extend(v.as_object().unwrap().clone());
    out
}

/// A press on a permission dialog button (under the phone lock).
pub fn answer(dev: &Arc<Device>, ph: &mut Phone, package: &str, permission: &str, choice: PermissionChoice) -> Value {
    let sdk = ph.sdk_int;
    let Some(i) = ph.app_index(package) else { return json!({ "package": package, "result": null }) };
    let app = &mut ph.apps[i];
    let f = app.perm_flags.entry(permission.to_string()).or_default();
    let granted = matches!(choice, PermissionChoice::Allow | PermissionChoice::AllowOnce);
    f.user_set = true;
    f.one_time = matches!(choice, PermissionChoice::AllowOnce);
    match choice {
        PermissionChoice::Allow | PermissionChoice::AllowOnce => {
            f.user_fixed = false;
            f.denials = 0;
        }
        PermissionChoice::Deny => {
            f.denials += 1;
            if sdk >= 30 && f.denials >= 2 {
                f.user_fixed = true;
            }
        }
        PermissionChoice::DenyDontAsk => {
            f.denials += 1;
            f.user_fixed = true;
        }
    }
    let user_fixed = f.user_fixed;
    app.permissions.insert(permission.to_string(), granted);
    let result = match choice {
        PermissionChoice::Allow => "granted",
        PermissionChoice::AllowOnce => "granted_once",
        _ if user_fixed => "denied_dont_ask_again",
        _ => "denied",
    };
    dev.record("permission", json!({ "package": package, "permission": permission, "granted": granted, "via": "dialog", "userFixed": user_fixed }));
    dev.record("permission-request-result", json!({ "package": package, "permission": permission, "result": result, "granted": granted, "userFixed": user_fixed }));
    json!({ "package": package, "permission": permission, "result": result, "granted": granted, "userFixed": user_fixed })
}
