//! `tcp:PORT` and `localabstract:NAME` streams. A simulator-held listener of
//! that name (an app's SDK socket, a test's listener) gets the stream itself;
//! otherwise `tcp:` reaches the machine's loopback and `localabstract:` a real
//! abstract Unix socket — device processes share this machine's network.

use std::sync::Arc;

use tokio::io::DuplexStream;
use tokio::net::{TcpStream, UnixStream};

use crate::device::Device;

pub enum Target {
    Held(String),
    Tcp(TcpStream),
    Unix(UnixStream),
}

pub async fn resolve(dev: &Arc<Device>, name: &str) -> Option<Target> {
    let key = if let Some(port) = name.strip_prefix("tcp:") {
        // `tcp:HOST:PORT` is accepted by adbd too; only loopback is meaningful here.
        let port = port.rsplit(':').next()?.parse::<u16>().ok()?;
        format!("tcp:{port}")
    } else if let Some(n) = name.strip_prefix("localabstract:") {
        format!("localabstract:{n}")
    } else {
        return None;
    };
    if dev.has_listener(&key) {
        return Some(Target::Held(key));
    }
    if let Some(port) = key.strip_prefix("tcp:") {
        let s = tokio::time::timeout(std::time::Duration::from_secs(2), TcpStream::connect(("127.0.0.1", port.parse::<u16>().ok()?))).await.ok()?.ok()?;
        return Some(Target::Tcp(s));
    }
    let n = key.strip_prefix("localabstract:")?;
    use std::os::linux::net::SocketAddrExt;
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(n.as_bytes()).ok()?;
    let s = std::os::unix::net::UnixStream::connect_addr(&addr).ok()?;
    s.set_nonblocking(true).ok()?;
    UnixStream::from_std(s).ok().map(Target::Unix)
}

pub async fn run(dev: Arc<Device>, target: Target, mut io: DuplexStream) {
    match target {
        Target::Held(key) => {
            if let Err(io) = dev.deliver(&key, io) {
                drop(io);
            }
        }
        Target::Tcp(mut s) => {
            let _ = tokio::io::copy_bidirectional(&mut io, &mut s).await;
        }
        Target::Unix(mut s) => {
            let _ = tokio::io::copy_bidirectional(&mut io, &mut s).await;
        }
    }
}
