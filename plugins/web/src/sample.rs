//! The bundled sample app (served under `/sample/` when `web-session-start` was
//! given `sampleApp: true`): static pages embedding the Web SDK, plus a tiny JSON
//! API that records what the app submitted, so demos and tests can check the
//! business outcome on the server side, independently of the SDK's own report.

use std::sync::Mutex;

use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{Value, json};

use crate::ids::now_ms;
use crate::server::{Body, json_response, respond};
use crate::state::{Shared, lock};

/// Largest accepted API body.
const MAX_BODY: usize = 64 * 1024;
/// Submissions kept (oldest dropped first).
const MAX_SUBMISSIONS: usize = 1000;

const FILES: &[(&str, &str, &str)] = &[
    ("/sample/", "text/html; charset=utf-8", include_str!("../sample/index.html")),
    ("/sample/index.html", "text/html; charset=utf-8", include_str!("../sample/index.html")),
    ("/sample/form.html", "text/html; charset=utf-8", include_str!("../sample/form.html")),
    ("/sample/list.html", "text/html; charset=utf-8", include_str!("../sample/list.html")),
    ("/sample/app.js", "text/javascript; charset=utf-8", include_str!("../sample/app.js")),
    ("/sample/style.css", "text/css; charset=utf-8", include_str!("../sample/style.css")),
];

#[derive(Default)]
pub struct SampleApi {
    submissions: Mutex<Vec<Value>>,
}

impl SampleApi {
    pub fn count(&self) -> usize {
        lock(&self.submissions).len()
    }
}

pub async fn handle(shared: &Shared, req: Request<Incoming>) -> Response<Body> {
    let path = req.uri().path().to_string();
    match (req.method().clone(), path.as_str()) {
        (Method::GET, "/sample") => {
            let mut r = respond(StatusCode::MOVED_PERMANENTLY, "text/plain", "see /sample/");
            r.headers_mut().insert(hyper::header::LOCATION, hyper::header::HeaderValue::from_static("/sample/"));
            r
        }
        (Method::POST, "/sample/api/submit") => {
            let body = match Limited::new(req.into_body(), MAX_BODY).collect().await {
                Ok(b) => b.to_bytes(),
                Err(_) => return json_response(StatusCode::PAYLOAD_TOO_LARGE, &json!({"ok": false, "error": "body_too_large"})),
            };
            let Ok(payload) = serde_json::from_slice::<Value>(&body) else {
                return json_response(StatusCode::BAD_REQUEST, &json!({"ok": false, "error": "invalid_json"}));
            };
            let mut list = lock(&shared.sample.submissions);
            let id = list.len() as u64 + 1;
            list.push(json!({"id": id, "receivedAtMs": now_ms(), "payload": payload}));
            if list.len() > MAX_SUBMISSIONS {
                list.remove(0);
            }
            json_response(StatusCode::OK, &json!({"ok": true, "id": id}))
        }
        // Binary resources for network-capture tests: `size` bytes (default 256,
        // at most 64 KiB) counting 0,1,…,255,0,…; `echo` answers the body it got.
        (Method::GET, "/sample/api/blob") => {
            let size = req.uri().query().and_then(|q| q.split('&').find_map(|kv| kv.strip_prefix("size="))).and_then(|n| n.parse::<usize>().ok()).unwrap_or(256);
            let bytes: Vec<u8> = (0..size.min(MAX_BODY)).map(|i| (i % 256) as u8).collect();
            respond(StatusCode::OK, "application/octet-stream", bytes)
        }
        (Method::POST, "/sample/api/echo") => match Limited::new(req.into_body(), MAX_BODY).collect().await {
            Ok(b) => respond(StatusCode::OK, "application/octet-stream", b.to_bytes()),
            Err(_) => json_response(StatusCode::PAYLOAD_TOO_LARGE, &json!({"ok": false, "error": "body_too_large"})),
        },
        (Method::GET, "/sample/api/submissions") => {
            let list = lock(&shared.sample.submissions).clone();
            json_response(StatusCode::OK, &json!({"ok": true, "count": list.len(), "submissions": list}))
        }
        (Method::GET, p) => match FILES.iter().find(|(name, _, _)| *name == p) {
            Some((_, kind, text)) => respond(StatusCode::OK, kind, Bytes::from_static(text.as_bytes())),
            None => json_response(StatusCode::NOT_FOUND, &json!({"ok": false, "error": "not_found"})),
        },
        _ => json_response(StatusCode::METHOD_NOT_ALLOWED, &json!({"ok": false, "error": "method_not_allowed"})),
    }
}
