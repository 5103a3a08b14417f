//! One worker process from start to finish: its temp dir, its spawn (own process
//! group, cleared environment, reply channel on fd 3), the single-threaded poll
//! loop that feeds stdin, collects the output tail and reads the reply frame
//! against one deadline, and the teardown (SIGKILL to the group, reap, remove the
//! temp dir) that runs on every path, including panics.

use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use crate::{ExtractError, Language, MAX_REPLY_FRAME_BYTES, MAX_STDERR_BYTES, Timings, codes};

/// The child's fd for the reply channel.
const REPLY_FD: RawFd = 3;
/// After the reply channel closes without a frame, how long to wait for the exit
/// status (the process usually is already gone: its exit closed the channel).
const EXIT_GRACE: Duration = Duration::from_millis(250);
/// Reads per descriptor per poll round, so a child that writes without pause
/// cannot keep the loop from checking the deadline.
const READS_PER_ROUND: usize = 16;

const JS_WORKER: &str = include_str!("../worker/extract-worker.js");
const PY_WORKER: &str = include_str!("../worker/extract-worker.py");

pub(crate) struct Job<'a> {
    pub language: Language,
    pub runtime: &'a Path,
    pub source: &'a str,
    /// The one request frame, newline included.
    pub request: &'a [u8],
    pub deadline: Instant,
    /// Parent of the temp dir; `None` = the system temp dir.
    pub temp_dir: Option<&'a Path>,
}

/// How a worker run ended.
pub(crate) enum End {
    /// One complete reply frame (without its newline).
    Frame(Vec<u8>),
    Timeout,
    /// The reply channel closed without a frame.
    Exited {
        exit: Option<Exit>,
        still_running: bool,
    },
    FrameTooLarge {
        bytes: usize,
    },
    /// The channel closed after part of a frame.
    Truncated {
        bytes: usize,
    },
    /// The host could not drive the child (poll failed).
    Broken(String),
}

#[derive(Clone, Copy, Debug)]
pub(crate) enum Exit {
    Code(i32),
    Signal(i32),
}

pub(crate) struct Report {
    pub end: End,
    /// The tail of the child's stdout+stderr, lossily decoded.
    pub output: String,
    pub output_truncated: bool,
    pub cleanup_error: Option<String>,
    pub timings: Timings,
}

/// Run one worker. `Err` only when it could not be started; the temp dir is gone
/// either way.
pub(crate) fn run(job: &Job<'_>) -> Result<Report, ExtractError> {
    let started = Instant::now();
    let dir = WorkDir::create(job.temp_dir).map_err(|e| failed(format!("could not create the extraction's temporary directory: {e}")))?;
    let spawned = spawn(job, &dir.path);
    let (mut child, pipes) = match spawned {
        Ok(spawned) => spawned,
        Err(e) => {
            // The start failure is the news; a cleanup failure on top is a detail.
            return Err(match dir.remove() {
                Ok(()) => e,
                Err(cleanup) => e.with("cleanupError", cleanup.to_string()),
            });
        }
    };
    let spawned_at = Instant::now();
    let mut output = Output {
        file: pipes.output,
        open: true,
        tail: Tail::new(MAX_STDERR_BYTES),
    };
    let end = drive(job, pipes.stdin, &pipes.reply, &mut output);
    let ended_at = Instant::now();
    let end = match end {
        Loop::Done(end) => {
            output.drain(Duration::ZERO);
            child.kill_and_reap();
            end
        }
        Loop::Closed { truncated } => {
            // Usually the exit itself closed the channel; give the status a moment,
            // but never hold a call much past its deadline for it.
            let until = (ended_at + EXIT_GRACE).min(job.deadline.max(ended_at + Duration::from_millis(20)));
            let exit = child.wait_for_exit(&mut output, until);
            let still_running = exit.is_none();
            child.kill_and_reap();
            match truncated {
                Some(bytes) => End::Truncated { bytes },
                None => End::Exited { exit, still_running },
            }
        }
    };
    // After SIGKILL every writer in the group is gone, so what is left in the pipe
    // is readable at once; a process that left the group cannot hold this up long.
    output.drain(Duration::from_millis(20));
    drop(child);
    let cleanup_error = dir.remove().err().map(|e| e.to_string());
    let done = Instant::now();
    let (output, output_truncated) = output.tail.into_text();
    Ok(Report {
        end,
        output,
        output_truncated,
        cleanup_error,
        timings: Timings {
            setup: spawned_at - started,
            worker: ended_at - spawned_at,
            cleanup: done - ended_at,
            total: done - started,
        },
    })
}

fn failed(message: String) -> ExtractError {
    ExtractError::new(codes::WORKER_FAILED, message)
}

struct Pipes {
    stdin: Option<ChildStdin>,
    reply: File,
    output: File,
}

fn spawn(job: &Job<'_>, dir: &Path) -> Result<(Worker, Pipes), ExtractError> {
    let (worker_name, worker_text, source_name, flags): (&str, &str, &str, &[&str]) = match job.language {
        Language::JavaScript => ("extract-worker.js", JS_WORKER, "main.js", &[]),
        // -I: ignore PYTHON* variables and user site-packages; -B: write no
        // bytecode into the temp dir; -u: unbuffered, so output before a crash
        // reaches the diagnostic tail.
        Language::Python => ("extract-worker.py", PY_WORKER, "main.py", &["-I", "-B", "-u"]),
    };
    let worker_path = dir.join(worker_name);
    write_new(&worker_path, worker_text).map_err(|e| failed(format!("could not write the worker program: {e}")))?;
    write_new(&dir.join(source_name), job.source).map_err(|e| failed(format!("could not write the script source: {e}")))?;
    let (reply_read, reply_write) = pipe().map_err(|e| failed(format!("could not create the reply pipe: {e}")))?;
    let (output_read, output_write) = pipe().map_err(|e| failed(format!("could not create the output pipe: {e}")))?;
    let output_write_2 = output_write
        .try_clone()
        .map_err(|e| failed(format!("could not duplicate the output pipe: {e}")))?;

    let mut command = Command::new(job.runtime);
    command
        .args(flags)
        .arg(&worker_path)
        .current_dir(dir)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", dir)
        .env("TMPDIR", dir)
        .env("LANG", "C.UTF-8")
        .env("LC_ALL", "C.UTF-8")
        .stdin(Stdio::piped())
        .stdout(Stdio::from(output_write))
        .stderr(Stdio::from(output_write_2))
        // Its own group, so one kill(-pgid) reaches everything it started.
        .process_group(0);
    let reply_fd = reply_write.as_raw_fd();
    // SAFETY: the closure runs in the forked child before exec and only calls
    // dup2/fcntl, which are async-signal-safe; it touches no memory it does not own.
    unsafe {
        command.pre_exec(move || install_reply_fd(reply_fd));
    }
    let spawned = command.spawn();
    // Our copies of the write ends must close now, or the pipes never report EOF.
    drop(command);
    drop(reply_write);
    let mut child = spawned.map_err(|e| spawn_error(e, job))?;
    let stdin = child.stdin.take();
    let worker = Worker { child, reaped: false };
    if let Some(stdin) = &stdin {
        set_nonblocking(stdin.as_raw_fd()).map_err(|e| failed(format!("could not configure the worker's stdin: {e}")))?;
    }
    let reply = File::from(reply_read);
    let output = File::from(output_read);
    for fd in [reply.as_raw_fd(), output.as_raw_fd()] {
        set_nonblocking(fd).map_err(|e| failed(format!("could not configure the worker's pipes: {e}")))?;
    }
    Ok((worker, Pipes { stdin, reply, output }))
}

fn spawn_error(e: io::Error, job: &Job<'_>) -> ExtractError {
    let language = job.language;
    match e.kind() {
        io::ErrorKind::NotFound | io::ErrorKind::PermissionDenied => ExtractError::new(
            codes::RUNTIME_UNAVAILABLE,
            format!(
                "could not start the {} runtime {}: {e}; set {} to a working runtime",
                language.name(),
                job.runtime.display(),
                language.env_var()
            ),
        )
        .with("runtime", job.runtime.display().to_string()),
        _ => failed(format!("could not start the {} worker ({}): {e}", language.name(), job.runtime.display())),
    }
}

/// In the forked child: make the reply pipe's write end fd 3 and inheritable.
fn install_reply_fd(fd: RawFd) -> io::Result<()> {
    // SAFETY: plain fd syscalls on descriptors this process owns.
    let rc = unsafe {
        if fd == REPLY_FD {
            libc::fcntl(fd, libc::F_SETFD, 0)
        } else {
            libc::dup2(fd, REPLY_FD)
        }
    };
    if rc == -1 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

fn write_new(path: &Path, text: &str) -> io::Result<()> {
    let mut file = fs::OpenOptions::new().write(true).create_new(true).open(path)?;
    file.write_all(text.as_bytes())
}

/// A close-on-exec pipe whose ends are never fds 0–2 (a daemon started with
/// those closed would otherwise hand out a descriptor the child's stdio setup
/// overwrites).
fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 writes.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } == -1 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pipe2 succeeded, so both descriptors are open and ours alone.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    Ok((above_stdio(read)?, above_stdio(write)?))
}

fn above_stdio(fd: OwnedFd) -> io::Result<OwnedFd> {
    if fd.as_raw_fd() > 2 {
        return Ok(fd);
    }
    // SAFETY: duplicating a descriptor we own; the original is closed on return.
    let moved = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 3) };
    if moved == -1 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: F_DUPFD_CLOEXEC returned a fresh descriptor owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(moved) })
}

fn set_nonblocking(fd: RawFd) -> io::Result<()> {
    // SAFETY: F_GETFL/F_SETFL on a descriptor we own.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags == -1 || libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) == -1 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The child, killed (with its whole group) and reaped when dropped.
struct Worker {
    child: Child,
    reaped: bool,
}

impl Worker {
    /// The exit status without reaping: until it is reaped, the child's pid — and
    /// so its process group id — cannot be reused by another process.
    fn peek_exit(&self) -> Option<Exit> {
        // SAFETY: waitid fills the zeroed siginfo_t we own; WNOWAIT leaves the
        // child waitable, WNOHANG keeps the call from blocking.
        unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            let rc = libc::waitid(
                libc::P_PID,
                self.child.id() as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
            );
            if rc != 0 || info.si_pid() == 0 {
                return None;
            }
            let status = info.si_status();
            Some(if info.si_code == libc::CLD_EXITED {
                Exit::Code(status)
            } else {
                Exit::Signal(status)
            })
        }
    }

    /// Wait (reading output) until the child exited or `until` passed.
    fn wait_for_exit(&self, output: &mut Output, until: Instant) -> Option<Exit> {
        loop {
            if let Some(exit) = self.peek_exit() {
                return Some(exit);
            }
            let now = Instant::now();
            if now >= until {
                return None;
            }
            let step = (until - now).min(Duration::from_millis(5));
            if output.open {
                // Polling the output both paces the loop and keeps the tail current.
                output.drain(step);
            } else {
                std::thread::sleep(step.min(Duration::from_millis(1)));
            }
        }
    }

    fn kill_and_reap(&mut self) {
        if self.reaped {
            return;
        }
        // SAFETY: kill(2) with the negated pid of our own, not yet reaped child,
        // which leads its own process group (process_group(0)).
        unsafe {
            libc::kill(-(self.child.id() as libc::pid_t), libc::SIGKILL);
        }
        // SIGKILL cannot be caught, so this returns promptly.
        let _ = self.child.wait();
        self.reaped = true;
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.kill_and_reap();
    }
}

enum Loop {
    Done(End),
    /// The reply channel closed; `truncated` = bytes of an unfinished frame.
    Closed {
        truncated: Option<usize>,
    },
}

/// Feed the request, read the reply, keep the output tail — until a frame, the
/// channel's end, or the deadline.
fn drive(job: &Job<'_>, mut stdin: Option<ChildStdin>, reply: &File, output: &mut Output) -> Loop {
    let mut sent = 0;
    let mut frame: Vec<u8> = Vec::with_capacity(4096);
    loop {
        let now = Instant::now();
        if now >= job.deadline {
            return Loop::Done(End::Timeout);
        }
        let mut fds = Vec::with_capacity(3);
        fds.push(libc::pollfd {
            fd: reply.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        });
        if output.open {
            fds.push(libc::pollfd {
                fd: output.file.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            });
        }
        if let Some(stdin) = &stdin {
            fds.push(libc::pollfd {
                fd: stdin.as_raw_fd(),
                events: libc::POLLOUT,
                revents: 0,
            });
        }
        let wait = job.deadline - now;
        // Round up so the loop does not spin through the last sub-millisecond.
        let wait_ms = wait
            .as_millis()
            .saturating_add(u128::from(!wait.subsec_nanos().is_multiple_of(1_000_000)))
            .min(i32::MAX as u128) as libc::c_int;
        // SAFETY: `fds` is a live array of initialised pollfd of the given length.
        let rc = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, wait_ms) };
        if rc < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Loop::Done(End::Broken(format!("waiting for the worker failed: {e}")));
        }
        for pfd in &fds[1..] {
            if pfd.revents == 0 {
                continue;
            }
            if pfd.fd == output.file.as_raw_fd() {
                output.read_now();
            } else if let Some(pipe) = stdin.as_mut() {
                match pipe.write(&job.request[sent..]) {
                    Ok(n) => sent += n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::Interrupted => {}
                    // EPIPE: the worker closed stdin or died; the reply channel tells how.
                    Err(_) => sent = job.request.len(),
                }
                if sent == job.request.len() {
                    // Closing stdin ends the request: the worker reads to EOF.
                    stdin = None;
                }
            }
        }
        // The reply last, so the output tail is as fresh as possible when it ends.
        if fds[0].revents != 0 {
            for _ in 0..READS_PER_ROUND {
                let mut chunk = [0u8; 64 * 1024];
                match (&*reply).read(&mut chunk) {
                    Ok(0) => {
                        return Loop::Closed {
                            truncated: (!frame.is_empty()).then_some(frame.len()),
                        };
                    }
                    Ok(n) => {
                        let searched = frame.len();
                        frame.extend_from_slice(&chunk[..n]);
                        if let Some(pos) = frame[searched..].iter().position(|&b| b == b'\n') {
                            let end = searched + pos;
                            if end > MAX_REPLY_FRAME_BYTES {
                                return Loop::Done(End::FrameTooLarge { bytes: end });
                            }
                            frame.truncate(end);
                            return Loop::Done(End::Frame(frame));
                        }
                        if frame.len() > MAX_REPLY_FRAME_BYTES {
                            return Loop::Done(End::FrameTooLarge { bytes: frame.len() });
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Loop::Done(End::Broken(format!("reading the worker's reply failed: {e}"))),
                }
            }
        }
    }
}

/// The child's stdout+stderr pipe and the tail kept of it.
struct Output {
    file: File,
    open: bool,
    tail: Tail,
}

impl Output {
    /// Read what the pipe holds now (bounded, so a chatty child cannot keep the
    /// caller from its deadline); notes end-of-file.
    fn read_now(&mut self) {
        let mut chunk = [0u8; 16 * 1024];
        for _ in 0..READS_PER_ROUND {
            match (&self.file).read(&mut chunk) {
                Ok(0) => {
                    self.open = false;
                    return;
                }
                Ok(n) => self.tail.push(&chunk[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return,
            }
        }
    }

    /// Read for up to `wait` (zero: only what is there now), stopping at EOF.
    fn drain(&mut self, wait: Duration) {
        let until = Instant::now() + wait;
        while self.open {
            let mut pfd = libc::pollfd {
                fd: self.file.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            let left = until.saturating_duration_since(Instant::now());
            // SAFETY: one initialised pollfd.
            let rc = unsafe { libc::poll(&mut pfd, 1, left.as_millis().min(i32::MAX as u128) as libc::c_int) };
            if rc <= 0 {
                return;
            }
            self.read_now();
            if Instant::now() >= until {
                return;
            }
        }
    }
}

/// The last `cap` bytes of a stream.
struct Tail {
    buf: Vec<u8>,
    cap: usize,
    dropped: bool,
}

impl Tail {
    fn new(cap: usize) -> Tail {
        Tail {
            buf: Vec::with_capacity(cap),
            cap,
            dropped: false,
        }
    }

    fn push(&mut self, data: &[u8]) {
        self.buf.extend_from_slice(data);
        // Compact only past twice the cap: amortised O(1) per byte.
        if self.buf.len() > 2 * self.cap {
            let cut = self.buf.len() - self.cap;
            self.buf.drain(..cut);
            self.dropped = true;
        }
    }

    fn into_text(mut self) -> (String, bool) {
        if self.buf.len() > self.cap {
            let cut = self.buf.len() - self.cap;
            self.buf.drain(..cut);
            self.dropped = true;
        }
        let mut start = 0;
        // A cut through a multi-byte character leaves continuation bytes first.
        if self.dropped {
            while start < self.buf.len() && start < 3 && (self.buf[start] & 0xC0) == 0x80 {
                start += 1;
            }
        }
        (String::from_utf8_lossy(&self.buf[start..]).into_owned(), self.dropped)
    }
}

/// `$TMPDIR/aab-extract-*` (0700), removed by [`WorkDir::remove`] or, failing
/// that, on drop.
struct WorkDir {
    path: PathBuf,
    armed: bool,
}

impl WorkDir {
    fn create(parent: Option<&Path>) -> io::Result<WorkDir> {
        let mut builder = tempfile::Builder::new();
        builder.prefix("aab-extract-");
        let dir = match parent {
            Some(parent) => builder.tempdir_in(parent)?,
            None => builder.tempdir()?,
        };
        Ok(WorkDir { path: dir.keep(), armed: true })
    }

    fn remove(mut self) -> io::Result<()> {
        self.armed = false;
        remove_tree(&self.path)
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        if self.armed {
            let _ = remove_tree(&self.path);
        }
    }
}

fn remove_tree(path: &Path) -> io::Result<()> {
    let gone = |r: io::Result<()>| match r {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    };
    if gone(fs::remove_dir_all(path)).is_ok() {
        return Ok(());
    }
    // The script ran as us and may have made directories read-only; give them
    // back to the owner and try once more.
    let mut stack = vec![path.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let _ = fs::set_permissions(&dir, fs::Permissions::from_mode(0o700));
        if let Ok(entries) = fs::read_dir(&dir) {
            for entry in entries.flatten() {
                if entry.file_type().is_ok_and(|t| t.is_dir()) {
                    stack.push(entry.path());
                }
            }
        }
    }
    gone(fs::remove_dir_all(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_runtime_that_cannot_be_started_is_unavailable_and_leaves_no_dir() {
        let root = tempfile::tempdir().unwrap();
        let job = Job {
            language: Language::JavaScript,
            runtime: Path::new("/nonexistent/node"),
            source: "function main() { return 1; }",
            request: b"{}\n",
            deadline: Instant::now() + Duration::from_secs(5),
            temp_dir: Some(root.path()),
        };
        let Err(e) = run(&job) else { panic!("the runtime does not exist") };
        assert_eq!(e.code, codes::RUNTIME_UNAVAILABLE, "{e}");
        assert_eq!(fs::read_dir(root.path()).unwrap().count(), 0);
    }

    #[test]
    fn tail_keeps_the_last_bytes_on_a_character_boundary() {
        let mut tail = Tail::new(8);
        tail.push("ééééééé".as_bytes());
        tail.push(b"end");
        let (text, truncated) = tail.into_text();
        assert!(truncated);
        // The last 8 bytes start inside an `é`; that half is dropped, not garbled.
        assert_eq!(text, "ééend");
        let mut tail = Tail::new(8);
        tail.push(b"short");
        assert_eq!(tail.into_text(), ("short".to_string(), false));
    }

    #[test]
    fn read_only_leftovers_are_still_removed() {
        let root = tempfile::tempdir().unwrap();
        let dir = WorkDir::create(Some(root.path())).unwrap();
        let nested = dir.path.join("a/b");
        fs::create_dir_all(&nested).unwrap();
        fs::write(nested.join("f"), "x").unwrap();
        fs::set_permissions(dir.path.join("a"), fs::Permissions::from_mode(0o500)).unwrap();
        fs::set_permissions(&nested, fs::Permissions::from_mode(0o500)).unwrap();
        dir.remove().unwrap();
        assert_eq!(fs::read_dir(root.path()).unwrap().count(), 0);
    }
}
