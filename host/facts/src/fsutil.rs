//! Filesystem rules the store and archives share: private directories owned by
//! the current user, exclusive creation, no-follow reads and fsync of both files
//! and the directories that name them.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

use crate::error::FactError;

pub(crate) fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Create (0700, parents too) or check the store directory: a real directory,
/// not a symlink, owned by us. An existing directory open to group/others is
/// tightened to 0700 when `tighten` (the writer owns it; a reader never
/// changes it).
pub(crate) fn prepare_store_dir(dir: &Path, create: bool, tighten: bool) -> Result<(), FactError> {
    let unsafe_dir = |why: String| FactError::new("fact_store_directory_unsafe", why).with_details(serde_json::json!({ "path": dir.display().to_string() }));
    match fs::symlink_metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && create => {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|e| FactError::io("fact_store_unavailable", &format!("cannot create {}", dir.display()), e))?;
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(FactError::new("fact_store_unavailable", format!("no fact store at {}", dir.display())));
        }
        Err(e) => return Err(FactError::io("fact_store_unavailable", &format!("cannot inspect {}", dir.display()), e)),
        Ok(_) => {}
    }
    let meta = fs::symlink_metadata(dir).map_err(|e| FactError::io("fact_store_unavailable", &format!("cannot inspect {}", dir.display()), e))?;
    if meta.file_type().is_symlink() || !meta.is_dir() {
        return Err(unsafe_dir(format!("{} is not a real directory", dir.display())));
    }
    if meta.uid() != euid() {
        return Err(unsafe_dir(format!("{} is owned by uid {}, not by the current user", dir.display(), meta.uid())));
    }
    if tighten && meta.mode() & 0o077 != 0 {
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
            .map_err(|e| FactError::io("fact_store_directory_unsafe", &format!("cannot restrict {}", dir.display()), e))?;
    }
    Ok(())
}

/// A new, empty private file (0600) that must not exist yet.
pub(crate) fn create_new_private(path: &Path) -> std::io::Result<File> {
    OpenOptions::new().write(true).create_new(true).mode(0o600).open(path)
}

pub(crate) fn sync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Write `bytes` to a new file (exclusive create) and fsync it.
pub(crate) fn write_new_file(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut f = create_new_private(path)?;
    f.write_all(bytes)?;
    f.sync_all()
}

/// Replace `path` atomically: temp file, fsync, rename, fsync the directory.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let tmp = dir.join(format!(".{}.tmp-{}", path.file_name().and_then(|n| n.to_str()).unwrap_or("file"), std::process::id()));
    let _ = fs::remove_file(&tmp);
    write_new_file(&tmp, bytes)?;
    fs::rename(&tmp, path)?;
    sync_dir(dir)
}

#[derive(Debug)]
pub(crate) enum NoFollowError {
    Missing,
    NotRegular,
    TooLarge(u64),
    Io(std::io::Error),
}

/// Read a regular file without following a symlink at its last component,
/// refusing anything larger than `max`.
pub(crate) fn read_regular_no_follow(path: &Path, max: u64) -> Result<Vec<u8>, NoFollowError> {
    let mut f = match OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK).open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(NoFollowError::Missing),
        // ELOOP: the last component is a symlink.
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => return Err(NoFollowError::NotRegular),
        Err(e) => return Err(NoFollowError::Io(e)),
    };
    let meta = f.metadata().map_err(NoFollowError::Io)?;
    if !meta.file_type().is_file() {
        return Err(NoFollowError::NotRegular);
    }
    if meta.len() > max {
        return Err(NoFollowError::TooLarge(meta.len()));
    }
    let mut buf = Vec::with_capacity(meta.len() as usize);
    (&mut f).take(max + 1).read_to_end(&mut buf).map_err(NoFollowError::Io)?;
    if buf.len() as u64 > max {
        return Err(NoFollowError::TooLarge(buf.len() as u64));
    }
    Ok(buf)
}
