//! A raw client of the runtime's loopback protocol (`aab.runtime/v2`), written from
//! the protocol description rather than shared with the host, so the trust tests
//! check the wire itself: the handshake, what an unauthenticated peer can make the
//! runtime do, and what it tells such a peer.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use serde_json::{Value, json};

pub const PROTOCOL: &str = "aab.runtime/v2";

/// HMAC-SHA256 keyed with the token over the label and both nonces.
pub fn proof(token: &str, label: &str, client_nonce: &str, runtime_nonce: &str) -> String {
    use hmac::{KeyInit, Mac};
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(token.as_bytes()).expect("any key length");
    mac.update(format!("aab.runtime/v2 {label}\n{client_nonce}\n{runtime_nonce}").as_bytes());
    mac.finalize().into_bytes().iter().map(|b| format!("{b:02x}")).collect()
}

pub struct Conn {
    pub stream: TcpStream,
    pub reader: BufReader<TcpStream>,
}

impl Conn {
    pub fn connect(port: u16) -> std::io::Result<Conn> {
        let stream = TcpStream::connect(("127.0.0.1", port))?;
        stream.set_read_timeout(Some(Duration::from_secs(20)))?;
        let reader = BufReader::new(stream.try_clone()?);
        Ok(Conn { stream, reader })
    }

    pub fn send_line(&mut self, line: &str) -> std::io::Result<()> {
        self.stream.write_all(line.as_bytes())?;
        self.stream.write_all(b"\n")?;
        self.stream.flush()
    }

    /// One reply line (empty at EOF), read with a bound.
    pub fn read_line(&mut self) -> std::io::Result<String> {
        let mut buf = Vec::new();
        (&mut self.reader).take(1 << 20).read_until(b'\n', &mut buf)?;
        Ok(String::from_utf8_lossy(&buf).into_owned())
    }

    /// Send a hello; returns the runtime's challenge object.
    pub fn hello(&mut self, client_nonce: &str) -> Result<Value, String> {
        self.send_line(&json!({"protocol": PROTOCOL, "hello": client_nonce}).to_string()).map_err(|e| e.to_string())?;
        let line = self.read_line().map_err(|e| e.to_string())?;
        serde_json::from_str(line.trim()).map_err(|e| format!("challenge is not JSON ({e}): {line:?}"))
    }

    /// The full handshake with `token`; checks the runtime's proof first.
    pub fn authenticated(port: u16, token: &str) -> Result<Conn, String> {
        let mut conn = Conn::connect(port).map_err(|e| e.to_string())?;
        let client_nonce = "c".repeat(64);
        let challenge = conn.hello(&client_nonce)?;
        let runtime_nonce = challenge.get("challenge").and_then(Value::as_str).ok_or_else(|| format!("no challenge: {challenge}"))?.to_string();
        let expected = proof(token, "runtime", &client_nonce, &runtime_nonce);
        if challenge.get("proof").and_then(Value::as_str) != Some(expected.as_str()) {
            return Err(format!("the runtime's proof does not match the token: {challenge}"));
        }
        conn.send_line(&json!({"protocol": PROTOCOL, "proof": proof(token, "client", &client_nonce, &runtime_nonce)}).to_string()).map_err(|e| e.to_string())?;
        Ok(conn)
    }

    /// One request frame → its reply frame.
    pub fn call(&mut self, frame: &Value) -> Result<Value, String> {
        self.send_line(&frame.to_string()).map_err(|e| e.to_string())?;
        let line = self.read_line().map_err(|e| e.to_string())?;
        serde_json::from_str(line.trim()).map_err(|e| format!("reply is not JSON ({e}): {line:?}"))
    }
}

