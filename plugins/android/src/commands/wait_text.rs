//! `wait-text`: poll the app's native view tree until every condition holds at
//! once in one fresh read: `targetText` and all `requireText` labels present,
//! every `absentText` label absent, `requireActivity` in the foreground. Labels
//! are the exact text and content descriptions of visible nodes. A read that
//! fails is `observation_unavailable` (never a successful absence); the deadline
//! (`timeoutMs`) is `deadline_exceeded` with the last check. A query: nothing is
//! dispatched.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use aab_plugin_api::{Command, CommandSpec, Context, Invocation, ProviderError, Reply, codes};
use serde::Deserialize;
use serde_json::{Value, json};

use super::tree::{TreeRead, read, walk};
use super::{AppArgs, Budget, cancellable};
use crate::AndroidProvider;
use crate::adb::Deadline;
use crate::manifest::{DEFAULT_ADB_TIMEOUT_MS, object, package_name, port, props};

pub const OBSERVATION_UNAVAILABLE: &str = "observation_unavailable";
const DEFAULT_INTERVAL_MS: u64 = 500;

fn labels_schema(what: &str) -> Value {
    json!({"type": "array", "minItems": 1, "maxItems": 64, "items": {"type": "string", "minLength": 1, "maxLength": 1024}, "description": what})
}

fn spec() -> CommandSpec {
    CommandSpec::query("wait-text")
        .platform("android")
        .domain("action")
        .target_kind("android-app")
        .summary("Wait until the app's native view tree shows targetText and every requireText label, shows none of the absentText labels, and requireActivity is in the foreground (exact text or content description of visible nodes, all in one fresh read; polled every intervalMs until timeoutMs).")
        .permission("app.interact")
        .target_key("serial")
        .target_key("packageName")
        // Its own lane: a long wait must not hold up tree/status reads of the same app.
        .lane("wait")
        .timeouts(10_000, 60_000)
        .input_schema(conditions(object(
            props(json!({
                "packageName": package_name(),
                "port": port("Host port of an existing or wanted adb forward to the SDK socket"),
                "provider": {"type": "string", "enum": ["auto", "native"], "description": "Tree provider: native (the SDK's view tree); auto = native here. Required (native) for waits with only absentText/requireActivity"},
                "targetText": {"type": "string", "minLength": 1, "maxLength": 1024, "description": "A label that must be present"},
                "requireText": labels_schema("Labels that must all be present (1–64)"),
                "absentText": labels_schema("Labels that must all be absent (1–64)"),
                "requireActivity": {"type": "string", "minLength": 1, "maxLength": 1024, "description": "Full class name of the Activity that must be in the foreground"},
                "intervalMs": {"type": "integer", "minimum": 10, "maximum": 60000, "description": "Pause between reads (default 500)"}
            })),
            &["packageName"],
        )))
}

/// The rules between arguments, in the schema so the host refuses them before any
/// device access: at least one condition, and a wait with no label to find (only
/// absence or an Activity) names its provider (`native`) explicitly.
fn conditions(mut schema: Value) -> Value {
    let any = |names: &[&str]| Value::Array(names.iter().map(|n| json!({"required": [n]})).collect());
    if let Value::Object(m) = &mut schema {
        m.insert("anyOf".into(), any(&["targetText", "requireText", "absentText", "requireActivity"]));
        m.insert(
            "if".into(),
            json!({"not": {"anyOf": any(&["targetText", "requireText"])}, "anyOf": any(&["absentText", "requireActivity"])}),
        );
        m.insert(
            "then".into(),
            json!({"required": ["provider"], "properties": {"provider": {"const": "native", "description": "a wait for absence or an Activity only names its provider: native"}}}),
        );
    }
    schema
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct WaitTextArgs {
    pub package_name: String,
    pub serial: Option<String>,
    pub port: Option<u16>,
    pub adb: Option<String>,
    pub adb_timeout_ms: Option<u64>,
    /// Checked by the schema; the SDK's native tree is the only provider here.
    #[allow(dead_code)]
    pub provider: Option<String>,
    pub target_text: Option<String>,
    #[serde(default)]
    pub require_text: Vec<String>,
    #[serde(default)]
    pub absent_text: Vec<String>,
    pub require_activity: Option<String>,
    pub interval_ms: Option<u64>,
}

/// What one read showed against the conditions.
#[derive(Debug, PartialEq)]
pub(crate) struct Check {
    pub present: Vec<String>,
    pub missing: Vec<String>,
    pub unexpected: Vec<String>,
    pub activity: Option<String>,
    pub activity_matched: Option<bool>,
}

impl Check {
    fn satisfied(&self) -> bool {
        self.missing.is_empty() && self.unexpected.is_empty() && self.activity_matched != Some(false)
    }
    fn json(&self) -> Value {
        json!({"present": self.present, "missing": self.missing, "unexpected": self.unexpected, "activity": self.activity, "activityMatched": self.activity_matched})
    }
}

/// The labels of a tree body: exact text and content descriptions of visible nodes.
pub(crate) fn labels(body: &Value) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    walk(body, |_, _, _, n| {
        if n.get("visible") != Some(&Value::Bool(true)) {
            return;
        }
        for field in ["text", "contentDescription"] {
            if let Some(s) = n.get(field).and_then(Value::as_str).filter(|s| !s.is_empty()) {
                out.insert(s.to_string());
            }
        }
    });
    out
}

pub(crate) fn check(body: &Value, args: &WaitTextArgs) -> Check {
    let labels = labels(body);
    let required: Vec<&String> = args.target_text.iter().chain(args.require_text.iter()).collect();
    let (mut present, mut missing) = (vec![], vec![]);
    for label in required {
        if labels.contains(label) { &mut present } else { &mut missing }.push(label.clone());
    }
    let unexpected = args.absent_text.iter().filter(|l| labels.contains(*l)).cloned().collect();
    let activity = body.get("activity").and_then(Value::as_str).map(str::to_string);
    let activity_matched = args.require_activity.as_ref().map(|a| activity.as_ref() == Some(a));
    Check { present, missing, unexpected, activity, activity_matched }
}

pub struct WaitText;
impl Command for WaitText {
    type Provider = AndroidProvider;
    type Args = WaitTextArgs;
    fn spec() -> CommandSpec {
        spec()
    }
    async fn run(_: &AndroidProvider, ctx: &Context<'_>, _: &Invocation, args: WaitTextArgs) -> Result<Reply, ProviderError> {
        let app = AppArgs { package_name: args.package_name.clone(), serial: args.serial.clone(), port: args.port, adb: args.adb.clone(), adb_timeout_ms: args.adb_timeout_ms };
        let interval = Duration::from_millis(args.interval_ms.unwrap_or(DEFAULT_INTERVAL_MS));
        // Give up a little before the host's deadline so the reply can carry the last check.
        let margin = super::wait_margin(ctx.remaining());
        let started = Instant::now();
        let end = Deadline::after(ctx.remaining().saturating_sub(margin));
        let budget = Budget { deadline: end, adb_step: Duration::from_millis(args.adb_timeout_ms.unwrap_or(DEFAULT_ADB_TIMEOUT_MS)) };
        cancellable(ctx, async {
            let mut polls = 0u64;
            let mut last: Option<(Check, String, String)> = None;
            // `polls` counts completed reads; one cut short by the deadline may still
            // have reached the app.
            loop {
                let read: TreeRead = match read(&app, &budget).await {
                    Ok(r) => r,
                    // The deadline passed during the read: that is the timeout, not a broken tree.
                    Err(_) if end.remaining().is_zero() => break,
                    Err(e) => {
                        let details = json!({"cause": {"error": e.error, "message": e.message, "details": e.details}, "polls": polls, "lastCheck": last.as_ref().map(|(c, _, _)| c.json())});
                        return Err(ProviderError::new(OBSERVATION_UNAVAILABLE, format!("the native view tree of {} could not be read: {}", args.package_name, e.message)).with_details(details).not_dispatched());
                    }
                };
                polls += 1;
                let c = check(&read.body, &args);
                if c.satisfied() {
                    return Ok(json!({
                        "ok": true, "provider": "native", "serial": read.serial, "packageName": args.package_name, "runtimeEpoch": read.runtime_epoch,
                        "matched": {"targetText": args.target_text, "requireText": args.require_text, "absentText": args.absent_text, "requireActivity": args.require_activity},
                        "activity": c.activity, "polls": polls, "elapsedMs": started.elapsed().as_millis() as u64,
                    }));
                }
                last = Some((c, read.serial, read.runtime_epoch));
                if end.remaining() <= interval {
                    break;
                }
                tokio::time::sleep(interval).await;
            }
            let details = json!({"provider": "native", "polls": polls, "elapsedMs": started.elapsed().as_millis() as u64,
                                 "lastCheck": last.as_ref().map(|(c, _, _)| c.json()), "serial": last.as_ref().map(|l| &l.1), "runtimeEpoch": last.as_ref().map(|l| &l.2)});
            let summary = match &last {
                Some((c, _, _)) => format!("missing {:?}, unexpected {:?}, activity {:?}", c.missing, c.unexpected, c.activity),
                None => "no read completed".to_string(),
            };
            Err(ProviderError::new(codes::DEADLINE_EXCEEDED, format!("the conditions did not hold before the deadline after {polls} reads: {summary}")).with_details(details).not_dispatched())
        })
        .await
        .map(Reply::Json)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::tree::tests::body;

    fn args(v: Value) -> WaitTextArgs {
        let mut base = json!({"packageName": "com.x.app"});
        base.as_object_mut().unwrap().extend(v.as_object().unwrap().clone());
        serde_json::from_value(base).unwrap()
    }

    #[test]
    fn labels_are_exact_visible_text_and_descriptions() {
        let mut b = body();
        b["windows"][0]["root"]["children"][2]["contentDescription"] = json!("Save draft");
        let l = labels(&b);
        assert!(l.contains("Sign in") && l.contains("Row 0") && l.contains("Save") && l.contains("Save draft"));
        assert!(!l.contains("Row 1"), "hidden nodes do not count: {l:?}");
    }

    #[test]
    fn a_check_needs_every_condition_at_once() {
        let c = check(&body(), &args(json!({"targetText": "Save", "requireText": ["Sign in", "Row 1", "sign in"], "absentText": ["Row 0", "Loading"]})));
        assert_eq!(c.present, ["Save", "Sign in"]);
        assert_eq!(c.missing, ["Row 1", "sign in"], "hidden and case-changed labels are missing");
        assert_eq!(c.unexpected, ["Row 0"]);
        assert!(!c.satisfied());
        let c = check(&body(), &args(json!({"requireText": ["Sign in"], "absentText": ["Row 1"], "requireActivity": "com.x.app.MainActivity"})));
        assert!(c.satisfied(), "{c:?}");
        let c = check(&body(), &args(json!({"requireActivity": ".MainActivity"})));
        assert_eq!(c.activity_matched, Some(false), "full class names only");
    }

    #[test]
    fn conditions_are_required_and_absence_only_waits_name_the_provider() {
        // The host's own validator with this command's schema decides.
        let schema = aab_plugin_api::validate::input_schema_with_host_options(&spec());
        let validator = aab_plugin_api::validate::compile(&schema).unwrap();
        let check = |extra: Value| {
            let mut a = json!({"packageName": "com.x.app"});
            a.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
            aab_plugin_api::validate::validate_arguments("wait-text", &validator, &schema, &a)
        };
        let e = check(json!({})).unwrap_err();
        assert_eq!(e.dispatched, Some(false), "{e:?}");
        let e = check(json!({"absentText": ["Loading"]})).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("provider"), "{e:?}");
        assert!(check(json!({"absentText": ["Loading"], "provider": "native"})).is_ok());
        let e = check(json!({"requireActivity": "a.B", "provider": "auto"})).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("provider"), "{e:?}");
        assert!(check(json!({"targetText": "Save"})).is_ok());
        assert!(check(json!({"requireText": []})).is_err(), "an empty label list is no condition");
    }
}
