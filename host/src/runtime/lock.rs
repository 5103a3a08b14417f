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
