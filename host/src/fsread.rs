//! Bounded reads of files that someone else may have replaced: the runtime's own
//! records (`endpoint.json`, `digest-cache.json`, the log tail). A careless operator
//! or a hostile process can put a FIFO, `/dev/zero`, a symlink or a huge file where a
//! small record belongs; a plain `fs::read` then blocks forever or grows without bound.
//! These helpers open without following symlinks and without blocking, accept only a
//! regular file, and never read more than the caller's cap.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Why a bounded read refused a file.
#[derive(Debug)]
pub enum ReadError {
    /// Not a regular file (FIFO, device, directory, socket) or a symlink.
    NotRegular(String),
    /// Larger than the cap.
    TooLarge(u64),
    Io(io::Error),
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::NotRegular(kind) => write!(f, "not a regular file ({kind})"),
            ReadError::TooLarge(max) => write!(f, "larger than {max} bytes"),
            ReadError::Io(e) => write!(f, "{e}"),
        }
    }
}

/// Open `path` read-only as a regular file: `O_NOFOLLOW` (a symlink fails with
/// ELOOP) and `O_NONBLOCK` (opening a FIFO never waits for a writer).
pub fn open_regular(path: &Path) -> Result<Option<File>, ReadError> {
    let file = match std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC).open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => return Err(ReadError::NotRegular("symlink".into())),
        Err(e) => return Err(ReadError::Io(e)),
    };
    let meta = file.metadata().map_err(ReadError::Io)?;
    if !meta.file_type().is_file() {
        let ft = meta.file_type();
        use std::os::unix::fs::FileTypeExt;
        let kind = if ft.is_fifo() {
            "fifo"
        } else if ft.is_char_device() || ft.is_block_device() {
            "device"
        } else if ft.is_dir() {
            "directory"
        } else if ft.is_socket() {
            "socket"
        } else {
            "special file"
        };
        return Err(ReadError::NotRegular(kind.into()));
    }
    Ok(Some(file))
}

/// The whole content of a regular file of at most `max` bytes; `Ok(None)` when it
/// does not exist. A file that grows past `max` while being read is refused too.
pub fn read_regular_bounded(path: &Path, max: u64) -> Result<Option<Vec<u8>>, ReadError> {
    let Some(file) = open_regular(path)? else { return Ok(None) };
    let len = file.metadata().map_err(ReadError::Io)?.len();
    if len > max {
        return Err(ReadError::TooLarge(max));
    }
    let mut bytes = Vec::with_capacity(len as usize);
    file.take(max + 1).read_to_end(&mut bytes).map_err(ReadError::Io)?;
    if bytes.len() as u64 > max {
        return Err(ReadError::TooLarge(max));
    }
    Ok(Some(bytes))
}

/// The last `max` bytes of a regular file (lossy UTF-8), empty when unreadable.
/// For diagnostics only (the runtime log tail in a start failure).
pub fn tail_lossy(path: &Path, max: u64) -> String {
    let Ok(Some(mut file)) = open_regular(path) else { return String::new() };
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    if file.seek(SeekFrom::Start(len.saturating_sub(max))).is_err() {
        return String::new();
    }
    let mut bytes = Vec::new();
    let _ = file.take(max).read_to_end(&mut bytes);
    String::from_utf8_lossy(&bytes).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_fifo_symlink_device_and_oversized_files_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        assert!(matches!(read_regular_bounded(&fifo, 1024), Err(ReadError::NotRegular(k)) if k == "fifo"));
        let link = dir.path().join("link");
        std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
        assert!(matches!(read_regular_bounded(&link, 1024), Err(ReadError::NotRegular(k)) if k == "symlink"));
        assert!(matches!(read_regular_bounded(Path::new("/dev/zero"), 1024), Err(ReadError::NotRegular(k)) if k == "device"));
        let big = dir.path().join("big");
        std::fs::write(&big, vec![b'x'; 2048]).unwrap();
        assert!(matches!(read_regular_bounded(&big, 1024), Err(ReadError::TooLarge(1024))));
        assert_eq!(read_regular_bounded(&big, 4096).unwrap().unwrap().len(), 2048);
        assert!(read_regular_bounded(&dir.path().join("missing"), 10).unwrap().is_none());
        assert_eq!(tail_lossy(&big, 10), "xxxxxxxxxx");
    }
}
