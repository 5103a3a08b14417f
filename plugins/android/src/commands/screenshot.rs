//! `screenshot`: the device's screen as a PNG file, taken with `exec:screencap -p`
//! (`adb exec-out screencap -p`, aab-protocols §2.2 — no SDK needed) and written
//! with a bounded, atomic write (a temp file in the target directory, synced, then
//! renamed over the name). The reply carries the path, byte size, the IHDR width
//! and height, and the sha256 of the file. With `packageName` it also carries a
//! foreground identity probe (§2.2) taken right after the picture.

use std::path::Path;

use aab_plugin_api::{Command, CommandSpec, Context, Invocation, ProviderError, Reply};
use serde::Deserialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::{Budget, cancellable, device};
use crate::AndroidProvider;
use crate::manifest::{object, package_name, props};

use aab_plugin_api::screenshot::MAX_PNG_BYTES;
use aab_plugin_api::screenshot::Target;

fn spec() -> CommandSpec {
    CommandSpec::query("screenshot")
        .platform("android")
        .domain("core")
        .target_kind("android-device")
        .summary("Take a PNG screenshot of the device (adb exec-out screencap -p) into outFile or a new file in artifactDir; reports path, bytes, width, height and sha256.")
        .permission("app.read")
        .target_key("serial")
        .lane("observation")
        .timeouts(15_000, 60_000)
        .input_schema(exclusive_targets(object(
            props(json!({
                "packageName": package_name(),
                "outFile": {"type": "string", "minLength": 1, "maxLength": 4096, "description": "PNG file to write (relative to the caller's working directory); replaced atomically if it exists; its directory must exist"},
                "artifactDir": {"type": "string", "minLength": 1, "maxLength": 4096, "description": "Directory for a new, uniquely named PNG (created if missing; not with outFile). Default without outFile/artifactDir: <system temp dir>/aab-screenshots"},
            })),
            &[],
        )))
}

/// outFile and artifactDir exclude each other: the host refuses both at once.
fn exclusive_targets(mut schema: Value) -> Value {
    schema["dependentSchemas"] = json!({"outFile": {"properties": {"artifactDir": false}}});
    schema
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ScreenshotArgs {
    pub serial: Option<String>,
    pub package_name: Option<String>,
    pub out_file: Option<String>,
    pub artifact_dir: Option<String>,
    pub adb: Option<String>,
    pub adb_timeout_ms: Option<u64>,
}

pub struct Screenshot;
impl Command for Screenshot {
    type Provider = AndroidProvider;
    type Args = ScreenshotArgs;
    fn spec() -> CommandSpec {
        spec()
    }
    async fn run(_: &AndroidProvider, ctx: &Context<'_>, inv: &Invocation, args: ScreenshotArgs) -> Result<Reply, ProviderError> {
        let budget = Budget::new(ctx, args.adb_timeout_ms);
        // Decide the target before touching the device: a bad path costs no capture.
        let target = Target::of(args.out_file.as_deref(), args.artifact_dir.as_deref(), Path::new(&inv.cwd))?;
        cancellable(ctx, async {
            let device = device(args.adb.as_deref(), args.serial.as_deref(), &budget).await?;
            let png = device.exec("screencap -p", MAX_PNG_BYTES, budget.adb()).await.map_err(|e| e.not_dispatched())?;
            let (width, height) = png_size(&png)?;
            let path = target.write(&device.serial, &png)?;
            let sha256: String = Sha256::digest(&png).iter().map(|b| format!("{b:02x}")).collect();
            let mut reply = json!({
                "ok": true,
                "serial": device.serial,
                "path": path,
                "bytes": png.len(),
                "width": width,
                "height": height,
                "mimeType": "image/png",
                "sha256": sha256,
            });
            if let Some(package) = &args.package_name {
                match crate::foreground::probe(&device, budget.adb()).await {
                    Ok(fg) => {
                        reply["foreground"] = match fg {
                            Some(f) => json!({"packageName": f.window.package, "activity": f.window.activity, "pid": f.process.pid, "uid": f.uid, "matches": &f.window.package == package}),
                            None => json!({"packageName": null, "matches": false}),
                        }
                    }
                    // The picture is taken and kept; only the identity is unknown.
                    Err(e) => reply["foregroundError"] = json!({"error": e.error, "message": e.message}),
                }
            }
            Ok(reply)
        })
        .await
        .map(Reply::Json)
    }
}

/// Width and height of what `screencap` answered (refused unless a PNG).
pub fn png_size(bytes: &[u8]) -> Result<(u32, u32), ProviderError> {
    aab_plugin_api::screenshot::png_size(bytes, "screencap")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schema_refuses_both_targets_and_screencap_text_is_not_a_png() {
        // Both at once never reaches the shared target code: the schema refuses the pair.
        let schema = aab_plugin_api::validate::input_schema_with_host_options(&spec());
        let validator = aab_plugin_api::validate::compile(&schema).unwrap();
        let e = aab_plugin_api::validate::validate_arguments("screenshot", &validator, &schema, &json!({"outFile": "a.png", "artifactDir": "d"})).unwrap_err();
        assert_eq!((e.field.as_deref(), e.dispatched), (Some("artifactDir"), Some(false)), "{e:?}");
        let e = png_size(b"Error: failed to capture the display\n").unwrap_err();
        assert_eq!((e.error.as_str(), e.dispatched), (aab_plugin_api::screenshot::SCREENSHOT_NOT_PNG, Some(false)));
        assert!(e.message.starts_with("screencap did not return a PNG"), "{}", e.message);
    }
}
