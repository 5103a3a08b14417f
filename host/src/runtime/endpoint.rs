//! The endpoint record `<runtime_dir>/endpoint.json`: how clients find and
//! authenticate to the running daemon. Written 0600 to an exclusive temp file and
//! renamed into place, so a reader never sees a partial record.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::CommandError;

/// v2: connections are mutually authenticated by a challenge/response handshake
/// before any request is sent (see `protocol`).
pub const PROTOCOL: &str = "aab.runtime/v2";
const MAX_RECORD_BYTES: u64 = 16_384;

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EndpointRecord {
    pub protocol: String,
    pub runtime_id: String,
    pub pid: u32,
    pub token: String,
    pub port: u16,
    pub facts: String,
}

pub fn write(path: &Path, record: &EndpointRecord) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let tmp = dir.join(format!("endpoint.json.{}.tmp", crate::ids::uuid_v4()));
    let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp)?;
    f.write_all(&serde_json::to_vec(record).expect("endpoint serialises"))?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

/// `Ok(None)` when there is no record; `runtime_endpoint_invalid` for a record that
/// is not a small regular file (FIFO, device, symlink: refused without blocking),
/// malformed, of another protocol or for another FactStore.
pub fn read(path: &Path, facts: &str) -> Result<Option<EndpointRecord>, CommandError> {
    let bytes = match crate::fsread::read_regular_bounded(path, MAX_RECORD_BYTES) {
        Ok(Some(b)) => b,
        Ok(None) => return Ok(None),
        Err(e) => return Err(CommandError::new("runtime_endpoint_invalid", format!("cannot read {}: {e}", path.display()))),
    };
    let record: EndpointRecord =
        serde_json::from_slice(&bytes).map_err(|e| CommandError::new("runtime_endpoint_invalid", format!("{} is not a valid endpoint record: {e}", path.display())))?;
    let token_ok = record.token.len() == 64 && record.token.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if record.protocol != PROTOCOL || !token_ok || record.port == 0 || record.pid == 0 {
        return Err(CommandError::new("runtime_endpoint_invalid", format!("{} has an invalid protocol, token, port or pid", path.display())));
    }
    if record.facts != facts {
        return Err(CommandError::new("runtime_endpoint_invalid", format!("{} belongs to FactStore {}, not {facts}", path.display(), record.facts)));
    }
    Ok(Some(record))
}

/// True when `path` holds exactly `record` as a regular file (the owner's repair
/// check: anything else — missing, replaced, a FIFO — is rewritten).
pub fn is_intact(path: &Path, record: &EndpointRecord) -> bool {
    matches!(crate::fsread::read_regular_bounded(path, MAX_RECORD_BYTES), Ok(Some(bytes)) if serde_json::from_slice::<EndpointRecord>(&bytes).ok().as_ref() == Some(record))
}
