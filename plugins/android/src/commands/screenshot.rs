//! `screenshot`: the device's screen as a PNG file, taken with `exec:screencap -p`
//! (`adb exec-out screencap -p`, aab-protocols §2.2 — no SDK needed) and written
//! with a bounded, atomic write (a temp file in the target directory, synced, then
//! renamed over the name). The reply carries the path, byte size, the IHDR width
//! and height, and the sha256 of the file. With `packageName` it also carries a
//! foreground identity probe (§2.2) taken right after the picture.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use aab_plugin_api::{Command, CommandSpec, Context, Invocation, ProviderError, Reply};
use serde::Deserialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::{Budget, cancellable, device};
use crate::AndroidProvider;
use crate::manifest::{object, package_name, props};

/// The device answered something that is not a PNG (an error text, nothing, a
/// truncated header). Never dispatched: a screenshot changes nothing.
pub const SCREENSHOT_NOT_PNG: &str = "screenshot_not_png";
/// The PNG could not be written where asked (`field` names the argument).
pub const SCREENSHOT_WRITE_FAILED: &str = "screenshot_write_failed";
/// Largest screenshot accepted from the device (a 4K RGBA frame uncompressed is ~33 MB).
pub const MAX_PNG_BYTES: usize = 64 * 1024 * 1024;
/// Where screenshots go when the call names neither `outFile` nor `artifactDir`.
pub const DEFAULT_DIR: &str = "aab-screenshots";

const PNG_SIGNATURE: [u8; 8] = [0x89, b'P', b'N', b'G', b'\r', b'\n', 0x1a, b'\n'];

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
        let target = Target::of(&args, Path::new(&inv.cwd))?;
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

/// Width and height from the IHDR chunk (bytes 16..24), after the signature check.
pub fn png_size(bytes: &[u8]) -> Result<(u32, u32), ProviderError> {
    let not_png = |why: &str| {
        let head: String = String::from_utf8_lossy(&bytes[..bytes.len().min(200)]).into_owned();
        ProviderError::new(SCREENSHOT_NOT_PNG, format!("screencap did not return a PNG: {why}")).with_details(json!({"bytes": bytes.len(), "head": head})).not_dispatched()
    };
    if bytes.is_empty() {
        return Err(not_png("the reply is empty"));
    }
    if bytes.len() < 24 || bytes[..8] != PNG_SIGNATURE {
        return Err(not_png("no PNG signature"));
    }
    if &bytes[12..16] != b"IHDR" {
        return Err(not_png("the first chunk is not IHDR"));
    }
    let width = u32::from_be_bytes(bytes[16..20].try_into().unwrap());
    let height = u32::from_be_bytes(bytes[20..24].try_into().unwrap());
    if width == 0 || height == 0 {
        return Err(not_png("zero width or height"));
    }
    Ok((width, height))
}

/// Where the PNG goes.
#[derive(Debug, PartialEq)]
enum Target {
    /// Exactly this file (replaced atomically).
    File(PathBuf),
    /// A new uniquely named file in this directory (`field` = the argument, or none for the default).
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
            // Both at once is refused by the schema (dependentSchemas).
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

    /// Write `png` atomically; returns the final path.
    fn write(&self, serial: &str, png: &[u8]) -> Result<PathBuf, ProviderError> {
        match self {
            Target::File(path) => {
                let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
                if !dir.is_dir() {
                    return Err(write_failed(Some("outFile"), path, "its directory does not exist"));
                }
                write_atomic(dir, path, png).map_err(|e| write_failed(Some("outFile"), path, e))?;
                Ok(path.clone())
            }
            Target::Dir(dir, field) => {
                create_dir(dir, field.is_none()).map_err(|e| write_failed(*field, dir, e))?;
                let path = dir.join(unique_name(serial));
                write_atomic(dir, &path, png).map_err(|e| write_failed(*field, &path, e))?;
                Ok(path)
            }
        }
    }
}

fn create_dir(dir: &Path, private: bool) -> std::io::Result<()> {
    let mut b = std::fs::DirBuilder::new();
    b.recursive(true);
    #[cfg(unix)]
    if private {
        // The shared temp dir: screenshots of the default location are the caller's alone.
        use std::os::unix::fs::DirBuilderExt;
        b.mode(0o700);
    }
    b.create(dir)
}

/// `screenshot-<serial>-<unix ms>-<pid>-<n>.png`, the serial reduced to file-name characters.
fn unique_name(serial: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let safe: String = serial.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '.' { c } else { '_' }).collect();
    let ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis()).unwrap_or(0);
    format!("screenshot-{safe}-{ms}-{}-{}.png", std::process::id(), N.fetch_add(1, Ordering::Relaxed))
}

/// Temp file beside the target (same file system), synced, renamed over it; the
/// temp file is removed on any failure, so a reader sees the old file or the new one.
fn write_atomic(dir: &Path, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = dir.join(format!(".{name}.{}-{}.tmp", std::process::id(), unique_name("")));
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

    fn png(w: u32, h: u32) -> Vec<u8> {
        let mut v = PNG_SIGNATURE.to_vec();
        v.extend_from_slice(&13u32.to_be_bytes());
        v.extend_from_slice(b"IHDR");
        v.extend_from_slice(&w.to_be_bytes());
        v.extend_from_slice(&h.to_be_bytes());
        v.extend_from_slice(&[8, 2, 0, 0, 0, 0, 0, 0, 0]);
        v
    }

    fn args(out_file: Option<&str>, artifact_dir: Option<&str>) -> ScreenshotArgs {
        ScreenshotArgs { serial: None, package_name: None, out_file: out_file.map(str::to_string), artifact_dir: artifact_dir.map(str::to_string), adb: None, adb_timeout_ms: None }
    }

    #[test]
    fn the_ihdr_gives_the_size_and_anything_else_is_refused() {
        assert_eq!(png_size(&png(1080, 2400)).unwrap(), (1080, 2400));
        for bad in [b"".to_vec(), b"Error: failed to capture the display\n".to_vec(), png(1080, 2400)[..20].to_vec(), png(0, 10)] {
            let e = png_size(&bad).unwrap_err();
            assert_eq!((e.error.as_str(), e.dispatched), (SCREENSHOT_NOT_PNG, Some(false)), "{bad:?}");
        }
        let mut other_chunk = png(1, 1);
        other_chunk[12..16].copy_from_slice(b"gAMA");
        assert_eq!(png_size(&other_chunk).unwrap_err().error, SCREENSHOT_NOT_PNG);
    }

    #[test]
    fn targets_resolve_against_the_callers_directory() {
        let tmp = tempfile::tempdir().unwrap();
        let cwd = tmp.path();
        assert_eq!(Target::of(&args(Some("shot.png"), None), cwd).unwrap(), Target::File(cwd.join("shot.png")));
        let abs = cwd.join("abs.png");
        assert_eq!(Target::of(&args(Some(abs.to_str().unwrap()), None), cwd).unwrap(), Target::File(abs.clone()));
        assert_eq!(Target::of(&args(None, Some("shots")), cwd).unwrap(), Target::Dir(cwd.join("shots"), Some("artifactDir")));
        assert_eq!(Target::of(&args(None, None), cwd).unwrap(), Target::Dir(std::env::temp_dir().join(DEFAULT_DIR), None));
        // Both at once never reaches here: the schema refuses the pair.
        let schema = aab_plugin_api::validate::input_schema_with_host_options(&spec());
        let validator = aab_plugin_api::validate::compile(&schema).unwrap();
        let e = aab_plugin_api::validate::validate_arguments("screenshot", &validator, &schema, &json!({"outFile": "a.png", "artifactDir": "d"})).unwrap_err();
        assert_eq!((e.field.as_deref(), e.dispatched), (Some("artifactDir"), Some(false)), "{e:?}");
        let e = Target::of(&args(Some("no/such/dir/x.png"), None), cwd).unwrap_err();
        assert_eq!((e.error.as_str(), e.field.as_deref()), (SCREENSHOT_WRITE_FAILED, Some("outFile")));
        let e = Target::of(&args(Some("."), None), cwd).unwrap_err();
        assert_eq!((e.error.as_str(), e.field.as_deref()), (SCREENSHOT_WRITE_FAILED, Some("outFile")));
    }

    #[test]
    fn writes_are_atomic_and_leave_no_temp_files() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("shot.png");
        std::fs::write(&file, b"old").unwrap();
        let t = Target::File(file.clone());
        assert_eq!(t.write("127.0.0.1:5555", &png(2, 3)).unwrap(), file);
        assert_eq!(std::fs::read(&file).unwrap(), png(2, 3));
        // A missing directory for outFile is the caller's mistake, named by field.
        let e = Target::File(tmp.path().join("no/such/dir/x.png")).write("s", &png(1, 1)).unwrap_err();
        assert_eq!((e.error.as_str(), e.field.as_deref()), (SCREENSHOT_WRITE_FAILED, Some("outFile")));
        // artifactDir is created; two shots get two names.
        let dir = tmp.path().join("a/b");
        let t = Target::Dir(dir.clone(), Some("artifactDir"));
        let (p1, p2) = (t.write("127.0.0.1:5555", &png(1, 1)).unwrap(), t.write("127.0.0.1:5555", &png(1, 1)).unwrap());
        assert_ne!(p1, p2);
        assert!(p1.starts_with(&dir) && p1.file_name().unwrap().to_str().unwrap().starts_with("screenshot-127.0.0.1_5555-"), "{p1:?}");
        let mut names: Vec<String> = std::fs::read_dir(tmp.path()).unwrap().chain(std::fs::read_dir(&dir).unwrap()).map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        names.sort();
        assert!(names.iter().all(|n| !n.ends_with(".tmp")), "{names:?}");
        // A directory that cannot be created (a file is in the way).
        let e = Target::Dir(file.join("sub"), Some("artifactDir")).write("s", &png(1, 1)).unwrap_err();
        assert_eq!((e.error.as_str(), e.field.as_deref()), (SCREENSHOT_WRITE_FAILED, Some("artifactDir")));
    }
}
