//! `dumpsys input_method` in the layout of AOSP's InputMethodManagerService dump
//! (Android 14) followed by the bound IME's InputMethodService state: the
//! current method, the focused window and its client, `mInputShown` /
//! `mImeWindowVis`, and — while an editable view has input focus — the IME's
//! `mInputEditorInfo` block (input type, IME options, hint, field id, package).

use std::fmt::Write;

use crate::phone::{Node, Phone};

pub const IME_ID: &str = "com.google.android.inputmethod.latin/com.android.inputmethod.latin.LatinIME";
const IME_UID: u32 = 10111;
const IME_PID: u32 = 2210;

fn focused_input(n: &Node) -> Option<&Node> {
    if n.focused && n.editable {
        return Some(n);
    }
    n.children.iter().find_map(focused_input)
}

/// `EditorInfo.inputType` of a simulated field: text, or text/password.
fn input_type(n: &Node) -> u32 {
    if n.password {
        0x81
    } else if n.id.as_deref().is_some_and(|i| i.contains("email")) {
        0x21
    } else {
        0x1
    }
}

/// A stable `fieldId` (the view id an app would have) for a node.
fn field_id(n: &Node) -> u32 {
    let h = n.id.as_deref().unwrap_or("").bytes().fold(0u32, |h, b| h.wrapping_mul(31).wrapping_add(b as u32));
    0x7f0a_0000 | (h & 0xffff)
}

pub fn input_method(ph: &Phone) -> String {
    let app = ph.foreground_app().and_then(|a| a.process.as_ref().map(|p| (a, p)));
    let (title, tok, client) = match app {
        Some((a, p)) => {
            let act = a.current_activity().unwrap_or_default();
            (format!("{}/{act}", a.package), p.window_token.clone(), format!("ClientState{{5e4d3c2 uid={} pid={} displayId=0}}", a.uid(), p.pid))
        }
        None => (format!("{}/{}", crate::dumpsys::LAUNCHER_PKG, crate::dumpsys::LAUNCHER_ACT), "9e1f2a3".to_string(), format!("ClientState{{5e4d3c2 uid={} pid={} displayId=0}}", crate::dumpsys::LAUNCHER_UID, crate::dumpsys::LAUNCHER_PID)),
    };
    let tree = ph.foreground_tree();
    let field = tree.as_ref().and_then(focused_input);
    let shown = ph.keyboard;
    let started = field.is_some();
    let mut s = String::new();
    s.push_str("Current Input Method Manager state:\n  Input Methods: mMethodMapUpdateCount=2 mBindInstantServiceAllowed=false\n  InputMethod #0:\n");
    let _ = writeln!(s, "    mId={IME_ID} mSettingsActivityName=com.android.inputmethod.latin.settings.SettingsActivity\n    mIsVrOnly=false mSupportsSwitchingToNextInputMethod=true mInlineSuggestionsEnabled=true");
    let _ = writeln!(s, "  ClientState:\n  Client #0:\n    client=com.android.internal.inputmethod.IInputMethodClient$Stub$Proxy@3b2a190\n    sessionRequested=false\n    curSession=SessionState{{uid {IME_UID} pid {IME_PID} method=com.android.internal.inputmethod.IInputMethod$Stub$Proxy@8d7c6b5 session=com.android.internal.inputmethod.IInputMethodSession$Stub$Proxy@9a8b7c6 channel=ClientChannel}}");
    let _ = writeln!(s, "  mCurrentUserId=0\n  mCurMethodId={IME_ID}\n  mCurrentSubtype=InputMethodSubtype{{mode=keyboard locale=en_US}}");
    let _ = writeln!(s, "  mCurSeq=7 mCurClient={client}\n  mFocusedWindowPerceptible=true");
    let _ = writeln!(s, "  mCurFocusedWindow=Window{{{tok} u0 {title}}} softInputMode=STATE_UNSPECIFIED|ADJUST_RESIZE|IS_FORWARD_NAVIGATION client=android.view.ViewRootImpl$W@{tok}");
    let _ = writeln!(s, "  mCurFocusedWindowClient={client}\n  mCurId={IME_ID} mHaveConnection=true mBoundToMethod=true mVisibleBound={shown}");
    let _ = writeln!(s, "  mCurToken=android.os.Binder@4c3b2a1\n  mCurTokenDisplayId=0\n  mCurIntent=Intent {{ act=android.view.InputMethod cmp={IME_ID} (has extras) }}");
    let _ = writeln!(s, "  mShowRequested={shown} mShowExplicitlyRequested=false mShowForced=false mInputShown={shown}\n  mInFullscreenMode=false\n  mSystemReady=true mInteractive=true");
    let _ = writeln!(s, "  mImeWindowVis={}\n  mImeHiddenByDisplayPolicy=false", if shown { 3 } else { 0 });
    let _ = writeln!(s, "\nInput method service state for {IME_ID}:");
    let _ = writeln!(s, "  Service:\n    mWindowCreated=true mWindowVisible={shown} mWindowWasVisible={shown} mInShowWindow=false");
    let _ = writeln!(s, "    mInputBinding=InputBinding{{android.os.BinderProxy@2f1e0d9 / uid {} / pid {}}}", app.map(|(a, _)| a.uid()).unwrap_or(crate::dumpsys::LAUNCHER_UID), app.map(|(_, p)| p.pid).unwrap_or(crate::dumpsys::LAUNCHER_PID));
    let _ = writeln!(s, "    mInputStarted={started} mInputViewStarted={} mCandidatesViewStarted=false", started && shown);
    match (field, app) {
        (Some(n), Some((a, _))) => {
            let _ = writeln!(
                s,
                "    mInputEditorInfo:\n      inputType=0x{:x} imeOptions=0x{:x} privateImeOptions=null\n      actionLabel=null actionId=0\n      initialSelStart=0 initialSelEnd=0 initialCapsMode=0x0\n      hintText={} hintLocales=[]\n      packageName={} autofillId=1073741825 fieldId={} fieldName=null\n      extras=null",
                input_type(n),
                0x1200_0005u32,
                n.desc.clone().unwrap_or_else(|| "null".into()),
                a.package,
                field_id(n)
            );
        }
        _ => s.push_str("    mInputEditorInfo: null\n"),
    }
    let _ = writeln!(s, "    mShowInputRequested={shown} mLastShowInputRequested={shown} mShowInputFlags=0x{}", if shown { 1 } else { 0 });
    s.push_str("    mCandidatesVisibility=4 mFullscreenApplied=false mIsFullscreen=false mExtractViewHidden=false\n");
    s
}
