//! The Android tools (`am`, `pm`, `dumpsys`, …) the device's shell runs: a
//! per-device loopback socket answers the `simtool` shim (framing: token, id,
//! cwd, argc lines, then NUL-terminated argv; the answer is stdout, and stderr
//! plus the exit code are left in `/dev/.simtool/<id>.{err,rc}` before the
//! socket closes). Also `abb_exec:` (adb install and `cmd` through abb).

mod android;
mod ime;
pub(crate) mod logcat;

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader, DuplexStream};
use tokio::net::TcpListener;

use crate::device::Device;

/// What a tool printed and returned.
#[derive(Default)]
pub struct Res {
    pub out: Vec<u8>,
    pub err: String,
    pub code: i32,
}

impl Res {
    pub fn ok(out: impl Into<Vec<u8>>) -> Res {
        Res { out: out.into(), err: String::new(), code: 0 }
    }
    pub fn fail(code: i32, err: impl Into<String>) -> Res {
        Res { out: vec![], err: err.into(), code }
    }
    pub fn out_fail(code: i32, out: impl Into<Vec<u8>>) -> Res {
        Res { out: out.into(), err: String::new(), code }
    }
}

pub struct Ctx {
    pub dev: Arc<Device>,
    pub cwd: String,
}

/// Starts the tool socket of a device; the port and token go into the root.
pub async fn start_server(dev: Arc<Device>) -> std::io::Result<tokio::task::JoinHandle<()>> {
    let l = TcpListener::bind("127.0.0.1:0").await?;
    let port = l.local_addr()?.port();
    *dev.tool_port.lock().unwrap() = port;
    let d = dev.root.join("dev/.simtool");
    std::fs::create_dir_all(&d)?;
    crate::rootfs::write_atomic(&d.join("port"), port.to_string().as_bytes())?;
    crate::rootfs::write_atomic(&d.join("token"), dev.token.as_bytes())?;
    Ok(tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            let dev = dev.clone();
            tokio::spawn(async move {
                let _ = serve(dev, s).await;
            });
        }
    }))
}

async fn serve(dev: Arc<Device>, s: tokio::net::TcpStream) -> std::io::Result<()> {
    let (rd, mut wr) = s.into_split();
    let mut rd = BufReader::new(rd);
    let header = tokio::time::timeout(Duration::from_secs(5), async {
        let mut lines = vec![];
        for _ in 0..4 {
            let mut l = String::new();
            rd.read_line(&mut l).await?;
            lines.push(l.trim_end_matches('\n').to_string());
        }
        let argc: usize = lines[3].parse().map_err(|_| std::io::Error::other("bad argc"))?;
        let mut argv = vec![];
        for _ in 0..argc.min(4096) {
            let mut a = vec![];
            rd.read_until(0, &mut a).await?;
            if a.last() == Some(&0) {
                a.pop();
            }
            argv.push(String::from_utf8_lossy(&a).into_owned());
        }
        Ok::<_, std::io::Error>((lines, argv))
    })
    .await
    .map_err(|_| std::io::Error::other("tool header timeout"))??;
    let (lines, argv) = header;
    if lines[0] != dev.token || argv.is_empty() {
        return Ok(());
    }
    let id: String = lines[1].chars().filter(char::is_ascii_digit).collect();
    let ctx = Ctx { dev: dev.clone(), cwd: lines[2].clone() };
    dev.record("tool", serde_json::json!({ "argv": argv }));
    let res = run(&ctx, &argv, &mut wr).await;
    crate::hold::after_tool(&dev, &argv).await;
    let d = dev.root.join("dev/.simtool");
    let _ = std::fs::write(d.join(format!("{id}.err")), res.err.as_bytes());
    let _ = std::fs::write(d.join(format!("{id}.rc")), format!("{}\n", res.code));
    let _ = wr.write_all(&res.out).await;
    let _ = wr.shutdown().await;
    Ok(())
}

/// Runs a tool; streaming tools (logcat follow) write to `w` directly.
pub async fn run(ctx: &Ctx, argv: &[String], w: &mut (dyn AsyncWrite + Unpin + Send)) -> Res {
    let name = argv[0].as_str();
    let args = &argv[1..];
    let slow = {
        let f = ctx.dev.faults.lock().unwrap();
        (!f.slow_tool.is_empty() && argv.len() >= f.slow_tool.len() && argv[..f.slow_tool.len()] == f.slow_tool[..]).then_some(f.slow_tool_ms)
    };
    if let Some(ms) = slow {
        ctx.dev.record("fault", serde_json::json!({ "kind": "slow-tool", "argv": argv, "delayMs": ms }));
        let boot = ctx.dev.boot_id();
        tokio::time::sleep(Duration::from_millis(ms)).await;
        // A reboot during the wait killed the caller: the tool never acts.
        if ctx.dev.boot_id() != boot {
            return Res::fail(137, "");
        }
    }
    match name {
        "dumpsys" => {
            let delay = ctx.dev.faults.lock().unwrap().dumpsys_delay_ms;
            if delay > 0 {
                tokio::time::sleep(Duration::from_millis(delay)).await;
            }
            android::dumpsys(ctx, args)
        }
        "logcat" => logcat::run(ctx, args, w).await,
        "input" => android::input(ctx, args).await,
        "app_process" => crate::uia::app_process(ctx, args),
        // A running instrumentation streams its status until it finishes (src/executor.rs).
        "am" if args.first().map(String::as_str) == Some("instrument") => crate::executor::instrument(ctx, &args[1..], w).await,
        "pm" | "cmd" if pm_async(name, args).is_some() => {
            let pm = pm_async(name, args).unwrap();
            match pm[0].as_str() {
                "install-commit" => crate::installer::commit(ctx, &pm[1..]).await,
                _ => {
                    // `pm install [-r] [-d] [-g] PATH`
                    let path = pm[1..].iter().rfind(|a| !a.starts_with('-')).cloned().unwrap_or_default();
                    let abs = if path.starts_with('/') { path.clone() } else { format!("{}/{path}", ctx.cwd.trim_end_matches('/')) };
                    match std::fs::read(ctx.dev.host_path(&abs)) {
                        Ok(apk) if !path.is_empty() => crate::installer::install_bytes(&ctx.dev, &pm[1..], apk).await,
                        _ => Res::out_fail(1, format!("Failure [INSTALL_FAILED_INVALID_URI: Invalid URI {path}]\n")),
                    }
                }
            }
        }
        _ => android::simple(ctx, name, args),
    }
}

/// The `pm` arguments of `pm install-commit|install …` / `cmd package install-commit|install …`.
fn pm_async<'a>(name: &str, args: &'a [String]) -> Option<&'a [String]> {
    let pm = match name {
        "pm" => args,
        "cmd" if args.first().map(String::as_str) == Some("package") => &args[1..],
        _ => return None,
    };
    matches!(pm.first().map(String::as_str), Some("install-commit" | "install")).then_some(pm)
}

/// `abb_exec:SERVICE\0ARGS…` — `package install` reads the APK from the stream.
pub async fn abb_exec(dev: Arc<Device>, args: Vec<String>, mut io: DuplexStream) {
    let ctx = Ctx { dev: dev.clone(), cwd: "/".into() };
    dev.record("abb_exec", serde_json::json!({ "args": args }));
    let res = if args.first().map(String::as_str) == Some("package") && args.get(1).map(String::as_str) == Some("install") {
        let size = args.iter().position(|a| a == "-S").and_then(|i| args.get(i + 1)).and_then(|s| s.parse::<usize>().ok());
        let mut apk = vec![];
        match size {
            Some(n) => {
                apk.resize(n, 0);
                if io.read_exact(&mut apk).await.is_err() {
                    apk.clear();
                }
            }
            None => {
                let _ = io.read_to_end(&mut apk).await;
            }
        }
        crate::installer::install_bytes(&dev, &args[2..], apk).await
    } else {
        let mut argv = vec!["cmd".to_string()];
        argv.extend(args);
        let mut sink = tokio::io::sink();
        run(&ctx, &argv, &mut sink).await
    };
    let _ = io.write_all(&res.out).await;
    let _ = io.write_all(res.err.as_bytes()).await;
    let _ = io.shutdown().await;
}

pub fn android_tap(dev: &Arc<Device>, x: i32, y: i32) {
    android::tap(dev, x, y)
}

pub fn android_text(dev: &Arc<Device>, text: &str) {
    android::type_text(dev, text)
}

/// Applies a tap on a node of app `i`'s current screen (the effect part of `input tap`).
pub fn tap_app_node(ph: &mut crate::phone::Phone, i: usize, node: &crate::phone::Node) -> serde_json::Value {
    android::tap_app_node(ph, i, node)
}

pub fn android_key(dev: &Arc<Device>, code: u32) {
    android::keyevent(dev, code)
}

pub fn install_marked(dev: &Arc<Device>, apk: &[u8]) -> Res {
    android::install_marked(dev, apk)
}
