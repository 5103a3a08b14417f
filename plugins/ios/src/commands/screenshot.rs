//! `ios-screenshot`: the device's screen as a PNG, taken with devicectl (`device
//! capture screenshot --destination <png> [--display-unique-id <id>]`, no SDK
//! needed) into a private temp dir, checked (PNG signature, IHDR size, bounded
//! read), then written atomically to `outFile` or a new file in `artifactDir`
//! (default `<temp>/aab-screenshots`). The reply carries path, bytes, width,
//! height and sha256.

use std::path::Path;

use aab_ios_transport::devicectl::{Devicectl, select_device, step};
use aab_plugin_api::{Command, CommandSpec, Context, Invocation, ProviderError, Reply};
use serde_json::json;
use sha2::{Digest, Sha256};

use super::{cancellable, deadline};
use crate::IosProvider;
use crate::manifest::{PLATFORM, SDK_TIMEOUTS, object, props};

pub use aab_plugin_api::screenshot::{MAX_PNG_BYTES, SCREENSHOT_NOT_PNG};
use aab_plugin_api::screenshot::{Target, write_failed};

super::ios_args!(
    ScreenshotArgs(device_id: Option<String>, bundle_id: Option<String>) {
        out_file: Option<String>,
        artifact_dir: Option<String>,
        display_unique_id: Option<String>,
    }
);

pub struct Screenshot;
impl Command for Screenshot {
    type Provider = IosProvider;
    type Args = ScreenshotArgs;
    fn spec() -> CommandSpec {
        let mut schema = object(
            props(json!({
                "outFile": {"type": "string", "minLength": 1, "maxLength": 4096, "description": "PNG file to write (relative to the caller's working directory); replaced atomically; its directory must exist"},
                "artifactDir": {"type": "string", "minLength": 1, "maxLength": 4096, "description": "Directory for a new, uniquely named PNG (created if missing; not with outFile). Default: <system temp dir>/aab-screenshots"},
                "displayUniqueId": {"type": "string", "minLength": 1, "maxLength": 256, "pattern": "^[A-Za-z0-9._:-]+$", "description": "Which display to capture (devicectl --display-unique-id)"}
            })),
            &[],
        );
        schema["dependentSchemas"] = json!({"outFile": {"properties": {"artifactDir": false}}});
        CommandSpec::query("ios-screenshot")
            .platform(PLATFORM)
            .domain("ios")
            .target_kind("ios-device")
            .summary("Take a PNG screenshot of the iOS device with devicectl (device capture screenshot) into outFile or a new file in artifactDir; reports path, bytes, width, height and sha256. deviceId may be omitted when one device is connected.")
            .permission("app.read")
            .target_key("deviceId")
            .lane("observation")
            .timeouts(SDK_TIMEOUTS.0, SDK_TIMEOUTS.1)
            .input_schema(schema)
    }
    async fn run(_: &IosProvider, ctx: &Context<'_>, inv: &Invocation, args: ScreenshotArgs) -> Result<Reply, ProviderError> {
        let target = Target::of(args.out_file.as_deref(), args.artifact_dir.as_deref(), Path::new(&inv.cwd))?;
        let deadline = deadline(ctx);
        cancellable(ctx, async {
            let dc = Devicectl::resolve(args.devicectl.as_deref());
            let devices = dc.list_devices(step(deadline, 30)).await?;
            let device = match (&args.device_id, devices.as_slice()) {
                (Some(id), _) => select_device(&devices, id)?,
                (None, [one]) => one.clone(),
                (None, others) => {
                    return Err(ProviderError::new(if others.is_empty() { aab_ios_transport::codes::IOS_DEVICE_NOT_FOUND } else { aab_ios_transport::codes::IOS_DEVICE_AMBIGUOUS }, format!("devicectl lists {} devices: name one with deviceId", others.len()))
                        .with_field("deviceId")
                        .not_dispatched());
                }
            };
            let tmp = tempfile::Builder::new().prefix("aab-ios-screenshot-").tempdir().map_err(|e| write_failed(None, Path::new("<temp>"), e))?;
            let shot = tmp.path().join("screen.png");
            let result = dc.screenshot(&device.identifier, &shot, args.display_unique_id.as_deref(), deadline).await?;
            let png = read_bounded(&shot)?;
            let (width, height) = png_size(&png)?;
            let path = target.write(&device.udid, &png)?;
            let sha256: String = Sha256::digest(&png).iter().map(|b| format!("{b:02x}")).collect();
            Ok(Reply::Json(json!({
                "ok": true, "deviceId": device.identifier, "udid": device.udid, "path": path, "bytes": png.len(), "width": width, "height": height,
                "mimeType": "image/png", "sha256": sha256, "displayUniqueId": args.display_unique_id, "devicectl": result
            })))
        })
        .await
    }
}

fn read_bounded(path: &Path) -> Result<Vec<u8>, ProviderError> {
    use std::io::Read;
    let not_png = |why: String| ProviderError::new(SCREENSHOT_NOT_PNG, format!("devicectl wrote no usable screenshot: {why}")).not_dispatched();
    let f = std::fs::File::open(path).map_err(|e| not_png(e.to_string()))?;
    let mut bytes = Vec::new();
    f.take(MAX_PNG_BYTES as u64 + 1).read_to_end(&mut bytes).map_err(|e| not_png(e.to_string()))?;
    if bytes.len() > MAX_PNG_BYTES {
        return Err(not_png(format!("larger than {MAX_PNG_BYTES} bytes")));
    }
    Ok(bytes)
}

/// Width and height of what devicectl wrote (refused unless a PNG).
pub fn png_size(bytes: &[u8]) -> Result<(u32, u32), ProviderError> {
    aab_plugin_api::screenshot::png_size(bytes, "devicectl")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_png_with_a_size_is_accepted() {
        let mut png = aab_plugin_api::screenshot::PNG_SIGNATURE.to_vec();
        png.extend_from_slice(&[0, 0, 0, 13]);
        png.extend_from_slice(b"IHDR");
        png.extend_from_slice(&1170u32.to_be_bytes());
        png.extend_from_slice(&2532u32.to_be_bytes());
        assert_eq!(png_size(&png).unwrap(), (1170, 2532));
        assert_eq!(png_size(b"error: no device").unwrap_err().error, SCREENSHOT_NOT_PNG);
        let mut zero = png.clone();
        zero[16..20].copy_from_slice(&0u32.to_be_bytes());
        assert_eq!(png_size(&zero).unwrap_err().dispatched, Some(false));
    }

    #[test]
    fn out_file_needs_an_existing_directory() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(Target::of(Some("a.png"), None, dir.path()).unwrap(), Target::File(dir.path().join("a.png")));
        assert_eq!(Target::of(Some("nope/a.png"), None, dir.path()).unwrap_err().field.as_deref(), Some("outFile"));
        assert_eq!(Target::of(None, Some("shots"), dir.path()).unwrap(), Target::Dir(dir.path().join("shots"), Some("artifactDir")));
        let t = Target::of(None, Some("shots"), dir.path()).unwrap();
        let p = t.write("00008110-1", b"png").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"png");
    }
}
