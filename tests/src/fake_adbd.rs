//! Test double: a minimal adbd over TCP that the REAL adb server connects to
//! (`adb connect` / `host:connect`), so the Android transport (unit tests of
//! `plugins/android`) and the Android commands (e2e) run through the real server
//! without a phone. It is deliberately small — the full simulated phone
//! is `sim/android` — and serves: `shell,v2,…:CMD` and `exec:CMD` (run by the
//! test machine's `sh`, except `run-as <pkg> cat files/ai_app_bridge_endpoint.json`,
//! answered from a table), `sync:` (`STAT`/`RECV`/`SEND` under a temp root), and
//! `localabstract:<name>` sockets that answer one HTTP request with JSON.
//! Other services are refused with `CLSE`.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

const CNXN: u32 = 0x4e584e43;
const OPEN: u32 = 0x4e45504f;
const OKAY: u32 = 0x59414b4f;
const WRTE: u32 = 0x45545257;
const CLSE: u32 = 0x45534c43;

/// What the fake phone knows; tests change it while it runs.
#[derive(Default)]
pub struct Phone {
    /// package → (exit code, stdout, stderr) of `run-as <pkg> cat files/ai_app_bridge_endpoint.json`.
    pub descriptors: HashMap<String, (u8, String, String)>,
    /// localabstract socket names that accept connections.
    pub sockets: Vec<String>,
    /// Every service opened, in order (ground truth for "no request was sent").
    pub opened: Vec<String>,
    /// HTTP requests seen on localabstract sockets (request line).
    pub http: Vec<String>,
    /// JSON body the sockets answer with (`request` and `socket` are added);
    /// default `{"ok":true}`.
    pub http_reply: Option<serde_json::Value>,
}

pub struct FakeAdbd {
    pub port: u16,
    pub phone: Arc<Mutex<Phone>>,
    pub root: tempfile::TempDir,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeAdbd {
    fn drop(&mut self) {
        self.task.abort();
    }
}

struct Packet {
    cmd: u32,
    arg0: u32,
    arg1: u32,
    data: Vec<u8>,
}

fn encode(p: &Packet) -> Vec<u8> {
    let mut b = Vec::with_capacity(24 + p.data.len());
    for w in [p.cmd, p.arg0, p.arg1, p.data.len() as u32, 0, p.cmd ^ 0xffff_ffff] {
        b.extend_from_slice(&w.to_le_bytes());
    }
    b.extend_from_slice(&p.data);
    b
}

async fn read_packet(s: &mut tokio::net::tcp::OwnedReadHalf) -> Option<Packet> {
    let mut h = [0u8; 24];
    s.read_exact(&mut h).await.ok()?;
    let w = |i: usize| u32::from_le_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
    let mut data = vec![0u8; w(12) as usize];
    s.read_exact(&mut data).await.ok()?;
    Some(Packet { cmd: w(0), arg0: w(4), arg1: w(8), data })
}

enum Event {
    Data(Vec<u8>),
    Okay,
}

/// One device-side stream: reads host data, writes with one outstanding WRTE.
struct Stream {
    local: u32,
    remote: u32,
    out: mpsc::UnboundedSender<Packet>,
    events: mpsc::UnboundedReceiver<Event>,
    pending: VecDeque<u8>,
    max: usize,
}

impl Stream {
    async fn write(&mut self, data: &[u8]) -> Option<()> {
        for chunk in data.chunks(self.max) {
            self.out.send(Packet { cmd: WRTE, arg0: self.local, arg1: self.remote, data: chunk.to_vec() }).ok()?;
            loop {
                match self.events.recv().await? {
                    Event::Okay => break,
                    Event::Data(d) => self.pending.extend(d),
                }
            }
        }
        Some(())
    }

    async fn read_exact(&mut self, n: usize) -> Option<Vec<u8>> {
        while self.pending.len() < n {
            match self.events.recv().await? {
                Event::Data(d) => self.pending.extend(d),
                Event::Okay => {}
            }
        }
        Some(self.pending.drain(..n).collect())
    }

    fn close(&self) {
        let _ = self.out.send(Packet { cmd: CLSE, arg0: self.local, arg1: self.remote, data: vec![] });
    }
}

impl FakeAdbd {
    pub async fn start() -> FakeAdbd {
        let listener = loop {
            let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
            if !(5037..=5585).contains(&l.local_addr().unwrap().port()) {
                break l;
            }
        };
        let port = listener.local_addr().unwrap().port();
        let phone = Arc::new(Mutex::new(Phone::default()));
        let root = tempfile::tempdir().unwrap();
        let (p, r) = (phone.clone(), root.path().to_path_buf());
        let task = tokio::spawn(async move {
            while let Ok((s, _)) = listener.accept().await {
                tokio::spawn(connection(s, p.clone(), r.clone()));
            }
        });
        FakeAdbd { port, phone, root, task }
    }

    pub fn serial(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

async fn connection(s: TcpStream, phone: Arc<Mutex<Phone>>, root: PathBuf) {
    let _ = s.set_nodelay(true);
    let (mut rd, mut wr) = s.into_split();
    let (out, mut out_rx) = mpsc::unbounded_channel::<Packet>();
    tokio::spawn(async move {
        while let Some(p) = out_rx.recv().await {
            if wr.write_all(&encode(&p)).await.is_err() {
                return;
            }
        }
    });
    let mut streams: HashMap<u32, mpsc::UnboundedSender<Event>> = HashMap::new();
    let mut next_id = 1u32;
    let mut max = 4096usize;
    while let Some(p) = read_packet(&mut rd).await {
        match p.cmd {
            CNXN => {
                max = (p.arg1 as usize).clamp(1024, 256 * 1024);
                let banner = b"device::ro.product.name=fake;ro.product.model=Fake_Phone;ro.product.device=fake;features=shell_v2,cmd".to_vec();
                let _ = out.send(Packet { cmd: CNXN, arg0: 0x0100_0001, arg1: 256 * 1024, data: banner });
            }
            OPEN => {
                let service = String::from_utf8_lossy(p.data.strip_suffix(&[0]).unwrap_or(&p.data)).into_owned();
                phone.lock().unwrap().opened.push(service.clone());
                let local = next_id;
                next_id += 1;
                let (tx, rx) = mpsc::unbounded_channel();
                let stream = Stream { local, remote: p.arg0, out: out.clone(), events: rx, pending: VecDeque::new(), max };
                if !accepts(&service, &phone) {
                    let _ = out.send(Packet { cmd: CLSE, arg0: 0, arg1: p.arg0, data: vec![] });
                    continue;
                }
                streams.insert(local, tx);
                let _ = out.send(Packet { cmd: OKAY, arg0: local, arg1: p.arg0, data: vec![] });
                tokio::spawn(serve(service, stream, phone.clone(), root.clone()));
            }
            WRTE => {
                let _ = out.send(Packet { cmd: OKAY, arg0: p.arg1, arg1: p.arg0, data: vec![] });
                if let Some(tx) = streams.get(&p.arg1) {
                    let _ = tx.send(Event::Data(p.data));
                }
            }
            OKAY => {
                if let Some(tx) = streams.get(&p.arg1) {
                    let _ = tx.send(Event::Okay);
                }
            }
            CLSE => {
                streams.remove(&p.arg1);
            }
            _ => {}
        }
    }
}

fn accepts(service: &str, phone: &Arc<Mutex<Phone>>) -> bool {
    if let Some(name) = service.strip_prefix("localabstract:") {
        return phone.lock().unwrap().sockets.iter().any(|s| s == name);
    }
    service.starts_with("shell,v2,") || service.starts_with("exec:") || service == "sync:"
}

async fn serve(service: String, mut s: Stream, phone: Arc<Mutex<Phone>>, root: PathBuf) {
    if let Some(rest) = service.strip_prefix("shell,v2,") {
        let cmd = rest.split_once(':').map(|(_, c)| c).unwrap_or("").to_string();
        // Collect stdin up to close-stdin (id 4).
        let mut stdin = Vec::new();
        loop {
            let Some(h) = s.read_exact(5).await else { return };
            let len = u32::from_le_bytes([h[1], h[2], h[3], h[4]]) as usize;
            let Some(d) = s.read_exact(len).await else { return };
            match h[0] {
                0 => stdin.extend_from_slice(&d),
                4 => break,
                _ => {}
            }
        }
        let (code, out, err) = run(&cmd, &stdin, &phone, &root).await;
        let mut bytes = Vec::new();
        for (id, data) in [(1u8, out), (2u8, err), (3u8, vec![code])] {
            if !data.is_empty() || id == 3 {
                bytes.push(id);
                bytes.extend_from_slice(&(data.len() as u32).to_le_bytes());
                bytes.extend_from_slice(&data);
            }
        }
        let _ = s.write(&bytes).await;
        s.close();
    } else if let Some(cmd) = service.strip_prefix("exec:") {
        let (_, out, _) = run(cmd, &[], &phone, &root).await;
        let _ = s.write(&out).await;
        s.close();
    } else if service == "sync:" {
        sync(&mut s, &root).await;
        s.close();
    } else if service.starts_with("localabstract:") {
        let mut req = Vec::new();
        while !req.windows(4).any(|w| w == b"\r\n\r\n") {
            match s.events.recv().await {
                Some(Event::Data(d)) => req.extend(d),
                Some(Event::Okay) => {}
                None => return,
            }
        }
        let line = String::from_utf8_lossy(&req).lines().next().unwrap_or("").to_string();
        phone.lock().unwrap().http.push(line.clone());
        let mut body = phone.lock().unwrap().http_reply.clone().unwrap_or_else(|| serde_json::json!({"ok": true}));
        body["request"] = serde_json::json!(line);
        body["socket"] = serde_json::json!(service);
        let body = body.to_string();
        let reply = format!("HTTP/1.1 200 OK\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len());
        let _ = s.write(reply.as_bytes()).await;
        s.close();
    }
}

async fn run(cmd: &str, stdin: &[u8], phone: &Arc<Mutex<Phone>>, root: &std::path::Path) -> (u8, Vec<u8>, Vec<u8>) {
    if let Some(rest) = cmd.strip_prefix("run-as ") {
        let pkg = rest.split_whitespace().next().unwrap_or("");
        return match phone.lock().unwrap().descriptors.get(pkg) {
            Some((code, out, err)) => (*code, out.clone().into_bytes(), err.clone().into_bytes()),
            None => (1, vec![], format!("run-as: unknown package: {pkg}\n").into_bytes()),
        };
    }
    // Answered in-process, so the benchmark measures the transport, not `sh`.
    if cmd == "true" {
        return (0, vec![], vec![]);
    }
    let mut child = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(cmd)
        .current_dir(root)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut i = child.stdin.take().unwrap();
    let _ = i.write_all(stdin).await;
    drop(i);
    let out = child.wait_with_output().await.unwrap();
    (out.status.code().unwrap_or(255) as u8, out.stdout, out.stderr)
}

async fn sync(s: &mut Stream, root: &std::path::Path) {
    let local = |p: &[u8]| root.join(String::from_utf8_lossy(p).trim_start_matches('/'));
    loop {
        let Some(h) = s.read_exact(8).await else { return };
        let len = u32::from_le_bytes([h[4], h[5], h[6], h[7]]) as usize;
        let Some(arg) = s.read_exact(len).await else { return };
        match &h[..4] {
            b"STAT" => {
                let mut r = b"STAT".to_vec();
                match std::fs::metadata(local(&arg)) {
                    Ok(m) => {
                        use std::os::unix::fs::MetadataExt;
                        for w in [m.mode(), m.size() as u32, m.mtime() as u32] {
                            r.extend_from_slice(&w.to_le_bytes());
                        }
                    }
                    Err(_) => r.extend_from_slice(&[0u8; 12]),
                }
                s.write(&r).await;
            }
            b"RECV" => {
                let mut r = Vec::new();
                match std::fs::read(local(&arg)) {
                    Ok(data) => {
                        for c in data.chunks(64 * 1024) {
                            r.extend_from_slice(b"DATA");
                            r.extend_from_slice(&(c.len() as u32).to_le_bytes());
                            r.extend_from_slice(c);
                        }
                        r.extend_from_slice(b"DONE\0\0\0\0");
                    }
                    Err(e) => {
                        let m = e.to_string();
                        r.extend_from_slice(b"FAIL");
                        r.extend_from_slice(&(m.len() as u32).to_le_bytes());
                        r.extend_from_slice(m.as_bytes());
                    }
                }
                s.write(&r).await;
            }
            b"SEND" => {
                let spec = String::from_utf8_lossy(&arg).into_owned();
                let path = spec.rsplit_once(',').map(|(p, _)| p.to_string()).unwrap_or(spec);
                let mut data = Vec::new();
                loop {
                    let Some(h) = s.read_exact(8).await else { return };
                    let len = u32::from_le_bytes([h[4], h[5], h[6], h[7]]) as usize;
                    if &h[..4] == b"DONE" {
                        break;
                    }
                    let Some(d) = s.read_exact(len).await else { return };
                    data.extend_from_slice(&d);
                }
                let target = local(path.as_bytes());
                let r = match target.parent().map(std::fs::create_dir_all).unwrap_or(Ok(())).and_then(|_| std::fs::write(&target, &data)) {
                    Ok(()) => b"OKAY\0\0\0\0".to_vec(),
                    Err(e) => {
                        let m = e.to_string();
                        let mut r = b"FAIL".to_vec();
                        r.extend_from_slice(&(m.len() as u32).to_le_bytes());
                        r.extend_from_slice(m.as_bytes());
                        r
                    }
                };
                s.write(&r).await;
            }
            _ => return,
        }
    }
}
