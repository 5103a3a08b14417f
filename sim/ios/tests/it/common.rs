//! Shared helpers: a simulator, raw HTTP/1.1 to the SDK listener (the host's
//! view), the identity headers of a running app, taps by accessibility id
//! through the control interface, and polling with a deadline.

use std::time::Duration;

use aab_ios_sim::{Options, Simulator};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

pub const APP: &str = "com.example.aab.ios";
pub const OTHER: &str = "com.example.aab.other";
const IO_TIMEOUT: Duration = Duration::from_secs(30);

pub async fn sim() -> Simulator {
    Simulator::start(Options::default()).await.expect("simulator starts")
}

#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub head: String,
    pub body: Value,
}

/// The SDK's head: `HTTP/1.1 <status> OK|Error`, `Connection: close`.
pub fn assert_sdk_head(r: &Reply) {
    let reason = if r.status == 200 { "OK" } else { "Error" };
    assert!(r.head.starts_with(&format!("HTTP/1.1 {} {reason}\r\n", r.status)), "{}", r.head);
    assert!(r.head.contains("\r\nConnection: close\r\n"), "{}", r.head);
}

/// A running SDK process as the host knows it from the descriptor.
#[derive(Clone, Debug)]
pub struct App {
    pub bundle: String,
    pub epoch: String,
    pub pid: u64,
    pub port: u16,
}

impl App {
    pub fn headers(&self) -> Vec<(String, String)> {
        vec![
            ("X-AAB-Runtime-Schema".into(), "aab.ios-runtime/v1".into()),
            ("X-AAB-Bundle-Id".into(), self.bundle.clone()),
            ("X-AAB-Runtime-Epoch".into(), self.epoch.clone()),
            ("X-AAB-Process-Id".into(), self.pid.to_string()),
            ("X-AAB-Runtime-Port".into(), self.port.to_string()),
        ]
    }

    pub async fn get(&self, path: &str) -> Reply {
        let r = http(self.port, "GET", path, &self.headers(), None).await.expect("a reply");
        assert_sdk_head(&r);
        r
    }

    pub async fn post(&self, path: &str, body: &Value) -> Reply {
        let r = http(self.port, "POST", path, &self.headers(), Some(body.to_string().as_bytes())).await.expect("a reply");
        assert_sdk_head(&r);
        r
    }

    /// The body's `runtimeBinding` names exactly this process.
    pub fn assert_binding(&self, r: &Reply) {
        assert_eq!(r.body["runtimeBinding"], json!({ "schemaVersion": "aab.ios-runtime/v1", "bundleId": self.bundle, "runtimeEpoch": self.epoch, "processId": self.pid, "port": self.port }), "{:?}", r.body);
    }
}

/// The app's process from ground truth (`state`), checked against its descriptor.
pub async fn app(sim: &Simulator, bundle: &str) -> App {
    let st = sim.control(json!({ "op": "state" })).await;
    let a = st["apps"].as_array().unwrap().iter().find(|a| a["bundleId"] == bundle).expect("app installed").clone();
    let app = App { bundle: bundle.into(), epoch: a["runtimeEpoch"].as_str().expect("running").into(), pid: a["pid"].as_u64().unwrap(), port: a["port"].as_u64().unwrap() as u16 };
    let desc = sim.control(json!({ "op": "descriptor", "bundleId": bundle })).await;
    assert_eq!(desc["descriptor"]["runtimeEpoch"], json!(app.epoch), "descriptor follows the process");
    app
}

/// One raw HTTP/1.1 exchange with 127.0.0.1:port; `None` = closed without a reply.
pub async fn http(port: u16, method: &str, path: &str, headers: &[(String, String)], body: Option<&[u8]>) -> Option<Reply> {
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: device\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    let body = body.unwrap_or_default();
    req.push_str(&format!("Content-Type: application/json\r\nConnection: close\r\nContent-Length: {}\r\n\r\n", body.len()));
    let mut bytes = req.into_bytes();
    bytes.extend_from_slice(body);
    raw(port, &bytes).await
}

/// Sends `bytes` as they are and reads the reply; `None` = closed without one.
pub async fn raw(port: u16, bytes: &[u8]) -> Option<Reply> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).await.ok()?;
    s.write_all(bytes).await.ok()?;
    let mut buf = Vec::new();
    tokio::time::timeout(IO_TIMEOUT, s.read_to_end(&mut buf)).await.expect("reply in time").ok()?;
    if buf.is_empty() {
        return None;
    }
    let head_end = buf.windows(4).position(|w| w == b"\r\n\r\n").expect("a head") + 4;
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let status: u16 = head[9..12].parse().unwrap();
    Some(Reply { status, head, body: serde_json::from_slice(&buf[head_end..]).expect("a JSON body") })
}

/// Taps the centre of accessibility element `id` on the app's screen (control touch).
pub async fn tap_id(sim: &Simulator, bundle: &str, id: &str) {
    let n = sim.control(json!({ "op": "native", "bundleId": bundle })).await;
    let e = n["elements"].as_array().unwrap().iter().find(|e| e["id"] == id).unwrap_or_else(|| panic!("{id} on screen: {n}")).clone();
    let f: Vec<f64> = e["frame"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
    let r = sim.control(json!({ "op": "tap", "bundleId": bundle, "x": f[0] + f[2] / 2.0, "y": f[1] + f[3] / 2.0 })).await;
    assert_eq!(r["ok"], true, "{r}");
}

/// Polls `f` every 20 ms until it yields, failing after 30 s.
pub async fn until<T, F: std::future::Future<Output = Option<T>>>(what: &str, mut f: impl FnMut() -> F) -> T {
    let end = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(tokio::time::Instant::now() < end, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Truth items of `kind` (after `since`).
pub async fn truth(sim: &Simulator, kind: &str) -> Vec<Value> {
    sim.control(json!({ "op": "truth", "kind": kind })).await["items"].as_array().cloned().unwrap_or_default()
}

/// The managed `execution` envelope.
pub fn execution(kind: &str, id: &str, epoch: &str, timeout_ms: u64) -> Value {
    json!({ "schemaVersion": format!("aab.{kind}-execution/v1"), "actionId": id, "runtimeEpoch": epoch, "timeoutMs": timeout_ms })
}
