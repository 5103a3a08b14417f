//! Injected faults, set through the control interface and consumed by the
//! code paths they disturb (SDK server, dumpsys, the adb listener).

use serde::{Deserialize, Serialize};

#[derive(Default, Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Faults {
    /// Every SDK reply waits this long (slow SDK).
    pub sdk_delay_ms: u64,
    /// The next N SDK requests take effect, then the connection closes without a reply.
    pub sdk_drop_replies: u32,
    /// `dumpsys` waits this long before answering.
    pub dumpsys_delay_ms: u64,
    /// The next N `dumpsys` outputs are truncated garbage.
    pub dumpsys_malformed: u32,
    /// After the next `dumpsys window`, this package comes to the foreground
    /// ("" = launcher): a foreground change during verification.
    pub foreground_after_dumpsys: Option<String>,
    /// After the next `dumpsys window`, the foreground app's process restarts (new pid/start time/epoch).
    pub restart_after_dumpsys: bool,
    /// The next N `screencap` calls fail the way a broken one does: an error text
    /// on stdout (what `exec-out` delivers) instead of an image, exit code 1.
    pub screencap_not_png: u32,
    /// The next N SDK action requests (tap, tap-target, input-text, input-target,
    /// gesture-target) take effect, then the connection closes without a reply.
    pub sdk_drop_action_replies: u32,
    /// An admitted SDK action runs this long on the UI thread before its effect (not interruptible).
    pub sdk_action_delay_ms: u64,
    /// An admitted SDK action waits this long queued before its UI task starts (a stop ends it undispatched).
    pub sdk_action_queue_ms: u64,
    /// A slow tool: every call whose argv starts with these words (e.g. `["input",
    /// "keyevent"]`) waits `slow_tool_ms` before it acts, so a test can reboot or
    /// disconnect the phone while the tool runs.
    pub slow_tool: Vec<String>,
    pub slow_tool_ms: u64,
    /// The app process dies while each of the next N admitted SDK actions runs
    /// (before its effect): the action never completes, the connection closes.
    pub sdk_crash_mid_action: u32,
    /// Flutter: the Dart side is busy this long before it asks `checkFlutterAction` (a stop then settles undispatched).
    pub flutter_action_queue_ms: u64,
    /// Flutter: an action runs this long after its permission, before its effect (slow).
    pub flutter_action_delay_ms: u64,
    /// Flutter: the next N replies of `/v1/flutter/action` and `/v1/flutter/cancel` are lost after their effect.
    pub flutter_drop_replies: u32,
    /// Flutter: the engine restarts (new runtime epoch) right after each of the next N `GET /v1/flutter/snapshot` reads.
    pub flutter_restart_after_snapshot: u32,
    /// The next N H5 actions (`/v1/h5/action`) take effect and settle (the receipt
    /// is retained for cancel), then the connection closes without a reply.
    pub h5_drop_action_replies: u32,
    /// An admitted H5 action holds the slot this long before its effect turn (a
    /// cancel or timeout during the wait ends it undispatched).
    pub h5_action_delay_ms: u64,
    /// UIA: an admitted click waits this long before its effect (query sees `admitted`).
    pub uia_click_delay_ms: u64,
    /// UIA: the next N authorized ops take effect, then the connection closes without a reply.
    pub uia_drop_replies: u32,
    /// UIA: snapshot lifetime in ms instead of 60000 (0 = default).
    pub uia_snapshot_ttl_ms: u64,
    /// UIA: the runtime restarts (new epoch) right after answering the next `prepare`.
    pub uia_restart_after_prepare: bool,
    /// Installer: the next commit fails with `Failure [<code>: simulated by aab-android-sim]` (exit = its public status).
    pub install_fail_next: Option<String>,
    /// Installer: the next commit prints exactly this text (a newline added) with exit code
    /// `install_commit_exit_code` and installs nothing: the outcome stays pending.
    pub install_commit_text: Option<String>,
    pub install_commit_exit_code: i32,
    /// Installer: the next N commits show the installer confirmation dialog; the commit prints
    /// `Failure [null]` (exit 255) and the install happens only when "Install" is pressed.
    pub install_pending_user_action: u32,
    /// Installer: the next install writes its base.apk with one byte flipped (storage
    /// corruption) and still answers `Success`: only a re-hash of the installed bytes sees it.
    pub install_corrupt_installed_bytes: bool,
    /// Installer: with `install_commit_text`, the install does happen (an OEM text over a
    /// real install): the installed bytes are the only proof.
    pub install_commit_text_installs: bool,
    /// Executor: an admitted action runs this long before its effect (a slow action; the slot stays busy).
    pub executor_action_delay_ms: u64,
    /// Executor: the next N settled `act` replies are lost after the effect (the journal keeps the receipt).
    pub executor_drop_replies: u32,
    /// Executor: the instrumentation's process dies while each of the next N admitted actions runs, before its effect.
    pub executor_crash_mid_action: u32,
}

impl Faults {
    /// Takes one unit of a countdown fault.
    pub fn take(counter: &mut u32) -> bool {
        if *counter > 0 {
            *counter -= 1;
            true
        } else {
            false
        }
    }
}
