//! `shell:`, `shell,v2,…:` and `exec:`: runs `/system/bin/sh` (busybox) chrooted
//! into the device root. shell v2 frames stdin/stdout/stderr/exit as packets
//! (id byte + LE length); raw modes carry bytes only (stderr merged, no exit code).

use std::process::Stdio;
use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt, DuplexStream, WriteHalf};
use tokio::sync::Mutex;

use crate::device::Device;

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ShellMode {
    V2,
    Raw { merge_stderr: bool },
}

const ID_STDIN: u8 = 0;
const ID_STDOUT: u8 = 1;
const ID_STDERR: u8 = 2;
const ID_EXIT: u8 = 3;
const ID_CLOSE_STDIN: u8 = 4;

type Out = Arc<Mutex<WriteHalf<DuplexStream>>>;

/// Environment of a device shell, close to adbd's.
pub fn device_env(cmd: &mut tokio::process::Command) {
    cmd.env_clear()
        .env("PATH", "/product/bin:/apex/com.android.runtime/bin:/system/bin:/system/xbin:/vendor/bin")
        .env("ANDROID_DATA", "/data")
        .env("ANDROID_ROOT", "/system")
        .env("EXTERNAL_STORAGE", "/sdcard")
        .env("HOME", "/")
        .env("TMPDIR", "/data/local/tmp")
        .env("HOSTNAME", "localhost")
        .env("USER", "shell")
        .env("SHELL", "/system/bin/sh")
        .env("TERM", "dumb");
}

/// A chrooted, session-leading `sh` (its own process group, killed with the stream).
pub fn device_sh(dev: &Device, command: &str) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new("/system/bin/sh");
    if !command.is_empty() {
        cmd.arg("-c").arg(command);
    }
    device_env(&mut cmd);
    let root = std::ffi::CString::new(dev.root.as_os_str().as_encoded_bytes()).unwrap();
    unsafe {
        cmd.pre_exec(move || {
            if libc::chroot(root.as_ptr()) != 0 || libc::chdir(c"/".as_ptr()) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            libc::setsid();
            Ok(())
        });
    }
    cmd
}

async fn send(out: &Out, mode: ShellMode, id: u8, data: &[u8]) -> std::io::Result<()> {
    let mut w = out.lock().await;
    if mode == ShellMode::V2 {
        let mut h = [id, 0, 0, 0, 0];
        h[1..].copy_from_slice(&(data.len() as u32).to_le_bytes());
        w.write_all(&h).await?;
    }
    w.write_all(data).await
}

async fn pump<R: AsyncRead + Unpin>(mut r: R, out: Out, mode: ShellMode, id: u8) -> bool {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => return true,
            Ok(n) => {
                if send(&out, mode, id, &buf[..n]).await.is_err() {
                    return false;
                }
            }
        }
    }
}

pub async fn run(dev: Arc<Device>, mode: ShellMode, command: String, io: DuplexStream) {
    dev.record("shell", serde_json::json!({ "command": command, "v2": mode == ShellMode::V2 }));
    let (mut rd, wr) = tokio::io::split(io);
    let out: Out = Arc::new(Mutex::new(wr));
    let mut cmd = device_sh(&dev, &command);
    cmd.stdin(Stdio::piped()).kill_on_drop(false);
    // Raw modes merge stderr into stdout at the descriptor level (one pipe), as adbd does, so their order is kept.
    let merged = match mode {
        ShellMode::V2 => {
            cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
            None
        }
        ShellMode::Raw { .. } => match std::io::pipe().and_then(|(r, w)| Ok((r, w.try_clone()?, w))) {
            Ok((r, w1, w2)) => {
                cmd.stdout(w1).stderr(w2);
                Some(r)
            }
            Err(_) => {
                cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
                None
            }
        },
    };
    let spawned = cmd.spawn();
    // Our copies of the pipe's write end must go, or the reader never sees EOF.
    drop(cmd);
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => {
            let _ = send(&out, mode, ID_STDERR, format!("/system/bin/sh: {e}\n").as_bytes()).await;
            if mode == ShellMode::V2 {
                let _ = send(&out, mode, ID_EXIT, &[127]).await;
            }
            return;
        }
    };
    let pgid = child.id().unwrap_or(0) as i32;
    let mut stdin = child.stdin.take();
    let (mut out_task, mut err_task) = match merged {
        Some(r) => {
            let rx = tokio::net::unix::pipe::Receiver::from_owned_fd(std::os::fd::OwnedFd::from(r)).expect("pipe receiver");
            (tokio::spawn(pump(rx, out.clone(), mode, ID_STDOUT)), tokio::spawn(async { true }))
        }
        None => {
            let err_id = if mode == ShellMode::V2 { ID_STDERR } else { ID_STDOUT };
            (tokio::spawn(pump(child.stdout.take().unwrap(), out.clone(), mode, ID_STDOUT)), tokio::spawn(pump(child.stderr.take().unwrap(), out.clone(), mode, err_id)))
        }
    };
    // Stdin: v2 packets (0 = data, 4 = close) or raw bytes.
    let input = async move {
        let mut buf = vec![0u8; 64 * 1024];
        if mode == ShellMode::V2 {
            loop {
                let mut h = [0u8; 5];
                if rd.read_exact(&mut h).await.is_err() {
                    return;
                }
                let len = u32::from_le_bytes(h[1..5].try_into().unwrap()) as usize;
                let mut data = vec![0u8; len];
                if rd.read_exact(&mut data).await.is_err() {
                    return;
                }
                match h[0] {
                    ID_STDIN => {
                        if let Some(s) = stdin.as_mut() {
                            let _ = s.write_all(&data).await;
                        }
                    }
                    ID_CLOSE_STDIN => stdin = None,
                    _ => {}
                }
            }
        } else {
            loop {
                match rd.read(&mut buf).await {
                    Ok(0) | Err(_) => {
                        drop(stdin.take());
                        // No half-close in adb: keep waiting so the stream stays "open".
                        std::future::pending::<()>().await;
                    }
                    Ok(n) => {
                        if let Some(s) = stdin.as_mut() {
                            let _ = s.write_all(&buf[..n]).await;
                        }
                    }
                }
            }
        }
    };
    tokio::pin!(input);
    let status = tokio::select! {
        s = child.wait() => s.ok(),
        _ = &mut input => {
            // The host closed the stream: end the whole process group.
            unsafe { libc::kill(-pgid, libc::SIGKILL) };
            let _ = child.wait().await;
            out_task.abort();
            err_task.abort();
            return;
        }
        ok = &mut out_task, if mode != ShellMode::V2 => {
            if !ok.unwrap_or(false) {
                unsafe { libc::kill(-pgid, libc::SIGKILL) };
            }
            child.wait().await.ok()
        }
    };
    // Output still in the pipes is flushed; a background child holding them open is not waited for long.
    let grace = std::time::Duration::from_secs(2);
    if !out_task.is_finished() {
        let _ = tokio::time::timeout(grace, &mut out_task).await;
    }
    let _ = tokio::time::timeout(grace, &mut err_task).await;
    out_task.abort();
    err_task.abort();
    if mode == ShellMode::V2 {
        use std::os::unix::process::ExitStatusExt;
        let code = status.map(|s| s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(9))).unwrap_or(255);
        let _ = send(&out, mode, ID_EXIT, &[code as u8]).await;
    }
    let _ = out.lock().await.shutdown().await;
}
