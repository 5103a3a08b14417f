//! Screenshot files, as every platform provider writes them: the PNG check (the
//! IHDR size) and the output target — `outFile` (that file, replaced atomically),
//! `artifactDir` (a new uniquely named file there) or the private default
//! directory under the system temp dir. One implementation, so a screenshot from an
//! Android phone and one from an iPhone land on disk the same way, with the same
//! error codes and fields.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::json;

use crate::ProviderError;

/// The device answered something that is not a PNG (an error text, nothing, a
/// truncated header). Never dispatched: a screenshot changes nothing.
pub const SCREENSHOT_NOT_PNG: &str = "screenshot_not_png";
/// The PNG could not be written where the caller asked (field names the argument).
pub const SCREENSHOT_WRITE_FAILED: &str = "screenshot_write_failed";
/// Largest PNG accepted from a device.
pub const MAX_PNG_BYTES: usize = 64 * 1024 * 1024;
/// The default directory (under the system temp dir), created private.
pub const DEFAULT_DIR: &str = "aab-screenshots";
pub const PNG_SIGNATURE: [u8; 8] = [0x89, b'P', b'N', b'G', b'\r', b'\n', 0x1a, b'\n'];

/// Width and height from the IHDR chunk (bytes 16..24), after the signature check;
/// `source` names what produced the bytes (e.g. "screencap").
pub fn png_size(bytes: &[u8], source: &str) -> Result<(u32, u32), ProviderError> {
    let not_png = |why: &str| {
        let head: String = String::from_utf8_lossy(&bytes[..bytes.len().min(200)]).into_owned();
        ProviderError::new(SCREENSHOT_NOT_PNG, format!("{source} did not return a PNG: {why}")).with_details(json!({"bytes": bytes.len(), "head": head})).not_dispatched()
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
    let width = u32::from_be_bytes([bytes[16], bytes[17], bytes[18], bytes[19]]);
    let height = u32::from_be_bytes([bytes[20], bytes[21], bytes[22], bytes[23]]);
    if width == 0 || height == 0 {
        return Err(not_png("zero width or height"));
    }
    Ok((width, height))
}

/// Where the PNG goes.
#[derive(Debug, PartialEq)]
pub enum Target {
    /// Exactly this file (replaced atomically).
    File(PathBuf),
    /// A new uniquely named file in this directory (`field` = the argument, or none for the default).
    Dir(PathBuf, Option<&'static str>),
}

fn resolve(cwd: &Path, p: &str) -> PathBuf {
    let p = Path::new(p);
    if p.is_absolute() { p.to_path_buf() } else { cwd.join(p) }
}

pub fn write_failed(field: Option<&str>, path: &Path, e: impl std::fmt::Display) -> ProviderError {
    let mut err = ProviderError::new(SCREENSHOT_WRITE_FAILED, format!("the screenshot cannot be written to {}: {e}", path.display())).with_details(json!({"path": path})).not_dispatched();
    if let Some(f) = field {
        err = err.with_field(f);
    }
    err
}

impl Target {
    /// The target of `outFile` / `artifactDir` (relative to the caller's cwd).
    /// Both at once is the schema's to refuse.
    pub fn of(out_file: Option<&str>, artifact_dir: Option<&str>, cwd: &Path) -> Result<Target, ProviderError> {
        match (out_file, artifact_dir) {
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

    /// Write `png` atomically; returns the final path. `device` names the file in a
    /// directory target (`screenshot-<device>-<ms>-<pid>-<n>.png`).
    pub fn write(&self, device: &str, png: &[u8]) -> Result<PathBuf, ProviderError> {
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
                let path = dir.join(unique_name(device));
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

/// `screenshot-<device>-<unix ms>-<pid>-<n>.png`, the device reduced to file-name characters.
fn unique_name(device: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let safe: String = device.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '.' { c } else { '_' }).collect();
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

    #[test]
    fn the_ihdr_gives_the_size_and_anything_else_is_refused() {
        assert_eq!(png_size(&png(1080, 2400), "screencap").unwrap(), (1080, 2400));
        for bad in [b"".to_vec(), b"Error: failed to capture the display\n".to_vec(), png(1080, 2400)[..20].to_vec(), png(0, 10)] {
            let e = png_size(&bad, "screencap").unwrap_err();
            assert_eq!((e.error.as_str(), e.dispatched), (SCREENSHOT_NOT_PNG, Some(false)), "{bad:?}");
        }
        let mut other_chunk = png(1, 1);
        other_chunk[12..16].copy_from_slice(b"gAMA");
        assert_eq!(png_size(&other_chunk, "devicectl").unwrap_err().error, SCREENSHOT_NOT_PNG);
    }

    #[test]
    fn targets_resolve_against_the_callers_directory() {
        let tmp = tempfile::tempdir().unwrap();
        let cwd = tmp.path();
        assert_eq!(Target::of(Some("shot.png"), None, cwd).unwrap(), Target::File(cwd.join("shot.png")));
        let abs = cwd.join("abs.png");
        assert_eq!(Target::of(Some(abs.to_str().unwrap()), None, cwd).unwrap(), Target::File(abs.clone()));
        assert_eq!(Target::of(None, Some("shots"), cwd).unwrap(), Target::Dir(cwd.join("shots"), Some("artifactDir")));
        assert_eq!(Target::of(None, None, cwd).unwrap(), Target::Dir(std::env::temp_dir().join(DEFAULT_DIR), None));
        let e = Target::of(Some("no/such/dir/x.png"), None, cwd).unwrap_err();
        assert_eq!((e.error.as_str(), e.field.as_deref()), (SCREENSHOT_WRITE_FAILED, Some("outFile")));
        let e = Target::of(Some("."), None, cwd).unwrap_err();
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
