//! A system dialog over the foreground app (a permission prompt, the package
//! installer's confirmation…): a window the app does not own. While it shows
//! it is the focused window — `uiautomator dump` and the UIA runtime read it,
//! and a tap outside its buttons does nothing (modal). A tap on a button (by
//! `input tap` or a UIA click) dismisses it and records truth
//! `system-dialog-answer {package, button, resourceId, windowId}`; a button
//! may grant or deny an app permission (`permission`).

use std::sync::Arc;

use serde::Deserialize;
use serde_json::{Value, json};

use crate::device::Device;
use crate::phone::{Node, Phone};

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SystemDialog {
    pub package: String,
    #[serde(default)]
    pub title: String,
    #[serde(default)]
    pub message: Option<String>,
    #[serde(default)]
    pub buttons: Vec<DialogButton>,
    /// Window id (set when shown).
    #[serde(default)]
    pub window_id: i64,
    /// `pkg/full.Activity` when the dialog is an activity on top of the foreground app's task
    /// (the permission controller's GrantPermissionsActivity, the package installer):
    /// `dumpsys activity activities` and `dumpsys window` then show it as the resumed/focused one.
    #[serde(default)]
    pub activity: Option<String>,
}

/// What a button does besides dismissing the dialog (set by the simulator, not the control op).
#[derive(Clone, Debug)]
pub enum DialogAction {
    /// The package installer's confirmation of session `session`: Install (accept) or Cancel.
    Install { session: u32, accept: bool },
    /// A runtime permission dialog's answer.
    Permission { package: String, permission: String, choice: PermissionChoice },
}

#[derive(Clone, Copy, Debug)]
pub enum PermissionChoice {
    Allow,
    /// "Only this time" (API ≥ 30): granted with `ONE_TIME`.
    AllowOnce,
    Deny,
    DenyDontAsk,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DialogButton {
    pub text: String,
    /// `id` (relative to the dialog's package) or `pkg:id/x`.
    #[serde(default)]
    pub resource_id: Option<String>,
    /// Applied when the button is pressed.
    #[serde(default)]
    pub permission: Option<PermissionAnswer>,
    #[serde(skip)]
    pub action: Option<DialogAction>,
}

#[derive(Clone, Debug, Deserialize)]
pub struct PermissionAnswer {
    pub package: String,
    pub permission: String,
    pub granted: bool,
}

impl SystemDialog {
    pub fn resource_name(&self, b: &DialogButton) -> Option<String> {
        b.resource_id.as_ref().map(|r| if r.contains(":id/") { r.clone() } else { format!("{}:id/{r}", self.package) })
    }

    /// The dialog's view tree: a frame with the title, the message and one button per answer (stacked).
    pub fn tree(&self, width: u32, height: u32) -> Node {
        let (w, h) = (width as i32, height as i32);
        let n = self.buttons.len() as i32;
        let top = h * 3 / 10;
        let bottom = top + 260 + n * 150;
        let (l, r) = (w / 12, w - w / 12);
        let mut root = Node::plain("android.widget.FrameLayout", [l, top, r, bottom]);
        let mut title = Node::plain("android.widget.TextView", [l + 40, top + 40, r - 40, top + 140]);
        title.text = Some(self.title.clone());
        title.resource_name = Some(format!("{}:id/alertTitle", self.package));
        root.children.push(title);
        if let Some(m) = &self.message {
            let mut msg = Node::plain("android.widget.TextView", [l + 40, top + 150, r - 40, top + 240]);
            msg.text = Some(m.clone());
            msg.resource_name = Some(format!("{}:id/message", self.package));
            root.children.push(msg);
        }
        for (i, b) in self.buttons.iter().enumerate() {
            let bt = top + 260 + i as i32 * 150;
            let mut node = Node::plain("android.widget.Button", [l + 40, bt, r - 40, bt + 130]);
            node.text = Some(b.text.clone());
            node.id = Some(format!("button{i}"));
            node.resource_name = self.resource_name(b);
            node.clickable = true;
            node.focusable = true;
            root.children.push(node);
        }
        root
    }
}

/// Presses button `i` of the shown dialog: dismisses it, applies its permission answer, records the answer.
pub fn answer(dev: &Arc<Device>, ph: &mut Phone, i: usize, via: &str) -> Value {
    let Some(d) = ph.system_dialog.take() else { return json!({ "dialog": null }) };
    let Some(b) = d.buttons.get(i).cloned() else {
        ph.system_dialog = Some(d);
        return json!({ "dialog": true, "button": null });
    };
    if let Some(p) = &b.permission
        && let Some(ai) = ph.app_index(&p.package) {
            ph.apps[ai].permissions.insert(p.permission.clone(), p.granted);
        }
    ph.log(1000, 'I', "WindowManager", &format!("dialog {} dismissed: {}", d.package, b.text));
    let result = match &b.action {
        Some(DialogAction::Install { session, accept }) => Some(crate::installer::answer(dev, ph, *session, *accept)),
        Some(DialogAction::Permission { package, permission, choice }) => Some(crate::permission_dialog::answer(dev, ph, package, permission, *choice)),
        None => None,
    };
    let mut data = json!({ "package": d.package, "title": d.title, "button": b.text, "resourceId": d.resource_name(&b), "windowId": d.window_id, "permission": b.permission.as_ref().map(|p| json!({ "package": p.package, "permission": p.permission, "granted": p.granted })), "via": via });
    if let Some(r) = result {
        data["result"] = r;
    }
    dev.record("system-dialog-answer", data.clone());
    data
}

/// Back while a dialog shows: closes it without an answer (a permission stays
/// as it was, an installer confirmation is cancelled).
pub fn dismiss(dev: &Arc<Device>, ph: &mut Phone, via: &str) -> Value {
    let Some(d) = ph.system_dialog.take() else { return json!({ "dialog": null }) };
    ph.log(1000, 'I', "WindowManager", &format!("dialog {} dismissed by {via}", d.package));
    let mut data = json!({ "package": d.package, "title": d.title, "button": null, "resourceId": null, "windowId": d.window_id, "via": via });
    for b in &d.buttons {
        if let Some(DialogAction::Install { session, accept: false }) = &b.action {
            data["result"] = crate::installer::answer(dev, ph, *session, false);
        }
    }
    dev.record("system-dialog-answer", data.clone());
    data
}

/// Shows a dialog (a new window id); returns the window id.
pub fn show(ph: &mut Phone, mut d: SystemDialog) -> i64 {
    d.window_id = next_window_id();
    let id = d.window_id;
    ph.system_dialog = Some(d);
    ph.keyboard = false;
    id
}

pub fn next_window_id() -> i64 {
    static NEXT: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(9000);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// `input tap` while a dialog shows: a button answers it, anything else is swallowed.
pub fn tap(dev: &Arc<Device>, ph: &mut Phone, x: i32, y: i32) -> Value {
    let Some(d) = ph.system_dialog.clone() else { return json!({}) };
    let tree = d.tree(ph.width, ph.height);
    match tree.hit(x, y).and_then(|n| n.id.clone()).and_then(|id| id.strip_prefix("button").and_then(|s| s.parse::<usize>().ok())) {
        Some(i) => json!({ "package": d.package, "dialog": answer(dev, ph, i, "input") }),
        None => json!({ "package": d.package, "id": null, "dialog": true }),
    }
}
