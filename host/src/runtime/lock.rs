//! Owner election: an exclusive SQLite transaction on `owner.sqlite`, held for the
//! daemon's whole life and released by the OS when the process dies (so `kill -9`
//! leaves nothing that blocks the next start). A busy lock is authoritative: no
//! PID or timeout ever overrides it.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use rusqlite::{Connection, ErrorCode};

use crate::error::CommandError;

pub struct OwnerLock {
    _conn: Connection,
}

/// `Ok(Some)` = we own the runtime directory; `Ok(None)` = someone else does.
pub fn try_acquire(path: &Path) -> Result<Option<OwnerLock>, CommandError> {
    let unavailable = |e: rusqlite::Error| CommandError::new("runtime_lock_unavailable", format!("cannot use owner lock {}: {e}", path.display()));
    let conn = Connection::open(path).map_err(unavailable)?;
    let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600));
    conn.busy_timeout(std::time::Duration::ZERO).map_err(unavailable)?;
    match conn.execute_batch("BEGIN EXCLUSIVE") {
        Ok(()) => Ok(Some(OwnerLock { _conn: conn })),
        Err(rusqlite::Error::SqliteFailure(e, _)) if e.code == ErrorCode::DatabaseBusy || e.code == ErrorCode::DatabaseLocked => Ok(None),
        Err(e) => Err(unavailable(e)),
    }
}

/// True when nobody holds the lock right now (the probe releases it at once).
pub fn is_free(path: &Path) -> Result<bool, CommandError> {
    Ok(try_acquire(path)?.is_some())
}

/// Where SQLite's unix VFS places its lock bytes (PENDING, RESERVED, then the
/// 510-byte SHARED range), starting at 1 GiB into the file.
const SQLITE_LOCK_RANGE_START: libc::off_t = 0x4000_0000;
const SQLITE_LOCK_RANGE_LEN: libc::off_t = 512;

/// True when some process holds a lock on the owner database right now.
///
/// Unlike [`is_free`], this never takes the lock: it asks the kernel with `F_GETLK`
/// whether a write lock on SQLite's lock bytes would conflict. A client uses it
/// before trusting an endpoint record, so a probe can neither race a starting
/// daemon out of its election nor treat a stale record of a dead owner as live.
/// Never call it inside the owner process: POSIX locks do not conflict with their
/// own process, and closing the probe's descriptor would drop the owner's locks.
pub fn is_held(path: &Path) -> Result<bool, CommandError> {
    let file = match crate::fsread::open_regular(path) {
        Ok(Some(f)) => f,
        Ok(None) => return Ok(false),
        Err(e) => return Err(CommandError::new("runtime_lock_unavailable", format!("cannot inspect owner lock {}: {e}", path.display()))),
    };
    use std::os::fd::AsRawFd;
    // SAFETY: an all-zero flock is a valid value; fields are set below.
    let mut probe: libc::flock = unsafe { std::mem::zeroed() };
    probe.l_type = libc::F_WRLCK as _;
    probe.l_whence = libc::SEEK_SET as _;
    probe.l_start = SQLITE_LOCK_RANGE_START;
    probe.l_len = SQLITE_LOCK_RANGE_LEN;
    // SAFETY: valid descriptor and a properly initialised flock.
    let rc = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GETLK, &mut probe) };
    if rc != 0 {
        return Err(CommandError::new("runtime_lock_unavailable", format!("cannot inspect owner lock {}: {}", path.display(), std::io::Error::last_os_error())));
    }
    // Dropping `file` releases no lock: this process holds none on the owner file.
    Ok(i32::from(probe.l_type) != libc::F_UNLCK)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn is_held_sees_another_process_holding_the_lock_without_taking_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("owner.sqlite");
        assert!(!is_held(&path).unwrap(), "no file, no owner");
        drop(try_acquire(&path).unwrap());
        assert!(!is_held(&path).unwrap(), "released lock");
        // A child process holds the lock (POSIX locks never conflict within one process).
        let script = format!(
            "import sqlite3,sys,time\nc=sqlite3.connect({:?},isolation_level=None)\nc.execute('BEGIN EXCLUSIVE')\nprint('held',flush=True)\nsys.stdin.read()\n",
            path.display().to_string()
        );
        let mut child = std::process::Command::new("python3").arg("-c").arg(script).stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped()).spawn().unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.as_mut().unwrap()), &mut line).unwrap();
        assert_eq!(line.trim(), "held");
        assert!(is_held(&path).unwrap(), "held by the child");
        assert!(is_held(&path).unwrap(), "probing twice does not disturb it");
        drop(child.stdin.take());
        child.wait().unwrap();
        assert!(!is_held(&path).unwrap(), "released when the holder exits");
    }
}
