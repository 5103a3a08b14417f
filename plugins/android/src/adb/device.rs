//! Device services, each on its own server connection switched with
//! `host:transport:<serial>`: shell protocol v2 (`shell,v2,raw:` — separate stdout
//! and stderr, the exit code, stdin closed explicitly), raw `exec:` streams, any
//! other service (`localabstract:…`), and the sync protocol (`STAT`, `RECV`, `SEND`).

use serde_json::json;

use super::server::AdbServer;
use super::wire::{Conn, Status};
use super::{Deadline, ProviderError, Result, codes, err, select};

/// Output limit for one device service (a runaway command must not exhaust memory).
pub const DEFAULT_OUTPUT_LIMIT: usize = 64 * 1024 * 1024;

/// One device, addressed by its serial.
#[derive(Clone, Debug)]
pub struct Device {
    pub server: AdbServer,
    pub serial: String,
}

/// What a `shell,v2` command produced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShellOutput {
    pub exit_code: u8,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

impl ShellOutput {
    pub fn stdout_text(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }
    pub fn stderr_text(&self) -> String {
        String::from_utf8_lossy(&self.stderr).into_owned()
    }
}

/// What a [`Device::shell_window`] collected; `exit_code` is `None` when the
/// window (or the output limit) ended the command.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ShellWindow {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub exit_code: Option<u8>,
    pub truncated: bool,
}

/// A sync `STAT` answer; all zero means "no such file" on the wire, kept as `None`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stat {
    pub mode: u32,
    pub size: u32,
    pub mtime: u32,
}

// Shell protocol v2 packet ids.
const SHELL_STDIN: u8 = 0;
const SHELL_STDOUT: u8 = 1;
const SHELL_STDERR: u8 = 2;
const SHELL_EXIT: u8 = 3;
const SHELL_CLOSE_STDIN: u8 = 4;

/// Largest sync `DATA` chunk (the protocol's limit).
const SYNC_CHUNK: usize = 64 * 1024;

/// Quote one argument for the device's POSIX shell.
pub fn quote(arg: &str) -> String {
    if !arg.is_empty() && arg.bytes().all(|b| b.is_ascii_alphanumeric() || b"_-./:=@%+,".contains(&b)) {
        return arg.to_string();
    }
    format!("'{}'", arg.replace('\'', r"'\''"))
}

/// Quote and join an argument vector into one shell command line.
pub fn command_line(argv: &[&str]) -> String {
    argv.iter().map(|a| quote(a)).collect::<Vec<_>>().join(" ")
}

impl Device {
    pub fn new(server: AdbServer, serial: impl Into<String>) -> Self {
        Device { server, serial: serial.into() }
    }

    /// A connection running the device service `service` (after its `OKAY`).
    pub async fn open(&self, service: &str, deadline: Deadline) -> Result<Conn> {
        let mut c = self.server.transport(&self.serial, deadline, service).await?;
        c.send_request(service).await?;
        match c.read_status().await? {
            Status::Okay => Ok(c),
            Status::Fail(m) => Err(select::map_transport_fail(&self.serial, service, &m)),
        }
    }

    /// Run `command` through the device shell with shell protocol v2.
    pub async fn shell(&self, command: &str, stdin: Option<&[u8]>, deadline: Deadline) -> Result<ShellOutput> {
        self.shell_limited(command, stdin, DEFAULT_OUTPUT_LIMIT, deadline).await
    }

    pub async fn shell_limited(&self, command: &str, stdin: Option<&[u8]>, limit: usize, deadline: Deadline) -> Result<ShellOutput> {
        let mut c = self.open(&format!("shell,v2,raw:{command}"), deadline).await?;
        c.what = format!("shell {}", truncate(command, 80));
        let mut out = Vec::new();
        if let Some(data) = stdin {
            for chunk in data.chunks(SYNC_CHUNK) {
                out.extend_from_slice(&shell_packet(SHELL_STDIN, chunk));
            }
        }
        // Close stdin at once so a command that reads it sees EOF instead of hanging.
        out.extend_from_slice(&shell_packet(SHELL_CLOSE_STDIN, &[]));
        c.write_all(&out).await?;
        let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
        loop {
            let head = match c.read_exact(5).await {
                Ok(h) => h,
                Err(e) if e.error == codes::ADB_COMMAND_FAILED => {
                    return Err(err::command_failed(&c.what, format!("the shell stream ended without an exit code ({})", e.message)));
                }
                Err(e) => return Err(e),
            };
            let len = u32::from_le_bytes([head[1], head[2], head[3], head[4]]) as usize;
            if stdout.len() + stderr.len() + len > limit {
                return Err(err::command_failed(&c.what, format!("output exceeds {limit} bytes")));
            }
            let data = c.read_exact(len).await?;
            match head[0] {
                SHELL_STDOUT => stdout.extend_from_slice(&data),
                SHELL_STDERR => stderr.extend_from_slice(&data),
                SHELL_EXIT => return Ok(ShellOutput { exit_code: data.first().copied().unwrap_or(255), stdout, stderr }),
                _ => {}
            }
        }
    }

    /// Run `command` with shell v2 and collect what it prints until it exits or
    /// `until` passes, whichever is first; then the connection is dropped, which ends
    /// the command on the device (adbd kills a shell whose stream closes). For
    /// commands that never end by themselves, such as `logcat` without `-d`. More
    /// than `limit` bytes of output also end the window (`truncated`).
    pub async fn shell_window(&self, command: &str, until: Deadline, limit: usize, deadline: Deadline) -> Result<ShellWindow> {
        let mut c = self.open(&format!("shell,v2,raw:{command}"), deadline).await?;
        c.what = format!("shell {}", truncate(command, 80));
        c.write_all(&shell_packet(SHELL_CLOSE_STDIN, &[])).await?;
        let mut w = ShellWindow::default();
        let collect = async {
            loop {
                let head = c.read_exact(5).await?;
                let len = u32::from_le_bytes([head[1], head[2], head[3], head[4]]) as usize;
                let data = c.read_exact(len).await?;
                match head[0] {
                    SHELL_STDOUT | SHELL_STDERR if w.stdout.len() + w.stderr.len() + len > limit => {
                        w.truncated = true;
                        return Ok::<(), ProviderError>(());
                    }
                    SHELL_STDOUT => w.stdout.extend_from_slice(&data),
                    SHELL_STDERR => w.stderr.extend_from_slice(&data),
                    SHELL_EXIT => {
                        w.exit_code = Some(data.first().copied().unwrap_or(255));
                        return Ok(());
                    }
                    _ => {}
                }
            }
        };
        match tokio::time::timeout_at(until.instant(), collect).await {
            Ok(Err(e)) if e.error == codes::ADB_COMMAND_FAILED => Err(err::command_failed(&c.what, format!("the shell stream ended without an exit code ({})", e.message))),
            Ok(Err(e)) => Err(e),
            Ok(Ok(())) | Err(_) => Ok(w),
        }
    }

    /// Run `command` with `exec:` (raw bytes, no pty, no exit code): for binary
    /// output such as `screencap -p`.
    pub async fn exec(&self, command: &str, limit: usize, deadline: Deadline) -> Result<Vec<u8>> {
        let mut c = self.open(&format!("exec:{command}"), deadline).await?;
        c.what = format!("exec {}", truncate(command, 80));
        c.read_to_end(limit).await
    }

    async fn sync(&self, deadline: Deadline, what: &str) -> Result<Conn> {
        let mut c = self.open("sync:", deadline).await?;
        c.what = what.to_string();
        Ok(c)
    }

    /// `STAT` a device path; `None` when it does not exist.
    pub async fn stat(&self, path: &str, deadline: Deadline) -> Result<Option<Stat>> {
        let mut c = self.sync(deadline, &format!("stat {path}")).await?;
        c.write_all(&sync_request(b"STAT", path.as_bytes())).await?;
        let reply = c.read_exact(16).await?;
        if &reply[..4] != b"STAT" {
            return Err(err::command_failed(&c.what, format!("unexpected sync reply {:?}", String::from_utf8_lossy(&reply[..4]))));
        }
        let word = |i: usize| u32::from_le_bytes([reply[i], reply[i + 1], reply[i + 2], reply[i + 3]]);
        let stat = Stat { mode: word(4), size: word(8), mtime: word(12) };
        let _ = c.write_all(&sync_request(b"QUIT", b"")).await;
        Ok(if stat == (Stat { mode: 0, size: 0, mtime: 0 }) { None } else { Some(stat) })
    }

    /// Read a device file (`RECV`).
    pub async fn pull(&self, path: &str, limit: usize, deadline: Deadline) -> Result<Vec<u8>> {
        let mut c = self.sync(deadline, &format!("pull {path}")).await?;
        c.write_all(&sync_request(b"RECV", path.as_bytes())).await?;
        let mut data = Vec::new();
        loop {
            let head = c.read_exact(8).await?;
            let len = u32::from_le_bytes([head[4], head[5], head[6], head[7]]) as usize;
            match &head[..4] {
                b"DATA" => {
                    if data.len() + len > limit {
                        return Err(err::command_failed(&c.what, format!("file exceeds {limit} bytes")));
                    }
                    data.extend_from_slice(&c.read_exact(len).await?);
                }
                b"DONE" => break,
                b"FAIL" => {
                    let message = String::from_utf8_lossy(&c.read_exact(len).await?).into_owned();
                    return Err(sync_fail(&c.what, path, &message));
                }
                other => return Err(err::command_failed(&c.what, format!("unexpected sync reply {:?}", String::from_utf8_lossy(other)))),
            }
        }
        let _ = c.write_all(&sync_request(b"QUIT", b"")).await;
        Ok(data)
    }

    /// Write a device file (`SEND` `<path>,<mode>`, `DATA`…, `DONE <mtime>`).
    pub async fn push(&self, path: &str, mode: u32, data: &[u8], mtime: u32, deadline: Deadline) -> Result<()> {
        let mut c = self.sync(deadline, &format!("push {path}")).await?;
        let mut out = sync_request(b"SEND", format!("{path},{mode}").as_bytes());
        for chunk in data.chunks(SYNC_CHUNK) {
            out.extend_from_slice(&sync_request(b"DATA", chunk));
        }
        out.extend_from_slice(b"DONE");
        out.extend_from_slice(&mtime.to_le_bytes());
        c.write_all(&out).await?;
        let head = c.read_exact(8).await?;
        let len = u32::from_le_bytes([head[4], head[5], head[6], head[7]]) as usize;
        match &head[..4] {
            b"OKAY" => {
                let _ = c.write_all(&sync_request(b"QUIT", b"")).await;
                Ok(())
            }
            b"FAIL" => {
                let message = String::from_utf8_lossy(&c.read_exact(len).await?).into_owned();
                Err(sync_fail(&c.what, path, &message))
            }
            other => Err(err::command_failed(&c.what, format!("unexpected sync reply {:?}", String::from_utf8_lossy(other)))),
        }
    }
}

fn sync_fail(what: &str, path: &str, message: &str) -> ProviderError {
    ProviderError::new(codes::ADB_COMMAND_FAILED, format!("{what}: {message}")).with_details(json!({"operation": what, "path": path, "adbMessage": message}))
}

fn shell_packet(id: u8, data: &[u8]) -> Vec<u8> {
    let mut p = Vec::with_capacity(5 + data.len());
    p.push(id);
    p.extend_from_slice(&(data.len() as u32).to_le_bytes());
    p.extend_from_slice(data);
    p
}

fn sync_request(id: &[u8; 4], data: &[u8]) -> Vec<u8> {
    let mut p = Vec::with_capacity(8 + data.len());
    p.extend_from_slice(id);
    p.extend_from_slice(&(data.len() as u32).to_le_bytes());
    p.extend_from_slice(data);
    p
}

fn truncate(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_survives_the_device_shell() {
        assert_eq!(quote("com.example.app"), "com.example.app");
        assert_eq!(quote("files/ai_app_bridge_endpoint.json"), "files/ai_app_bridge_endpoint.json");
        assert_eq!(quote(""), "''");
        assert_eq!(quote("a b"), "'a b'");
        assert_eq!(quote("it's"), r"'it'\''s'");
        assert_eq!(command_line(&["run-as", "com.x", "cat", "a;b"]), "run-as com.x cat 'a;b'");
    }

    #[test]
    fn packets_are_little_endian_framed() {
        assert_eq!(shell_packet(SHELL_CLOSE_STDIN, &[]), vec![4, 0, 0, 0, 0]);
        assert_eq!(shell_packet(SHELL_STDIN, b"hi"), vec![0, 2, 0, 0, 0, b'h', b'i']);
        assert_eq!(sync_request(b"STAT", b"/x"), b"STAT\x02\x00\x00\x00/x".to_vec());
    }
}
