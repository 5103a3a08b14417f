//! The per-device root directory: builds it (busybox applets, Android paths,
//! device nodes, the tool shims that ask the simulator), maps device paths to
//! host paths without escaping the root, and kills what still runs inside it.
//!
//! Debian's busybox-static has no `flock` and no `nohup`, which the managed
//! shell worker needs; those two are copied from the host (util-linux,
//! coreutils) together with the shared libraries `ldd` names, so they run
//! inside the chroot too.

use std::io;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Component, Path, PathBuf};

/// Android tools answered by the simulator through the `simtool` shim.
pub const TOOLS: &[&str] = &[
    "getprop", "setprop", "am", "pm", "cmd", "dumpsys", "input", "screencap", "appops", "logcat", "pidof", "ps", "uiautomator", "ime", "wm", "settings", "abb", "monkey",
];

/// Host binaries copied into the root (with their libraries) because busybox lacks them.
const HOST_EXTRAS: &[&str] = &["flock", "nohup"];

/// The shim every tool name links to: sends cwd and argv to the simulator's
/// per-device tool socket with busybox `nc`, prints the answer (stdout), then
/// replays stderr and the exit code the simulator left in `/dev/.simtool`.
const SIMTOOL: &str = r#"#!/system/bin/sh
# aab-android-sim tool shim: the simulator answers Android tools (see sim/android/README.md).
# Builtins only where possible: every fork costs a few milliseconds per tool call.
d=/dev/.simtool
read t < $d/token
read p < $d/port
n=${0##*/}
if [ "$n" = simtool ]; then n=$1; shift; fi
{ printf '%s\n%s\n%s\n%s\n' "$t" "$$" "$PWD" "$(($# + 1))"; printf '%s\0' "$n" "$@"; } | nc 127.0.0.1 $p
[ -s $d/$$.err ] && cat $d/$$.err >&2
read rc < $d/$$.rc || rc=255
rm -f $d/$$.rc $d/$$.err
exit $rc
"#;

/// `run-as PKG [CMD…]`: the simulator checks the package, then the command runs
/// in the app's data directory like Android's run-as.
const RUN_AS: &str = r#"#!/system/bin/sh
/system/bin/simtool run-as "$@" || exit $?
p=$1; shift
# `kill` is a shell builtin; signals to app processes go to the simulator.
if [ "$1" = kill ]; then shift; exec /system/bin/simtool sim-kill "$p" "$@"; fi
cd /data/user/0/$p || exit 1
if [ $# -eq 0 ]; then exec /system/bin/sh; fi
exec "$@"
"#;

/// `app_process`: the environment's `CLASSPATH` travels as the first argument
/// (the simulator runs the UIA runtime's main class, `src/uia/`).
const APP_PROCESS: &str = r#"#!/system/bin/sh
exec /system/bin/simtool app_process "--sim-classpath=$CLASSPATH" "$@"
"#;

pub fn require_root() -> io::Result<()> {
    if unsafe { libc::geteuid() } != 0 {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            "aab-android-sim runs device shells with chroot(2) and creates device nodes, which needs root (run it as root, or inside `unshare -r --mount`)",
        ));
    }
    Ok(())
}

fn find_busybox() -> io::Result<PathBuf> {
    if let Ok(p) = std::env::var("AAB_SIM_BUSYBOX") {
        return Ok(PathBuf::from(p));
    }
    for p in ["/usr/bin/busybox", "/bin/busybox", "/usr/sbin/busybox"] {
        if Path::new(p).exists() {
            // A dynamically linked busybox (Debian `busybox`) cannot run inside the root.
            if has_interpreter(&std::fs::read(p)?) {
                return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("{p} is dynamically linked: install Debian package busybox-static")));
            }
            return Ok(PathBuf::from(p));
        }
    }
    Err(io::Error::new(io::ErrorKind::NotFound, "busybox not found: install Debian package busybox-static (or set AAB_SIM_BUSYBOX to a static busybox)"))
}

/// Busybox applets that Android tools of the same name replace. Debian's
/// busybox-static is a "standalone shell": `sh` runs its own applet for any name
/// it knows before searching PATH, so the copy in the root gets these names
/// renamed in its applet table (same length, same sort position).
const HIDDEN_APPLETS: &[(&[u8], &[u8])] = &[(b"printf\0ps\0pwd\0", b"printf\0pt\0pwd\0"), (b"patch\0pidof\0ping\0", b"patch\0pidog\0ping\0")];

fn install_busybox(from: &Path, to: &Path) -> io::Result<()> {
    let mut bytes = std::fs::read(from)?;
    for (old, new) in HIDDEN_APPLETS {
        if let Some(i) = bytes.windows(old.len()).position(|w| w == *old) {
            bytes[i..i + new.len()].copy_from_slice(new);
        }
    }
    let _ = std::fs::remove_file(to);
    std::fs::write(to, &bytes)?;
    std::fs::set_permissions(to, std::fs::Permissions::from_mode(0o755))
}

/// True for a 64-bit ELF with a PT_INTERP program header (dynamically linked).
fn has_interpreter(elf: &[u8]) -> bool {
    if elf.len() < 64 || &elf[..4] != b"\x7fELF" || elf[4] != 2 {
        return false;
    }
    let u16_at = |o: usize| u16::from_le_bytes([elf[o], elf[o + 1]]) as usize;
    let phoff = u64::from_le_bytes(elf[0x20..0x28].try_into().unwrap()) as usize;
    let (size, num) = (u16_at(0x36), u16_at(0x38));
    (0..num).any(|i| {
        let o = phoff + i * size;
        o + 4 <= elf.len() && u32::from_le_bytes(elf[o..o + 4].try_into().unwrap()) == 3
    })
}

fn find_host_binary(name: &str) -> Option<PathBuf> {
    ["/usr/bin", "/bin", "/usr/sbin", "/sbin"].iter().map(|d| Path::new(d).join(name)).find(|p| p.exists())
}

fn link_or_copy(from: &Path, to: &Path) -> io::Result<()> {
    if let Some(parent) = to.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let _ = std::fs::remove_file(to);
    if std::fs::hard_link(from, to).is_err() {
        std::fs::copy(from, to)?;
    }
    Ok(())
}

fn write_exec(path: &Path, text: &str) -> io::Result<()> {
    let _ = std::fs::remove_file(path);
    std::fs::write(path, text)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
}

fn force_symlink(target: &str, at: &Path) -> io::Result<()> {
    let _ = std::fs::remove_file(at);
    symlink(target, at)
}

/// Copies a host binary and the shared objects `ldd` lists into the root.
fn copy_with_libs(root: &Path, bin: &Path, dest: &Path) -> io::Result<()> {
    link_or_copy(bin, dest)?;
    let out = std::process::Command::new("ldd").arg(bin).output()?;
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let lib = line.split_whitespace().find(|w| w.starts_with('/'));
        if let Some(lib) = lib {
            let target = root.join(lib.trim_start_matches('/'));
            if !target.exists() {
                std::fs::create_dir_all(target.parent().unwrap())?;
                std::fs::copy(lib, &target)?;
            }
        }
    }
    Ok(())
}

fn mknod(path: &Path, major: u32, minor: u32) -> io::Result<()> {
    if path.exists() {
        return Ok(());
    }
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    let rc = unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR | 0o666, libc::makedev(major, minor)) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666))
}

/// Builds (or refreshes) a device root at `root`.
pub fn build(root: &Path) -> io::Result<()> {
    require_root()?;
    let busybox = find_busybox()?;
    for d in [
        "system/bin", "system/xbin", "vendor/bin", "data/local/tmp", "data/user/0", "data/app", "storage/emulated/0/Download", "storage/emulated/0/DCIM",
        "proc/sys/kernel/random", "proc/net", "dev/.simtool", "mnt", "cache", "acct",
    ] {
        std::fs::create_dir_all(root.join(d))?;
    }
    std::fs::set_permissions(root.join("data/local/tmp"), std::fs::Permissions::from_mode(0o771))?;
    // Relative links, so host-side file access (sync) resolves them inside the root too.
    // Android bind-mounts /data/data onto /data/user/0: the latter is the real path.
    force_symlink("user/0", &root.join("data/data"))?;
    force_symlink("storage/emulated/0", &root.join("sdcard"))?;
    force_symlink("system/bin", &root.join("bin"))?;
    force_symlink("system/etc", &root.join("etc"))?;
    std::fs::create_dir_all(root.join("system/etc"))?;
    let bin = root.join("system/bin");
    install_busybox(&busybox, &bin.join("busybox"))?;
    let list = std::process::Command::new(&busybox).arg("--list").output()?;
    for name in String::from_utf8_lossy(&list.stdout).lines() {
        let name = name.trim();
        if !name.is_empty() && name != "busybox" {
            force_symlink("busybox", &bin.join(name))?;
        }
    }
    for extra in HOST_EXTRAS {
        if let Some(p) = find_host_binary(extra) {
            copy_with_libs(root, &p, &bin.join(extra))?;
        }
    }
    write_exec(&bin.join("simtool"), SIMTOOL)?;
    write_exec(&bin.join("run-as"), RUN_AS)?;
    write_exec(&bin.join("app_process"), APP_PROCESS)?;
    for t in TOOLS {
        force_symlink("simtool", &bin.join(t))?;
    }
    let dev = root.join("dev");
    mknod(&dev.join("null"), 1, 3)?;
    mknod(&dev.join("zero"), 1, 5)?;
    mknod(&dev.join("random"), 1, 8)?;
    mknod(&dev.join("urandom"), 1, 9)?;
    Ok(())
}

/// Maps an absolute (or `/`-relative) device path to a host path inside `root`,
/// resolving symlinks component by component so that absolute link targets
/// stay inside the root. `follow_last` is false for lstat-like lookups.
pub fn resolve(root: &Path, dev_path: &str, follow_last: bool) -> PathBuf {
    let mut parts: Vec<String> = Vec::new();
    let mut pending: Vec<String> = dev_path.split('/').filter(|s| !s.is_empty()).map(str::to_string).rev().collect();
    let mut hops = 0;
    while let Some(part) = pending.pop() {
        match part.as_str() {
            "." => continue,
            ".." => {
                parts.pop();
                continue;
            }
            _ => {}
        }
        let is_last = pending.is_empty();
        let mut candidate = root.to_path_buf();
        for p in &parts {
            candidate.push(p);
        }
        candidate.push(&part);
        if (!is_last || follow_last) && hops < 40
            && let Ok(target) = std::fs::read_link(&candidate) {
                hops += 1;
                let t = target.to_string_lossy().to_string();
                if t.starts_with('/') {
                    parts.clear();
                }
                for c in Path::new(&t).components().rev() {
                    if let Component::Normal(s) = c {
                        pending.push(s.to_string_lossy().to_string());
                    } else if let Component::ParentDir = c {
                        pending.push("..".into());
                    }
                }
                continue;
            }
        parts.push(part);
    }
    let mut out = root.to_path_buf();
    for p in parts {
        out.push(p);
    }
    out
}

/// SIGKILLs every process whose root directory is `root` (device shells and
/// anything they left running, e.g. `setsid nohup` workers).
pub fn kill_processes_in(root: &Path) -> usize {
    let Ok(canon) = std::fs::canonicalize(root) else { return 0 };
    let mut killed = 0;
    let Ok(entries) = std::fs::read_dir("/proc") else { return 0 };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name.to_str().and_then(|s| s.parse::<i32>().ok()) else { continue };
        if std::fs::read_link(e.path().join("root")).ok().as_deref() == Some(canon.as_path()) {
            unsafe { libc::kill(pid, libc::SIGKILL) };
            killed += 1;
        }
    }
    killed
}

/// Writes a file atomically (temp + rename), creating parent directories.
pub fn write_atomic(path: &Path, data: &[u8]) -> io::Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".simtmp{n}"));
    let tmp = PathBuf::from(tmp);
    std::fs::write(&tmp, data)?;
    std::fs::rename(&tmp, path)
}
