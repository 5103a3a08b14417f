//! The adb server's port ("smart socket") protocol on one TCP connection: a request
//! is 4 hex digits of length plus an ASCII service name; the server answers `OKAY`
//! or `FAIL` + a length-prefixed message, then whatever the service speaks. Every
//! read and write here is bounded by the connection's [`Deadline`]; a future dropped
//! by a cancelled caller closes the socket (cancellation is drop-based).

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::{Deadline, Result, err};

/// The server's first answer to a request.
#[derive(Debug, PartialEq, Eq)]
pub enum Status {
    Okay,
    /// `FAIL` with the server's (or device's) message.
    Fail(String),
}

/// One connection to the adb server, with the deadline of the operation it serves.
pub struct Conn {
    stream: TcpStream,
    pub deadline: Deadline,
    /// What this connection is doing, for error messages.
    pub what: String,
}

/// Longest service name the server accepts (its 4-hex-digit length).
const MAX_REQUEST: usize = 0xffff;

impl Conn {
    /// Connect to the server. The raw I/O error is returned so the caller can tell
    /// "nothing listens" (start a server) from other failures.
    pub async fn connect(addr: SocketAddr, deadline: Deadline, what: &str) -> std::result::Result<Conn, ConnectError> {
        match tokio::time::timeout_at(deadline.instant(), TcpStream::connect(addr)).await {
            Err(_) => Err(ConnectError::Timeout),
            Ok(Err(e)) => Err(ConnectError::Io(e)),
            Ok(Ok(stream)) => {
                let _ = stream.set_nodelay(true);
                Ok(Conn { stream, deadline, what: what.to_string() })
            }
        }
    }

    pub fn timeout_error(&self) -> aab_plugin_api::ProviderError {
        err::timeout(&self.what, self.deadline)
    }

    /// Send one request (`<hex len><service>`).
    pub async fn send_request(&mut self, service: &str) -> Result<()> {
        if service.len() > MAX_REQUEST {
            return Err(err::command_failed(&self.what, format!("adb request too long ({} bytes)", service.len())));
        }
        let mut buf = format!("{:04x}", service.len()).into_bytes();
        buf.extend_from_slice(service.as_bytes());
        self.write_all(&buf).await
    }

    pub async fn write_all(&mut self, bytes: &[u8]) -> Result<()> {
        match tokio::time::timeout_at(self.deadline.instant(), self.stream.write_all(bytes)).await {
            Err(_) => Err(self.timeout_error()),
            Ok(Err(e)) => Err(err::connection_lost(&self.what, &e)),
            Ok(Ok(())) => Ok(()),
        }
    }

    /// Read exactly `n` bytes.
    pub async fn read_exact(&mut self, n: usize) -> Result<Vec<u8>> {
        let mut buf = vec![0u8; n];
        match tokio::time::timeout_at(self.deadline.instant(), self.stream.read_exact(&mut buf)).await {
            Err(_) => Err(self.timeout_error()),
            Ok(Err(e)) => Err(err::connection_lost(&self.what, &e)),
            Ok(Ok(_)) => Ok(buf),
        }
    }

    /// Read up to `buf.len()` bytes; 0 = the peer closed.
    pub async fn read_some(&mut self, buf: &mut [u8]) -> Result<usize> {
        match tokio::time::timeout_at(self.deadline.instant(), self.stream.read(buf)).await {
            Err(_) => Err(self.timeout_error()),
            Ok(Err(e)) => Err(err::connection_lost(&self.what, &e)),
            Ok(Ok(n)) => Ok(n),
        }
    }

    /// Read until the peer closes, refusing more than `limit` bytes.
    pub async fn read_to_end(&mut self, limit: usize) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        let mut chunk = vec![0u8; 64 * 1024];
        loop {
            let n = self.read_some(&mut chunk).await?;
            if n == 0 {
                return Ok(out);
            }
            if out.len() + n > limit {
                return Err(err::command_failed(&self.what, format!("output exceeds {limit} bytes")));
            }
            out.extend_from_slice(&chunk[..n]);
        }
    }

    /// `OKAY`, or `FAIL` with its message.
    pub async fn read_status(&mut self) -> Result<Status> {
        let head = self.read_exact(4).await?;
        match &head[..] {
            b"OKAY" => Ok(Status::Okay),
            b"FAIL" => Ok(Status::Fail(self.read_hex_string().await?)),
            other => Err(err::command_failed(&self.what, format!("unexpected adb server reply {:?}", String::from_utf8_lossy(other)))),
        }
    }

    /// `OKAY`, else the `FAIL` message as an `adb_command_failed` error.
    pub async fn expect_okay(&mut self) -> Result<()> {
        match self.read_status().await? {
            Status::Okay => Ok(()),
            Status::Fail(message) => Err(err::adb_fail(&self.what, &message)),
        }
    }

    /// A 4-hex-digit length-prefixed string.
    pub async fn read_hex_string(&mut self) -> Result<String> {
        let len = self.read_exact(4).await?;
        let len = std::str::from_utf8(&len).ok().and_then(|s| usize::from_str_radix(s, 16).ok());
        let Some(len) = len else {
            return Err(err::command_failed(&self.what, "malformed length prefix from the adb server"));
        };
        let body = self.read_exact(len).await?;
        Ok(String::from_utf8_lossy(&body).into_owned())
    }

    /// Send a request and require `OKAY`.
    pub async fn request(&mut self, service: &str) -> Result<()> {
        self.send_request(service).await?;
        self.expect_okay().await
    }
}

/// Why a connection to the server could not be made.
#[derive(Debug)]
pub enum ConnectError {
    Timeout,
    Io(std::io::Error),
}
