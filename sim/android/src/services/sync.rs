//! `sync:` — the file transfer protocol (STAT, STA2/LST2, LIST/LIS2, SEND, RECV,
//! QUIT) on the device root. Paths are resolved inside the root (rootfs::resolve).

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

use crate::device::Device;
use crate::rootfs;

const SYNC_DATA_MAX: usize = 64 * 1024;

fn stat_v1(md: Option<&std::fs::Metadata>) -> Vec<u8> {
    let mut v = b"STAT".to_vec();
    let (mode, size, mtime) = md.map(|m| (m.mode(), m.size() as u32, m.mtime() as u32)).unwrap_or((0, 0, 0));
    for x in [mode, size, mtime] {
        v.extend_from_slice(&x.to_le_bytes());
    }
    v
}

fn stat_v2_body(md: Result<std::fs::Metadata, std::io::Error>) -> Vec<u8> {
    let mut v = Vec::with_capacity(68);
    match md {
        Ok(m) => {
            v.extend_from_slice(&0u32.to_le_bytes());
            v.extend_from_slice(&m.dev().to_le_bytes());
            v.extend_from_slice(&m.ino().to_le_bytes());
            v.extend_from_slice(&m.mode().to_le_bytes());
            v.extend_from_slice(&(m.nlink() as u32).to_le_bytes());
            v.extend_from_slice(&m.uid().to_le_bytes());
            v.extend_from_slice(&m.gid().to_le_bytes());
            v.extend_from_slice(&m.size().to_le_bytes());
            v.extend_from_slice(&m.atime().to_le_bytes());
            v.extend_from_slice(&m.mtime().to_le_bytes());
            v.extend_from_slice(&m.ctime().to_le_bytes());
        }
        Err(e) => {
            v.extend_from_slice(&(e.raw_os_error().unwrap_or(libc::ENOENT) as u32).to_le_bytes());
            v.resize(68, 0);
        }
    }
    v
}

async fn fail<W: AsyncWriteExt + Unpin>(w: &mut W, msg: &str) -> std::io::Result<()> {
    let mut v = b"FAIL".to_vec();
    v.extend_from_slice(&(msg.len() as u32).to_le_bytes());
    v.extend_from_slice(msg.as_bytes());
    w.write_all(&v).await
}

pub async fn run(dev: Arc<Device>, mut io: DuplexStream) {
    let _ = serve(&dev, &mut io).await;
    let _ = io.shutdown().await;
}

async fn read_req(io: &mut DuplexStream) -> std::io::Result<([u8; 4], Vec<u8>)> {
    let mut h = [0u8; 8];
    io.read_exact(&mut h).await?;
    let len = u32::from_le_bytes(h[4..8].try_into().unwrap()) as usize;
    if len > 1024 * 1024 {
        return Err(std::io::Error::other("sync request too long"));
    }
    let mut data = vec![0u8; len];
    io.read_exact(&mut data).await?;
    Ok((h[..4].try_into().unwrap(), data))
}

async fn serve(dev: &Device, io: &mut DuplexStream) -> std::io::Result<()> {
    loop {
        let (req, data) = read_req(io).await?;
        let path = String::from_utf8_lossy(&data).into_owned();
        match &req {
            b"STAT" => {
                let md = std::fs::metadata(rootfs::resolve(&dev.root, &path, true)).ok();
                io.write_all(&stat_v1(md.as_ref())).await?;
            }
            b"STA2" | b"LST2" => {
                let follow = &req == b"STA2";
                let p = rootfs::resolve(&dev.root, &path, follow);
                let md = if follow { std::fs::metadata(&p) } else { std::fs::symlink_metadata(&p) };
                let mut v = req.to_vec();
                v.extend(stat_v2_body(md));
                io.write_all(&v).await?;
            }
            b"LIST" | b"LIS2" => list(dev, io, &path, &req == b"LIS2").await?,
            b"SEND" => send(dev, io, &path).await?,
            b"RECV" => recv(dev, io, &path).await?,
            b"QUIT" => return Ok(()),
            _ => {
                fail(io, "unknown sync request").await?;
                return Ok(());
            }
        }
    }
}

async fn list(dev: &Device, io: &mut DuplexStream, path: &str, v2: bool) -> std::io::Result<()> {
    let dir = rootfs::resolve(&dev.root, path, true);
    let mut names: Vec<String> = vec![".".into(), "..".into()];
    if let Ok(rd) = std::fs::read_dir(&dir) {
        names.extend(rd.flatten().map(|e| e.file_name().to_string_lossy().into_owned()));
    }
    for name in names {
        let Ok(md) = std::fs::symlink_metadata(dir.join(&name)) else { continue };
        let mut v = Vec::new();
        if v2 {
            v.extend_from_slice(b"DNT2");
            v.extend(stat_v2_body(Ok(md)));
        } else {
            v.extend_from_slice(b"DENT");
            for x in [md.mode(), md.size() as u32, md.mtime() as u32] {
                v.extend_from_slice(&x.to_le_bytes());
            }
        }
        v.extend_from_slice(&(name.len() as u32).to_le_bytes());
        v.extend_from_slice(name.as_bytes());
        io.write_all(&v).await?;
    }
    let mut done = if v2 { b"DNT2".to_vec() } else { b"DONE".to_vec() };
    done.resize(if v2 { 4 + 68 + 4 } else { 20 }, 0);
    if v2 {
        done[..4].copy_from_slice(b"DONE");
    }
    io.write_all(&done).await
}

async fn send(dev: &Device, io: &mut DuplexStream, spec: &str) -> std::io::Result<()> {
    let (path, mode) = match spec.rsplit_once(',') {
        Some((p, m)) => (p.to_string(), m.parse::<u32>().unwrap_or(0o644)),
        None => (spec.to_string(), 0o644),
    };
    let mut data = Vec::new();
    let mtime;
    loop {
        let mut h = [0u8; 8];
        io.read_exact(&mut h).await?;
        let arg = u32::from_le_bytes(h[4..8].try_into().unwrap());
        match &h[..4] {
            b"DATA" => {
                if arg as usize > SYNC_DATA_MAX * 4 {
                    return fail(io, "sync DATA too long").await;
                }
                let start = data.len();
                data.resize(start + arg as usize, 0);
                io.read_exact(&mut data[start..]).await?;
            }
            b"DONE" => {
                mtime = arg;
                break;
            }
            _ => return fail(io, "unexpected sync message during SEND").await,
        }
    }
    let target = rootfs::resolve(&dev.root, &path, true);
    let result = (|| -> std::io::Result<()> {
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent)?;
        }
        if mode & libc::S_IFMT == libc::S_IFLNK {
            let _ = std::fs::remove_file(&target);
            std::os::unix::fs::symlink(String::from_utf8_lossy(&data).as_ref(), &target)?;
            return Ok(());
        }
        std::fs::write(&target, &data)?;
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(mode & 0o7777))?;
        set_mtime(&target, mtime);
        Ok(())
    })();
    dev.record("push", serde_json::json!({ "path": path, "bytes": data.len(), "ok": result.is_ok() }));
    match result {
        Ok(()) => io.write_all(&[b'O', b'K', b'A', b'Y', 0, 0, 0, 0]).await,
        Err(e) => fail(io, &format!("couldn't create file: {e}")).await,
    }
}

fn set_mtime(p: &Path, mtime: u32) {
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
    let t = libc::timespec { tv_sec: mtime as libc::time_t, tv_nsec: 0 };
    let times = [t, t];
    unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), times.as_ptr(), 0) };
}

async fn recv(dev: &Device, io: &mut DuplexStream, path: &str) -> std::io::Result<()> {
    let p = rootfs::resolve(&dev.root, path, true);
    let bytes = match dev.read_device_file(&p) {
        Ok(b) => b,
        Err(e) => return fail(io, &format!("open failed: {e}")).await,
    };
    dev.record("pull", serde_json::json!({ "path": path, "bytes": bytes.len() }));
    for chunk in bytes.chunks(SYNC_DATA_MAX) {
        let mut v = Vec::with_capacity(8 + chunk.len());
        v.extend_from_slice(b"DATA");
        v.extend_from_slice(&(chunk.len() as u32).to_le_bytes());
        v.extend_from_slice(chunk);
        io.write_all(&v).await?;
    }
    io.write_all(&[b'D', b'O', b'N', b'E', 0, 0, 0, 0]).await
}
