//! Device services an OPEN can name: parses the service string and runs the
//! matching handler on the stream's duplex end. Unknown services are refused
//! (the transport answers CLSE).

mod shell;
mod socket;
mod sync;

use std::sync::Arc;

use tokio::io::DuplexStream;

use crate::device::Device;

pub use shell::ShellMode;

pub enum Service {
    Shell { mode: ShellMode, command: String },
    Abb(Vec<String>),
    Sync,
    Socket(socket::Target),
    Reverse,
}

/// Resolves a service name; `None` refuses the OPEN.
pub async fn open(dev: &Arc<Device>, name: &[u8]) -> Option<Service> {
    if let Some(rest) = name.strip_prefix(b"abb_exec:") {
        let args = rest.split(|b| *b == 0).map(|a| String::from_utf8_lossy(a).into_owned()).collect();
        return Some(Service::Abb(args));
    }
    let name = String::from_utf8_lossy(name).into_owned();
    dev.record("service", serde_json::json!({ "name": name }));
    if name == "sync:" {
        return Some(Service::Sync);
    }
    if let Some(cmd) = name.strip_prefix("exec:") {
        return Some(Service::Shell { mode: ShellMode::Raw { merge_stderr: true }, command: cmd.to_string() });
    }
    if let Some(rest) = name.strip_prefix("shell") {
        let (opts, cmd) = rest.split_once(':')?;
        let v2 = opts.split(',').any(|o| o == "v2");
        let mode = if v2 { ShellMode::V2 } else { ShellMode::Raw { merge_stderr: true } };
        return Some(Service::Shell { mode, command: cmd.to_string() });
    }
    if let Some(rest) = name.strip_prefix("reverse:") {
        let _ = rest;
        return Some(Service::Reverse);
    }
    socket::resolve(dev, &name).await.map(Service::Socket)
}

impl Service {
    pub async fn run(self, dev: Arc<Device>, io: DuplexStream) {
        match self {
            Service::Shell { mode, command } => shell::run(dev, mode, command, io).await,
            Service::Abb(args) => crate::tools::abb_exec(dev, args, io).await,
            Service::Sync => sync::run(dev, io).await,
            Service::Socket(t) => socket::run(dev, t, io).await,
            Service::Reverse => {
                // Reverse forwarding is not simulated: answer FAIL like a device without it.
                use tokio::io::AsyncWriteExt;
                let mut io = io;
                let msg = b"reverse is not supported by aab-android-sim";
                let _ = io.write_all(format!("FAIL{:04x}", msg.len()).as_bytes()).await;
                let _ = io.write_all(msg).await;
            }
        }
    }
}
