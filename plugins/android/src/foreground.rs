//! Foreground identity (aab-protocols §2.2): which window has focus and which
//! process and package own it, proven from three independent sources and checked
//! for change during the probe:
//! 1. `dumpsys window -a`: `mCurrentFocus`, then the matching `Window #N` block
//!    (display, task, session pid/uid, owner uid + package, window type, activity);
//! 2. `cat /proc/sys/kernel/random/boot_id /proc/<pid>/stat /proc/<pid>/status`
//!    (boot id, process start ticks, `Pid:` and the four `Uid:` values);
//! 3. `dumpsys package <pkg>` (`appId`/`userId`, `User <u>: installed=true`);
//! 4. steps 1 and 2 again: a different window is
//!    `foreground_changed_during_verification`, a different boot or process start
//!    `foreground_process_changed_during_verification`.
//!
//! Steps 2–4 run in one shell on the device (one adb round trip, same order).
//!
//! Anything that does not parse exactly is `foreground_identity_unavailable`.
//! All failures are queries' failures: never dispatched.

use serde::Serialize;
use serde_json::json;

use crate::adb::device::{Device, command_line};
use crate::adb::{Deadline, ProviderError, Result};

pub const FOREGROUND_CHANGED_DURING_VERIFICATION: &str = "foreground_changed_during_verification";
pub const FOREGROUND_PROCESS_CHANGED_DURING_VERIFICATION: &str = "foreground_process_changed_during_verification";
pub const FOREGROUND_IDENTITY_UNAVAILABLE: &str = "foreground_identity_unavailable";
/// An action's package is not the verified foreground (nothing was dispatched).
pub const FOREGROUND_PACKAGE_MISMATCH: &str = "foreground_package_mismatch";

/// The focused window as `dumpsys window -a` describes it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FocusWindow {
    pub token: String,
    pub user: u32,
    pub title: String,
    pub display_id: u32,
    pub task_id: Option<u32>,
    pub pid: u32,
    pub owner_uid: u32,
    pub package: String,
    /// `ty=` as printed (a name such as `BASE_APPLICATION` or a number).
    pub window_type: String,
    /// `<pkg>/<activity>` of the window's activity record (application windows).
    pub activity: Option<String>,
}

/// What `/proc` says about the owning process.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ProcessIdentity {
    pub boot_id: String,
    pub pid: u32,
    pub start_ticks: u64,
    pub uids: [u32; 4],
}

/// The verified foreground.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Foreground {
    pub window: FocusWindow,
    pub process: ProcessIdentity,
    pub app_id: u32,
    pub uid: u32,
}

fn unavailable(why: impl Into<String>) -> ProviderError {
    let why = why.into();
    ProviderError::new(FOREGROUND_IDENTITY_UNAVAILABLE, format!("the foreground cannot be identified: {why}")).with_details(json!({"reason": why})).not_dispatched()
}

/// `Window{<token> u<user> <title>}` → (token, user, title).
fn parse_window_ref(s: &str) -> Option<(String, u32, String)> {
    let inner = s.strip_prefix("Window{")?.strip_suffix('}')?;
    let mut it = inner.splitn(3, ' ');
    let token = it.next()?.to_string();
    let user = it.next()?.strip_prefix('u')?.parse().ok()?;
    let title = it.next()?.to_string();
    Some((token, user, title))
}

fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split_whitespace().find_map(|t| t.strip_prefix(key))
}

/// Parse `dumpsys window -a`; `Ok(None)` when nothing has focus (`mCurrentFocus=null`).
pub fn parse_window_dump(text: &str) -> Result<Option<FocusWindow>> {
    let focus_lines: Vec<&str> = text.lines().map(str::trim).filter(|l| l.starts_with("mCurrentFocus=")).collect();
    let focus = match focus_lines.as_slice() {
        [one] => one.trim_start_matches("mCurrentFocus="),
        [] => return Err(unavailable("dumpsys window has no mCurrentFocus")),
        // Several displays: the lines must agree.
        [first, rest @ ..] if rest.iter().all(|l| l == first) => first.trim_start_matches("mCurrentFocus="),
        _ => return Err(unavailable("dumpsys window reports several different mCurrentFocus values")),
    };
    if focus == "null" {
        return Ok(None);
    }
    let (token, user, title) = parse_window_ref(focus).ok_or_else(|| unavailable(format!("unparseable mCurrentFocus {focus:?}")))?;
    // The `Window #N Window{…}:` block of that window, up to the next block.
    let header = format!("Window{{{token} u{user} {title}}}:");
    let lines: Vec<&str> = text.lines().collect();
    let starts: Vec<usize> = lines.iter().enumerate().filter(|(_, l)| l.trim_start().starts_with("Window #") && l.trim_end().ends_with(&header)).map(|(i, _)| i).collect();
    let [start] = starts.as_slice() else {
        return Err(unavailable(format!("dumpsys window has {} blocks for the focused window", starts.len())));
    };
    let block: Vec<&str> = lines[start + 1..].iter().take_while(|l| !l.trim_start().starts_with("Window #")).map(|l| l.trim()).collect();
    let one = |what: &str, pred: &dyn Fn(&str) -> bool| -> Result<&str> {
        let found: Vec<&&str> = block.iter().filter(|l| pred(l)).collect();
        match found.as_slice() {
            [l] => Ok(l),
            other => Err(unavailable(format!("the focused window block has {} {what} lines", other.len()))),
        }
    };
    let session_line = one("mDisplayId/mSession", &|l| l.starts_with("mDisplayId=") && l.contains("mSession=Session{"))?;
    let display_id = field(session_line, "mDisplayId=").and_then(|v| v.parse().ok()).ok_or_else(|| unavailable("bad mDisplayId"))?;
    let task_id = ["taskId=", "rootTaskId=", "stackId="].iter().find_map(|k| field(session_line, k)).and_then(|v| v.parse().ok());
    // mSession=Session{<hex> <pid>:u<user>a<appId>}
    let session = session_line.split("mSession=Session{").nth(1).and_then(|s| s.split('}').next()).ok_or_else(|| unavailable("bad mSession"))?;
    let pid: u32 = session.split_whitespace().nth(1).and_then(|p| p.split(':').next()).and_then(|p| p.parse().ok()).ok_or_else(|| unavailable(format!("bad mSession {session:?}")))?;
    let owner_line = one("mOwnerUid", &|l| l.starts_with("mOwnerUid="))?;
    let owner_uid = field(owner_line, "mOwnerUid=").and_then(|v| v.parse().ok()).ok_or_else(|| unavailable("bad mOwnerUid"))?;
    let package = field(owner_line, "package=").ok_or_else(|| unavailable("mOwnerUid line has no package="))?.to_string();
    let attrs_line = one("mAttrs", &|l| l.starts_with("mAttrs={") || l.starts_with("mAttrs=WM.LayoutParams{"))?;
    // The type may sit on a continuation line of a multi-line mAttrs (0.4.5 format).
    let attrs_at = block.iter().position(|l| *l == attrs_line).unwrap_or(0);
    let window_type = block[attrs_at..].iter().take(4).find_map(|l| field(l, "ty=")).ok_or_else(|| unavailable("mAttrs has no ty="))?.trim_end_matches(['}', ',']).to_string();
    let application = window_type == "BASE_APPLICATION" || window_type == "APPLICATION" || window_type == "1" || window_type == "2";
    let records: Vec<&&str> = block.iter().filter(|l| l.starts_with("mActivityRecord=ActivityRecord{") || (l.starts_with("mAppToken=") && l.contains("ActivityRecord{"))).collect();
    let activity = match records.as_slice() {
        [l] => {
            // ActivityRecord{<tok> u<user> <pkg>/<act> t<task>}
            let rec = l.split("ActivityRecord{").nth(1).and_then(|s| s.split('}').next()).unwrap_or("");
            let component = rec.split_whitespace().nth(2).ok_or_else(|| unavailable(format!("bad ActivityRecord {rec:?}")))?;
            Some(component.to_string())
        }
        [] if !application => None,
        other => return Err(unavailable(format!("the focused application window has {} activity records", other.len()))),
    };
    Ok(Some(FocusWindow { token, user, title, display_id, task_id, pid, owner_uid, package, window_type, activity }))
}

/// Parse `cat boot_id /proc/<pid>/stat /proc/<pid>/status` output.
pub fn parse_proc(text: &str, pid: u32) -> Result<ProcessIdentity> {
    let mut lines = text.lines();
    let boot_id = lines.next().map(str::trim).filter(|b| b.len() == 36).ok_or_else(|| unavailable("no boot id"))?.to_string();
    let stat = lines.next().ok_or_else(|| unavailable("no /proc/<pid>/stat"))?;
    // `pid (comm) state …`: comm may hold spaces and parentheses; fields resume after the last `)`.
    let (head, tail) = stat.rsplit_once(')').ok_or_else(|| unavailable("bad /proc/<pid>/stat"))?;
    let stat_pid: u32 = head.split_whitespace().next().and_then(|p| p.parse().ok()).ok_or_else(|| unavailable("bad /proc/<pid>/stat pid"))?;
    // After `)`: field 3 (state) is index 0, so field 22 (starttime) is index 19.
    let start_ticks: u64 = tail.split_whitespace().nth(19).and_then(|v| v.parse().ok()).ok_or_else(|| unavailable("bad /proc/<pid>/stat starttime"))?;
    let mut status_pid = None;
    let mut uids = None;
    for line in lines {
        if let Some(v) = line.strip_prefix("Pid:") {
            status_pid = v.trim().parse::<u32>().ok();
        } else if let Some(v) = line.strip_prefix("Uid:") {
            let u: Vec<u32> = v.split_whitespace().filter_map(|x| x.parse().ok()).collect();
            uids = <[u32; 4]>::try_from(u).ok();
        }
    }
    if stat_pid != pid || status_pid != Some(pid) {
        return Err(unavailable(format!("/proc reports pid {stat_pid}/{status_pid:?}, expected {pid}")));
    }
    let uids = uids.ok_or_else(|| unavailable("/proc/<pid>/status has no four Uid: values"))?;
    Ok(ProcessIdentity { boot_id, pid, start_ticks, uids })
}

/// Parse `dumpsys package <pkg>`: the package's app id, if installed for `user`.
pub fn parse_package(text: &str, package: &str, user: u32) -> Result<u32> {
    let sections: Vec<usize> = text.lines().enumerate().filter(|(_, l)| l.trim_end() == "Packages:").map(|(i, _)| i).collect();
    let [start] = sections.as_slice() else {
        return Err(unavailable(format!("dumpsys package has {} Packages: sections", sections.len())));
    };
    let lines: Vec<&str> = text.lines().skip(start + 1).take_while(|l| l.starts_with(' ') || l.is_empty()).collect();
    let header = format!("Package [{package}] (");
    let heads: Vec<usize> = lines.iter().enumerate().filter(|(_, l)| l.trim_start().starts_with(&header)).map(|(i, _)| i).collect();
    let [h] = heads.as_slice() else {
        return Err(unavailable(format!("dumpsys package lists {package} {} times", heads.len())));
    };
    let indent = lines[*h].len() - lines[*h].trim_start().len();
    let body: Vec<&str> = lines[h + 1..].iter().take_while(|l| l.is_empty() || l.len() - l.trim_start().len() > indent).map(|l| l.trim()).collect();
    let app_id = body.iter().find_map(|l| l.strip_prefix("appId=").or_else(|| l.strip_prefix("userId="))).and_then(|v| v.split_whitespace().next()?.parse().ok()).ok_or_else(|| unavailable(format!("dumpsys package {package} has no appId")))?;
    let installed = body.iter().any(|l| l.starts_with(&format!("User {user}:")) && l.contains("installed=true"));
    if !installed {
        return Err(unavailable(format!("{package} is not installed for user {user}")));
    }
    Ok(app_id)
}

/// Join the three sources (pure).
pub fn verify(window: FocusWindow, process: ProcessIdentity, app_id: u32) -> Result<Foreground> {
    let uid = window.user * 100_000 + app_id;
    if uid != window.owner_uid {
        return Err(unavailable(format!("package uid {uid} differs from the window owner uid {}", window.owner_uid)));
    }
    if process.uids.iter().any(|u| *u != uid) {
        return Err(unavailable(format!("process {} runs as {:?}, not uid {uid}", process.pid, process.uids)));
    }
    Ok(Foreground { window, process, app_id, uid })
}

/// The device commands the probe runs (a trait so the change checks are unit-tested
/// with scripted outputs).
pub trait ShellText {
    fn text(&self, argv: &[&str], deadline: Deadline) -> impl std::future::Future<Output = Result<String>>;

    /// Several commands in order, each answered as [`ShellText::text`] would. The
    /// default runs them one by one; a device runs them in ONE shell (one adb round
    /// trip) — the order, and so every change check, is the same.
    fn texts(&self, commands: &[Vec<String>], deadline: Deadline) -> impl std::future::Future<Output = Result<Vec<Result<String>>>> {
        async move {
            let mut out = Vec::with_capacity(commands.len());
            for argv in commands {
                let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
                out.push(self.text(&argv, deadline).await);
            }
            Ok(out)
        }
    }
}

fn exited(argv: &str, code: impl std::fmt::Display, stderr: &str) -> ProviderError {
    unavailable(format!("`{argv}` exited {code}: {}", stderr.trim()))
}

impl ShellText for Device {
    async fn text(&self, argv: &[&str], deadline: Deadline) -> Result<String> {
        let out = self.shell(&command_line(argv), None, deadline).await?;
        if out.exit_code != 0 {
            return Err(exited(&argv.join(" "), out.exit_code, &out.stderr_text()));
        }
        Ok(out.stdout_text())
    }

    /// One shell runs every command, each followed by a separator line carrying its
    /// exit status. The separator holds a fresh random nonce: window titles in
    /// `dumpsys window` are app-controlled, so a fixed marker could be forged.
    async fn texts(&self, commands: &[Vec<String>], deadline: Deadline) -> Result<Vec<Result<String>>> {
        let mut nonce = [0u8; 16];
        getrandom::fill(&mut nonce).map_err(|e| unavailable(format!("no randomness for the read separator: {e}")))?;
        let marker = format!("--aab-section-{}", nonce.iter().map(|b| format!("{b:02x}")).collect::<String>());
        let script: Vec<String> = commands
            .iter()
            .map(|argv| format!("{}; aab_status=$?; echo; echo \"{marker} $aab_status\"", command_line(&argv.iter().map(String::as_str).collect::<Vec<_>>())))
            .collect();
        let out = self.shell(&script.join("; "), None, deadline).await?;
        split_sections(&out.stdout_text(), &out.stderr_text(), out.exit_code, &marker, commands)
    }
}

/// Cut a combined read's output at its separators into one answer per command.
fn split_sections(stdout: &str, stderr: &str, exit_code: u8, marker: &str, commands: &[Vec<String>]) -> Result<Vec<Result<String>>> {
    let mut rest = stdout;
    let mut answers = Vec::with_capacity(commands.len());
    for argv in commands {
        let Some((text, after)) = rest.split_once(&format!("\n{marker} ")) else {
            return Err(unavailable(format!("the combined read ended before `{}` finished (exit {exit_code}): {}", argv.join(" "), stderr.trim())));
        };
        let (code, after) = after.split_once('\n').unwrap_or((after, ""));
        rest = after;
        // The `echo` before each separator ends a last line without a newline; the
        // split consumed it, so `text` is exactly what the command printed.
        answers.push(match code.trim() {
            "0" => Ok(text.to_string()),
            code => Err(exited(&argv.join(" "), code, stderr)),
        });
    }
    Ok(answers)
}

async fn window(device: &impl ShellText, deadline: Deadline) -> Result<Option<FocusWindow>> {
    parse_window_dump(&device.text(&["dumpsys", "window", "-a"], deadline).await?)
}

/// A `/proc` read's answer; the window's process ending between the window read
/// and this one is a change during verification, not an unavailable identity.
fn process_answer(pid: u32, answer: Result<String>) -> Result<ProcessIdentity> {
    match answer {
        Ok(text) => parse_proc(&text, pid),
        Err(e) if e.error == FOREGROUND_IDENTITY_UNAVAILABLE && e.message.contains(&format!("/proc/{pid}/")) => Err(ProviderError::new(
            FOREGROUND_PROCESS_CHANGED_DURING_VERIFICATION,
            format!("the focused window's process {pid} ended while it was being verified"),
        )
        .with_details(json!({"pid": pid, "reason": e.message}))
        .not_dispatched()),
        Err(e) => Err(e),
    }
}

fn proc_argv(pid: u32) -> Vec<String> {
    vec!["cat".into(), "/proc/sys/kernel/random/boot_id".into(), format!("/proc/{pid}/stat"), format!("/proc/{pid}/status")]
}

/// Package → uid facts already proven by `dumpsys package`, keyed by (package,
/// user, the window owner's uid) and holding the boot they were proven in: they
/// vouch only for that boot. A reinstall that changes the uid changes the key, so a
/// stale entry can never vouch for a new identity; the window and `/proc` reads
/// (and their change checks) still run on every probe.
pub type VerifiedPackages = std::sync::Mutex<std::collections::HashMap<(String, u32, u32), (String, u32)>>;

/// At most this many verified packages are remembered (then the map starts over).
const VERIFIED_PACKAGES_CAP: usize = 256;

fn verified_packages() -> &'static VerifiedPackages {
    static CACHE: std::sync::OnceLock<VerifiedPackages> = std::sync::OnceLock::new();
    CACHE.get_or_init(Default::default)
}

/// Probe the foreground; `Ok(None)` when no window has focus. The package's uid
/// comes from `dumpsys package` once per boot and identity (see [`VerifiedPackages`]).
pub async fn probe(device: &impl ShellText, deadline: Deadline) -> Result<Option<Foreground>> {
    probe_with(device, deadline, if cfg!(test) { None } else { Some(verified_packages()) }).await
}

/// [`probe`] with an explicit cache of verified packages (`None`: read every time).
///
/// Two device round trips: the window, then one combined read of `/proc`,
/// (`dumpsys package` when the package is not known for this identity,) the window
/// again and `/proc` again — the same order as separate reads, so the same change
/// checks. The first read cannot join: the pid comes from it.
pub async fn probe_with(device: &impl ShellText, deadline: Deadline, cache: Option<&VerifiedPackages>) -> Result<Option<Foreground>> {
    let Some(first) = window(device, deadline).await? else { return Ok(None) };
    let identity = (first.package.clone(), first.user, first.owner_uid);
    let known = cache.and_then(|c| c.lock().unwrap_or_else(|p| p.into_inner()).get(&identity).cloned());
    let mut reads = vec![proc_argv(first.pid)];
    if known.is_none() {
        reads.push(vec!["dumpsys".into(), "package".into(), first.package.clone()]);
    }
    reads.push(["dumpsys", "window", "-a"].map(String::from).to_vec());
    reads.push(proc_argv(first.pid));
    let mut answers = device.texts(&reads, deadline).await?.into_iter();
    let mut next = || answers.next().unwrap_or_else(|| Err(unavailable("the combined foreground read returned too few answers")));
    let proc_first = process_answer(first.pid, next())?;
    let package_text = if known.is_none() { Some(next()) } else { None };
    let second_window = next();
    let proc_second = next();
    let app_id = match (known, package_text) {
        (Some((boot, id)), _) if boot == proc_first.boot_id => id,
        (_, Some(text)) => parse_package(&text?, &first.package, first.user)?,
        // Proven in another boot: prove it again for this one.
        (_, None) => parse_package(&device.text(&["dumpsys", "package", &first.package], deadline).await?, &first.package, first.user)?,
    };
    let second = parse_window_dump(&second_window?)?;
    if second.as_ref() != Some(&first) {
        return Err(ProviderError::new(FOREGROUND_CHANGED_DURING_VERIFICATION, "the focused window changed while it was being verified")
            .with_details(json!({"before": first, "after": second}))
            .not_dispatched());
    }
    match process_answer(first.pid, proc_second) {
        Ok(p) if p == proc_first => {}
        other => {
            return Err(ProviderError::new(FOREGROUND_PROCESS_CHANGED_DURING_VERIFICATION, "the focused window's process or the device boot changed while it was being verified")
                .with_details(json!({"before": proc_first, "after": other.ok()}))
                .not_dispatched());
        }
    }
    let boot_id = proc_first.boot_id.clone();
    let verified = verify(first, proc_first, app_id)?;
    if let Some(c) = cache {
        let mut c = c.lock().unwrap_or_else(|p| p.into_inner());
        if c.len() >= VERIFIED_PACKAGES_CAP {
            c.clear();
        }
        c.insert(identity, (boot_id, app_id));
    }
    Ok(Some(verified))
}

/// The verified foreground, which must be `package` when one is named: the check
/// every Android action makes before it dispatches.
pub async fn require(device: &impl ShellText, package: Option<&str>, deadline: Deadline) -> Result<Option<Foreground>> {
    let foreground = probe(device, deadline).await?;
    let fg_package = foreground.as_ref().map(|f| f.window.package.as_str());
    if let Some(package) = package
        && fg_package != Some(package)
    {
        return Err(ProviderError::new(FOREGROUND_PACKAGE_MISMATCH, format!("{package} is not in the foreground (foreground: {})", fg_package.unwrap_or("none")))
            .with_details(json!({"packageName": package, "foregroundPackage": fg_package}))
            .not_dispatched());
    }
    Ok(foreground)
}

#[cfg(test)]
mod tests {
    use super::*;

    pub const WINDOW_DUMP: &str = "\
WINDOW MANAGER WINDOWS (dumpsys window windows)
  Window #0 Window{1a2b3c u0 StatusBar}:
    mDisplayId=0 rootTaskId=1 mSession=Session{99 800:u0a10050} mClient=android.os.BinderProxy@1
    mOwnerUid=10050 showForAllUsers=true package=com.android.systemui appop=NONE
    mAttrs={(0,0)(fillxwrap) ty=STATUS_BAR fmt=TRANSLUCENT}
  Window #1 Window{4d5e6f u0 com.example.app/com.example.app.MainActivity}:
    mDisplayId=0 rootTaskId=12 mSession=Session{abc 4321:u0a10123} mClient=android.os.BinderProxy@2
    mOwnerUid=10123 showForAllUsers=false package=com.example.app appop=NONE
    mAttrs={(0,0)(fillxfill) sim={adjust=resize} ty=BASE_APPLICATION fmt=TRANSPARENT}
    mActivityRecord=ActivityRecord{77 u0 com.example.app/.MainActivity t12}
    mViewVisibility=0x0 mHaveFrame=true
  mCurrentFocus=Window{4d5e6f u0 com.example.app/com.example.app.MainActivity}
  mFocusedApp=ActivityRecord{77 u0 com.example.app/.MainActivity t12}
";

    const PROC: &str = "0d6f5a3c-8e1b-4c2d-9f0a-1b2c3d4e5f60\n\
4321 (example.app) S 600 600 0 0 -1 1077952832 100 0 0 0 5 3 0 0 10 -10 20 0 123456 1000 200 18446744073709551615\n\
Name:\texample.app\nPid:\t4321\nUid:\t10123\t10123\t10123\t10123\nGid:\t10123\t10123\t10123\t10123\n";

    const PACKAGE: &str = "\
Activity Resolver Table:
  Non-Data Actions:
Packages:
  Package [com.example.app] (5f3e):
    userId=10123
    appId=10123
    pkg=Package{5f3e com.example.app}
    User 0: ceDataInode=1 installed=true hidden=false suspended=false
Queries:
";

    #[test]
    fn the_focused_application_window_parses() {
        let w = parse_window_dump(WINDOW_DUMP).unwrap().unwrap();
        assert_eq!(w, FocusWindow {
            token: "4d5e6f".into(), user: 0, title: "com.example.app/com.example.app.MainActivity".into(), display_id: 0, task_id: Some(12), pid: 4321,
            owner_uid: 10123, package: "com.example.app".into(), window_type: "BASE_APPLICATION".into(), activity: Some("com.example.app/.MainActivity".into()),
        });
        assert_eq!(parse_window_dump("  mCurrentFocus=null\n").unwrap(), None);
    }

    #[test]
    fn ambiguous_or_missing_window_facts_are_refused() {
        for broken in [
            WINDOW_DUMP.replace("  mCurrentFocus=", "  mOther="),
            WINDOW_DUMP.replace("    mOwnerUid=10123", "    mOwnerUid=10123 x\n    mOwnerUid=10124"),
            WINDOW_DUMP.replace("    mActivityRecord=ActivityRecord{77 u0 com.example.app/.MainActivity t12}\n", ""),
            WINDOW_DUMP.replace("Window #1 Window{4d5e6f", "Window #1 Window{ffffff"),
        ] {
            let e = parse_window_dump(&broken).unwrap_err();
            assert_eq!((e.error.as_str(), e.dispatched), (FOREGROUND_IDENTITY_UNAVAILABLE, Some(false)), "{broken}");
        }
    }

    #[test]
    fn proc_and_package_join_into_one_identity() {
        let w = parse_window_dump(WINDOW_DUMP).unwrap().unwrap();
        let p = parse_proc(PROC, 4321).unwrap();
        assert_eq!((p.start_ticks, p.uids), (123456, [10123; 4]));
        let app_id = parse_package(PACKAGE, "com.example.app", 0).unwrap();
        let f = verify(w.clone(), p.clone(), app_id).unwrap();
        assert_eq!(f.uid, 10123);
        // Wrong pid, uid mismatch, not installed, duplicate sections.
        assert!(parse_proc(PROC, 4322).is_err());
        assert!(verify(w.clone(), ProcessIdentity { uids: [10124; 4], ..p.clone() }, app_id).is_err());
        assert!(verify(w, p, 10124).is_err());
        assert!(parse_package(&PACKAGE.replace("installed=true", "installed=false"), "com.example.app", 0).is_err());
        assert!(parse_package(&format!("{PACKAGE}Packages:\n"), "com.example.app", 0).is_err());
        assert!(parse_package(PACKAGE, "com.other", 0).is_err());
    }

    /// Scripted device: each command's outputs, served in order.
    struct Script(std::sync::Mutex<Vec<(String, String)>>);

    impl ShellText for Script {
        async fn text(&self, argv: &[&str], _deadline: Deadline) -> Result<String> {
            let mut q = self.0.lock().unwrap();
            let key = argv.join(" ");
            let i = q.iter().position(|(k, _)| *k == key).unwrap_or_else(|| panic!("unexpected command {key}"));
            Ok(q.remove(i).1)
        }
    }

    fn script(windows: [&str; 2], procs: [&str; 2]) -> Script {
        let cat = "cat /proc/sys/kernel/random/boot_id /proc/4321/stat /proc/4321/status";
        Script(std::sync::Mutex::new(vec![
            ("dumpsys window -a".into(), windows[0].into()),
            (cat.into(), procs[0].into()),
            ("dumpsys package com.example.app".into(), PACKAGE.into()),
            ("dumpsys window -a".into(), windows[1].into()),
            (cat.into(), procs[1].into()),
        ]))
    }

    fn run<T>(f: impl std::future::Future<Output = T>) -> T {
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(f)
    }

    #[test]
    fn probe_verifies_and_detects_changes_during_verification() {
        let d = crate::adb::Deadline::after(std::time::Duration::from_secs(5));
        let f = run(probe(&script([WINDOW_DUMP, WINDOW_DUMP], [PROC, PROC]), d)).unwrap().unwrap();
        assert_eq!((f.uid, f.window.pid, f.process.start_ticks), (10123, 4321, 123456));
        let other = WINDOW_DUMP.replace("mCurrentFocus=Window{4d5e6f u0 com.example.app/com.example.app.MainActivity}", "mCurrentFocus=Window{1a2b3c u0 StatusBar}");
        let e = run(probe(&script([WINDOW_DUMP, &other], [PROC, PROC]), d)).unwrap_err();
        assert_eq!((e.error.as_str(), e.dispatched), (FOREGROUND_CHANGED_DURING_VERIFICATION, Some(false)));
        let restarted = PROC.replace(" 123456 ", " 123999 ");
        let e = run(probe(&script([WINDOW_DUMP, WINDOW_DUMP], [PROC, &restarted]), d)).unwrap_err();
        assert_eq!(e.error, FOREGROUND_PROCESS_CHANGED_DURING_VERIFICATION);
        let rebooted = PROC.replace("0d6f5a3c", "11111111");
        let e = run(probe(&script([WINDOW_DUMP, WINDOW_DUMP], [PROC, &rebooted]), d)).unwrap_err();
        assert_eq!(e.error, FOREGROUND_PROCESS_CHANGED_DURING_VERIFICATION);
    }

    /// The second probe of the same boot and identity skips `dumpsys package` (the
    /// script panics on a command it does not expect); a new owner uid reads it again.
    #[test]
    fn a_verified_package_is_read_once_per_boot_and_identity() {
        let d = crate::adb::Deadline::after(std::time::Duration::from_secs(5));
        let cache = VerifiedPackages::default();
        run(probe_with(&script([WINDOW_DUMP, WINDOW_DUMP], [PROC, PROC]), d, Some(&cache))).unwrap().unwrap();
        let cat = "cat /proc/sys/kernel/random/boot_id /proc/4321/stat /proc/4321/status";
        let without_package = Script(std::sync::Mutex::new(vec![
            ("dumpsys window -a".into(), WINDOW_DUMP.into()),
            (cat.into(), PROC.into()),
            ("dumpsys window -a".into(), WINDOW_DUMP.into()),
            (cat.into(), PROC.into()),
        ]));
        let f = run(probe_with(&without_package, d, Some(&cache))).unwrap().unwrap();
        assert_eq!(f.uid, 10123);
        assert!(without_package.0.lock().unwrap().is_empty(), "every scripted read happened");
        // Reinstalled with another uid: the window owner changed, so the package is read again.
        let moved = WINDOW_DUMP.replace("mOwnerUid=10123", "mOwnerUid=10124").replace("4321:u0a10123", "4321:u0a10124");
        let e = run(probe_with(&script([&moved, &moved], [PROC, PROC]), d, Some(&cache))).unwrap_err();
        assert_eq!(e.error, FOREGROUND_IDENTITY_UNAVAILABLE, "the fresh package read disagrees with the new owner: {e:?}");
    }

    /// A combined read splits only at its own nonce: an app that prints a separator
    /// of another nonce in its window title cannot shift the sections.
    #[test]
    fn a_combined_read_splits_only_at_its_own_separator() {
        let cmds = vec![vec!["a".to_string()], vec!["b".to_string()], vec!["c".to_string()]];
        let m = "--aab-section-00ff";
        let out = format!("one\n--aab-section-1234 0\nstill one\n\n{m} 0\ntwo-no-newline\n{m} 1\n\n{m} 0\n");
        let got = split_sections(&out, "cat: can't open '/proc/1/stat'", 1, m, &cmds).unwrap();
        assert_eq!(got[0].as_deref().unwrap(), "one\n--aab-section-1234 0\nstill one\n");
        assert!(got[1].as_ref().unwrap_err().message.contains("/proc/1/stat"));
        assert_eq!(got[2].as_deref().unwrap(), "");
        let short = split_sections(&format!("x\n{m} 0\n"), "", 0, m, &cmds).unwrap_err();
        assert_eq!(short.error, FOREGROUND_IDENTITY_UNAVAILABLE);
    }

    #[test]
    fn a_comm_with_parentheses_and_spaces_keeps_field_positions() {
        let proc = PROC.replace("(example.app)", "(we ird) (name)");
        assert_eq!(parse_proc(&proc, 4321).unwrap().start_ticks, 123456);
    }
}
