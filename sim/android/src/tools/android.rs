//! Implementations of the Android tools in stock output formats. Effects on
//! the phone are recorded as ground truth (taps, text, launches, permission
//! and app-op changes, installs).

use std::time::Duration;

use serde_json::json;

use super::{Ctx, Res};
use crate::dumpsys;
use crate::lifecycle;

fn opt<'a>(args: &'a [String], flag: &str) -> Option<&'a str> {
    args.iter().position(|a| a == flag).and_then(|i| args.get(i + 1)).map(String::as_str)
}

pub fn simple(ctx: &Ctx, name: &str, args: &[String]) -> Res {
    match name {
        "getprop" => getprop(ctx, args),
        "setprop" => match args {
            [k, v, ..] => {
                ctx.dev.props.lock().unwrap().insert(k.clone(), v.clone());
                Res::ok("")
            }
            _ => Res::fail(1, "usage: setprop NAME VALUE\n"),
        },
        "am" => am(ctx, args),
        "pm" => pm(ctx, args),
        "cmd" => cmd(ctx, args),
        "appops" => appops(ctx, args),
        "screencap" => screencap(ctx, args),
        "uiautomator" => uiautomator(ctx, args),
        "pidof" => pidof(ctx, args),
        "ps" => ps(ctx, args),
        "ime" => ime(ctx, args),
        "wm" => wm(ctx, args),
        "settings" => settings(ctx, args),
        "run-as" => run_as(ctx, args),
        "sim-kill" => {
            let Some(pkg) = args.first() else { return Res::fail(1, "kill: usage\n") };
            let sig = args.iter().skip(1).find(|a| a.starts_with('-')).map(String::as_str).unwrap_or("-TERM");
            let mut res = Res::ok("");
            for pid in args.iter().skip(1).filter(|a| !a.starts_with('-')) {
                let r = pid.parse::<u32>().map_err(|_| format!("kill: bad pid '{pid}'")).and_then(|p| lifecycle::signal(&ctx.dev, pkg, p, sig));
                if let Err(e) = r {
                    res = Res::fail(1, format!("{e}\n"));
                }
            }
            res
        }
        "abb" => Res::fail(1, "abb: not supported\n"),
        // `monkey -p PKG -c android.intent.category.LAUNCHER 1`: how many tools launch an app.
        "monkey" => match opt(args, "-p") {
            Some(pkg) => match lifecycle::launch(&ctx.dev, pkg, None) {
                Ok(_) => Res::ok("  bash arg: -p\n  bash arg: ".to_string() + pkg + "\nEvents injected: 1\n## Network stats: elapsed time=12ms (0ms mobile, 0ms wifi, 12ms not connected)\n"),
                Err(_) => Res::out_fail(252, "** No activities found to run, monkey aborted.\n"),
            },
            None => Res::fail(1, "usage: monkey [-p ALLOWED_PACKAGE] [-c MAIN_CATEGORY] COUNT\n"),
        },
        other => Res::fail(127, format!("/system/bin/sh: {other}: inaccessible or not found\n")),
    }
}

fn getprop(ctx: &Ctx, args: &[String]) -> Res {
    let props = ctx.dev.props.lock().unwrap();
    match args.first() {
        Some(k) => Res::ok(format!("{}\n", props.get(k).cloned().or_else(|| args.get(1).cloned()).unwrap_or_default())),
        None => Res::ok(props.iter().map(|(k, v)| format!("[{k}]: [{v}]\n")).collect::<String>()),
    }
}

fn am(ctx: &Ctx, args: &[String]) -> Res {
    let dev = &ctx.dev;
    match args.first().map(String::as_str) {
        Some("start" | "start-activity") => {
            let comp = opt(args, "-n").map(str::to_string);
            let (pkg, act) = match &comp {
                Some(c) => match c.split_once('/') {
                    Some((p, a)) => (p.to_string(), Some(a.to_string())),
                    None => (c.clone(), None),
                },
                None => match args.last() {
                    Some(p) if !p.starts_with('-') && args.len() > 1 => (p.clone(), None),
                    _ => return Res::fail(1, "Error: Intent does not match any activities\n"),
                },
            };
            let mut intent = String::from("Intent { ");
            if let Some(a) = opt(args, "-a") {
                intent.push_str(&format!("act={a} "));
            }
            if let Some(c) = opt(args, "-c") {
                intent.push_str(&format!("cat=[{c}] "));
            }
            if let Some(d) = opt(args, "-d") {
                intent.push_str(&format!("dat={d} "));
            }
            let extras = args.iter().enumerate().filter(|(_, a)| ["-e", "--es"].contains(&a.as_str())).filter_map(|(i, _)| Some((args.get(i + 1)?.clone(), args.get(i + 2)?.clone()))).collect::<Vec<_>>();
            if args.iter().any(|a| a == "--activity-clear-task") {
                intent.push_str("flg=0x10008000 ");
            }
            intent.push_str(&format!("cmp={} ", comp.clone().unwrap_or_else(|| pkg.clone())));
            if !extras.is_empty() {
                intent.push_str("(has extras) ");
            }
            intent.push('}');
            if !extras.is_empty() || args.iter().any(|a| a == "--activity-clear-task") {
                dev.record("intent", json!({ "package": pkg, "extras": extras, "clearTask": args.iter().any(|a| a == "--activity-clear-task"), "action": opt(args, "-a"), "data": opt(args, "-d") }));
            }
            let was_running = dev.phone.lock().unwrap().pid_of(&pkg).is_some();
            if args.iter().any(|a| a == "-S") {
                let idx = dev.phone.lock().unwrap().app_index(&pkg);
                if let Some(i) = idx {
                    lifecycle::stop_process(dev, i, "am start -S");
                }
            }
            match lifecycle::launch(dev, &pkg, act.as_deref()) {
                Ok(component) => {
                    let mut out = format!("Starting: {intent}\n");
                    if args.iter().any(|a| a == "-W") {
                        let short = component.split_once('/').map(|(p, a)| format!("{p}/{}", a.strip_prefix(p).unwrap_or(a))).unwrap_or(component.clone());
                        out.push_str(&format!("Status: ok\nLaunchState: {}\nActivity: {short}\nTotalTime: 312\nWaitTime: 318\nComplete\n", if was_running { "WARM" } else { "COLD" }));
                    }
                    Res::ok(out)
                }
                Err(e) => Res::out_fail(1, format!("Starting: {intent}\nError type 3\n{e}\n")),
            }
        }
        Some("force-stop" | "kill") => {
            let Some(pkg) = args.get(1) else { return Res::fail(1, "Error: no package\n") };
            let idx = dev.phone.lock().unwrap().app_index(pkg);
            if let Some(i) = idx {
                lifecycle::stop_process(dev, i, args[0].as_str());
            }
            dev.record("force-stop", json!({ "package": pkg }));
            Res::ok("")
        }
        Some("crash") => match args.get(1) {
            Some(pkg) => lifecycle::crash(dev, pkg, false).map(|_| Res::ok("")).unwrap_or_else(|e| Res::fail(1, format!("{e}\n"))),
            None => Res::fail(1, "Error: no package\n"),
        },
        Some("get-current-user") => Res::ok("0\n"),
        Some("broadcast") => Res::ok("Broadcasting: Intent { }\nBroadcast completed: result=0\n"),
        Some("stack" | "task") => Res::ok(dumpsys::activity(&dev.phone.lock().unwrap())),
        _ => Res::fail(1, "usage: am [start|force-stop|kill|crash|get-current-user|broadcast] ...\n"),
    }
}

fn no_package(pkg: &str) -> Res {
    Res::fail(255, format!("Exception occurred while executing:\njava.lang.IllegalArgumentException: Unknown package: {pkg}\n"))
}

fn pm(ctx: &Ctx, args: &[String]) -> Res {
    let dev = &ctx.dev;
    let sub = args.first().map(String::as_str).unwrap_or("");
    let rest: Vec<&String> = args.iter().skip(1).filter(|a| !a.starts_with('-')).collect();
    // `--user N` takes a value: drop it from the positional arguments.
    let rest: Vec<&String> = {
        let mut v = vec![];
        let mut skip = false;
        for (i, a) in args.iter().enumerate().skip(1) {
            if skip {
                skip = false;
                continue;
            }
            if a == "--user" || a == "-S" || a == "--pid" {
                skip = true;
                continue;
            }
            if !a.starts_with('-') && (i > 0) {
                v.push(a);
            }
        }
        let _ = rest;
        v
    };
    match sub {
        "list" if rest.first().map(|s| s.as_str()) == Some("instrumentation") => {
            // `pm list instrumentation [-f] [TARGET]`, one line per element, as PackageManagerShellCommand prints it.
            let ph = dev.phone.lock().unwrap();
            let target = rest.get(1).map(|s| s.as_str());
            let mut lines: Vec<String> = vec![];
            for a in ph.apps.iter().filter(|a| a.installed) {
                for i in a.instrumentations.iter().filter(|i| target.is_none_or(|t| i.target == t)) {
                    let source = if args.iter().any(|x| x == "-f") { format!("{}=", a.code_path.clone().unwrap_or_else(|| format!("/data/app/~~sim==/{}-1==/base.apk", a.package))) } else { String::new() };
                    lines.push(format!("instrumentation:{source}{} (target={})\n", crate::executor::short_component(&a.package, &i.name), i.target));
                }
            }
            lines.sort();
            Res::ok(lines.concat())
        }
        "list" if rest.first().map(|s| s.as_str()) == Some("packages") => {
            let ph = dev.phone.lock().unwrap();
            let filter = rest.get(1).map(|s| s.as_str());
            let mut out = String::new();
            for p in ["android", "com.android.systemui", dumpsys::LAUNCHER_PKG, "com.google.android.inputmethod.latin"] {
                if !args.iter().any(|a| a == "-3") && filter.is_none_or(|f| p.contains(f)) {
                    out.push_str(&format!("package:{p}\n"));
                }
            }
            for a in ph.apps.iter().filter(|a| a.installed) {
                if filter.is_none_or(|f| a.package.contains(f)) {
                    out.push_str(&format!("package:{}\n", a.package));
                }
            }
            for (_, p) in &ph.extra_installs {
                out.push_str(&format!("package:{p}\n"));
            }
            Res::ok(out)
        }
        "path" => {
            let Some(pkg) = rest.first() else { return Res::fail(1, "Error: no package specified\n") };
            let ph = dev.phone.lock().unwrap();
            if let Some(i) = ph.app_index(pkg) {
                Res::ok(format!("package:{}\n", ph.apps[i].code_path.clone().unwrap_or_else(|| format!("/data/app/~~sim==/{pkg}-1==/base.apk"))))
            } else {
                Res::out_fail(1, "")
            }
        }
        "grant" | "revoke" => {
            let (Some(pkg), Some(perm)) = (rest.first(), rest.get(1)) else { return Res::fail(1, "Error: no package or permission specified\n") };
            let mut ph = dev.phone.lock().unwrap();
            let Some(i) = ph.app_index(pkg) else { return no_package(pkg) };
            let app = &mut ph.apps[i];
            if app.spec.install_permissions.iter().any(|p| p == perm.as_str()) {
                return Res::fail(255, format!("Exception occurred while executing '{sub}':\njava.lang.SecurityException: Permission {perm} requested by {pkg} is not a changeable permission type\n"));
            }
            if !app.permissions.contains_key(perm.as_str()) {
                return Res::fail(255, format!("Exception occurred while executing '{sub}':\njava.lang.SecurityException: Package {pkg} has not requested permission {perm}\n"));
            }
            let granted = sub == "grant";
            app.permissions.insert(perm.to_string(), granted);
            drop(ph);
            dev.record("permission", json!({ "package": pkg, "permission": perm, "granted": granted }));
            Res::ok("")
        }
        "clear" => {
            let Some(pkg) = rest.first() else { return Res::fail(1, "Error: no package specified\n") };
            let Some(i) = dev.phone.lock().unwrap().app_index(pkg) else { return Res::out_fail(1, "Failed\n") };
            lifecycle::stop_process(dev, i, "pm clear");
            {
                let mut ph = dev.phone.lock().unwrap();
                let app = &mut ph.apps[i];
                app.permissions = app.spec.permissions.clone();
                app.perm_flags.clear();
                app.reset_runtime();
            }
            let _ = std::fs::remove_dir_all(dev.root.join("data/user/0").join(pkg.as_str()));
            dev.record("clear-data", json!({ "package": pkg }));
            Res::ok("Success\n")
        }
        "uninstall" => {
            let Some(pkg) = rest.first() else { return Res::fail(1, "Error: no package specified\n") };
            let Some(i) = dev.phone.lock().unwrap().app_index(pkg) else { return Res::out_fail(1, "Failure [DELETE_FAILED_INTERNAL_ERROR]\n") };
            lifecycle::stop_process(dev, i, "uninstall");
            {
                let mut ph = dev.phone.lock().unwrap();
                let app = &mut ph.apps[i];
                app.installed = false;
                app.perm_flags.clear();
                app.cert = None;
                if let Some(top) = app.code_path.take().as_deref().map(std::path::Path::new).and_then(|p| p.parent()).and_then(|p| p.parent()) {
                    let _ = std::fs::remove_dir_all(dev.host_path(&top.to_string_lossy()));
                }
            }
            dev.record("uninstall", json!({ "package": pkg }));
            Res::ok("Success\n")
        }
        "dump" => Res::ok(dumpsys::package(&dev.phone.lock().unwrap(), rest.first().map(|s| s.as_str()))),
        "query-activities" => {
            let pkg = rest.last().map(|s| s.as_str());
            let ph = dev.phone.lock().unwrap();
            let mut out = String::new();
            for a in ph.apps.iter().filter(|a| a.installed && pkg.is_none_or(|p| a.package == p)) {
                if let Some(l) = a.launcher() {
                    out.push_str(&format!("{}/{}\n", a.package, a.short_activity(&l)));
                }
            }
            if out.is_empty() {
                out.push_str("No activities found\n");
            }
            Res::ok(out)
        }
        "resolve-activity" => {
            let pkg = rest.last().map(|s| s.as_str()).unwrap_or("");
            let ph = dev.phone.lock().unwrap();
            match ph.apps.iter().find(|a| a.installed && a.package == pkg).and_then(|a| a.launcher().map(|l| (a, l))) {
                Some((a, l)) => Res::ok(format!("{}/{}\n", a.package, a.short_activity(&l))),
                None => Res::ok("No activity found\n"),
            }
        }
        "install-create" => crate::installer::create(dev, &args[1..]),
        "install-write" => crate::installer::write(ctx, &args[1..]),
        "install-abandon" => crate::installer::abandon(dev, &args[1..]),
        // `install-commit` and `install` run the real verification tools: async, in `tools::run`.
        _ => Res::fail(1, format!("Unknown command: {sub}\n")),
    }
}

/// The simulator's fixture shortcut (no real APK): bytes carrying an
/// `aab-sim-package:NAME` marker install (or reinstall) that package without verification.
pub fn install_marked(dev: &std::sync::Arc<crate::device::Device>, apk: &[u8]) -> Res {
    if apk.is_empty() {
        return Res::out_fail(1, "Failure [INSTALL_PARSE_FAILED_NOT_APK: Failed to parse /data/app/vmdl.tmp/base.apk]\n");
    }
    let sha = crate::device::sha256_hex(apk);
    let text = String::from_utf8_lossy(apk);
    let named = text.find("aab-sim-package:").map(|i| text[i + 16..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '.' || *c == '_').collect::<String>());
    let pkg = named.unwrap_or_else(|| format!("com.sim.installed.a{}", &sha[..8]));
    let mut ph = dev.phone.lock().unwrap();
    if let Some(a) = ph.apps.iter_mut().find(|a| a.package == pkg) {
        a.installed = true;
    } else if !ph.extra_installs.iter().any(|(_, p)| p == &pkg) {
        ph.extra_installs.push((sha.clone(), pkg.clone()));
    }
    drop(ph);
    dev.record("install", json!({ "package": pkg, "sha256": sha, "bytes": apk.len() }));
    Res::ok("Success\n")
}

fn cmd(ctx: &Ctx, args: &[String]) -> Res {
    match args.first().map(String::as_str) {
        Some("package") => pm(ctx, &args[1..]),
        Some("activity") => am(ctx, &args[1..]),
        Some("appops") => appops(ctx, &args[1..]),
        Some("window") => wm(ctx, &args[1..]),
        Some("input_method") => ime(ctx, &args[1..]),
        Some("settings") => settings(ctx, &args[1..]),
        Some(s) => Res::fail(20, format!("cmd: Can't find service: {s}\n")),
        None => Res::fail(20, "cmd: No service specified; use -l to list all running services.\n"),
    }
}

fn appops(ctx: &Ctx, args: &[String]) -> Res {
    let dev = &ctx.dev;
    let pos: Vec<&String> = args.iter().filter(|a| !a.starts_with("--")).collect();
    match pos.first().map(|s| s.as_str()) {
        Some("get") => {
            let Some(pkg) = pos.get(1) else { return Res::fail(255, "Error: no package\n") };
            let ph = dev.phone.lock().unwrap();
            let Some(i) = ph.app_index(pkg) else { return Res::fail(255, format!("Error: Unknown package: {pkg}\n")) };
            let ops = &ph.apps[i].appops;
            let out: String = match pos.get(2) {
                Some(op) => format!("{op}: {}\n", ops.get(op.as_str()).map(String::as_str).unwrap_or("default")),
                None if ops.is_empty() => "No operations.\n".into(),
                None => ops.iter().map(|(k, v)| format!("{k}: {v}\n")).collect(),
            };
            Res::ok(out)
        }
        Some("set") => {
            let (Some(pkg), Some(op), Some(mode)) = (pos.get(1), pos.get(2), pos.get(3)) else { return Res::fail(255, "Error: usage: appops set PACKAGE OP MODE\n") };
            if !["allow", "ignore", "deny", "default", "foreground", "errored"].contains(&mode.as_str()) {
                return Res::fail(255, format!("Error: Mode {mode} is not valid\n"));
            }
            let mut ph = dev.phone.lock().unwrap();
            let Some(i) = ph.app_index(pkg) else { return Res::fail(255, format!("Error: Unknown package: {pkg}\n")) };
            ph.apps[i].appops.insert(op.to_string(), mode.to_string());
            drop(ph);
            dev.record("appops", json!({ "package": pkg, "op": op, "mode": mode }));
            Res::ok("")
        }
        _ => Res::fail(255, "usage: appops get|set ...\n"),
    }
}

fn screencap(ctx: &Ctx, args: &[String]) -> Res {
    if crate::faults::Faults::take(&mut ctx.dev.faults.lock().unwrap().screencap_not_png) {
        ctx.dev.record("fault", json!({ "kind": "screencap-not-png" }));
        return Res::out_fail(1, "Error: failed to capture the display (simulated fault)\n");
    }
    let png = args.iter().any(|a| a == "-p");
    let file = args.iter().find(|a| !a.starts_with('-'));
    let ph = ctx.dev.phone.lock().unwrap();
    let bytes = if png || file.is_some_and(|f| f.ends_with(".png")) {
        crate::screencap::png_of(&ph).2
    } else {
        let (w, h, rgb) = crate::screencap::pixels(&ph);
        let mut v = Vec::with_capacity(16 + rgb.len() / 3 * 4);
        for x in [w, h, 1, 0] {
            v.extend_from_slice(&x.to_le_bytes());
        }
        for p in rgb.chunks_exact(3) {
            v.extend_from_slice(&[p[0], p[1], p[2], 255]);
        }
        v
    };
    drop(ph);
    ctx.dev.record("screencap", json!({ "bytes": bytes.len() }));
    match file {
        Some(f) => {
            let p = ctx.dev.host_path(&absolute(&ctx.cwd, f));
            match std::fs::write(&p, &bytes) {
                Ok(()) => Res::ok(""),
                Err(e) => Res::fail(1, format!("Error opening file: {f} ({e})\n")),
            }
        }
        None => Res::ok(bytes),
    }
}

fn absolute(cwd: &str, p: &str) -> String {
    if p.starts_with('/') { p.to_string() } else { format!("{}/{p}", cwd.trim_end_matches('/')) }
}

fn uiautomator(ctx: &Ctx, args: &[String]) -> Res {
    if args.first().map(String::as_str) != Some("dump") {
        return Res::fail(1, "Usage: uiautomator <subcommand> [options]\n\nAvailable subcommands:\n\nhelp: displays help message\n\nruntest: executes UI automation tests\n\ndump: creates an XML dump of current UI hierarchy\n\nevents: prints out accessibility events until terminated\n");
    }
    let file = args.iter().skip(1).find(|a| !a.starts_with('-')).cloned().unwrap_or_else(|| "/sdcard/window_dump.xml".into());
    let xml = crate::uiautomator::dump(&ctx.dev.phone.lock().unwrap());
    ctx.dev.record("uiautomator-dump", json!({ "file": file }));
    if file == "/dev/tty" || file == "/dev/stdout" {
        return Res::ok(format!("{xml}UI hierchary dumped to: {file}\n"));
    }
    match std::fs::write(ctx.dev.host_path(&absolute(&ctx.cwd, &file)), xml) {
        Ok(()) => Res::ok(format!("UI hierchary dumped to: {file}\n")),
        Err(_) => Res::fail(1, "ERROR: could not get idle state.\n"),
    }
}

/// (pid, uid, name) of every process `ps` shows.
fn processes(ctx: &Ctx) -> Vec<(u32, u32, String)> {
    let ph = ctx.dev.phone.lock().unwrap();
    let mut v = vec![
        (1, 0, "init".to_string()),
        (612, 0, "zygote64".to_string()),
        (1000, 1000, "system_server".to_string()),
        (dumpsys::SYSTEMUI_PID, dumpsys::SYSTEMUI_UID, "com.android.systemui".to_string()),
        (dumpsys::LAUNCHER_PID, dumpsys::LAUNCHER_UID, dumpsys::LAUNCHER_PKG.to_string()),
    ];
    for a in &ph.apps {
        if let Some(p) = &a.process {
            v.push((p.pid, a.uid(), a.package.clone()));
        }
    }
    drop(ph);
    for pid in crate::uia::pids(&ctx.dev) {
        v.push((pid, 2000, "app_process".to_string()));
    }
    v
}

fn pidof(ctx: &Ctx, args: &[String]) -> Res {
    let single = args.iter().any(|a| a == "-s");
    let names: Vec<&String> = args.iter().filter(|a| !a.starts_with('-')).collect();
    let mut pids: Vec<u32> = processes(ctx).into_iter().filter(|(_, _, n)| names.contains(&n)).map(|(p, _, _)| p).collect();
    if pids.is_empty() {
        return Res::out_fail(1, "");
    }
    pids.reverse();
    if single {
        pids.truncate(1);
    }
    Res::ok(format!("{}\n", pids.iter().map(u32::to_string).collect::<Vec<_>>().join(" ")))
}

fn user_name(uid: u32) -> String {
    match uid {
        0 => "root".into(),
        1000 => "system".into(),
        u if u >= 10000 => format!("u0_a{}", u - 10000),
        u => u.to_string(),
    }
}

/// Pids of app processes stopped by `kill -SIGSTOP` (state `T` in `ps`).
fn frozen_pids(ctx: &Ctx) -> Vec<u32> {
    ctx.dev.phone.lock().unwrap().apps.iter().filter(|a| a.frozen).filter_map(|a| a.process.as_ref().map(|p| p.pid)).collect()
}

fn ps(ctx: &Ctx, args: &[String]) -> Res {
    let fields: Vec<String> = match opt(args, "-o") {
        Some(f) => f.split(',').map(|s| s.trim().to_uppercase()).collect(),
        None => ["USER", "PID", "PPID", "VSZ", "RSS", "WCHAN", "ADDR", "S", "NAME"].iter().map(|s| s.to_string()).collect(),
    };
    let names: Vec<&String> = {
        let mut v = vec![];
        let mut skip = false;
        for a in args {
            if skip {
                skip = false;
                continue;
            }
            if a == "-o" || a == "-p" || a == "-u" {
                skip = true;
                continue;
            }
            if !a.starts_with('-') {
                v.push(a);
            }
        }
        v
    };
    let cell = |f: &str, pid: u32, uid: u32, name: &str| -> String {
        match f {
            "USER" => format!("{:<12}", user_name(uid)),
            "PID" => format!("{pid:>5}"),
            "PPID" => format!("{:>5}", if pid == 1 { 0 } else if pid < 1000 { 1 } else { 612 }),
            "VSZ" => format!("{:>8}", 15069376),
            "RSS" => format!("{:>6}", 125348),
            "WCHAN" => format!("{:>20}", "0"),
            "ADDR" => "0".into(),
            "S" | "STAT" => if frozen_pids(ctx).contains(&pid) { "T".into() } else { "S".into() },
            "NAME" | "CMD" | "ARGS" | "CMDLINE" | "COMM" => name.to_string(),
            "UID" => uid.to_string(),
            _ => "?".into(),
        }
    };
    let mut out = fields.iter().map(|f| match f.as_str() {
        "PID" => format!("{:>5}", "PID"),
        "USER" => format!("{:<12}", "USER"),
        f => f.to_string(),
    }).collect::<Vec<_>>().join(" ");
    out.push('\n');
    for (pid, uid, name) in processes(ctx) {
        if !names.is_empty() && !names.iter().any(|n| *n == &name || n.parse::<u32>().ok() == Some(pid)) {
            continue;
        }
        out.push_str(&fields.iter().map(|f| cell(f, pid, uid, &name)).collect::<Vec<_>>().join(" "));
        out.push('\n');
    }
    Res::ok(out)
}

fn ime(_ctx: &Ctx, args: &[String]) -> Res {
    const IME: &str = "com.google.android.inputmethod.latin/com.android.inputmethod.latin.LatinIME";
    match args.first().map(String::as_str) {
        Some("list") => Res::ok(if args.iter().any(|a| a == "-s") { format!("{IME}\n") } else { format!("{IME}:\n  mId={IME} mSettingsActivityName=com.android.inputmethod.latin.settings.SettingsActivity\n") }),
        Some("enable") => Res::ok(format!("Input method {} enabled\n", args.get(1).map(String::as_str).unwrap_or(IME))),
        Some("set") => Res::ok(format!("Input method {} selected for user #0\n", args.get(1).map(String::as_str).unwrap_or(IME))),
        Some("disable") => Res::ok(format!("Input method {} disabled\n", args.get(1).map(String::as_str).unwrap_or(IME))),
        _ => Res::fail(1, "ime <command>:\n  list [-a] [-s]\n  enable ID\n  disable ID\n  set ID\n"),
    }
}

fn wm(ctx: &Ctx, args: &[String]) -> Res {
    let ph = ctx.dev.phone.lock().unwrap();
    match args.first().map(String::as_str) {
        Some("size") => Res::ok(format!("Physical size: {}x{}\n", ph.width, ph.height)),
        Some("density") => Res::ok(format!("Physical density: {}\n", ph.density)),
        _ => Res::fail(1, "usage: wm size|density\n"),
    }
}

fn settings(ctx: &Ctx, args: &[String]) -> Res {
    let key = |ns: &str, k: &str| format!("settings.{ns}.{k}");
    let mut props = ctx.dev.props.lock().unwrap();
    match args {
        [op, ns, k] if op == "get" => Res::ok(format!("{}\n", props.get(&key(ns, k)).cloned().unwrap_or_else(|| "null".into()))),
        [op, ns, k, v, ..] if op == "put" => {
            props.insert(key(ns, k), v.clone());
            Res::ok("")
        }
        _ => Res::fail(1, "usage: settings get|put NAMESPACE KEY [VALUE]\n"),
    }
}

fn run_as(ctx: &Ctx, args: &[String]) -> Res {
    let Some(pkg) = args.first() else { return Res::fail(1, "usage: run-as <package-name> [--user <uid>] <command> [<args>]\n") };
    let ph = ctx.dev.phone.lock().unwrap();
    let Some(i) = ph.app_index(pkg) else { return Res::fail(1, format!("run-as: unknown package: {pkg}\n")) };
    if !ph.apps[i].debuggable() {
        return Res::fail(1, format!("run-as: package not debuggable: {pkg}\n"));
    }
    drop(ph);
    let _ = std::fs::create_dir_all(ctx.dev.root.join("data/user/0").join(pkg.as_str()).join("files"));
    ctx.dev.record("run-as", json!({ "package": pkg, "command": &args[1..] }));
    Res::ok("")
}

pub fn dumpsys(ctx: &Ctx, args: &[String]) -> Res {
    let dev = &ctx.dev;
    let service = args.first().map(String::as_str).unwrap_or("");
    let text = {
        let ph = dev.phone.lock().unwrap();
        match service {
            "window" => dumpsys::window(&ph),
            "activity" => dumpsys::activity(&ph),
            "input_method" => super::ime::input_method(&ph),
            "input" => format!("INPUT MANAGER (dumpsys input)\n\nInput Manager State:\n  Interactive: true\n\nInput Reader State:\n  Device 4: virtio_input_multi_touch_1\n    Touch Input Mapper (mode - DIRECT):\n      Viewport INTERNAL: displayId=0, orientation=0, logicalFrame=[0, 0, {w}, {h}]\n      SurfaceWidth: {w}px\n      SurfaceHeight: {h}px\n      SurfaceOrientation: 0\n", w = ph.width, h = ph.height),
            "display" => format!("DISPLAY MANAGER (dumpsys display)\n  mViewports=[DisplayViewport{{type=INTERNAL, valid=true, isActive=true, displayId=0, orientation=0, logicalFrame=Rect(0, 0 - {w}, {h}), physicalFrame=Rect(0, 0 - {w}, {h}), deviceWidth={w}, deviceHeight={h}}}]\n  mDefaultViewport=DisplayViewport{{type=INTERNAL, orientation=0, deviceWidth={w}, deviceHeight={h}}}\n  DisplayDeviceInfo{{\"Built-in Screen\": {w} x {h}, density {d}, state ON}}\n", w = ph.width, h = ph.height, d = ph.density),
            "package" => {
                let pkg = args.iter().skip(1).find(|a| !a.starts_with('-')).map(String::as_str);
                match pkg {
                    Some("permissions") => dumpsys::package(&ph, None),
                    p => dumpsys::package(&ph, p),
                }
            }
            "" => return Res::ok("Currently running services:\n  activity\n  display\n  input\n  input_method\n  package\n  window\n"),
            s => return Res::ok(format!("Can't find service: {s}\n")),
        }
    };
    let (malformed, fg_after, restart_after) = {
        let mut f = dev.faults.lock().unwrap();
        let m = crate::faults::Faults::take(&mut f.dumpsys_malformed);
        if service == "window" { (m, f.foreground_after_dumpsys.take(), std::mem::take(&mut f.restart_after_dumpsys)) } else { (m, None, false) }
    };
    if let Some(p) = fg_after {
        let _ = lifecycle::set_foreground(dev, if p.is_empty() { None } else { Some(&p) });
        dev.record("fault", json!({ "kind": "foreground-after-dumpsys", "package": p }));
    }
    if restart_after {
        let fg = dev.phone.lock().unwrap().foreground_app().map(|a| a.package.clone());
        if let Some(p) = fg {
            let _ = lifecycle::crash(dev, &p, true);
            dev.record("fault", json!({ "kind": "restart-after-dumpsys", "package": p }));
        }
    }
    if malformed {
        dev.record("fault", json!({ "kind": "dumpsys-malformed", "service": service }));
        return Res::ok(dumpsys::malformed(&text));
    }
    Res::ok(text)
}

/// Android's keycodes the simulator understands.
const KEYCODES: &[(&str, u32)] = &[("KEYCODE_HOME", 3), ("KEYCODE_BACK", 4), ("KEYCODE_ENTER", 66), ("KEYCODE_DEL", 67), ("KEYCODE_ESCAPE", 111), ("KEYCODE_TAB", 61), ("KEYCODE_APP_SWITCH", 187), ("KEYCODE_MENU", 82)];

pub async fn input(ctx: &Ctx, args: &[String]) -> Res {
    let dev = &ctx.dev;
    // `input [source] command …`
    let args: Vec<&String> = args.iter().skip_while(|a| ["touchscreen", "keyboard", "mouse", "touchpad", "dpad", "-d"].contains(&a.as_str())).collect();
    let num = |i: usize| args.get(i).and_then(|s| s.parse::<f64>().ok()).map(|v| v as i32);
    match args.first().map(|s| s.as_str()) {
        Some("tap") => {
            let (Some(x), Some(y)) = (num(1), num(2)) else { return Res::fail(1, "Error: Invalid arguments for command: tap\n") };
            tap(dev, x, y);
            Res::ok("")
        }
        Some("swipe" | "draganddrop") => {
            let (Some(x1), Some(y1), Some(x2), Some(y2)) = (num(1), num(2), num(3), num(4)) else { return Res::fail(1, "Error: Invalid arguments for command: swipe\n") };
            let ms = num(5).unwrap_or(300);
            dev.record("swipe", json!({ "x1": x1, "y1": y1, "x2": x2, "y2": y2, "durationMs": ms }));
            if (x1 - x2).abs() < 10 && (y1 - y2).abs() < 10 {
                tap(dev, x1, y1);
            }
            tokio::time::sleep(Duration::from_millis(ms.clamp(0, 2000) as u64)).await;
            Res::ok("")
        }
        Some("text") => {
            let Some(t) = args.get(1) else { return Res::fail(1, "Error: Invalid arguments for command: text\n") };
            let text = t.replace("%s", " ");
            type_text(dev, &text);
            Res::ok("")
        }
        Some("keyevent" | "press") => {
            for k in args.iter().skip(1).filter(|a| !a.starts_with("--")) {
                let code = k.parse::<u32>().ok().or_else(|| KEYCODES.iter().find(|(n, _)| n == k || n.strip_prefix("KEYCODE_") == Some(k.as_str())).map(|(_, c)| *c));
                match code {
                    Some(c) => keyevent(dev, c),
                    None => return Res::fail(1, format!("Error: Unknown keycode: {k}\n")),
                }
            }
            Res::ok("")
        }
        _ => Res::fail(1, "Usage: input [<source>] <command> [<arg>...]\n\nThe commands and default sources are:\n      text <string> (Default: touchscreen)\n      keyevent [--longpress] <key code number or name> ... (Default: keyboard)\n      tap <x> <y> (Default: touchscreen)\n      swipe <x1> <y1> <x2> <y2> [duration(ms)] (Default: touchscreen)\n"),
    }
}

/// A tap at screen coordinates: hit-tests the foreground screen (or the launcher's icons).
pub fn tap(dev: &std::sync::Arc<crate::device::Device>, x: i32, y: i32) {
    let mut launch_pkg = None;
    let effect = {
        let mut ph = dev.phone.lock().unwrap();
        let kb_top = ph.height as i32 * 6 / 10;
        if ph.keyboard && y >= kb_top {
            json!({ "keyboard": true })
        } else {
            match ph.foreground {
                _ if ph.system_dialog.is_some() => crate::system_dialog::tap(dev, &mut ph, x, y),
                Some(i) => {
                    let tree = ph.apps[i].tree(ph.width, ph.height);
                    match tree.as_ref().and_then(|t| t.hit(x, y)) {
                        Some(node) => {
                            let node = node.clone();
                            tap_app_node(&mut ph, i, &node)
                        }
                        None => json!({ "package": ph.apps[i].package, "id": null }),
                    }
                }
                None => {
                    let installed: Vec<String> = ph.apps.iter().filter(|a| a.installed).map(|a| a.package.clone()).collect();
                    for (i, p) in installed.iter().enumerate() {
                        let (col, row) = ((i % 4) as i32, (i / 4) as i32);
                        if x >= 60 + col * 250 && x < 230 + col * 250 && y >= 300 + row * 300 && y < 470 + row * 300 {
                            launch_pkg = Some(p.clone());
                        }
                    }
                    json!({ "package": dumpsys::LAUNCHER_PKG, "launch": launch_pkg })
                }
            }
        }
    };
    dev.record("tap", json!({ "x": x, "y": y, "hit": effect }));
    if let Some(p) = launch_pkg {
        let _ = lifecycle::launch(dev, &p, None);
    }
}

/// The effect of a tap on a resolved node of app `i`'s current screen.
pub fn tap_app_node(ph: &mut crate::phone::Phone, i: usize, node: &crate::phone::Node) -> serde_json::Value {
    let fx = ph.apps[i].apply_action(node);
    ph.keyboard = ph.apps[i].focused.is_some();
    let pid = ph.apps[i].process.as_ref().map(|p| p.pid).unwrap_or(0);
    ph.log(pid, 'D', "ViewRootImpl", &format!("tap on {} ({})", node.resource_name.clone().unwrap_or_default(), node.text.clone().unwrap_or_default()));
    super::logcat::app_writes(ph, pid, &fx);
    json!({ "package": ph.apps[i].package, "id": node.id, "text": node.text, "class": node.class, "effects": fx })
}

pub fn type_text(dev: &std::sync::Arc<crate::device::Device>, text: &str) {
    let mut ph = dev.phone.lock().unwrap();
    let target = ph.foreground.and_then(|i| ph.apps[i].focused.clone().map(|f| (i, f)));
    let result = match target {
        Some((i, id)) => {
            let app = &mut ph.apps[i];
            let cur = app.values.get(&id).cloned().unwrap_or_default();
            let new = format!("{cur}{text}");
            app.values.insert(id.clone(), new.clone());
            json!({ "package": app.package, "id": id, "value": new })
        }
        None => json!({ "id": null }),
    };
    drop(ph);
    dev.record("text", json!({ "text": text, "target": result }));
}

pub fn keyevent(dev: &std::sync::Arc<crate::device::Device>, code: u32) {
    let mut to_launcher = false;
    {
        let mut ph = dev.phone.lock().unwrap();
        match code {
            4 | 111 if ph.keyboard => {
                ph.keyboard = false;
            }
            4 if ph.system_dialog.is_some() => {
                crate::system_dialog::dismiss(dev, &mut ph, "back");
            }
            4 => {
                if let Some(i) = ph.foreground {
                    let start = ph.apps[i].start_screen();
                    if ph.apps[i].screen != start {
                        ph.apps[i].screen = start;
                        ph.apps[i].focused = None;
                    } else {
                        to_launcher = true;
                    }
                }
            }
            3 => to_launcher = true,
            67 => {
                if let Some(i) = ph.foreground
                    && let Some(f) = ph.apps[i].focused.clone()
                        && let Some(v) = ph.apps[i].values.get_mut(&f) {
                            v.pop();
                        }
            }
            66 => {
                if let Some(i) = ph.foreground {
                    ph.apps[i].focused = None;
                }
                ph.keyboard = false;
            }
            _ => {}
        }
    }
    dev.record("keyevent", json!({ "keyCode": code }));
    if to_launcher {
        let _ = lifecycle::set_foreground(dev, None);
    }
}
