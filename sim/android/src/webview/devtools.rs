//! `@webview_devtools_remote_<pid>`: the app process's DevTools socket, as a
//! simulator-held abstract socket (reached through `adb forward
//! tcp:N localabstract:webview_devtools_remote_<pid>`). Each connection gets
//! one HTTP request: `GET /json` (`/json/list`) and `/json/version` are
//! answered from Chromium's real endpoint, filtered to THIS app's pages with
//! their WebSocket URLs rewritten to the caller's host:port; a WebSocket
//! upgrade of `/devtools/page/<id>` for one of the app's pages is relayed byte
//! for byte to Chromium; anything else is refused.

use std::sync::Weak;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use tokio::net::TcpStream;
use tokio::sync::mpsc::UnboundedReceiver;

use super::Host;
use super::http::{self, READ_TIMEOUT};

pub async fn serve(host: Weak<Host>, package: String, pid: u32, mut rx: UnboundedReceiver<DuplexStream>) {
    while let Some(io) = rx.recv().await {
        let (host, package) = (host.clone(), package.clone());
        tokio::spawn(async move { handle(host, &package, pid, io).await });
    }
}

async fn handle(host: Weak<Host>, package: &str, pid: u32, mut io: DuplexStream) {
    let Some(req) = http::read_request(&mut io, false).await else { return };
    let Some(host) = host.upgrade() else { return };
    let chrome = match host.chrome().await {
        Ok(c) => c,
        Err(e) => return http::respond(&mut io, 502, "text/plain", e.as_bytes()).await,
    };
    let mine = host.targets_of(package, pid);
    drop(host);
    // The address the caller used (the forwarded port), for the URLs we hand out.
    let caller = req.header("host").unwrap_or("127.0.0.1").to_string();
    let real = format!("127.0.0.1:{}", chrome.port);
    match req.path.trim_end_matches('/') {
        "/json" | "/json/list" => match get_json(chrome.port, "/json/list").await {
            Ok(Value::Array(pages)) => {
                let mut out = vec![];
                for mut p in pages.into_iter().filter(|p| p["id"].as_str().is_some_and(|id| mine.iter().any(|m| m == id))) {
                    for k in ["webSocketDebuggerUrl", "devtoolsFrontendUrl"] {
                        if let Some(s) = p[k].as_str() {
                            p[k] = Value::String(s.replace(&real, &caller));
                        }
                    }
                    out.push(p);
                }
                http::respond(&mut io, 200, "application/json; charset=UTF-8", Value::Array(out).to_string().as_bytes()).await
            }
            Ok(_) => http::respond(&mut io, 502, "text/plain", b"unexpected /json/list reply").await,
            Err(e) => http::respond(&mut io, 502, "text/plain", e.as_bytes()).await,
        },
        "/json/version" => match get_json(chrome.port, "/json/version").await {
            Ok(mut v) => {
                // The browser endpoint would reach every app's pages: not offered.
                if let Some(o) = v.as_object_mut() {
                    o.remove("webSocketDebuggerUrl");
                    o.insert("Android-Package".into(), Value::String(package.to_string()));
                }
                http::respond(&mut io, 200, "application/json; charset=UTF-8", v.to_string().as_bytes()).await
            }
            Err(e) => http::respond(&mut io, 502, "text/plain", e.as_bytes()).await,
        },
        p => match p.strip_prefix("/devtools/page/") {
            Some(id) if mine.iter().any(|m| m == id) && req.header("upgrade").is_some_and(|u| u.eq_ignore_ascii_case("websocket")) => {
                let Ok(Ok(mut up)) = tokio::time::timeout(READ_TIMEOUT, TcpStream::connect(("127.0.0.1", chrome.port))).await else {
                    return http::respond(&mut io, 502, "text/plain", b"DevTools endpoint unreachable").await;
                };
                // The request as received, then whatever followed it, both ways until either side closes.
                if up.write_all(&req.raw_head).await.is_err() || up.write_all(&req.body).await.is_err() {
                    return;
                }
                let _ = tokio::io::copy_bidirectional(&mut io, &mut up).await;
            }
            Some(_) => http::respond(&mut io, 403, "text/plain", b"not a page of this app").await,
            None => http::respond(&mut io, 404, "text/plain", b"not found").await,
        },
    }
}

/// GET a JSON document from Chromium's DevTools HTTP endpoint.
async fn get_json(port: u16, path: &str) -> Result<Value, String> {
    let work = async {
        let mut s = TcpStream::connect(("127.0.0.1", port)).await.map_err(|e| e.to_string())?;
        s.write_all(format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n").as_bytes()).await.map_err(|e| e.to_string())?;
        let mut buf = Vec::new();
        let mut tmp = [0u8; 8192];
        loop {
            if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&buf[..end]).to_lowercase();
                let len = head.lines().find_map(|l| l.strip_prefix("content-length:")).and_then(|v| v.trim().parse::<usize>().ok());
                if let Some(len) = len
                    && buf.len() >= end + 4 + len
                {
                    return serde_json::from_slice::<Value>(&buf[end + 4..end + 4 + len]).map_err(|e| e.to_string());
                }
            }
            let n = s.read(&mut tmp).await.map_err(|e| e.to_string())?;
            if n == 0 {
                let end = buf.windows(4).position(|w| w == b"\r\n\r\n").ok_or("no reply")?;
                return serde_json::from_slice::<Value>(&buf[end + 4..]).map_err(|e| e.to_string());
            }
            if buf.len() > http::MAX_BODY {
                return Err("reply too large".into());
            }
            buf.extend_from_slice(&tmp[..n]);
        }
    };
    tokio::time::timeout(Duration::from_secs(10), work).await.map_err(|_| "DevTools endpoint timed out".to_string())?
}
