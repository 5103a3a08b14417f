//! Each managed operation as the sequence of XCTest events it submits. Every
//! event is preceded, in the same main-queue turn, by its permission: the
//! action was not stopped, the session still names the target App/PID, that
//! App/PID is still foreground, and the operation's own precondition (native
//! target revalidation, editor focus) still holds. Only submitted events are
//! recorded in the device truth, and once one is submitted the action is
//! `dispatched` whatever happens after.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use serde_json::{Value, json};

use super::action::{Operation, TargetRef};
use super::exec::Active;
use super::{Session, Shared, ids};
use crate::screen::{EventError, Foreground, NativeScreen};

/// Deepest source tree the Runner walks (a hostile screen cannot recurse it to death).
const MAX_TREE_NODES: usize = 100_000;

/// What an operation ended with, before the settled-result envelope.
pub struct Outcome {
    pub ok: bool,
    pub error: Option<&'static str>,
    pub message: Option<String>,
    pub dispatched: bool,
    pub value: Option<Value>,
}

#[derive(Debug)]
pub struct Fail {
    code: &'static str,
    message: String,
    value: Option<Value>,
}

fn fail(code: &'static str, message: impl Into<String>) -> Fail {
    Fail { code, message: message.into(), value: None }
}

enum Halt {
    Fail(Fail),
    /// The main-queue work never returned: the action stays unresolved.
    Unresolved,
}

impl From<Fail> for Halt {
    fn from(f: Fail) -> Halt {
        Halt::Fail(f)
    }
}

type Step<T> = Result<T, Halt>;

/// Runs `active`'s operation; `None` when it can never settle.
pub async fn execute(shared: &Arc<Shared>, active: &Arc<Active>) -> Option<Outcome> {
    let mut run = Run { shared: shared.clone(), active: active.clone(), dispatched: false };
    let result = run.operation().await;
    let dispatched = run.dispatched;
    match result {
        Ok(value) => Some(Outcome { ok: true, error: None, message: None, dispatched, value: Some(value) }),
        Err(Halt::Fail(f)) => Some(Outcome { ok: false, error: Some(f.code), message: Some(f.message), dispatched, value: f.value }),
        Err(Halt::Unresolved) => None,
    }
}

struct Run {
    shared: Arc<Shared>,
    active: Arc<Active>,
    dispatched: bool,
}

/// The App the action addresses, as XCTest identifies it.
fn expected(active: &Active) -> Foreground {
    Foreground { bundle_id: active.request.target.bundle_id.clone(), process_id: active.request.target.process_id }
}

/// The targeted-action permission: session, then foreground.
fn permit(shared: &Shared, active: &Active) -> Result<Foreground, Fail> {
    let target = &active.request.target;
    let Some(session) = shared.session() else { return Err(fail("ios_wda_session_required", "the Runner has no session")) };
    if target.session_id.as_deref() != Some(session.session_id.as_str()) {
        return Err(fail("ios_wda_session_changed", format!("the Runner's session is {}", session.session_id)));
    }
    if session.bundle_id != target.bundle_id || session.process_id != target.process_id {
        return Err(fail("ios_wda_target_changed", "the session belongs to another App or process"));
    }
    let fg = expected(active);
    if shared.screen.foreground().as_ref() != Some(&fg) {
        return Err(fail("ios_wda_target_changed", "the target App/PID is no longer foreground"));
    }
    Ok(fg)
}

fn fact(active: &Active, event: &str, detail: Value, error: Option<&str>) -> Value {
    let t = &active.request.target;
    json!({
        "source": "wda",
        "event": event,
        "actionId": active.request.action_id,
        "operation": active.operation(),
        "runnerBundleId": active.runner_bundle_id,
        "runnerEpoch": active.epoch,
        "bundleId": t.bundle_id,
        "processId": t.process_id,
        "sessionId": t.session_id,
        "detail": detail,
        "error": error,
    })
}

/// Interface orientation → the device direction XCTest is asked for (landscape is mirrored).
fn device_orientation(interface: &str) -> &'static str {
    match interface {
        "landscapeLeft" => "landscapeRight",
        "landscapeRight" => "landscapeLeft",
        "portraitUpsideDown" => "portraitUpsideDown",
        _ => "portrait",
    }
}

/// Preorder search of a WDA JSON source tree.
pub fn find_nodes(root: &Value, mut keep: impl FnMut(&Value) -> bool, limit: usize) -> Vec<&Value> {
    let (mut out, mut stack, mut seen) = (Vec::new(), vec![root], 0usize);
    while let Some(n) = stack.pop() {
        seen += 1;
        if seen > MAX_TREE_NODES || out.len() >= limit {
            break;
        }
        if keep(n) {
            out.push(n);
        }
        if let Some(children) = n["children"].as_array() {
            stack.extend(children.iter().rev());
        }
    }
    out
}

fn node_string(n: &Value, key: &str) -> Option<String> {
    n[key].as_str().map(str::to_string)
}

/// `aab.ios-native-target/v1` revalidation immediately before the event: the
/// same UID, type, raw identifier and label, still visible and enabled. Returns
/// the element's centre.
fn revalidate(screen: &dyn NativeScreen, fg: &Foreground, target: &TargetRef) -> Result<(f64, f64), Fail> {
    let Some(tree) = screen.source(fg) else { return Err(fail("ios_wda_target_changed", "the target App is no longer foreground")) };
    let changed = |what: &str| fail("ios_native_target_changed", format!("element {}: {what}", target.element_id));
    let Some(node) = find_nodes(&tree, |n| n["elementId"] == target.element_id.as_str(), 1).into_iter().next() else { return Err(changed("no longer in the tree")) };
    if node["type"] != target.element_type.as_str() {
        return Err(changed("its type changed"));
    }
    if node_string(node, "rawIdentifier") != target.identifier {
        return Err(changed("its accessibility identifier changed"));
    }
    if node_string(node, "label") != target.label {
        return Err(changed("its label changed"));
    }
    if node["isVisible"] != "1" {
        return Err(changed("it is no longer visible"));
    }
    if node["isEnabled"] != "1" {
        return Err(changed("it is disabled"));
    }
    let r = &node["rect"];
    let (x, y, w, h) = (r["x"].as_f64(), r["y"].as_f64(), r["width"].as_f64(), r["height"].as_f64());
    match (x, y, w, h) {
        (Some(x), Some(y), Some(w), Some(h)) => Ok((x + w / 2.0, y + h / 2.0)),
        _ => Err(changed("it has no frame")),
    }
}

impl Run {
    async fn operation(&mut self) -> Step<Value> {
        self.queued().await?;
        match self.active.request.operation.clone() {
            Operation::SessionCreate => self.session_create().await,
            Operation::SessionClose => self.session_close().await,
            Operation::Tap { x, y } => {
                let hit = self.event("tap", json!({ "x": x, "y": y }), "ios_wda_event_failed", |_, _| Ok(()), move |s, fg, ()| s.tap(fg, x, y)).await?;
                Ok(json!({ "x": x, "y": y, "hitElementId": hit }))
            }
            Operation::Swipe { start, end, duration_ms } => {
                let detail = json!({ "startX": start.0, "startY": start.1, "endX": end.0, "endY": end.1, "durationMs": duration_ms });
                self.event("swipe", detail.clone(), "ios_wda_event_failed", |_, _| Ok(()), move |s, fg, ()| s.swipe(fg, start, end, duration_ms)).await?;
                Ok(detail)
            }
            Operation::Input { element_id, text, clear_first } => self.input(element_id, None, text, clear_first).await,
            Operation::NativeTap { target_ref } => {
                let id = target_ref.element_id.clone();
                let hit = self
                    .event("tap", json!({ "elementId": id }), "ios_native_target_changed", move |s, fg| revalidate(s, fg, &target_ref), move |s, fg, (x, y)| s.tap(fg, x, y).map(|hit| (hit, x, y)))
                    .await?;
                Ok(json!({ "elementId": id, "x": hit.1, "y": hit.2, "hitElementId": hit.0 }))
            }
            Operation::NativeInput { target_ref, text, clear_first } => self.input(target_ref.element_id.clone(), Some(target_ref), text, clear_first).await,
            Operation::SetOrientation { orientation } => self.set_orientation(orientation).await,
        }
    }

    fn check_stop(&self) -> Step<()> {
        match self.active.stop_reason() {
            Some(reason) => Err(fail(reason, "the action was stopped before its next event").into()),
            None => Ok(()),
        }
    }

    /// The admitted action waiting for the main queue (`wdaSlowActionMs`); a
    /// stop ends it here without any event.
    async fn queued(&self) -> Step<()> {
        let ms = self.shared.faults().slow_action_ms;
        if ms > 0 {
            let mut stop = self.active.stop_watch();
            tokio::select! {
                _ = tokio::time::sleep(std::time::Duration::from_millis(ms)) => {}
                _ = stop.wait_for(Option::is_some) => {}
            }
        }
        self.check_stop()
    }

    /// Runs `f` on the "main queue" (a blocking thread: the screen is synchronous).
    async fn main<T: Send + 'static>(&self, f: impl FnOnce(&Shared, &Active) -> T + Send + 'static) -> Step<T> {
        let (shared, active) = (self.shared.clone(), self.active.clone());
        tokio::task::spawn_blocking(move || f(&shared, &active)).await.map_err(|_| Halt::Unresolved)
    }

    /// One permitted event: permission, `pre` (its own precondition, whose value
    /// `act` uses), then the submission. `element_code` names a gone or
    /// unusable element for this operation.
    async fn event<P: Send + 'static, T: Send + 'static>(
        &mut self,
        event: &'static str,
        detail: Value,
        element_code: &'static str,
        pre: impl FnOnce(&dyn NativeScreen, &Foreground) -> Result<P, Fail> + Send + 'static,
        act: impl FnOnce(&dyn NativeScreen, &Foreground, P) -> Result<T, EventError> + Send + 'static,
    ) -> Step<T> {
        self.check_stop()?;
        let (result, submitted) = self
            .main(move |shared, active| {
                let fg = match permit(shared, active) {
                    Ok(fg) => fg,
                    Err(f) => return (Err(f), false),
                };
                let p = match pre(&*shared.screen, &fg) {
                    Ok(p) => p,
                    Err(f) => return (Err(f), false),
                };
                active.permission_issued.store(true, Ordering::SeqCst);
                let r = act(&*shared.screen, &fg, p);
                let submitted = matches!(r, Ok(_) | Err(EventError::Failed(_)));
                let r = r.map_err(|e| match e {
                    EventError::TargetChanged => fail("ios_wda_target_changed", "the target App changed before the event was submitted"),
                    EventError::ElementGone => fail(element_code, "the element is gone"),
                    EventError::NotOperable(m) => fail(element_code, format!("the element cannot take the event: {m}")),
                    EventError::Failed(m) => fail("ios_wda_event_failed", format!("XCTest reported the {event} event failed: {m}")),
                });
                if submitted {
                    shared.screen.record(fact(active, event, detail, r.as_ref().err().map(|f| f.code)));
                }
                (r, submitted)
            })
            .await?;
        self.dispatched |= submitted;
        Ok(result?)
    }

    // The session lock is never held across a screen call: the device model
    // reads the Runner's state while holding its own lock.
    async fn session_create(&mut self) -> Step<Value> {
        let created = self
            .main(|shared, active| {
                let fg = expected(active);
                if shared.screen.foreground().as_ref() != Some(&fg) {
                    return Err(fail("ios_wda_target_changed", "the App/PID is not foreground; a session never launches an App"));
                }
                let session = Session { session_id: ids::uuid_v4(), bundle_id: fg.bundle_id, process_id: fg.process_id };
                {
                    let mut slot = shared.session.lock().unwrap();
                    if let Some(existing) = slot.as_ref() {
                        return Err(fail("ios_wda_session_exists", format!("session {} is open; close it first", existing.session_id)));
                    }
                    active.permission_issued.store(true, Ordering::SeqCst);
                    *slot = Some(session.clone());
                }
                shared.screen.record(fact(active, "session-create", json!({ "sessionId": session.session_id }), None));
                Ok(session)
            })
            .await?;
        let session = created?;
        self.dispatched = true;
        Ok(session.to_json())
    }

    async fn session_close(&mut self) -> Step<Value> {
        let closed = self
            .main(|shared, active| {
                let target = &active.request.target;
                let session = {
                    let mut slot = shared.session.lock().unwrap();
                    let Some(session) = slot.clone() else { return Err(fail("ios_wda_session_required", "the Runner has no session")) };
                    if target.session_id.as_deref() != Some(session.session_id.as_str()) {
                        return Err(fail("ios_wda_session_changed", format!("the Runner's session is {}", session.session_id)));
                    }
                    if session.bundle_id != target.bundle_id || session.process_id != target.process_id {
                        return Err(fail("ios_wda_target_changed", "the session belongs to another App or process"));
                    }
                    // Closing never needs the App in the foreground and never terminates it.
                    active.permission_issued.store(true, Ordering::SeqCst);
                    *slot = None;
                    session
                };
                shared.screen.record(fact(active, "session-close", json!({ "sessionId": session.session_id }), None));
                Ok(session)
            })
            .await?;
        let session = closed?;
        self.dispatched = true;
        Ok(json!({ "sessionId": session.session_id, "bundleId": session.bundle_id, "processId": session.process_id, "closed": true }))
    }

    /// Click the editor, optionally one HID clear with the empty value observed,
    /// then XCTest text input; each keyboard event requires the editor's focus.
    async fn input(&mut self, element_id: String, native: Option<TargetRef>, text: String, clear_first: bool) -> Step<Value> {
        let code = "ios_wda_input_target_changed";
        let id = element_id.clone();
        self.event(
            "focus",
            json!({ "elementId": element_id }),
            code,
            move |s, fg| match &native {
                Some(target) => revalidate(s, fg, target).map(|_| ()),
                None => match s.source(fg) {
                    None => Err(fail("ios_wda_target_changed", "the target App is no longer foreground")),
                    Some(tree) if find_nodes(&tree, |n| n["elementId"] == id.as_str(), 1).is_empty() => Err(fail(code, format!("element {id} is not in the tree"))),
                    Some(_) => Ok(()),
                },
            },
            {
                let id = element_id.clone();
                move |s, fg, ()| s.focus(fg, &id)
            },
        )
        .await?;
        self.require_focus(&element_id).await?;
        if clear_first {
            self.event("clear", json!({ "elementId": element_id, "usagePage": 7, "usage": 0x9c }), code, focus_pre(element_id.clone()), |s, fg, ()| s.clear_focused(fg)).await?;
            self.require_focus(&element_id).await?;
            let id = element_id.clone();
            let value = self.main(move |shared, active| shared.screen.value(&expected(active), &id)).await?;
            if value.as_deref().is_some_and(|v| !v.is_empty()) {
                return Err(fail("ios_wda_clear_not_observed", "the editor's raw value is not empty after the clear event").into());
            }
        }
        let text_length = text.chars().count();
        if !text.is_empty() {
            self.event("type", json!({ "elementId": element_id, "textLength": text_length }), code, focus_pre(element_id.clone()), move |s, fg, ()| s.type_text(fg, &text)).await?;
        }
        Ok(json!({ "elementId": element_id, "clearFirst": clear_first, "textLength": text_length }))
    }

    /// A fresh editor/focus check after an event (not a permission: no event follows directly).
    async fn require_focus(&self, element_id: &str) -> Step<()> {
        self.check_stop()?;
        let focused = self.main(|shared, active| shared.screen.focused(&expected(active))).await?;
        if focused.as_deref() != Some(element_id) {
            return Err(fail("ios_wda_input_target_changed", format!("element {element_id} does not have keyboard focus")).into());
        }
        Ok(())
    }

    async fn set_orientation(&mut self, orientation: String) -> Step<Value> {
        let ignored = self.shared.faults().orientation_ignored;
        let requested = orientation.clone();
        let detail = json!({ "requestedOrientation": orientation, "deviceOrientation": device_orientation(&orientation), "appRefused": ignored });
        let observed = self
            .event("orientation", detail, "ios_wda_event_failed", |_, _| Ok(()), move |s, fg, ()| if ignored { Ok(s.orientation()) } else { s.set_orientation(fg, &requested) })
            .await?;
        let observed = Some(observed).filter(|o| !o.is_empty());
        let value = json!({ "requestedOrientation": orientation, "observedInterfaceOrientation": observed });
        if observed.as_deref() != Some(orientation.as_str()) {
            let mut f = fail("ios_wda_orientation_not_observed", format!("requested {orientation}, the App's interface is {}", observed.as_deref().unwrap_or("unknown")));
            f.value = Some(value);
            return Err(f.into());
        }
        Ok(value)
    }
}

/// A keyboard event's precondition: the editor still holds focus.
fn focus_pre(element_id: String) -> impl FnOnce(&dyn NativeScreen, &Foreground) -> Result<(), Fail> + Send + 'static {
    move |s, fg| {
        if s.focused(fg).as_deref() == Some(element_id.as_str()) {
            Ok(())
        } else {
            Err(fail("ios_wda_input_target_changed", format!("element {element_id} lost keyboard focus before the keyboard event")))
        }
    }
}
