//! Step 2: a real userland (busybox in a per-device chroot) with Android's tools and /proc files.

use std::time::{Duration, Instant};

use crate::support::Env;

#[test]
fn shell_worker_primitives_work_in_the_device_root() {
    let env = Env::start(1);
    // The managed shell worker needs mkdir (atomic), flock on fd 0, setsid + nohup, sha256sum, umask.
    let script = r#"set -e
umask 077
root=/data/local/tmp/ai-app-bridge-shell/v1
mkdir -p $root
: > $root/prepare.lock
( flock -x 0; mkdir $root/job1; echo prepared ) < $root/prepare.lock
mkdir $root/job1 2>/dev/null && echo reused || echo exists
printf 'exec echo from-worker\n' > $root/job1/command.sh
j=$root/job1
printf 'sleep 0.3; sh %s/command.sh > %s/stdout 2>&1; mv %s/stdout %s/done\n' $j $j $j $j > $j/worker.sh
setsid nohup sh $root/job1/worker.sh </dev/null >$root/job1/worker.log 2>&1 &
command -v setsid nohup flock sha256sum >/dev/null && echo tools-ok
"#;
    let out = env.sh(script);
    assert_eq!(out, "prepared\nexists\ntools-ok\n");
    // The detached worker outlived the adb shell and finished on its own.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (o, _, c) = env.shell("cat /data/local/tmp/ai-app-bridge-shell/v1/job1/done");
        if c == 0 {
            assert_eq!(o, "from-worker\n");
            break;
        }
        assert!(Instant::now() < deadline, "worker never finished");
        std::thread::sleep(Duration::from_millis(50));
    }
    // A lock held by one shell blocks another (real flock semantics inside the root).
    let out = env.sh("L=/data/local/tmp/l; : > $L; ( flock -x 0; sleep 1 ) < $L & sleep 0.2; ( flock -n -x 0 && echo got || echo busy ) < $L; wait");
    assert_eq!(out, "busy\n");
}

#[test]
fn android_tools_answer_with_stock_formats_and_exit_codes() {
    let env = Env::start(1);
    assert_eq!(env.sh("getprop ro.build.version.sdk"), "34\n");
    assert!(env.sh("getprop").contains("[ro.product.model]: [AAB Sim Phone]\n"));
    let pid = env.sh("pidof com.example.aab.sample").trim().parse::<u32>().expect("pid");
    let ps = env.sh("ps -A -o PID,NAME");
    assert!(ps.starts_with("  PID NAME\n"), "{ps}");
    assert!(ps.lines().any(|l| l.trim() == format!("{pid} com.example.aab.sample")), "{ps}");
    assert_eq!(env.shell("pidof com.example.notes").2, 1);
    // Unknown and failing tools: stderr and exit codes come back through the shim.
    let (o, e, c) = env.shell("pm grant com.example.aab.sample android.permission.READ_CONTACTS");
    assert_eq!(c, 255, "{o}{e}");
    assert!(e.contains("java.lang.SecurityException: Package com.example.aab.sample has not requested permission android.permission.READ_CONTACTS"), "{e}");
    let (_, e, c) = env.shell("cmd nosuchservice");
    assert_eq!(c, 20);
    assert!(e.contains("Can't find service: nosuchservice"));
    // Tools compose with the shell (pipes, $(...), exit status).
    assert_eq!(env.sh("pm list packages | grep -c com.example"), "2\n");
    assert_eq!(env.sh("wm size"), "Physical size: 1080x2400\n");
    assert_eq!(env.sh("cmd package query-activities --brief -a android.intent.action.MAIN -c android.intent.category.LAUNCHER com.example.aab.sample"), "com.example.aab.sample/.MainActivity\n");
}

#[test]
fn run_as_checks_the_package_and_runs_in_its_data_dir() {
    let env = Env::start(1);
    let (o, _, c) = env.shell("run-as com.example.aab.sample pwd");
    assert_eq!((o.as_str(), c), ("/data/user/0/com.example.aab.sample\n", 0));
    let (_, e, c) = env.shell("run-as com.example.notes ls");
    assert_eq!(c, 1);
    assert_eq!(e, "run-as: package not debuggable: com.example.notes\n");
    let (_, e, c) = env.shell("run-as com.nope.app ls");
    assert_eq!(c, 1);
    assert_eq!(e, "run-as: unknown package: com.nope.app\n");
}

#[test]
fn proc_files_match_the_simulated_processes() {
    let env = Env::start(1);
    let boot = env.sh("cat /proc/sys/kernel/random/boot_id");
    assert_eq!(boot.trim(), env.state()["bootId"].as_str().unwrap());
    let up1: f64 = env.sh("cat /proc/uptime").split(' ').next().unwrap().parse().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let up2: f64 = env.sh("cat /proc/uptime").split(' ').next().unwrap().parse().unwrap();
    assert!(up2 > up1, "{up1} {up2}");
    let pid = env.sh("pidof com.example.aab.sample").trim().to_string();
    let out = env.sh(&format!("cat /proc/sys/kernel/random/boot_id /proc/{pid}/stat /proc/{pid}/status"));
    let stat = out.lines().nth(1).unwrap();
    assert!(stat.starts_with(&format!("{pid} (mple.aab.sample) S ")), "{stat}");
    // Field 22 is the start time in clock ticks since boot; it is not in the future.
    let after_comm: Vec<&str> = stat.rsplit_once(") ").unwrap().1.split(' ').collect();
    let start: f64 = after_comm[22 - 3].parse().unwrap();
    assert!(start / 100.0 <= up2 + 1.0);
    assert!(out.contains(&format!("\nPid:\t{pid}\n")) && out.contains("\nUid:\t10123\t10123\t10123\t10123\n"), "{out}");
    assert!(env.sh("cat /proc/net/unix").contains("@aab-sdk-"));
}

#[test]
fn run_as_kill_freezes_thaws_and_kills_the_app_process() {
    let env = Env::start(1);
    let pid = env.sh("pidof com.example.aab.sample").trim().to_string();
    env.sh(&format!("run-as com.example.aab.sample kill -SIGSTOP {pid}"));
    assert!(env.sh(&format!("cat /proc/{pid}/stat")).starts_with(&format!("{pid} (mple.aab.sample) T ")));
    assert!(env.sh(&format!("cat /proc/{pid}/status")).contains("State:\tT (stopped)"));
    env.sh(&format!("run-as com.example.aab.sample kill -SIGCONT {pid}"));
    assert!(env.sh(&format!("cat /proc/{pid}/stat")).starts_with(&format!("{pid} (mple.aab.sample) S ")));
    let (_, e, c) = env.shell("run-as com.example.aab.sample kill -9 1");
    assert_eq!((e.as_str(), c), ("kill: 1: No such process\n", 1));
    env.sh(&format!("run-as com.example.aab.sample kill -9 {pid}"));
    assert_eq!(env.shell("pidof com.example.aab.sample").2, 1);
    let sig: Vec<String> = env.truth("signal").iter().map(|r| r["data"]["signal"].as_str().unwrap().to_string()).collect();
    assert_eq!(sig, ["STOP", "CONT", "9"]);
    // The home screen has a process and a package too.
    let out = env.sh("dumpsys window -a");
    assert!(out.contains("mCurrentFocus=Window{9e1f2a3 u0 com.android.launcher3/"), "{out}");
    assert!(env.sh("cat /proc/1987/status").contains("\nUid:\t10070\t10070\t10070\t10070\n"));
    assert!(env.sh("dumpsys package com.android.launcher3").contains("\n    appId=10070\n"));
}
