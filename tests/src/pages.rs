//! A page server whose request log is ground truth for executor tests: it serves
//! small HTML pages with no SDK in them, and every click on their buttons sends a
//! `GET /hit?…` the server records. A test then knows what really happened in the
//! browser (on whichever grid node it ran) without trusting aab's own reply.
//!
//! Pages: `/form?s=TAG` — a `Go` button (each click hits `/hit?s=TAG&b=go&n=<count>`),
//! a `Name` text field and a `Send` button (hits `/hit?s=TAG&b=send&name=<value>`),
//! and a link to `/second?s=TAG`; `/second?s=TAG` — a page with a `Back` link.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub struct PageServer {
    port: u16,
    log: Arc<Mutex<Vec<String>>>,
}

const FORM: &str = r#"<!doctype html>
<html><head><meta charset="utf-8"><title>Executor form</title></head>
<body>
<h1>Executor form</h1>
<button id="go" onclick="hit('b=go&n=' + (++window.goCount))">Go</button>
<label>Name <input id="name" name="name" aria-label="Name" type="text"></label>
<button id="send" onclick="hit('b=send&name=' + encodeURIComponent(document.getElementById('name').value))">Send</button>
<a id="next" href="/second?s=__TAG__">Second page</a>
<p id="status">idle</p>
<script>
window.goCount = 0;
function hit(q) {
  document.getElementById('status').textContent = 'sent ' + q;
  fetch('/hit?s=__TAG__&' + q, {cache: 'no-store'});
}
</script>
</body></html>"#;

const SECOND: &str = r#"<!doctype html>
<html><head><meta charset="utf-8"><title>Second page</title></head>
<body><h1>Second page</h1><a id="back" href="/form?s=__TAG__">Back</a></body></html>"#;

impl PageServer {
    pub fn start() -> PageServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind page server");
        let port = listener.local_addr().unwrap().port();
        let log: Arc<Mutex<Vec<String>>> = Arc::default();
        let l = log.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let l = l.clone();
                std::thread::spawn(move || serve(stream, &l));
            }
        });
        PageServer { port, log }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// Every `/hit` query received so far, in arrival order.
    pub fn hits(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }

    /// The hits of one page tag.
    pub fn hits_of(&self, tag: &str) -> Vec<String> {
        let prefix = format!("s={tag}&");
        self.hits().into_iter().filter(|h| h.starts_with(&prefix)).collect()
    }

    /// Waits (bounded) until `pred` holds over the log; the browser's fetch is
    /// asynchronous to the click that sent it.
    pub fn wait_for(&self, within: Duration, pred: impl Fn(&[String]) -> bool) -> bool {
        let end = Instant::now() + within;
        loop {
            if pred(&self.hits()) {
                return true;
            }
            if Instant::now() > end {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn serve(stream: TcpStream, log: &Mutex<Vec<String>>) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let mut reader = BufReader::new(stream.try_clone().expect("clone"));
    let mut out = stream;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line.len() > 8192 {
            return;
        }
        let target = line.split_whitespace().nth(1).unwrap_or("/").to_string();
        // Headers (bounded); no request here has a body.
        let mut n = 0;
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            n += 1;
            if h == "\r\n" || h == "\n" || n > 100 {
                break;
            }
        }
        let (path, query) = target.split_once('?').unwrap_or((target.as_str(), ""));
        let tag: String = query.split('&').find_map(|kv| kv.strip_prefix("s=")).unwrap_or("none").chars().filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_').collect();
        let (status, ctype, body) = match path {
            "/form" => ("200 OK", "text/html; charset=utf-8", FORM.replace("__TAG__", &tag)),
            "/second" => ("200 OK", "text/html; charset=utf-8", SECOND.replace("__TAG__", &tag)),
            "/hit" => {
                log.lock().unwrap().push(query.to_string());
                ("204 No Content", "text/plain", String::new())
            }
            _ => ("404 Not Found", "text/plain", "not found".to_string()),
        };
        let head = format!("HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nCache-Control: no-store\r\n\r\n", body.len());
        if out.write_all(head.as_bytes()).and_then(|_| out.write_all(body.as_bytes())).is_err() {
            return;
        }
    }
}
