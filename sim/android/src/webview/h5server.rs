//! The simulator's H5 HTTP server (127.0.0.1, ephemeral port): the pages of
//! `sim/android/scenarios/h5/` (built in), a generated page of N controls
//! (`/h5/controls.html?n=1000`, benchmarks), and a small JSON API whose every
//! request is logged — the ground truth for what a page really sent.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::task::JoinHandle;

use super::http::{self, Request};

/// Pages served under `/h5/`.
const PAGES: &[(&str, &str)] = &[("signup.html", include_str!("../../scenarios/h5/signup.html")), ("news.html", include_str!("../../scenarios/h5/news.html")), ("help.html", include_str!("../../scenarios/h5/help.html"))];

/// Requests kept in the log (oldest dropped first).
const LOG_CAP: usize = 2000;
/// Bytes of a request or response body kept in the log.
const LOG_BODY: usize = 64 * 1024;
/// Whole-connection bound.
const CONN_TIMEOUT: Duration = Duration::from_secs(30);

pub struct H5Server {
    pub port: u16,
    log: Arc<Mutex<Log>>,
    task: JoinHandle<()>,
}

#[derive(Default)]
struct Log {
    next: u64,
    items: Vec<Value>,
}

impl H5Server {
    /// Binds and starts serving (needs a tokio runtime).
    pub fn start() -> std::io::Result<H5Server> {
        let std_l = std::net::TcpListener::bind(("127.0.0.1", 0))?;
        std_l.set_nonblocking(true)?;
        let port = std_l.local_addr()?.port();
        let listener = tokio::net::TcpListener::from_std(std_l)?;
        let log = Arc::new(Mutex::new(Log::default()));
        let l2 = log.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                let log = l2.clone();
                tokio::spawn(async move {
                    let _ = tokio::time::timeout(CONN_TIMEOUT, async {
                        let Some(req) = http::read_request(&mut s, true).await else { return };
                        let (status, ctype, body) = route(&req, port).await;
                        record(&log, &req, status, &body);
                        http::respond(&mut s, status, ctype, &body).await;
                    })
                    .await;
                });
            }
        });
        Ok(H5Server { port, log, task })
    }

    pub fn base(&self) -> String {
        format!("http://127.0.0.1:{}/", self.port)
    }

    /// A WebView url: absolute as given, relative ones against this server.
    pub fn resolve(&self, url: &str) -> String {
        if url.contains("://") || url.starts_with("about:") || url.starts_with("data:") { url.to_string() } else { format!("{}{}", self.base(), url.trim_start_matches('/')) }
    }

    /// Logged requests with seq > `since`.
    pub fn requests(&self, since: u64) -> Vec<Value> {
        self.log.lock().unwrap().items.iter().filter(|r| r["seq"].as_u64().unwrap_or(0) > since).cloned().collect()
    }
}

impl Drop for H5Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn clip(b: &[u8]) -> String {
    String::from_utf8_lossy(&b[..b.len().min(LOG_BODY)]).into_owned()
}

fn record(log: &Mutex<Log>, req: &Request, status: u16, body: &[u8]) {
    let mut l = log.lock().unwrap();
    l.next += 1;
    let item = json!({
        "seq": l.next,
        "atMs": crate::device::now_ms(),
        "method": req.method,
        "path": req.path,
        "query": req.query.iter().map(|(k, v)| json!([k, v])).collect::<Vec<_>>(),
        "contentType": req.header("content-type"),
        "userAgent": req.header("user-agent"),
        "body": clip(&req.body),
        "status": status,
        "responseBody": if req.path.starts_with("/api/") { Value::String(clip(body)) } else { Value::Null },
        "responseBytes": body.len(),
    });
    l.items.push(item);
    if l.items.len() > LOG_CAP {
        l.items.remove(0);
    }
}

fn jsonr(status: u16, v: Value) -> (u16, &'static str, Vec<u8>) {
    (status, "application/json", v.to_string().into_bytes())
}

async fn route(req: &Request, port: u16) -> (u16, &'static str, Vec<u8>) {
    let body_text = String::from_utf8_lossy(&req.body).into_owned();
    match req.path.as_str() {
        "/" | "/h5/" => {
            let links: String = PAGES.iter().map(|(n, _)| format!("<li><a href=\"/h5/{n}\">{n}</a></li>")).collect();
            (200, "text/html; charset=utf-8", format!("<!doctype html><title>H5 pages</title><ul>{links}<li><a href=\"/h5/controls.html?n=1000\">controls.html</a></li></ul>").into_bytes())
        }
        "/h5/controls.html" => {
            let n = req.query("n").and_then(|n| n.parse::<usize>().ok()).unwrap_or(1000).min(20_000);
            (200, "text/html; charset=utf-8", controls_page(n).into_bytes())
        }
        "/api/echo" => jsonr(200, json!({ "ok": true, "method": req.method, "path": req.path, "query": req.query.iter().map(|(k, v)| json!([k, v])).collect::<Vec<_>>(), "contentType": req.header("content-type"), "body": body_text, "port": port })),
        "/api/signup" => {
            if req.method != "POST" {
                return jsonr(405, json!({ "ok": false, "error": "method_not_allowed" }));
            }
            let v: Value = serde_json::from_str(&body_text).unwrap_or(Value::Null);
            let email = v["email"].as_str().unwrap_or("").trim().to_string();
            let name = v["name"].as_str().unwrap_or("").trim().to_string();
            if !(email.contains('@') && email.rsplit('@').next().is_some_and(|d| d.contains('.'))) {
                return jsonr(400, json!({ "ok": false, "error": "invalid_email" }));
            }
            if v["terms"] != json!(true) {
                return jsonr(400, json!({ "ok": false, "error": "terms_not_accepted" }));
            }
            let who = if name.is_empty() { email.clone() } else { name };
            jsonr(201, json!({ "ok": true, "id": crate::device::random_hex(12), "email": email, "welcome": format!("Welcome, {who}") }))
        }
        "/api/support" => {
            if req.method != "POST" {
                return jsonr(405, json!({ "ok": false, "error": "method_not_allowed" }));
            }
            let v: Value = serde_json::from_str(&body_text).unwrap_or(Value::Null);
            let question = v["question"].as_str().unwrap_or("").trim().to_string();
            if question.is_empty() {
                return jsonr(400, json!({ "ok": false, "error": "question_required" }));
            }
            jsonr(201, json!({ "ok": true, "ticket": format!("T-{}", &crate::device::random_hex(6)), "topic": v["topic"], "question": question }))
        }
        "/api/items" => {
            let n = req.query("n").and_then(|n| n.parse::<usize>().ok()).unwrap_or(5).min(500);
            jsonr(200, json!({ "ok": true, "items": (1..=n).map(|i| json!({ "id": i, "title": format!("Item {i}") })).collect::<Vec<_>>() }))
        }
        "/api/slow" => {
            let ms = req.query("ms").and_then(|n| n.parse::<u64>().ok()).unwrap_or(500).min(10_000);
            tokio::time::sleep(Duration::from_millis(ms)).await;
            jsonr(200, json!({ "ok": true, "sleptMs": ms }))
        }
        p => match p.strip_prefix("/h5/").and_then(|n| PAGES.iter().find(|(name, _)| *name == n)) {
            Some((_, html)) => (200, "text/html; charset=utf-8", html.as_bytes().to_vec()),
            None => jsonr(404, json!({ "ok": false, "error": "not_found", "path": p })),
        },
    }
}

/// A page of `n` controls (buttons, text inputs, checkboxes, links in turn),
/// each with a stable id and label — the large-page benchmark.
pub fn controls_page(n: usize) -> String {
    let mut s = String::with_capacity(n * 90 + 600);
    s.push_str("<!doctype html><html><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>Controls</title>");
    s.push_str("<style>body{font-family:sans-serif;margin:8px}.c{display:block;margin:4px 0;min-height:28px}</style></head><body><h1>Controls</h1>");
    s.push_str("<p id=\"last\" role=\"status\"></p>");
    for i in 0..n {
        match i % 4 {
            0 => s.push_str(&format!("<button class=\"c\" id=\"b{i}\" onclick=\"last.textContent='clicked b{i}'\">Button {i}</button>")),
            1 => s.push_str(&format!("<input class=\"c\" id=\"i{i}\" name=\"i{i}\" type=\"text\" aria-label=\"Field {i}\" placeholder=\"Field {i}\">")),
            2 => s.push_str(&format!("<label class=\"c\"><input id=\"k{i}\" type=\"checkbox\"> Option {i}</label>")),
            _ => s.push_str(&format!("<a class=\"c\" id=\"a{i}\" href=\"#a{i}\">Link {i}</a>")),
        }
    }
    s.push_str("</body></html>");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_page_has_exactly_n_controls() {
        let p = controls_page(1000);
        let count = p.matches("class=\"c\"").count();
        assert_eq!(count, 1000);
        assert!(p.contains("id=\"b996\"") && p.contains("id=\"a999\""));
    }
}
