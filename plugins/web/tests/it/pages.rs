//! The test pages and the page server's request log: the ground truth of what
//! a page did. Pages log through synchronous XHR, so a request is in the log
//! before the page's handler returns. `/block` holds its reply until the test
//! releases it (a click handler that is still running when the test strikes).

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

pub const FORM: &str = r#"<!doctype html><html><head><title>Executor form</title></head><body>
<h1>Executor test</h1>
<label for="name">Name</label><input id="name" name="name">
<button id="go">Send</button>
<button id="swap">Swap</button>
<div id="holder"><button id="target">Target</button></div>
<button id="slow">Slow</button>
<button id="gone" onclick="this.remove()">Vanish</button>
<a id="next" href="/other">Next page</a>
<p id="status">ready</p>
<div style="height:3000px"></div>
<button id="far">Far</button>
<script>
var tag = new URLSearchParams(location.search).get('tag') || '';
function log(q) { var x = new XMLHttpRequest(); x.open('GET', '/log?tag=' + encodeURIComponent(tag) + '&' + q, false); x.send(); }
document.getElementById('go').addEventListener('click', function (e) { log('click=go&trusted=' + e.isTrusted + '&name=' + encodeURIComponent(document.getElementById('name').value)); document.getElementById('status').textContent = 'sent'; });
document.getElementById('target').addEventListener('click', function () { log('click=target'); });
document.getElementById('far').addEventListener('click', function () { log('click=far'); });
document.getElementById('swap').addEventListener('click', function () {
  log('click=swap');
  document.getElementById('holder').innerHTML = '<button id="target">Target</button>';
  document.getElementById('target').addEventListener('click', function () { log('click=target2'); });
});
document.getElementById('slow').addEventListener('click', function () {
  log('click=slow');
  var x = new XMLHttpRequest(); x.open('GET', '/block?tag=' + encodeURIComponent(tag), false); x.send();
});
document.getElementById('name').addEventListener('keydown', function (e) { if (e.key === 'Enter') log('enter=' + encodeURIComponent(this.value)); });
document.getElementById('next').href = '/other?tag=' + encodeURIComponent(tag);
setTimeout(function () { var p = document.createElement('p'); p.id = 'late'; p.textContent = 'Late arrival'; document.body.appendChild(p); }, 300);
</script></body></html>"#;

pub const OTHER: &str = r#"<!doctype html><html><head><title>Other page</title></head><body><h1>Other</h1><button id="back">Back</button></body></html>"#;

#[derive(Default)]
pub struct Log {
    lines: Mutex<(Vec<String>, VecDeque<String>)>,
    changed: Condvar,
}

pub struct Server {
    pub port: u16,
    pub log: Arc<Log>,
}

impl Server {
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// The `/log` requests of pages tagged `tag` (their query strings).
    pub fn entries(&self, tag: &str) -> Vec<String> {
        let prefix = format!("tag={tag}&");
        self.log.lines.lock().unwrap().0.iter().filter_map(|l| l.strip_prefix("/log?")).filter(|q| q.starts_with(&prefix)).map(|q| q[prefix.len()..].to_string()).collect()
    }

    /// Wait (bounded) until a tagged entry satisfies `want`.
    pub fn wait_for(&self, tag: &str, want: impl Fn(&str) -> bool) -> bool {
        let end = Instant::now() + Duration::from_secs(30);
        let mut g = self.log.lines.lock().unwrap();
        loop {
            let prefix = format!("/log?tag={tag}&");
            if g.0.iter().filter_map(|l| l.strip_prefix(&prefix)).any(&want) {
                return true;
            }
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            g = self.log.changed.wait_timeout(g, left).unwrap().0;
        }
    }

    /// Let held `/block` requests of `tag` answer.
    pub fn release(&self, tag: &str) {
        self.log.lines.lock().unwrap().1.push_back(tag.to_string());
        self.log.changed.notify_all();
    }
}

fn handle(mut stream: TcpStream, log: Arc<Log>) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < 65536 {
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    let head = String::from_utf8_lossy(&buf);
    let target = head.split_whitespace().nth(1).unwrap_or("/").to_string();
    let path = target.split('?').next().unwrap_or("/").to_string();
    {
        let mut g = log.lines.lock().unwrap();
        g.0.push(target.clone());
    }
    log.changed.notify_all();
    let (status, kind, body) = match path.as_str() {
        "/form" => ("200 OK", "text/html; charset=utf-8", FORM.to_string()),
        "/other" => ("200 OK", "text/html; charset=utf-8", OTHER.to_string()),
        "/log" => ("204 No Content", "text/plain", String::new()),
        "/block" => {
            let tag = target.split("tag=").nth(1).unwrap_or("").to_string();
            let end = Instant::now() + Duration::from_secs(60);
            let mut g = log.lines.lock().unwrap();
            while !g.1.contains(&tag) && Instant::now() < end {
                g = log.changed.wait_timeout(g, Duration::from_millis(200)).unwrap().0;
            }
            ("204 No Content", "text/plain", String::new())
        }
        _ => ("404 Not Found", "text/plain", "not found".to_string()),
    };
    let reply = format!("HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n{body}", body.len());
    let _ = stream.write_all(reply.as_bytes());
}

/// The one page server of this test binary (127.0.0.1, a free port).
pub fn server() -> &'static Server {
    static S: OnceLock<Server> = OnceLock::new();
    S.get_or_init(|| {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let log = Arc::new(Log::default());
        let l2 = log.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let log = l2.clone();
                std::thread::spawn(move || handle(stream, log));
            }
        });
        Server { port, log }
    })
}
