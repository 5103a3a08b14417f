//! Text renderings of system services in Android's formats: `dumpsys window`,
//! `dumpsys package`, `dumpsys activity`, the package list, and logcat
//! `threadtime` lines (`dumpsys input_method` is `tools/ime.rs`).

use std::fmt::Write;

use crate::phone::{App, LogLine, Phone};

pub const LAUNCHER_PKG: &str = "com.android.launcher3";
pub const LAUNCHER_ACT: &str = "com.android.launcher3.uioverrides.QuickstepLauncher";
pub const LAUNCHER_UID: u32 = 10070;
pub const LAUNCHER_PID: u32 = 1987;
pub const SYSTEMUI_UID: u32 = 10087;
pub const SYSTEMUI_PID: u32 = 1543;

fn app_short_uid(uid: u32) -> String {
    format!("u0a{}", uid % 100000 - 10000)
}

/// (window token, title, activity record) of the focused window.
fn focus(ph: &Phone) -> (String, String, String) {
    match ph.foreground_app().and_then(|a| a.process.as_ref().map(|p| (a, p))) {
        Some((a, p)) => {
            let act = a.current_activity().unwrap_or_default();
            let title = format!("{}/{act}", a.package);
            let rec = format!("ActivityRecord{{{} u0 {}/{} t{}}}", p.activity_token, a.package, a.short_activity(&act), a.task_id);
            (p.window_token.clone(), title, rec)
        }
        None => ("9e1f2a3".into(), format!("{LAUNCHER_PKG}/{LAUNCHER_ACT}"), format!("ActivityRecord{{5b4c3d2 u0 {LAUNCHER_PKG}/.uioverrides.QuickstepLauncher t2}}")),
    }
}

pub fn window(ph: &Phone) -> String {
    let mut s = String::new();
    let (w, h) = (ph.width, ph.height);
    s.push_str("WINDOW MANAGER LAST ANR (dumpsys window lastanr)\n  <no ANR has occurred since boot>\n\n");
    s.push_str("WINDOW MANAGER POLICY STATE (dumpsys window policy)\n    mSafeMode=false mSystemReady=true mSystemBooted=true\n    mLidState=LID_ABSENT mLidOpenRotation=-1\n\n");
    s.push_str("WINDOW MANAGER WINDOWS (dumpsys window windows)\n");
    let mut n = 0;
    let mut sys_window = |s: &mut String, tok: &str, title: &str, ty: &str, hgt: u32| {
        let _ = write!(
            s,
            "  Window #{n} Window{{{tok} u0 {title}}}:\n    mDisplayId=0 rootTaskId=1 mSession=Session{{3a2b1c0 {SYSTEMUI_PID}:{}}} mClient=android.os.BinderProxy@{tok}\n    mOwnerUid={SYSTEMUI_UID} showForAllUsers=true package=com.android.systemui appop=NONE\n    mAttrs={{(0,0)(fillx{hgt}) sim={{adjust=pan}} ty={ty} fmt=TRANSLUCENT\n      fl=NOT_FOCUSABLE NOT_TOUCH_MODAL SPLIT_TOUCH HARDWARE_ACCELERATED}}\n    Requested w={w} h={hgt} mLayoutSeq=412\n    isOnScreen=true\n    isVisible=true\n",
            app_short_uid(SYSTEMUI_UID)
        );
        n += 1;
    };
    sys_window(&mut s, "c1d2e3f", "NavigationBar0", "NAVIGATION_BAR", 126);
    sys_window(&mut s, "a9b8c7d", "StatusBar", "STATUS_BAR", 80);
    if ph.keyboard {
        let _ = write!(
            s,
            "  Window #{n} Window{{7f6e5d4 u0 InputMethod}}:\n    mDisplayId=0 rootTaskId=1 mSession=Session{{2c3d4e5 2210:u0a10111}} mClient=android.os.BinderProxy@7f6e5d4\n    mOwnerUid=10111 showForAllUsers=false package=com.google.android.inputmethod.latin appop=NONE\n    mAttrs={{(0,0)(fillxwrap) gr=BOTTOM CENTER_VERTICAL sim={{adjust=pan}} ty=INPUT_METHOD fmt=TRANSPARENT\n      fl=NOT_FOCUSABLE LAYOUT_IN_SCREEN SPLIT_TOUCH HARDWARE_ACCELERATED}}\n    Requested w={w} h={} mLayoutSeq=412\n    isOnScreen=true\n    isVisible=true\n",
            h * 4 / 10
        );
        n += 1;
    }
    let (tok, title, rec) = focus(ph);
    let top = dialog_activity(ph).map(|r| {
        let comp = ph.system_dialog.as_ref().and_then(|d| d.activity.clone()).unwrap_or_default();
        (format!("{:07x}", 0x5d00000 + (ph.system_dialog.as_ref().map(|d| d.window_id).unwrap_or(0) as u64 & 0xfffff)), comp, r)
    });
    let (uid, pid, pkg, session) = match ph.foreground_app().and_then(|a| a.process.as_ref().map(|p| (a, p))) {
        Some((a, p)) => (a.uid(), p.pid, a.package.clone(), p.session_token.clone()),
        None => (LAUNCHER_UID, LAUNCHER_PID, LAUNCHER_PKG.to_string(), "6d5e4f3".into()),
    };
    let task = ph.foreground_app().map(|a| a.task_id).unwrap_or(2);
    if let Some((ttok, comp, trec)) = &top {
        let tpkg = comp.split('/').next().unwrap_or_default();
        let _ = write!(
            s,
            "  Window #{n} Window{{{ttok} u0 {comp}}}:\n    mDisplayId=0 rootTaskId={task} mSession=Session{{4b5c6d7 2345:u0a10042}} mClient=android.os.BinderProxy@{ttok}\n    mOwnerUid=10042 showForAllUsers=false package={tpkg} appop=NONE\n    mAttrs={{(0,0)(fillxwrap) gr=CENTER sim={{adjust=pan}} ty=BASE_APPLICATION fmt=TRANSLUCENT\n      fl=DIM_BEHIND ALT_FOCUSABLE_IM SPLIT_TOUCH HARDWARE_ACCELERATED}}\n    Requested w={w} h={h} mLayoutSeq=412\n    mActivityRecord={trec}\n    isOnScreen=true\n    isVisible=true\n"
        );
        n += 1;
    }
    let _ = write!(
        s,
        "  Window #{n} Window{{{tok} u0 {title}}}:\n    mDisplayId=0 rootTaskId={task} mSession=Session{{{session} {pid}:{}}} mClient=android.os.BinderProxy@{tok}\n    mOwnerUid={uid} showForAllUsers=false package={pkg} appop=NONE\n    mAttrs={{(0,0)(fillxfill) sim={{adjust=resize forwardNavigation}} ty=BASE_APPLICATION wanim=0x10302f8\n      fl=LAYOUT_IN_SCREEN LAYOUT_INSET_DECOR SPLIT_TOUCH HARDWARE_ACCELERATED DRAWS_SYSTEM_BAR_BACKGROUNDS\n      pfl=NO_MOVE_ANIMATION FORCE_DRAW_STATUS_BAR_BACKGROUND FIT_INSETS_CONTROLLED\n      bhv=DEFAULT}}\n    Requested w={w} h={h} mLayoutSeq=412\n    mActivityRecord={rec}\n    mViewVisibility=0x0 mHaveFrame=true mObscured=false\n    isOnScreen=true\n    isVisible=true\n",
        app_short_uid(uid)
    );
    n += 1;
    let (tok, title, rec) = match &top {
        Some((ttok, comp, trec)) => (ttok.clone(), comp.clone(), trec.clone()),
        None => (tok, title, rec),
    };
    let _ = write!(
        s,
        "  Window #{n} Window{{1e2d3c4 u0 com.android.systemui.wallpapers.ImageWallpaper}}:\n    mDisplayId=0 rootTaskId=1 mSession=Session{{3a2b1c0 {SYSTEMUI_PID}:{}}} mClient=android.os.BinderProxy@1e2d3c4\n    mOwnerUid={SYSTEMUI_UID} showForAllUsers=false package=com.android.systemui appop=NONE\n    mAttrs={{(0,0)(fillxfill) ty=WALLPAPER fmt=RGBX_8888\n      fl=NOT_FOCUSABLE NOT_TOUCHABLE LAYOUT_IN_SCREEN LAYOUT_NO_LIMITS SCALED}}\n    Requested w={w} h={h} mLayoutSeq=412\n    isOnScreen=false\n    isVisible=false\n\n",
        app_short_uid(SYSTEMUI_UID)
    );
    let _ = write!(
        s,
        "  mGlobalConfiguration={{1.0 ?mcc?mnc [en_US] ldltr sw411dp w411dp h914dp {}dpi nrml long port finger -keyb/v/h -nav/h winConfig={{ mBounds=Rect(0, 0 - {w}, {h}) mAppBounds=Rect(0, 80 - {w}, {}) mWindowingMode=fullscreen mActivityType=undefined}} s.412}}\n  mHasPermanentDpad=false\n  mTopFocusedDisplayId=0\n  mInputMethodWindow={}\n  mCurrentFocus=Window{{{tok} u0 {title}}}\n  mFocusedApp={rec}\n",
        ph.density,
        h - 126,
        if ph.keyboard { "Window{7f6e5d4 u0 InputMethod}" } else { "null" }
    );
    s
}

pub fn activity(ph: &Phone) -> String {
    let (_, _, rec) = focus(ph);
    let (uid, pkg, task) = match ph.foreground_app() {
        Some(a) => (a.uid(), a.package.clone(), a.task_id),
        None => (LAUNCHER_UID, LAUNCHER_PKG.to_string(), 2),
    };
    if let Some(top) = dialog_activity(ph) {
        // An activity of another package on top of the app's task (the permission
        // controller's GrantPermissionsActivity, the package installer): it is the resumed one.
        let tpkg = top.split('/').next().unwrap_or_default().to_string();
        return format!(
            "ACTIVITY MANAGER ACTIVITIES (dumpsys activity activities)\nDisplay #0 (activities from top to bottom):\n  * Task{{4d3c2b1 #{task} type=standard A={uid}:{pkg} U=0 visible=true visibleRequested=true mode=fullscreen translucent=false sz=2}}\n    mLastPausedActivity: {rec}\n    * Hist  #1: {top}\n      packageName={tpkg} processName={tpkg}\n      state=RESUMED stopped=false delayedResume=false finishing=false\n    * Hist  #0: {rec}\n      packageName={pkg} processName={pkg}\n      state=PAUSED stopped=false delayedResume=false finishing=false\n\n  Resumed activities in task display areas (from top to bottom):\n    Resumed: {top}\n\n  ResumedActivity: {top}\n  topResumedActivity={top}\n"
        );
    }
    format!(
        "ACTIVITY MANAGER ACTIVITIES (dumpsys activity activities)\nDisplay #0 (activities from top to bottom):\n  * Task{{4d3c2b1 #{task} type=standard A={uid}:{pkg} U=0 visible=true visibleRequested=true mode=fullscreen translucent=false sz=1}}\n    mLastPausedActivity: null\n    * Hist  #0: {rec}\n      packageName={pkg} processName={pkg}\n      state=RESUMED stopped=false delayedResume=false finishing=false\n\n  Resumed activities in task display areas (from top to bottom):\n    Resumed: {rec}\n\n  ResumedActivity: {rec}\n  topResumedActivity={rec}\n"
    )
}

/// The ActivityRecord of a system dialog that is an activity on top of the foreground task.
fn dialog_activity(ph: &Phone) -> Option<String> {
    let d = ph.system_dialog.as_ref()?;
    let comp = d.activity.as_ref()?;
    let (p, a) = comp.split_once('/')?;
    let short = a.strip_prefix(p).filter(|r| r.starts_with('.')).map(str::to_string).unwrap_or_else(|| a.to_string());
    let task = ph.foreground_app().map(|a| a.task_id).unwrap_or(2);
    Some(format!("ActivityRecord{{{:07x} u0 {p}/{short} t{task}}}", 0x3c00000 + (d.window_id as u64 & 0xfffff)))
}

fn package_block(s: &mut String, a: &App, sdk_int: u32) {
    let id_key = if sdk_int >= 30 { "appId" } else { "userId" };
    let code = a.code_path.as_deref().and_then(|p| p.strip_suffix("/base.apk")).map(str::to_string).unwrap_or_else(|| format!("/data/app/~~sim==/{}-1==", a.package));
    let _ = write!(
        s,
        "  Package [{pkg}] ({h}):\n    {id_key}={uid}\n    pkg=Package{{{h2} {pkg}}}\n    codePath={code}\n    resourcePath={code}\n    primaryCpuAbi=x86_64\n    versionCode={vc} minSdk=24 targetSdk=34\n    versionName={vn}\n    flags=[ HAS_CODE ALLOW_CLEAR_USER_DATA ALLOW_BACKUP{dbg} ]\n    dataDir=/data/user/0/{pkg}\n    timeStamp=2026-11-30 10:00:00\n    lastUpdateTime=2026-11-30 10:00:00\n",
        pkg = a.package,
        h = crate::device::random_hex(7),
        h2 = crate::device::random_hex(7),
        uid = a.app_id,
        vc = a.spec.version_code.unwrap_or(1),
        vn = a.spec.version_name.clone().unwrap_or_else(|| "1.0".into()),
        dbg = if a.debuggable() { " DEBUGGABLE" } else { "" },
    );
    s.push_str("    declared permissions:\n    requested permissions:\n");
    for p in a.spec.install_permissions.iter().chain(a.permissions.keys()) {
        let _ = writeln!(s, "      {p}");
    }
    s.push_str("    install permissions:\n");
    for p in &a.spec.install_permissions {
        let _ = writeln!(s, "      {p}: granted=true");
    }
    let _ = writeln!(
        s,
        "    User 0: ceDataInode=123456 installed={} hidden=false suspended=false distractionFlags=0 stopped={} notLaunched=false enabled=0 instant=false virtual=false",
        a.installed,
        a.process.is_none()
    );
    s.push_str("      gids=[3003]\n      runtime permissions:\n");
    for (p, g) in &a.permissions {
        let f = a.perm_flags.get(p).cloned().unwrap_or_default();
        let _ = writeln!(s, "        {p}: granted={g}, flags=[ USER_SENSITIVE_WHEN_GRANTED|USER_SENSITIVE_WHEN_DENIED{}{}{}]", if *g || f.user_set { "|USER_SET" } else { "" }, if f.user_fixed { "|USER_FIXED" } else { "" }, if f.one_time { "|ONE_TIME" } else { "" });
    }
}

/// `dumpsys package [PKG]`.
pub fn package(ph: &Phone, pkg: Option<&str>) -> String {
    let apps: Vec<&App> = ph.apps.iter().filter(|a| a.installed && pkg.is_none_or(|p| a.package == p)).collect();
    let mut s = String::new();
    s.push_str("Activity Resolver Table:\n  Non-Data Actions:\n      android.intent.action.MAIN:\n");
    for a in &apps {
        if let Some(l) = a.launcher() {
            let _ = writeln!(s, "        {} {}/{} filter {}", crate::device::random_hex(7), a.package, a.short_activity(&l), crate::device::random_hex(7));
        }
    }
    s.push_str("\nKey Set Manager:\n  [");
    s.push_str(pkg.unwrap_or("android"));
    s.push_str("]\n      Signing KeySets: 42\n\nPackages:\n");
    for a in &apps {
        package_block(&mut s, a, ph.sdk_int);
    }
    if pkg == Some(LAUNCHER_PKG) {
        let _ = write!(
            s,
            "  Package [{LAUNCHER_PKG}] (2f3e4d5):\n    appId={LAUNCHER_UID}\n    pkg=Package{{6a5b4c3 {LAUNCHER_PKG}}}\n    codePath=/system_ext/priv-app/Launcher3QuickStep\n    versionCode=34 minSdk=34 targetSdk=34\n    versionName=14\n    flags=[ SYSTEM HAS_CODE ALLOW_CLEAR_USER_DATA ]\n    User 0: ceDataInode=4242 installed=true hidden=false suspended=false distractionFlags=0 stopped=false notLaunched=false enabled=0 instant=false virtual=false\n      runtime permissions:\n"
        );
        return s;
    }
    if let (true, Some(p)) = (apps.is_empty(), pkg) {
        s.truncate(0);
        s.push_str("Dexopt state:\n  Unable to find package: ");
        s.push_str(p);
        s.push('\n');
    }
    s
}

pub fn logcat_line(l: &LogLine) -> String {
    let secs = (l.at_ms / 1000) as i64;
    let ms = l.at_ms % 1000;
    let (mon, day, hh, mm, ss) = civil(secs);
    format!("{mon:02}-{day:02} {hh:02}:{mm:02}:{ss:02}.{ms:03} {:>5} {:>5} {} {:<8}: {}\n", l.pid, l.tid, l.level, l.tag, l.message)
}

/// UTC month, day, hour, minute, second of a Unix time.
fn civil(secs: i64) -> (u32, u32, u32, u32, u32) {
    let days = secs.div_euclid(86400);
    let rem = secs.rem_euclid(86400);
    let z = days + 719468;
    let era = z.div_euclid(146097);
    let doe = z - era * 146097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (m, d, (rem / 3600) as u32, ((rem % 3600) / 60) as u32, (rem % 60) as u32)
}

/// A truncated, garbled rendering for the "dumpsys malformed" fault.
pub fn malformed(text: &str) -> String {
    let cut = text.len() / 3;
    let mut t: String = text.chars().take(cut).collect();
    t.push_str("\n\u{fffd}\u{fffd} Window{ u0 \nmCurrentFocus=Window{\n");
    t
}
