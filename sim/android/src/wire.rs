//! The adb transport's message framing (24-byte header + payload): constants,
//! encoding and reading. Nothing here knows about streams or services.

use tokio::io::{AsyncRead, AsyncReadExt};

pub const A_CNXN: u32 = 0x4e584e43;
pub const A_OPEN: u32 = 0x4e45504f;
pub const A_OKAY: u32 = 0x59414b4f;
pub const A_CLSE: u32 = 0x45534c43;
pub const A_WRTE: u32 = 0x45545257;
pub const A_AUTH: u32 = 0x48545541;

/// Version we answer with: ≥ 0x01000001 lets both sides skip checksums.
pub const VERSION: u32 = 0x0100_0001;
/// Largest payload we accept or send (adb 29 offers 1 MiB; adbd caps at 256 KiB).
pub const MAX_PAYLOAD: u32 = 256 * 1024;
/// Hard limit on an incoming payload, to refuse garbage headers.
const MAX_ACCEPTED: u32 = 1024 * 1024;

#[derive(Debug, Clone)]
pub struct Message {
    pub cmd: u32,
    pub arg0: u32,
    pub arg1: u32,
    pub data: Vec<u8>,
}

impl Message {
    pub fn new(cmd: u32, arg0: u32, arg1: u32, data: Vec<u8>) -> Self {
        Message { cmd, arg0, arg1, data }
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(24 + self.data.len());
        let sum: u32 = self.data.iter().map(|b| *b as u32).fold(0u32, u32::wrapping_add);
        for v in [self.cmd, self.arg0, self.arg1, self.data.len() as u32, sum, self.cmd ^ 0xffff_ffff] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&self.data);
        out
    }
}

/// Reads one message; `Ok(None)` on a clean EOF before a header.
pub async fn read_message<R: AsyncRead + Unpin>(r: &mut R) -> std::io::Result<Option<Message>> {
    let mut h = [0u8; 24];
    match r.read_exact(&mut h).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let w = |i: usize| u32::from_le_bytes(h[i * 4..i * 4 + 4].try_into().unwrap());
    let (cmd, arg0, arg1, len, magic) = (w(0), w(1), w(2), w(3), w(5));
    if magic != cmd ^ 0xffff_ffff || len > MAX_ACCEPTED {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, "bad adb message header"));
    }
    let mut data = vec![0u8; len as usize];
    r.read_exact(&mut data).await?;
    Ok(Some(Message { cmd, arg0, arg1, data }))
}
