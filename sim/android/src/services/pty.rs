//! `shell,v2,…,pty:` and interactive `shell:` — the shell on a pseudo-terminal
//! (what `adb shell` asks for when its stdin is a terminal, or with `-t`):
//! echo, prompts and line discipline come from the kernel's pty; window-size
//! packets resize it.

use std::os::fd::{FromRawFd, OwnedFd};
use std::process::Stdio;
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

use crate::device::Device;

const ID_STDIN: u8 = 0;
const ID_STDOUT: u8 = 1;
const ID_EXIT: u8 = 3;
const ID_CLOSE_STDIN: u8 = 4;
const ID_WINDOW: u8 = 5;

fn set_winsize(fd: i32, spec: &[u8]) {
    // "ROWSxCOLSxXPIXELSxYPIXELS"
    let s = String::from_utf8_lossy(spec);
    let v: Vec<u16> = s.trim_end_matches('\0').split('x').filter_map(|p| p.parse().ok()).collect();
    if v.len() == 4 {
        let ws = libc::winsize { ws_row: v[0], ws_col: v[1], ws_xpixel: v[2], ws_ypixel: v[3] };
        unsafe { libc::ioctl(fd, libc::TIOCSWINSZ, &ws) };
    }
}

pub async fn run(dev: Arc<Device>, v2: bool, command: String, term: String, io: DuplexStream) {
    dev.record("shell", serde_json::json!({ "command": command, "v2": v2, "pty": true }));
    let (mut master, mut slave) = (0, 0);
    if unsafe { libc::openpty(&mut master, &mut slave, std::ptr::null_mut(), std::ptr::null(), std::ptr::null()) } != 0 {
        let mode = if v2 { super::ShellMode::V2 } else { super::ShellMode::Raw { merge_stderr: true } };
        return super::shell::run(dev, mode, command, io).await;
    }
    let (master, slave) = unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
    let master_fd = std::os::fd::AsRawFd::as_raw_fd(&master);
    let mut cmd = super::shell::device_sh(&dev, &command);
    cmd.env("TERM", if term.is_empty() { "xterm".to_string() } else { term });
    let (Ok(s1), Ok(s2)) = (slave.try_clone(), slave.try_clone()) else { return };
    cmd.stdin(Stdio::from(s1)).stdout(Stdio::from(s2)).stderr(Stdio::from(slave)).kill_on_drop(false);
    unsafe {
        cmd.pre_exec(|| {
            // After device_sh's setsid: the pty becomes the controlling terminal.
            libc::ioctl(0, libc::TIOCSCTTY as _, 0);
            Ok(())
        });
    }
    let spawned = cmd.spawn();
    drop(cmd);
    let Ok(mut child) = spawned else { return };
    let pgid = child.id().unwrap_or(0) as i32;
    let (Ok(rfd), Ok(wfd)) = (master.try_clone(), master.try_clone()) else { return };
    drop(master);
    let mut reader = tokio::fs::File::from_std(std::fs::File::from(rfd));
    let mut writer = tokio::fs::File::from_std(std::fs::File::from(wfd));
    let (mut rd, wr) = tokio::io::split(io);
    let out = Arc::new(tokio::sync::Mutex::new(wr));
    let out2 = out.clone();
    let mut pump = tokio::spawn(async move {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            match reader.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    let mut w = out2.lock().await;
                    if v2 {
                        let mut h = [ID_STDOUT, 0, 0, 0, 0];
                        h[1..].copy_from_slice(&(n as u32).to_le_bytes());
                        if w.write_all(&h).await.is_err() {
                            return;
                        }
                    }
                    if w.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                }
            }
        }
    });
    let input = async move {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            if v2 {
                let mut h = [0u8; 5];
                if rd.read_exact(&mut h).await.is_err() {
                    return;
                }
                let mut data = vec![0u8; u32::from_le_bytes(h[1..5].try_into().unwrap()) as usize];
                if rd.read_exact(&mut data).await.is_err() {
                    return;
                }
                match h[0] {
                    ID_STDIN => {
                        let _ = writer.write_all(&data).await;
                        let _ = writer.flush().await;
                    }
                    // No half-close on a terminal: ^D is end of input for the line discipline.
                    ID_CLOSE_STDIN => {
                        let _ = writer.write_all(&[4]).await;
                        let _ = writer.flush().await;
                    }
                    ID_WINDOW => set_winsize(master_fd, &data),
                    _ => {}
                }
            } else {
                match rd.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => {
                        let _ = writer.write_all(&buf[..n]).await;
                        let _ = writer.flush().await;
                    }
                }
            }
        }
    };
    tokio::pin!(input);
    let status = tokio::select! {
        s = child.wait() => s.ok(),
        _ = &mut input => {
            unsafe { libc::kill(-pgid, libc::SIGKILL) };
            let _ = child.wait().await;
            pump.abort();
            return;
        }
    };
    let _ = tokio::time::timeout(std::time::Duration::from_secs(2), &mut pump).await;
    pump.abort();
    let mut w = out.lock().await;
    if v2 {
        use std::os::unix::process::ExitStatusExt;
        let code = status.map(|s| s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(9))).unwrap_or(255);
        let _ = w.write_all(&[ID_EXIT, 1, 0, 0, 0, code as u8]).await;
    }
    let _ = w.shutdown().await;
}
