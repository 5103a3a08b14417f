//! Test-side servers whose request logs are the ground truth: a page server
//! the browsers load pages from, and a fault server that plays a WebDriver
//! endpoint misbehaving in one chosen way.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One request as the server read it.
#[derive(Clone, Debug)]
pub struct Hit {
    pub method: String,
    pub target: String,
    pub content_type: Option<String>,
    pub body: String,
}

type Log = Arc<Mutex<Vec<Hit>>>;

/// Reads one HTTP/1.1 request (head + Content-Length body), capped.
fn read_request(stream: &mut TcpStream) -> Option<Hit> {
    const CAP: usize = 1024 * 1024;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .ok()?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = stream.read(&mut chunk).ok()?;
        if n == 0 || buf.len() > CAP {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut request_line = lines.next()?.split(' ');
    let (method, target) = (
        request_line.next()?.to_string(),
        request_line.next()?.to_string(),
    );
    let mut content_length = 0usize;
    let mut content_type = None;
    for line in lines {
        if let Some((name, value)) = line.split_once(':') {
            match name.trim().to_ascii_lowercase().as_str() {
                "content-length" => content_length = value.trim().parse().unwrap_or(0),
                "content-type" => content_type = Some(value.trim().to_string()),
                _ => {}
            }
        }
    }
    while buf.len() < head_end + content_length.min(CAP) {
        let n = stream.read(&mut chunk).ok()?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let body = String::from_utf8_lossy(&buf[head_end..]).into_owned();
    Some(Hit {
        method,
        target,
        content_type,
        body,
    })
}

fn respond(stream: &mut TcpStream, status: &str, content_type: &str, body: &[u8]) {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = stream
        .write_all(head.as_bytes())
        .and_then(|_| stream.write_all(body));
}

/// Accept loop on 127.0.0.1 that hands each connection to `handle` on its
/// own thread, until dropped.
struct Acceptor {
    port: u16,
    stop: Arc<AtomicBool>,
}

impl Acceptor {
    fn start(handle: impl Fn(TcpStream, &AtomicBool) + Send + Sync + 'static) -> Acceptor {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind test server");
        let port = listener.local_addr().unwrap().port();
        let stop = Arc::new(AtomicBool::new(false));
        let handle = Arc::new(handle);
        let stop_loop = stop.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                if stop_loop.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(stream) = stream else { continue };
                let (handle, stop) = (handle.clone(), stop_loop.clone());
                std::thread::spawn(move || handle(stream, &stop));
            }
        });
        Acceptor { port, stop }
    }
}

impl Drop for Acceptor {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the accept loop so it sees the flag.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

pub const PAGE_TITLE: &str = "aab webdriver page";

/// Serves the test pages; `/clicked…` and `/submit…` are the page's own
/// reports of what the browser did.
pub struct PageServer {
    acceptor: Acceptor,
    log: Log,
}

impl PageServer {
    pub fn start() -> PageServer {
        let log: Log = Arc::default();
        let log_conn = log.clone();
        let acceptor = Acceptor::start(move |mut stream, _| {
            let Some(hit) = read_request(&mut stream) else {
                return;
            };
            log_conn.lock().unwrap().push(hit.clone());
            let path = hit.target.split('?').next().unwrap_or("");
            match path {
                "/page" => respond(
                    &mut stream,
                    "200 OK",
                    "text/html; charset=utf-8",
                    page_html().as_bytes(),
                ),
                "/frame" => respond(
                    &mut stream,
                    "200 OK",
                    "text/html; charset=utf-8",
                    b"<!doctype html><p id=inner>inside the frame</p>",
                ),
                "/submit" => respond(
                    &mut stream,
                    "200 OK",
                    "text/html; charset=utf-8",
                    b"<!doctype html><title>submitted</title><p>thanks</p>",
                ),
                "/clicked" => respond(&mut stream, "204 No Content", "text/plain", b""),
                p if p.starts_with("/visit/") => {
                    let body = format!(
                        "<!doctype html><title>{}</title><p>visited</p>",
                        &p["/visit/".len()..]
                    );
                    respond(
                        &mut stream,
                        "200 OK",
                        "text/html; charset=utf-8",
                        body.as_bytes(),
                    );
                }
                _ => respond(&mut stream, "404 Not Found", "text/plain", b"not here"),
            }
        });
        PageServer { acceptor, log }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.acceptor.port)
    }

    pub fn hits(&self) -> Vec<Hit> {
        self.log.lock().unwrap().clone()
    }

    pub fn saw(&self, target: &str) -> bool {
        self.hits().iter().any(|h| h.target == target)
    }

    /// Waits (bounded) for a request the page sends by itself after an
    /// action (its `fetch` and form submits are asynchronous to the driver's
    /// reply).
    pub fn wait_for(&self, target: &str) -> bool {
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if self.saw(target) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }
}

fn page_html() -> String {
    format!(
        r#"<!doctype html><html><head><title>{PAGE_TITLE}</title><style>body{{margin:0;background:#fff}} button{{width:200px;height:60px}}</style></head>
<body>
<button id="btn" onclick="window.clicks=(window.clicks||0)+1;document.getElementById('out').textContent='clicked '+window.clicks;fetch('/clicked?n='+window.clicks)">Go</button>
<div id="out">idle</div>
<form action="/submit" method="get"><input id="q" name="q"><button id="send" type="submit">Send</button></form>
<iframe id="frame" src="/frame" width="300" height="80"></iframe>
</body></html>"#
    )
}

/// How the fault server answers a request it has read.
#[derive(Clone, Copy, Debug)]
pub enum Fault {
    /// Close with SO_LINGER 0: the client sees a TCP reset.
    Reset,
    /// Never answer, keep the connection open.
    Hang,
    /// 200 with a body of this many bytes and no Content-Length (streamed).
    Oversized(usize),
    /// Headers announce this Content-Length; the body is never sent.
    DeclaredOversized(usize),
    /// Content-Length 100, 10 bytes, then close.
    Truncated,
    /// A complete 200 that is HTML, not JSON.
    Html,
}

/// A WebDriver endpoint that misbehaves as told, logging what it received.
pub struct FaultServer {
    acceptor: Acceptor,
    log: Log,
}

impl FaultServer {
    pub fn start(fault: Fault) -> FaultServer {
        let log: Log = Arc::default();
        let log_conn = log.clone();
        let acceptor = Acceptor::start(move |mut stream, stop| {
            let Some(hit) = read_request(&mut stream) else {
                return;
            };
            log_conn.lock().unwrap().push(hit);
            match fault {
                Fault::Reset => reset(stream),
                Fault::Hang => {
                    while !stop.load(Ordering::SeqCst) {
                        std::thread::sleep(Duration::from_millis(50));
                    }
                }
                Fault::Oversized(len) => {
                    let _ = stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n{\"value\":\"");
                    let block = vec![b'a'; 64 * 1024];
                    let mut sent = 0;
                    while sent < len {
                        if stream.write_all(&block).is_err() {
                            return; // the client stopped reading at its cap
                        }
                        sent += block.len();
                    }
                    let _ = stream.write_all(b"\"}");
                }
                Fault::DeclaredOversized(len) => {
                    let head = format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len}\r\n\r\n"
                    );
                    let _ = stream.write_all(head.as_bytes());
                    std::thread::sleep(Duration::from_secs(2));
                }
                Fault::Truncated => {
                    let _ = stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"value\":");
                    let _ = stream.flush();
                }
                Fault::Html => respond(
                    &mut stream,
                    "200 OK",
                    "text/html",
                    b"<html>not webdriver</html>",
                ),
            }
        });
        FaultServer { acceptor, log }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.acceptor.port)
    }

    pub fn hits(&self) -> Vec<Hit> {
        self.log.lock().unwrap().clone()
    }
}

fn reset(stream: TcpStream) {
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: setsockopt on a socket this function owns, with a correctly sized option.
    unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        );
    }
    drop(stream);
}

/// A port with nothing listening on it (bound, then released).
pub fn closed_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// PNG width and height from the IHDR chunk, after checking the signature.
pub fn png_size(png: &[u8]) -> (u32, u32) {
    assert!(png.len() > 33, "PNG too short: {} bytes", png.len());
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "PNG signature");
    assert_eq!(&png[12..16], b"IHDR", "first chunk is IHDR");
    let width = u32::from_be_bytes(png[16..20].try_into().unwrap());
    let height = u32::from_be_bytes(png[20..24].try_into().unwrap());
    (width, height)
}

/// Asserts that none of the process groups has a live member left.
pub fn assert_groups_gone(pgids: &[i32]) {
    for &pgid in pgids {
        let left = aab_webdriver::servers::group_members(pgid);
        assert!(
            left.is_empty(),
            "process group {pgid} still has live members: {left:?}"
        );
    }
}
