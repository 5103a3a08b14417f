//! `ios-screenshot`: the device's screen as a PNG, taken with devicectl (`device
//! capture screenshot --destination <png> [--display-unique-id <id>]`, no SDK
//! needed) into a private temp dir, checked (PNG signature, IHDR size, bounded
//! read), then written atomically to `outFile` or a new file in `artifactDir`
//! (default `<temp>/aab-screenshots`). The reply carries path, bytes, width,
//! height and sha256.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use aab_ios_transport::devicectl::{Devicectl, select_device, step};
use aab_plugin_api::{Command, CommandSpec, Context, Invocation, ProviderError, Reply};
use serde_json::json;
use sha2::{Digest, Sha256};

use super::{cancellable, deadline};
use crate::IosProvider;
use crate::manifest::{PLATFORM, SDK_TIMEOUTS, object, props};

pub const SCREENSHOT_NOT_PNG: &str = "screenshot_not_png";
pub const SCREENSHOT_WRITE_FAILED: &str = "screenshot_write_failed";
pub const MAX_PNG_BYTES: u64 = 64 * 1024 * 1024;
pub const DEFAULT_DIR: &str = "aab-screenshots";
const PNG_SIGNATURE: [u8; 8] = [0x89, b'P', b'N', b'G', b'\r', b'\n', 0x1a, b'\n'];

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
        let target = Target::of(&args, Path::new(&inv.cwd))?;
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
    f.take(MAX_PNG_BYTES + 1).read_to_end(&mut bytes).map_err(|e| not_png(e.to_string()))?;
    if bytes.len() as u64 > MAX_PNG_BYTES {
        return Err(not_png(format!("larger than {MAX_PNG_BYTES} bytes")));
    }
    Ok(bytes)
}

/// Width and height from the IHDR chunk, after the signature check.
pub fn png_size(bytes: &[u8]) -> Result<(u32, u32), ProviderError> {
    let not_png = |why: &str| ProviderError::new(SCREENSHOT_NOT_PNG, format!("the screenshot is not a PNG: {why}")).with_details(json!({"bytes": bytes.len()})).not_dispatched();
    if bytes.len() < 24 || bytes[..8] != PNG_SIGNATURE {
        return Err(not_png("no PNG signature"));
    }
    if &bytes[12..16] != b"IHDR" {
        return Err(not_png("the first chunk is not IHDR"));
    }
    let width = u32::from_be_bytes([bytes[16], bytes[17], bytes[18], bytes[19]]);
    let height = u32::from_be_bytes([bytes[20], bytes[21], bytes[22], bytes[23]]);
    if width == 0 || height == 0 {
        return Err(not_png("zero width or height"));
    }
    Ok((width, height))
}

#[derive(Debug, PartialEq)]
enum Target {
    File(PathBuf),
    Dir(PathBuf, Option<&'static str>),
}

fn resolve(cwd: &Path, p: &str) -> PathBuf {
    let p = Path::new(p);
    if p.is_absolute() { p.to_path_buf() } else { cwd.join(p) }
}

fn write_failed(field: Option<&str>, path: &Path, e: impl std::fmt::Display) -> ProviderError {
    let mut err = ProviderError::new(SCREENSHOT_WRITE_FAILED, format!("the screenshot cannot be written to {}: {e}", path.display())).with_details(json!({"path": path})).not_dispatched();
    if let Some(f) = field {
        err = err.with_field(f);
    }
    err
}

impl Target {
    fn of(args: &ScreenshotArgs, cwd: &Path) -> Result<Target, ProviderError> {
        match (&args.out_file, &args.artifact_dir) {
            (Some(f), _) => {
                let path = resolve(cwd, f);
                if f.ends_with('/') || path.is_dir() {
                    return Err(write_failed(Some("outFile"), &path, "it is a directory (use artifactDir for a directory)"));
                }
                if !path.parent().is_some_and(Path::is_dir) {
                    return Err(write_failed(Some("outFile"), &path, "its directory does not exist"));
                }
                Ok(Target::File(path))
            }
            (None, Some(d)) => Ok(Target::Dir(resolve(cwd, d), Some("artifactDir"))),
            (None, None) => Ok(Target::Dir(std::env::temp_dir().join(DEFAULT_DIR), None)),
        }
    }

    fn write(&self, udid: &str, png: &[u8]) -> Result<PathBuf, ProviderError> {
        match self {
            Target::File(path) => {
                let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
                write_atomic(dir, path, png).map_err(|e| write_failed(Some("outFile"), path, e))?;
                Ok(path.clone())
            }
            Target::Dir(dir, field) => {
                let mut b = std::fs::DirBuilder::new();
                b.recursive(true);
                #[cfg(unix)]
                if field.is_none() {
                    // The shared temp dir: default screenshots are the caller's alone.
                    use std::os::unix::fs::DirBuilderExt;
                    b.mode(0o700);
                }
                b.create(dir).map_err(|e| write_failed(*field, dir, e))?;
                let path = dir.join(unique_name(udid));
                write_atomic(dir, &path, png).map_err(|e| write_failed(*field, &path, e))?;
                Ok(path)
            }
        }
    }
}

fn unique_name(udid: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let safe: String = udid.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' }).collect();
    let ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis()).unwrap_or(0);
    format!("ios-screenshot-{safe}-{ms}-{}-{}.png", std::process::id(), N.fetch_add(1, Ordering::Relaxed))
}

/// Temp file beside the target, synced, renamed over it (a reader sees the old or the new file).
fn write_atomic(dir: &Path, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = dir.join(format!(".{name}.{}.tmp", unique_name("")));
    let result = (|| {
        let mut f = std::fs::OpenOptions::new().write(true).create_new(true).open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        drop(f);
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_png_with_a_size_is_accepted() {
        let mut png = PNG_SIGNATURE.to_vec();
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
        let args = |out: Option<&str>, art: Option<&str>| ScreenshotArgs {
            device_id: None, bundle_id: None, runtime_url: None, ios_host: None, ios_port: None, devicectl: None, wda_url: None, wda_session_id: None, xcodebuild: None,
            out_file: out.map(str::to_string), artifact_dir: art.map(str::to_string), display_unique_id: None,
        };
        assert_eq!(Target::of(&args(Some("a.png"), None), dir.path()).unwrap(), Target::File(dir.path().join("a.png")));
        assert_eq!(Target::of(&args(Some("nope/a.png"), None), dir.path()).unwrap_err().field.as_deref(), Some("outFile"));
        assert_eq!(Target::of(&args(None, Some("shots")), dir.path()).unwrap(), Target::Dir(dir.path().join("shots"), Some("artifactDir")));
        let t = Target::of(&args(None, Some("shots")), dir.path()).unwrap();
        let p = t.write("00008110-1", b"png").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"png");
    }
}
