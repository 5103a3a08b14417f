//! The runtime's transport (§3.2): one strict HTTP/1.1 request per connection
//! on `localabstract:aab-uia-<epoch>`. Request line exactly `POST /v1 HTTP/1.1`,
//! head ≤ 16 KiB, `Content-Length` 1..65536 (once), no `Transfer-Encoding` or
//! `Expect`, `Authorization: Bearer <token>`; 5 s to read the whole request.
//! Replies: 200, 400 `uia_protocol_error` / `uia_unknown_op`, 401
//! `uia_unauthorized`, 500 `uia_response_too_large` (> 1 MiB).

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

use super::Runtime;
use crate::device::Device;
use crate::faults::Faults;

const MAX_HEAD: usize = 16 * 1024;
const MAX_BODY: usize = 65536;
const MAX_RESPONSE: usize = 1024 * 1024;

type Reject = (u16, &'static str, String);

fn proto(msg: impl Into<String>) -> Reject {
    (400, "uia_protocol_error", msg.into())
}

async fn read_request(io: &mut DuplexStream, token: &str) -> Result<Vec<u8>, Reject> {
    let mut buf = Vec::new();
    let mut tmp = [0u8; 4096];
    let head_end = loop {
        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break p;
        }
        if buf.len() > MAX_HEAD {
            return Err(proto("request head larger than 16384 bytes"));
        }
        let n = io.read(&mut tmp).await.map_err(|e| proto(e.to_string()))?;
        if n == 0 {
            return Err(proto("connection closed before the end of the request head"));
        }
        buf.extend_from_slice(&tmp[..n]);
    };
    if head_end > MAX_HEAD {
        return Err(proto("request head larger than 16384 bytes"));
    }
    let head = std::str::from_utf8(&buf[..head_end]).map_err(|_| proto("request head is not UTF-8"))?;
    let mut lines = head.split("\r\n");
    let line = lines.next().unwrap_or("");
    if line != "POST /v1 HTTP/1.1" {
        return Err(proto(format!("request line must be exactly `POST /v1 HTTP/1.1`, got {line:?}")));
    }
    let (mut len, mut auth) = (None::<usize>, None::<&str>);
    for l in lines {
        let Some((k, v)) = l.split_once(':') else { return Err(proto(format!("malformed header line {l:?}"))) };
        let (k, v) = (k.trim().to_ascii_lowercase(), v.trim());
        match k.as_str() {
            "transfer-encoding" => return Err(proto("Transfer-Encoding is not accepted")),
            "expect" => return Err(proto("Expect is not accepted")),
            "content-length" => {
                if len.is_some() {
                    return Err(proto("Content-Length given twice"));
                }
                if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) || v.len() > 9 {
                    return Err(proto(format!("bad Content-Length {v:?}")));
                }
                len = Some(v.parse().unwrap());
            }
            "authorization" => {
                if auth.is_some() {
                    return Err(proto("Authorization given twice"));
                }
                auth = Some(v);
            }
            _ => {}
        }
    }
    let Some(len) = len else { return Err(proto("Content-Length is required")) };
    if !(1..=MAX_BODY).contains(&len) {
        return Err(proto(format!("Content-Length {len} is outside 1..65536")));
    }
    if auth.and_then(|a| a.strip_prefix("Bearer ")) != Some(token) {
        return Err((401, "uia_unauthorized", "missing or wrong bearer token".into()));
    }
    let mut body = buf[head_end + 4..].to_vec();
    while body.len() < len {
        let n = io.read(&mut tmp).await.map_err(|e| proto(e.to_string()))?;
        if n == 0 {
            return Err(proto("connection closed before the end of the body"));
        }
        body.extend_from_slice(&tmp[..n]);
    }
    if body.len() > len {
        return Err(proto("more bytes than Content-Length"));
    }
    Ok(body)
}

async fn reply(io: &mut DuplexStream, status: u16, body: &Value) {
    let mut text = body.to_string();
    let mut status = status;
    if text.len() > MAX_RESPONSE {
        status = 500;
        text = json!({ "ok": false, "error": "uia_response_too_large", "message": "response larger than 1 MiB" }).to_string();
    }
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        _ => "Internal Server Error",
    };
    let head = format!("HTTP/1.1 {status} {reason}\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", text.len());
    let _ = io.write_all(head.as_bytes()).await;
    let _ = io.write_all(text.as_bytes()).await;
    let _ = io.shutdown().await;
}

pub async fn serve(dev: Arc<Device>, rt: Arc<Runtime>, mut io: DuplexStream) {
    let body = match tokio::time::timeout(Duration::from_secs(5), read_request(&mut io, &rt.token)).await {
        Err(_) => {
            dev.record("uia-request", json!({ "runtimeEpoch": rt.epoch, "op": null, "status": null, "error": "read_timeout" }));
            let _ = io.shutdown().await;
            return;
        }
        Ok(Err((status, code, message))) => {
            dev.record("uia-request", json!({ "runtimeEpoch": rt.epoch, "op": null, "status": status, "error": code }));
            reply(&mut io, status, &json!({ "ok": false, "error": code, "message": message })).await;
            return;
        }
        Ok(Ok(b)) => b,
    };
    let req = match serde_json::from_slice::<Value>(&body) {
        Ok(v) if v.get("op").and_then(Value::as_str).is_some() => v,
        _ => {
            reply(&mut io, 400, &json!({ "ok": false, "error": "uia_protocol_error", "message": "body must be a JSON object with a string `op`" })).await;
            return;
        }
    };
    let op = req["op"].as_str().unwrap_or("").to_string();
    let drop_reply = Faults::take(&mut dev.faults.lock().unwrap().uia_drop_replies);
    let (status, out, after) = super::ops::handle(&dev, &rt, &op, &req);
    dev.record("uia-request", json!({ "runtimeEpoch": rt.epoch, "op": op, "actionId": out.get("actionId"), "status": status, "error": out.get("error"), "dropped": drop_reply }));
    if drop_reply {
        dev.record("fault", json!({ "kind": "uia-drop-reply", "op": op }));
        let _ = io.shutdown().await;
    } else {
        reply(&mut io, status, &out).await;
    }
    if let Some(f) = after {
        f();
    }
}
