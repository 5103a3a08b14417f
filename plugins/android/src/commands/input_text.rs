//! `input-text`: replace the text of one editor through the app SDK (Unicode,
//! the editor's InputConnection): bound by a native selector
//! (`/v1/action/input-target` with the `targetRef` of a fresh tree), at
//! coordinates (`tapX`+`tapY`, `/v1/action/input-text`), or the focused editor.
//! The argument rules (selector XOR coordinates, coordinates together) are in
//! the schema, so the host refuses them before dispatch.

use aab_plugin_api::{Command, CommandSpec, Context, Invocation, ProviderError, Reply};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::cancellable;
use crate::AndroidProvider;
use crate::manifest::{device_mutation, MUTATION_REQUIRED, coordinate, object, package_name, port, props};
use crate::native_exec::{App, open};
use crate::native_target::{bind, selector_schema, summary};

fn spec() -> CommandSpec {
    let mut required = MUTATION_REQUIRED.to_vec();
    required.push("text");
    let mut schema = object(
        props(json!({
            "packageName": package_name(), "port": port("Host port of an existing or wanted adb forward to the SDK socket"),
            "text": {"type": "string", "maxLength": 16384, "description": "The editor's new whole text (empty clears it)"},
            "selector": selector_schema(),
            "tapX": coordinate("Screen x of the editor (with tapY; not with selector)"),
            "tapY": coordinate("Screen y of the editor (with tapX; not with selector)"),
            "hideKeyboard": {"type": "boolean", "description": "Hide the soft keyboard afterwards (needs the shell worker)"}
        })),
        &required,
    );
    schema["dependentRequired"] = json!({"tapX": ["tapY"], "tapY": ["tapX"]});
    schema["not"] = json!({"anyOf": [{"required": ["selector", "tapX"]}, {"required": ["selector", "tapY"]}]});
    device_mutation("input-text", "core", "android-app", "Replace the text of one editor through the app SDK: the editor a native selector names (revalidated by the SDK), the one at tapX/tapY, or the focused one; receipt and settlement proof, never retried.")
        .permission("app.interact")
        .input_schema(schema)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct InputTextArgs {
    pub package_name: String,
    pub serial: Option<String>,
    pub port: Option<u16>,
    pub adb: Option<String>,
    pub adb_timeout_ms: Option<u64>,
    pub text: String,
    pub selector: Option<Value>,
    pub tap_x: Option<f64>,
    pub tap_y: Option<f64>,
    #[serde(default)]
    pub hide_keyboard: bool,
}

pub struct InputText;
impl Command for InputText {
    type Provider = AndroidProvider;
    type Args = InputTextArgs;
    fn spec() -> CommandSpec {
        spec()
    }
    async fn run(_: &AndroidProvider, ctx: &Context<'_>, inv: &Invocation, args: InputTextArgs) -> Result<Reply, ProviderError> {
        let app = App { package: args.package_name.clone(), serial: args.serial.clone(), port: args.port, adb: args.adb.clone(), adb_timeout_ms: args.adb_timeout_ms };
        cancellable(ctx, async {
            let session = open(ctx, &app).await?;
            let mut body = Map::new();
            body.insert("text".into(), json!(args.text));
            let (path, bound) = match (&args.selector, args.tap_x, args.tap_y) {
                (Some(sel), _, _) => {
                    let node = bind(&session.tree().await?, sel, true)?;
                    body.insert("selector".into(), sel.clone());
                    body.insert("targetRef".into(), node["targetRef"].clone());
                    ("/v1/action/input-target", Some(summary(&node)))
                }
                (None, Some(x), Some(y)) => {
                    body.insert("x".into(), json!(x));
                    body.insert("y".into(), json!(y));
                    ("/v1/action/input-text", None)
                }
                _ => ("/v1/action/input-text", None),
            };
            let mut out = session.execute(ctx, inv, "input-text", path, body, 0).await?;
            if let Some(b) = bound {
                out["bound"] = b;
            }
            if args.hide_keyboard {
                out["hideKeyboard"] = hide_keyboard(ctx, inv, &args, &session.serial).await?;
            }
            Ok(Reply::Json(out))
        })
        .await
    }
}

/// `hideKeyboard`: after the text is in, `input keyevent 111` (ESCAPE) through the
/// shell worker as the second job of this action (`<action id>:1`). A refusal
/// before that job ran is reported beside the input's success; an unknown outcome
/// fails the call (ambiguous) so the device stays unresolved until reconciled.
async fn hide_keyboard(ctx: &Context<'_>, inv: &Invocation, args: &InputTextArgs, serial: &str) -> Result<Value, ProviderError> {
    let budget = super::Budget::new(ctx, args.adb_timeout_ms);
    let job = format!("{}:1", inv.action_id);
    let hidden = async {
        let device = super::device(args.adb.as_deref(), Some(serial), &budget).await?;
        crate::shell_exec::command_action(ctx, &job, &device, &budget, "input-text", Some(&args.package_name), &["input", "keyevent", "111"]).await
    };
    match hidden.await {
        Ok(run) => Ok(json!({"ok": true, "keyCode": 111, "execution": run.execution()})),
        // Nothing of the second job reached the phone: the input's success stands.
        Err(e) if e.dispatched == Some(false) => Ok(json!({"ok": false, "error": e.error, "message": e.message})),
        Err(e) => Err(e),
    }
}
