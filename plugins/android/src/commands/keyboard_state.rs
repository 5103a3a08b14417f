//! `keyboard-state`: whether the soft keyboard is shown, which IME is current,
//! which client window it serves and the focused editor's `EditorInfo`, read from
//! one `dumpsys input_method` over shell v2 (aab-protocols §2.2). Shown when any of
//! InputMethodManagerService's signals says so (`mInputShown=true`,
//! `inputShown=true`, `mImeWindowVis` with the visible bit) or the IME service's
//! window is visible with its input view up (`mWindowVisible=true` with
//! `mIsInputViewShown=true` or `mInputViewStarted=true`).

use aab_plugin_api::{Command, CommandSpec, Context, Invocation, ProviderError, Reply};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::{Budget, cancellable, device};
use crate::AndroidProvider;
use crate::manifest::{object, props};

/// `dumpsys input_method` answered without InputMethodManagerService's state or
/// without any visibility signal (service missing, output cut, unknown layout).
pub const KEYBOARD_STATE_UNAVAILABLE: &str = "keyboard_state_unavailable";

fn spec() -> CommandSpec {
    CommandSpec::query("keyboard-state")
        .platform("android")
        .domain("action")
        .target_kind("android-device")
        .summary("Whether the soft keyboard is shown, the current input method, its client and the focused editor (input type, IME options, hint), from dumpsys input_method.")
        .permission("app.read")
        .target_key("serial")
        .lane("observation")
        .timeouts(15_000, 30_000)
        .input_schema(object(props(json!({})), &[]))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct KeyboardArgs {
    pub serial: Option<String>,
    pub adb: Option<String>,
    pub adb_timeout_ms: Option<u64>,
}

/// `key=value` of `key` in a dump line (`value` ends at whitespace).
fn value<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let mut from = 0;
    while let Some(i) = line[from..].find(key) {
        let at = from + i;
        let before_ok = at == 0 || line.as_bytes()[at - 1] == b' ';
        let rest = &line[at + key.len()..];
        if before_ok && let Some(v) = rest.strip_prefix('=') {
            return Some(v.split_whitespace().next().unwrap_or(""));
        }
        from = at + key.len();
    }
    None
}

/// The first value of `key` anywhere in the dump.
fn first<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.lines().find_map(|l| value(l, key))
}

fn flag(text: &str, key: &str) -> Option<bool> {
    first(text, key).and_then(|v| v.parse().ok())
}

/// `mImeWindowVis`: hex with or without `0x` (releases print both); bit 0x1 = visible.
fn ime_window_vis(text: &str) -> Option<u32> {
    let v = first(text, "mImeWindowVis")?;
    u32::from_str_radix(v.trim_start_matches("0x"), 16).ok()
}

/// `uid=N pid=N` (ClientState) or `uid N / pid N` (InputBinding) inside a value.
fn uid_pid(s: &str) -> (Option<u32>, Option<u32>) {
    let num = |key: &str| {
        let i = s.find(key)? + key.len();
        let digits: String = s[i..].trim_start_matches(['=', ' ']).chars().take_while(char::is_ascii_digit).collect();
        digits.parse().ok()
    };
    (num("uid"), num("pid"))
}

/// The `mInputEditorInfo:` block (indented `key=value` lines after it).
fn editor_info(text: &str) -> Option<Map<String, Value>> {
    let mut lines = text.lines().skip_while(|l| !l.trim_start().starts_with("mInputEditorInfo:"));
    let head = lines.next()?;
    if head.trim_end().ends_with("null") {
        return None;
    }
    let indent = head.len() - head.trim_start().len();
    let mut m = Map::new();
    for l in lines.take_while(|l| l.len() - l.trim_start().len() > indent && !l.trim().is_empty()) {
        // `hintText` may hold spaces: it runs to the key that follows it on its line
        // (`hintLocales=` on current releases, `label=` on old ones).
        let mut rest = l.trim();
        while let Some(eq) = rest.find('=') {
            let key = &rest[..eq];
            let after = &rest[eq + 1..];
            let end = if key == "hintText" { [" hintLocales=", " label="].iter().filter_map(|k| after.find(k)).min() } else { after.find(' ') };
            let end = end.unwrap_or(after.len());
            m.insert(key.to_string(), json!(&after[..end]));
            rest = after[end..].trim_start();
        }
    }
    Some(m)
}

fn hex(v: Option<&Value>) -> Option<u64> {
    u64::from_str_radix(v?.as_str()?.trim_start_matches("0x"), 16).ok()
}

/// The reply object of one dump, or `keyboard_state_unavailable`.
pub fn parse_input_method(text: &str) -> Result<Value, ProviderError> {
    if !text.contains("Input Method Manager state") && first(text, "mCurMethodId").is_none() && first(text, "mInputShown").is_none() {
        let head: String = text.chars().take(200).collect();
        return Err(ProviderError::new(KEYBOARD_STATE_UNAVAILABLE, "dumpsys input_method printed no input method manager state").with_details(json!({"output": head})).not_dispatched());
    }
    let input_shown = flag(text, "mInputShown").or_else(|| flag(text, "inputShown"));
    let vis = ime_window_vis(text);
    let window_visible = flag(text, "mWindowVisible");
    if input_shown.is_none() && vis.is_none() && window_visible.is_none() {
        // A cut or foreign dump without any visibility signal must not read as "hidden".
        let head: String = text.chars().take(200).collect();
        return Err(ProviderError::new(KEYBOARD_STATE_UNAVAILABLE, "dumpsys input_method printed none of mInputShown, mImeWindowVis, mWindowVisible").with_details(json!({"output": head})).not_dispatched());
    }
    let view_shown = flag(text, "mIsInputViewShown");
    let view_started = flag(text, "mInputViewStarted");
    let shown = input_shown == Some(true) || vis.is_some_and(|v| v & 0x1 != 0) || (window_visible == Some(true) && (view_shown == Some(true) || view_started == Some(true)));
    let client = first(text, "mCurClient").map(|_| {
        let line = text.lines().find(|l| value(l, "mCurClient").is_some()).unwrap_or("");
        let after = &line[line.find("mCurClient=").map(|i| i + 11).unwrap_or(0)..];
        let state = after.split('}').next().unwrap_or("");
        uid_pid(state)
    });
    let focused_window = text.lines().find_map(|l| {
        let i = l.find("mCurFocusedWindow=Window{")? + "mCurFocusedWindow=".len();
        let w = &l[i..];
        Some(w[..w.find('}').map(|j| j + 1).unwrap_or(w.len())].to_string())
    });
    let editor = editor_info(text).map(|m| {
        let input_type = hex(m.get("inputType"));
        let class = input_type.map(|t| match t & 0xf {
            1 => "text",
            2 => "number",
            3 => "phone",
            4 => "datetime",
            _ => "none",
        });
        // TYPE_CLASS_TEXT variations PASSWORD (0x80), VISIBLE_PASSWORD (0x90), WEB_PASSWORD (0xe0); NUMBER_VARIATION_PASSWORD (0x10).
        let password = input_type.map(|t| (t & 0xf == 1 && matches!(t & 0xff0, 0x80 | 0x90 | 0xe0)) || (t & 0xf == 2 && t & 0xff0 == 0x10));
        let s = |k: &str| m.get(k).and_then(Value::as_str).filter(|v| *v != "null").map(str::to_string);
        json!({
            "inputType": input_type,
            "inputClass": class,
            "password": password,
            "imeOptions": hex(m.get("imeOptions")),
            "hintText": s("hintText"),
            "packageName": s("packageName"),
            "fieldId": s("fieldId").and_then(|v| v.parse::<i64>().ok()),
            "fieldName": s("fieldName"),
        })
    });
    Ok(json!({
        "shown": shown,
        "inputMethodId": first(text, "mCurMethodId").filter(|v| *v != "null"),
        "focusedWindow": focused_window,
        "client": client.map(|(uid, pid)| json!({"uid": uid, "pid": pid})),
        "inputStarted": flag(text, "mInputStarted"),
        "editor": editor,
        "signals": {"mInputShown": input_shown, "mImeWindowVis": vis, "mWindowVisible": window_visible, "mIsInputViewShown": view_shown, "mInputViewStarted": view_started},
    }))
}

pub struct KeyboardState;
impl Command for KeyboardState {
    type Provider = AndroidProvider;
    type Args = KeyboardArgs;
    fn spec() -> CommandSpec {
        spec()
    }
    async fn run(_: &AndroidProvider, ctx: &Context<'_>, _: &Invocation, args: KeyboardArgs) -> Result<Reply, ProviderError> {
        let budget = Budget::new(ctx, args.adb_timeout_ms);
        cancellable(ctx, async {
            let device = device(args.adb.as_deref(), args.serial.as_deref(), &budget).await?;
            let out = device.shell("dumpsys input_method", None, budget.adb()).await?;
            let mut reply = parse_input_method(&out.stdout_text())?;
            reply["ok"] = json!(true);
            reply["serial"] = json!(device.serial);
            Ok(reply)
        })
        .await
        .map(Reply::Json)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // An Android 14 emulator with Gboard up over an email field (trimmed to the
    // lines the parser reads and their neighbours).
    const SHOWN: &str = "Current Input Method Manager state:
  Input Methods: mMethodMapUpdateCount=2 mBindInstantServiceAllowed=false
  InputMethod #0:
    mId=com.google.android.inputmethod.latin/com.android.inputmethod.latin.LatinIME mSettingsActivityName=com.android.inputmethod.latin.settings.SettingsActivity
  mCurrentUserId=0
  mCurMethodId=com.google.android.inputmethod.latin/com.android.inputmethod.latin.LatinIME
  mCurSeq=12 mCurClient=ClientState{c3a1f20 uid=10151 pid=4219 displayId=0}
  mCurFocusedWindow=Window{8e51d0b u0 com.example.app/com.example.app.LoginActivity} softInputMode=STATE_UNSPECIFIED|ADJUST_RESIZE|IS_FORWARD_NAVIGATION client=android.view.ViewRootImpl$W@2ad6e8f
  mCurId=com.google.android.inputmethod.latin/com.android.inputmethod.latin.LatinIME mHaveConnection=true mBoundToMethod=true mVisibleBound=true
  mShowRequested=true mShowExplicitlyRequested=false mShowForced=false mInputShown=true
  mImeWindowVis=3

Input method service state for com.google.android.inputmethod.latin/com.android.inputmethod.latin.LatinIME:
  Service:
    mWindowCreated=true mWindowVisible=true mWindowWasVisible=true mInShowWindow=false
    mInputBinding=InputBinding{android.os.BinderProxy@9f3e2d1 / uid 10151 / pid 4219}
    mInputStarted=true mInputViewStarted=true mCandidatesViewStarted=false
    mInputEditorInfo:
      inputType=0x21 imeOptions=0x12000005 privateImeOptions=null
      actionLabel=null actionId=0
      initialSelStart=0 initialSelEnd=0 initialCapsMode=0x0
      hintText=Work email hintLocales=[]
      packageName=com.example.app autofillId=1073741825 fieldId=2131230890 fieldName=null
      extras=null
    mShowInputRequested=true mLastShowInputRequested=true mShowInputFlags=0x1
";

    #[test]
    fn a_shown_keyboard_with_its_editor() {
        let v = parse_input_method(SHOWN).unwrap();
        assert_eq!(v["shown"], json!(true));
        assert_eq!(v["inputMethodId"], json!("com.google.android.inputmethod.latin/com.android.inputmethod.latin.LatinIME"));
        assert_eq!(v["client"], json!({"uid": 10151, "pid": 4219}));
        assert_eq!(v["focusedWindow"], json!("Window{8e51d0b u0 com.example.app/com.example.app.LoginActivity}"));
        assert_eq!(v["editor"]["inputType"], json!(0x21));
        assert_eq!(v["editor"]["inputClass"], json!("text"));
        assert_eq!(v["editor"]["password"], json!(false));
        assert_eq!(v["editor"]["imeOptions"], json!(0x1200_0005));
        assert_eq!(v["editor"]["hintText"], json!("Work email"));
        assert_eq!(v["editor"]["packageName"], json!("com.example.app"));
        assert_eq!(v["editor"]["fieldId"], json!(2131230890));
        assert_eq!(v["signals"]["mImeWindowVis"], json!(3));
    }

    #[test]
    fn each_signal_alone_decides_and_hidden_is_hidden() {
        let hidden = SHOWN.replace("mInputShown=true", "mInputShown=false").replace("mImeWindowVis=3", "mImeWindowVis=0").replace("mWindowVisible=true", "mWindowVisible=false").replace("    mInputEditorInfo:\n      inputType=0x21", "    mInputEditorInfo: null\n      inputType=0x21");
        let v = parse_input_method(&hidden).unwrap();
        assert_eq!((v["shown"].clone(), v["editor"].clone()), (json!(false), Value::Null));
        assert_eq!(parse_input_method(&hidden.replace("mImeWindowVis=0", "mImeWindowVis=0x1")).unwrap()["shown"], json!(true));
        assert_eq!(parse_input_method(&hidden.replace("mWindowVisible=false", "mWindowVisible=true")).unwrap()["shown"], json!(true), "window visible + input view started");
        let password = SHOWN.replace("inputType=0x21", "inputType=0x81");
        assert_eq!(parse_input_method(&password).unwrap()["editor"]["password"], json!(true));
        let e = parse_input_method("Can't find service: input_method\n").unwrap_err();
        assert_eq!(e.error, KEYBOARD_STATE_UNAVAILABLE);
        let cut = &SHOWN[..SHOWN.find("mShowRequested").unwrap()];
        assert_eq!(parse_input_method(cut).unwrap_err().error, KEYBOARD_STATE_UNAVAILABLE, "a cut dump is not a hidden keyboard");
    }
}
