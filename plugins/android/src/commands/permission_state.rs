//! `permission-state`: one permission of one package for one Android user, read
//! from the device and never from a cache (aab-protocols §2.2): the user is the
//! argument or `am get-current-user`; `dumpsys package <pkg>` gives the package's
//! requested and install permissions and, in its `User <u>:` block, the runtime
//! permissions with `granted=` and `flags=[…]`; for a permission guarded by an
//! app-op, `appops get <pkg> <OP>` adds the op's mode.

use std::collections::BTreeMap;

use aab_plugin_api::{Command, CommandSpec, Context, Invocation, ProviderError, Reply};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Budget, cancellable, device};
use crate::AndroidProvider;
use crate::adb::device::{Device, command_line};
use crate::manifest::{object, package_name, permission_name, props, user_id};

/// The package is not installed (for that user).
pub const PACKAGE_NOT_FOUND: &str = "package_not_found";
/// The package neither requests nor holds the permission.
pub const PERMISSION_NOT_REQUESTED: &str = "permission_not_requested";
/// No such Android user on the device (the package dump has no `User <u>:` block).
pub const USER_NOT_FOUND: &str = "user_not_found";
/// The device's answers did not parse (current user or package dump).
pub const PERMISSION_STATE_UNAVAILABLE: &str = "permission_state_unavailable";

fn spec() -> CommandSpec {
    CommandSpec::query("permission-state")
        .platform("android")
        .domain("app")
        .target_kind("android-app")
        .summary("Whether a package holds a permission for an Android user: runtime (granted + flags) or install permission, from dumpsys package, plus the app-op mode when the permission has one.")
        .permission("app.read")
        .target_key("serial")
        .target_key("packageName")
        .lane("observation")
        .timeouts(15_000, 30_000)
        .input_schema(object(
            props(json!({
                "packageName": package_name(),
                "permission": permission_name(),
                "userId": user_id(),
            })),
            &["serial", "packageName", "permission"],
        ))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PermissionArgs {
    pub serial: String,
    pub package_name: String,
    pub permission: String,
    pub user_id: Option<u32>,
    pub adb: Option<String>,
    pub adb_timeout_ms: Option<u64>,
}

/// One runtime permission line: `granted=` and its flags.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Runtime {
    pub granted: bool,
    pub flags: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UserBlock {
    pub installed: Option<bool>,
    pub runtime: BTreeMap<String, Runtime>,
}

/// What `dumpsys package <pkg>` says about the package's permissions.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PackagePermissions {
    pub requested: Vec<String>,
    pub install: BTreeMap<String, bool>,
    pub users: BTreeMap<u32, UserBlock>,
}

fn indent(l: &str) -> usize {
    l.len() - l.trim_start().len()
}

fn unavailable(why: impl Into<String>, text: &str) -> ProviderError {
    let head: String = text.chars().take(300).collect();
    ProviderError::new(PERMISSION_STATE_UNAVAILABLE, why).with_details(json!({"output": head})).not_dispatched()
}

fn not_found(package: &str, user: Option<u32>) -> ProviderError {
    let msg = match user {
        Some(u) => format!("{package} is not installed for user {u}"),
        None => format!("{package} is not installed"),
    };
    ProviderError::new(PACKAGE_NOT_FOUND, msg).with_field("packageName").with_details(json!({"packageName": package, "userId": user})).not_dispatched()
}

/// `perm: granted=true, flags=[ A|B ]` (runtime) or `perm: granted=true` (install).
fn permission_line(t: &str) -> Option<(String, Runtime)> {
    let (name, rest) = t.split_once(": ")?;
    let granted = rest.strip_prefix("granted=")?;
    let granted = granted.split([',', ' ']).next()? == "true";
    let flags = match (rest.find('['), rest.rfind(']')) {
        (Some(a), Some(b)) if a < b => rest[a + 1..b].split('|').map(str::trim).filter(|f| !f.is_empty()).map(str::to_string).collect(),
        _ => vec![],
    };
    Some((name.trim().to_string(), Runtime { granted, flags }))
}

/// The permission facts of `package` in a `dumpsys package <pkg>` dump.
pub fn parse_package(text: &str, package: &str) -> Result<PackagePermissions, ProviderError> {
    if text.contains(&format!("Unable to find package: {package}")) {
        return Err(not_found(package, None));
    }
    if !text.lines().any(|l| l == "Packages:") {
        return Err(unavailable("dumpsys package printed no Packages: section", text));
    }
    let header = format!("Package [{package}] (");
    let mut lines = text.lines().skip_while(|l| l != &"Packages:").skip(1).skip_while(|l| !l.trim_start().starts_with(&header));
    let Some(head) = lines.next() else { return Err(not_found(package, None)) };
    let base = indent(head);
    let mut p = PackagePermissions::default();
    #[derive(PartialEq)]
    enum Section {
        None,
        Requested,
        Install,
        Runtime,
    }
    let mut section = (Section::None, 0usize);
    let mut user: Option<(u32, usize)> = None;
    for l in lines.take_while(|l| l.trim().is_empty() || indent(l) > base) {
        let (ind, t) = (indent(l), l.trim());
        if t.is_empty() {
            continue;
        }
        if section.0 != Section::None && ind <= section.1 {
            section = (Section::None, 0);
        }
        if user.is_some_and(|(_, ui)| ind <= ui) {
            user = None;
        }
        if let Some(rest) = t.strip_prefix("User ")
            && let Some((id, info)) = rest.split_once(':')
            && let Ok(id) = id.parse::<u32>()
        {
            let installed = info.split_whitespace().find_map(|kv| kv.strip_prefix("installed=")).map(|v| v == "true");
            p.users.insert(id, UserBlock { installed, runtime: BTreeMap::new() });
            user = Some((id, ind));
            continue;
        }
        match t {
            "requested permissions:" => section = (Section::Requested, ind),
            "install permissions:" => section = (Section::Install, ind),
            "runtime permissions:" => section = (Section::Runtime, ind),
            _ if t.ends_with(':') => section = (Section::None, 0),
            _ => match section.0 {
                Section::Requested => p.requested.push(t.split(':').next().unwrap_or(t).trim().to_string()),
                Section::Install => {
                    if let Some((name, r)) = permission_line(t) {
                        p.install.insert(name, r.granted);
                    }
                }
                Section::Runtime => {
                    if let (Some((name, r)), Some((u, _))) = (permission_line(t), user) {
                        p.users.entry(u).or_default().runtime.insert(name, r);
                    }
                }
                Section::None => {}
            },
        }
    }
    if p.users.is_empty() {
        // Every installed package has `User <u>:` blocks; none means the dump was cut.
        return Err(unavailable(format!("the dump of {package} has no User blocks (cut or unknown layout)"), text));
    }
    Ok(p)
}

/// The app-op that guards a runtime permission (AppOpsManager's permission→op map,
/// for the permissions apps commonly request).
pub fn app_op_of(permission: &str) -> Option<&'static str> {
    let short = permission.strip_prefix("android.permission.")?;
    Some(match short {
        "CAMERA" => "CAMERA",
        "RECORD_AUDIO" => "RECORD_AUDIO",
        "ACCESS_FINE_LOCATION" => "FINE_LOCATION",
        "ACCESS_COARSE_LOCATION" => "COARSE_LOCATION",
        "READ_CONTACTS" => "READ_CONTACTS",
        "WRITE_CONTACTS" => "WRITE_CONTACTS",
        "READ_CALENDAR" => "READ_CALENDAR",
        "WRITE_CALENDAR" => "WRITE_CALENDAR",
        "READ_SMS" => "READ_SMS",
        "SEND_SMS" => "SEND_SMS",
        "RECEIVE_SMS" => "RECEIVE_SMS",
        "CALL_PHONE" => "CALL_PHONE",
        "READ_PHONE_STATE" => "READ_PHONE_STATE",
        "READ_CALL_LOG" => "READ_CALL_LOG",
        "WRITE_CALL_LOG" => "WRITE_CALL_LOG",
        "BODY_SENSORS" => "BODY_SENSORS",
        "POST_NOTIFICATIONS" => "POST_NOTIFICATION",
        "READ_EXTERNAL_STORAGE" => "READ_EXTERNAL_STORAGE",
        "WRITE_EXTERNAL_STORAGE" => "WRITE_EXTERNAL_STORAGE",
        "READ_MEDIA_IMAGES" => "READ_MEDIA_IMAGES",
        "READ_MEDIA_VIDEO" => "READ_MEDIA_VIDEO",
        "READ_MEDIA_AUDIO" => "READ_MEDIA_AUDIO",
        "ACTIVITY_RECOGNITION" => "ACTIVITY_RECOGNITION",
        "SYSTEM_ALERT_WINDOW" => "SYSTEM_ALERT_WINDOW",
        _ => return None,
    })
}

/// `appops get <pkg> <OP>`: `OP: mode[; time=…]`, optionally after `Uid mode: OP: mode`;
/// `No operations.` is the op's default mode.
pub fn parse_app_op(text: &str, op: &str) -> Value {
    let prefix = format!("{op}: ");
    let mode_of = |rest: &str| rest.split([';', ' ']).next().unwrap_or("").to_string();
    let uid_mode = text.lines().find_map(|l| l.trim().strip_prefix("Uid mode: ")?.strip_prefix(&prefix).map(mode_of));
    let mode = text.lines().find_map(|l| l.trim().strip_prefix(&prefix).map(mode_of)).or_else(|| text.contains("No operations.").then(|| "default".to_string()));
    json!({"op": op, "mode": mode, "uidMode": uid_mode})
}

/// The reply facts of `permission` for `user` in parsed package permissions.
pub fn permission_state(p: &PackagePermissions, package: &str, permission: &str, user: u32) -> Result<Value, ProviderError> {
    let Some(u) = p.users.get(&user) else {
        return Err(ProviderError::new(USER_NOT_FOUND, format!("the package dump of {package} has no user {user}")).with_field("userId").with_details(json!({"userId": user, "users": p.users.keys().collect::<Vec<_>>()})).not_dispatched());
    };
    if u.installed == Some(false) {
        return Err(not_found(package, Some(user)));
    }
    let (kind, granted, flags) = if let Some(r) = u.runtime.get(permission) {
        ("runtime", r.granted, r.flags.clone())
    } else if let Some(g) = p.install.get(permission) {
        ("install", *g, vec![])
    } else if p.requested.iter().any(|r| r == permission) {
        // Requested but listed nowhere as granted: the platform holds no grant.
        ("requested", false, vec![])
    } else {
        return Err(ProviderError::new(PERMISSION_NOT_REQUESTED, format!("{package} does not request {permission}")).with_field("permission").with_details(json!({"packageName": package, "permission": permission, "userId": user})).not_dispatched());
    };
    Ok(json!({"kind": kind, "granted": granted, "flags": flags}))
}

/// The current Android user (`am get-current-user`).
pub(crate) async fn current_user(device: &Device, budget: &Budget) -> Result<u32, ProviderError> {
    let out = device.shell("am get-current-user", None, budget.adb()).await?;
    let text = out.stdout_text();
    text.trim().parse::<u32>().map_err(|_| unavailable("am get-current-user did not print a user id", &format!("{text}{}", out.stderr_text())))
}

/// One permission's state for `user`, from `dumpsys package <pkg>`.
pub(crate) async fn read(device: &Device, package: &str, permission: &str, user: u32, budget: &Budget) -> Result<Value, ProviderError> {
    let out = device.shell(&command_line(&["dumpsys", "package", package]), None, budget.adb()).await?;
    permission_state(&parse_package(&out.stdout_text(), package)?, package, permission, user)
}

pub struct PermissionState;
impl Command for PermissionState {
    type Provider = AndroidProvider;
    type Args = PermissionArgs;
    fn spec() -> CommandSpec {
        spec()
    }
    async fn run(_: &AndroidProvider, ctx: &Context<'_>, _: &Invocation, args: PermissionArgs) -> Result<Reply, ProviderError> {
        let budget = Budget::new(ctx, args.adb_timeout_ms);
        cancellable(ctx, async {
            let device = device(args.adb.as_deref(), Some(&args.serial), &budget).await?;
            let (user, source) = match args.user_id {
                Some(u) => (u, "argument"),
                None => (current_user(&device, &budget).await?, "current-user"),
            };
            let mut reply = read(&device, &args.package_name, &args.permission, user, &budget).await?;
            let app_op = match app_op_of(&args.permission) {
                Some(op) => {
                    let mut argv = vec!["appops", "get"];
                    let user_arg = user.to_string();
                    if user != 0 {
                        argv.extend(["--user", &user_arg]);
                    }
                    argv.extend([args.package_name.as_str(), op]);
                    let out = device.shell(&command_line(&argv), None, budget.adb()).await?;
                    if out.exit_code == 0 { parse_app_op(&out.stdout_text(), op) } else { json!({"op": op, "mode": null, "uidMode": null, "error": out.stderr_text().trim()}) }
                }
                None => Value::Null,
            };
            reply["ok"] = json!(true);
            reply["serial"] = json!(device.serial);
            reply["packageName"] = json!(args.package_name);
            reply["permission"] = json!(args.permission);
            reply["userId"] = json!(user);
            reply["userIdSource"] = json!(source);
            reply["appOp"] = app_op;
            Ok(reply)
        })
        .await
        .map(Reply::Json)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // `dumpsys package com.example.app` of an Android 14 emulator with a second
    // user (trimmed: the Activity Resolver Table and queries are cut).
    const DUMP: &str = "Activity Resolver Table:
  Non-Data Actions:
      android.intent.action.MAIN:
        3f2a1b0 com.example.app/.MainActivity filter 9c8d7e6

Key Set Manager:
  [com.example.app]
      Signing KeySets: 57

Packages:
  Package [com.example.app] (a1b2c3d):
    appId=10151
    pkg=Package{e4f5a6b com.example.app}
    versionCode=42 minSdk=24 targetSdk=34
    flags=[ HAS_CODE ALLOW_CLEAR_USER_DATA ALLOW_BACKUP DEBUGGABLE ]
    declared permissions:
      com.example.app.DYNAMIC_RECEIVER_NOT_EXPORTED_PERMISSION: prot=signature, INSTALLED
    requested permissions:
      android.permission.INTERNET
      android.permission.CAMERA
      android.permission.ACCESS_FINE_LOCATION
      android.permission.READ_EXTERNAL_STORAGE: restricted=true
      com.example.app.DYNAMIC_RECEIVER_NOT_EXPORTED_PERMISSION
    install permissions:
      android.permission.INTERNET: granted=true
      com.example.app.DYNAMIC_RECEIVER_NOT_EXPORTED_PERMISSION: granted=true
    User 0: ceDataInode=131073 installed=true hidden=false suspended=false distractionFlags=0 stopped=false notLaunched=false enabled=0 instant=false virtual=false
      gids=[3003]
      runtime permissions:
        android.permission.ACCESS_FINE_LOCATION: granted=false, flags=[ USER_SENSITIVE_WHEN_GRANTED|USER_SENSITIVE_WHEN_DENIED]
        android.permission.CAMERA: granted=true, flags=[ USER_SET|USER_SENSITIVE_WHEN_GRANTED|USER_SENSITIVE_WHEN_DENIED]
      enabledComponents:
        com.example.app.Widget
    User 10: ceDataInode=0 installed=false hidden=false suspended=false distractionFlags=0 stopped=true notLaunched=true enabled=0 instant=false virtual=false
      gids=[3003]
      runtime permissions:
        android.permission.CAMERA: granted=false, flags=[ ]

Queries:
  system apps queryable: false
";

    #[test]
    fn runtime_install_and_requested_permissions_per_user() {
        let p = parse_package(DUMP, "com.example.app").unwrap();
        assert_eq!(p.requested.len(), 5);
        assert_eq!(p.requested[3], "android.permission.READ_EXTERNAL_STORAGE");
        assert_eq!(p.install.get("android.permission.INTERNET"), Some(&true));
        assert_eq!(p.users[&0].installed, Some(true));
        assert_eq!(p.users[&0].runtime.len(), 2, "enabledComponents is not a permission");
        let cam = permission_state(&p, "com.example.app", "android.permission.CAMERA", 0).unwrap();
        assert_eq!(cam, json!({"kind": "runtime", "granted": true, "flags": ["USER_SET", "USER_SENSITIVE_WHEN_GRANTED", "USER_SENSITIVE_WHEN_DENIED"]}));
        assert_eq!(permission_state(&p, "com.example.app", "android.permission.ACCESS_FINE_LOCATION", 0).unwrap()["granted"], json!(false));
        assert_eq!(permission_state(&p, "com.example.app", "android.permission.INTERNET", 0).unwrap()["kind"], json!("install"));
        assert_eq!(permission_state(&p, "com.example.app", "android.permission.READ_EXTERNAL_STORAGE", 0).unwrap(), json!({"kind": "requested", "granted": false, "flags": []}));
        let e = |perm: &str, user: u32| permission_state(&p, "com.example.app", perm, user).unwrap_err();
        assert_eq!((e("android.permission.RECORD_AUDIO", 0).error, e("android.permission.RECORD_AUDIO", 0).field), (PERMISSION_NOT_REQUESTED.to_string(), Some("permission".to_string())));
        assert_eq!(e("android.permission.CAMERA", 10).error, PACKAGE_NOT_FOUND, "not installed for user 10");
        assert_eq!(e("android.permission.CAMERA", 7).error, USER_NOT_FOUND);
    }

    #[test]
    fn unknown_packages_and_unparseable_dumps() {
        let missing = "Dexopt state:\n  Unable to find package: com.nope.app\n";
        assert_eq!(parse_package(missing, "com.nope.app").unwrap_err().error, PACKAGE_NOT_FOUND);
        assert_eq!(parse_package(DUMP, "com.other.app").unwrap_err().error, PACKAGE_NOT_FOUND);
        assert_eq!(parse_package("\u{fffd}\u{fffd} garbled", "com.example.app").unwrap_err().error, PERMISSION_STATE_UNAVAILABLE);
        let cut = &DUMP[..DUMP.find("    User 0:").unwrap()];
        assert_eq!(parse_package(cut, "com.example.app").unwrap_err().error, PERMISSION_STATE_UNAVAILABLE, "a cut dump is not a missing user");
    }

    #[test]
    fn app_op_modes() {
        assert_eq!(app_op_of("android.permission.ACCESS_FINE_LOCATION"), Some("FINE_LOCATION"));
        assert_eq!(app_op_of("android.permission.INTERNET"), None);
        assert_eq!(parse_app_op("Uid mode: CAMERA: allow\nCAMERA: ignore; time=+1d2h3m ago; duration=+5s\n", "CAMERA"), json!({"op": "CAMERA", "mode": "ignore", "uidMode": "allow"}));
        assert_eq!(parse_app_op("No operations.\n", "CAMERA")["mode"], json!("default"));
    }
}
