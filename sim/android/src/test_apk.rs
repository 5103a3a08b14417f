//! Real APKs for tests (the simulator's own and the end-to-end suite's):
//! packaged by Debian's `aapt` from a manifest written here (against
//! `android-framework-res`'s framework-res.apk) and signed by `apksigner` with a
//! keystore made by the JDK's `keytool`. A failing tool panics with the command,
//! its output and the packages that provide it.

use std::path::{Path, PathBuf};
use std::process::Command;

pub fn framework() -> String {
    std::env::var("AAB_TEST_FRAMEWORK_RES").unwrap_or_else(|_| "/usr/share/android-framework-res/framework-res.apk".into())
}

fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e} (apt-get install aapt apksigner android-framework-res default-jre-headless)"));
    assert!(out.status.success(), "{cmd:?}: {}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
}

pub fn keystore(dir: &Path, name: &str) -> PathBuf {
    let ks = dir.join(format!("{name}.jks"));
    run(Command::new("keytool").args(["-genkeypair", "-noprompt", "-keystore"]).arg(&ks).args(["-storepass", "secret12", "-keypass", "secret12", "-alias", "k", "-keyalg", "RSA", "-keysize", "2048", "-validity", "3650", "-dname", &format!("CN={name}")]));
    ks
}

/// A real APK of `package` at `version_code` requesting `perms`, signed with `ks` (None: unsigned).
pub fn apk(dir: &Path, package: &str, version_code: u32, perms: &[&str], ks: Option<&Path>) -> PathBuf {
    build(dir, package, version_code, perms, &[], ks)
}

/// A test APK `package` whose manifest declares `<instrumentation android:name=runner
/// android:targetPackage=target>` for each `(runner, target)` (what `executor-prepare`
/// builds for an executor), signed with `ks`.
pub fn instrumentation_apk(dir: &Path, package: &str, instrumentations: &[(&str, &str)], ks: &Path) -> PathBuf {
    build(dir, package, 1, &[], instrumentations, Some(ks))
}

fn build(dir: &Path, package: &str, version_code: u32, perms: &[&str], instrumentations: &[(&str, &str)], ks: Option<&Path>) -> PathBuf {
    let work = dir.join(format!("{package}-{version_code}-{}", ks.map(|k| k.file_stem().unwrap().to_string_lossy().to_string()).unwrap_or("unsigned".into())));
    std::fs::create_dir_all(&work).unwrap();
    let uses: String = perms.iter().map(|p| format!("  <uses-permission android:name=\"{p}\"/>\n")).collect();
    let instr: String = instrumentations.iter().map(|(runner, target)| format!("  <instrumentation android:name=\"{runner}\" android:targetPackage=\"{target}\" android:label=\"aab executor\"/>\n")).collect();
    // A test APK has no launcher activity.
    let activity = if instrumentations.is_empty() {
        "    <activity android:name=\".Main\" android:exported=\"true\">\n      <intent-filter><action android:name=\"android.intent.action.MAIN\"/><category android:name=\"android.intent.category.LAUNCHER\"/></intent-filter>\n    </activity>\n"
    } else {
        ""
    };
    std::fs::write(
        work.join("AndroidManifest.xml"),
        format!("<?xml version=\"1.0\" encoding=\"utf-8\"?>\n<manifest xmlns:android=\"http://schemas.android.com/apk/res/android\" package=\"{package}\" android:versionCode=\"{version_code}\" android:versionName=\"1.{version_code}\">\n  <uses-sdk android:minSdkVersion=\"24\" android:targetSdkVersion=\"34\"/>\n{uses}  <application android:label=\"Test\">\n{activity}  </application>\n{instr}</manifest>\n"),
    )
    .unwrap();
    let unsigned = work.join("unsigned.apk");
    run(Command::new("aapt").args(["package", "-f", "-M"]).arg(work.join("AndroidManifest.xml")).args(["-I", &framework(), "-F"]).arg(&unsigned));
    let Some(ks) = ks else { return unsigned };
    let signed = work.join("signed.apk");
    run(Command::new("apksigner").args(["sign", "--ks"]).arg(ks).args(["--ks-pass", "pass:secret12", "--out"]).arg(&signed).arg(&unsigned));
    signed
}
