//! The prepared WebDriverAgent project `ios-setup` builds (protocols §5.1) and its
//! manifest `aab-wda-project.json` (`aab.ios-wda-project/v1`).
//!
//! The contract prepares a COPY of npm `appium-webdriveragent` exactly 14.1.1: the
//! installed dependency is never modified; the copy gets the `AABWDA*` sources and
//! the native segmented store (`sfs.h`, `sfs.c`) and patches to FBWebServer (route
//! queue off main, `/aab/*` control routes, descriptor published after bind, the
//! admission check before every upstream route, shutdown refused),
//! FBResponsePayload (`wdaBinding` on every response) and the JSON source
//! serializer (`elementId` next to `rawIdentifier`). The manifest lists every
//! touched file with its sha256 before and after.
//!
//! Honest limit of this build: no appium-webdriveragent 14.1.1 source (and no
//! Xcode) exists where aab is built and tested, so the "upstream" files below are
//! GENERATED STAND-INS named like the upstream ones, and the patches are applied
//! to them. Their `before` hashes are of the stand-ins, not of the real upstream
//! bytes, and the manifest says so (`upstream.source: "generated-stand-in"`). The
//! tree is still content-addressed and verified like a real one: a directory
//! whose files no longer match its manifest is never reused, and the `xcodebuild`
//! double checks the manifest against the files before it "builds".

use std::path::{Path, PathBuf};

use aab_plugin_api::ProviderError;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

pub const MANIFEST_FILE: &str = "aab-wda-project.json";
pub const MANIFEST_SCHEMA: &str = "aab.ios-wda-project/v1";
pub const PROJECT_DIR: &str = "WebDriverAgent.xcodeproj";
pub const UPSTREAM_PACKAGE: &str = "appium-webdriveragent";
pub const UPSTREAM_VERSION: &str = "14.1.1";
pub const SETUP_UNAVAILABLE: &str = "ios_wda_setup_unavailable";

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// One file of the prepared copy: its upstream stand-in (`None` = added by aab)
/// and its prepared content.
struct File {
    path: &'static str,
    before: Option<String>,
    after: String,
    why: &'static str,
}

fn upstream(path: &str, body: &str) -> String {
    format!("// {path} — generated stand-in for {UPSTREAM_PACKAGE} {UPSTREAM_VERSION} (no upstream source on this host).\n{body}")
}

fn patched(base: &str, patch: &str) -> String {
    format!("{base}\n// ---- aab prepared-WDA patch ----\n{patch}")
}

/// The files of the prepared copy, in a fixed order.
fn files() -> Vec<File> {
    let pbx = upstream("WebDriverAgent.xcodeproj/project.pbxproj", "// !$*UTF8*$!\n{ archiveVersion = 1; objectVersion = 54; targets = (WebDriverAgentLib, WebDriverAgentRunner); }\n");
    let server = upstream("WebDriverAgentLib/Routing/FBWebServer.m", "@implementation FBWebServer\n- (void)startServing { /* routes on the main queue; GET /wda/shutdown stops the server */ }\n@end\n");
    let payload = upstream("WebDriverAgentLib/Routing/FBResponsePayload.m", "id<FBResponsePayload> FBResponseWithObject(id object) { return @{@\"value\": object, @\"sessionId\": FBSessionId()}; }\n");
    let source = upstream("WebDriverAgentLib/Categories/XCUIApplication+FBHelpers.m", "+ (NSDictionary *)dictionaryForElement:(id)snapshot { /* type, rawIdentifier, name, value, label, rect, isEnabled, isVisible, children */ }\n");
    let added = |path: &'static str, body: &str, why: &'static str| File { path, before: None, after: format!("// {path} — aab prepared-WDA source.\n{body}"), why };
    vec![
        File {
            path: "WebDriverAgent.xcodeproj/project.pbxproj",
            after: patched(&pbx, "// + AABWDA*.m, sfs.c in WebDriverAgentLib; ENABLE_DEFAULT_HEADER_SEARCH_PATHS = NO\n"),
            before: Some(pbx),
            why: "adds the AABWDA sources and the segmented store to WebDriverAgentLib",
        },
        File {
            path: "WebDriverAgentLib/Routing/FBWebServer.m",
            after: patched(
                &server,
                "// route queue off main; registers /aab/status, /aab/session, /aab/action, /aab/execution/result, /aab/execution/cancel\n// publishes Documents/ai_app_bridge_wda.json after the server binds\n// AABWDAAdmission runs on main before every upstream route; /wda/shutdown answers ios_wda_route_unsupported\n",
            ),
            before: Some(server),
            why: "control routes, descriptor publication, admission check, shutdown rejected",
        },
        File {
            path: "WebDriverAgentLib/Routing/FBResponsePayload.m",
            after: patched(&payload, "// every response carries wdaBinding {schemaVersion, bundleId, runtimeEpoch, processId, port}\n"),
            before: Some(payload),
            why: "wdaBinding on every response",
        },
        File {
            path: "WebDriverAgentLib/Categories/XCUIApplication+FBHelpers.m",
            after: patched(&source, "// the JSON source adds elementId (the WDA element UID) next to rawIdentifier\n"),
            before: Some(source),
            why: "elementId in the JSON source",
        },
        added("WebDriverAgentLib/AAB/AABWDAControlRoutes.m", "// /aab/* routes: status, session, managed action, result pages, cancel (aab.wda-execution/v1)\n", "the /aab control routes"),
        added("WebDriverAgentLib/AAB/AABWDAAdmission.m", "// identity headers (X-AAB-WDA-*), target App/PID/session checks on the main queue\n", "admission of every request"),
        added("WebDriverAgentLib/AAB/AABWDAExecution.m", "// one admission slot; events via W3C pointer actions / XCTest text input; aab.wda-completion/v1 committed before the reply\n", "managed actions"),
        added("WebDriverAgentLib/AAB/AABWDADescriptor.m", "// aab.ios-wda/v1 descriptor, sorted keys, written atomically\n", "the Runner descriptor"),
        added("WebDriverAgentLib/AAB/sfs.h", "/* segmented file store: append, fsync, paged reads (64 records / 2 MiB) */\n", "the native segmented store (header)"),
        added("WebDriverAgentLib/AAB/sfs.c", "/* segmented file store implementation */\n", "the native segmented store"),
    ]
}

/// The manifest of the prepared copy (before/after hashes of every touched file).
pub fn manifest() -> Value {
    let entries: Vec<Value> = files()
        .iter()
        .map(|f| json!({"path": f.path, "change": if f.before.is_some() { "patched" } else { "added" }, "beforeSha256": f.before.as_deref().map(|b| sha256_hex(b.as_bytes())), "afterSha256": sha256_hex(f.after.as_bytes()), "purpose": f.why}))
        .collect();
    json!({
        "schemaVersion": MANIFEST_SCHEMA,
        "upstream": {"package": UPSTREAM_PACKAGE, "version": UPSTREAM_VERSION, "source": "generated-stand-in",
                     "note": "No appium-webdriveragent 14.1.1 source exists on this host: the upstream files are generated stand-ins and beforeSha256 hashes them; the installed dependency is never modified."},
        "project": PROJECT_DIR, "scheme": "WebDriverAgentRunner",
        "generator": {"plugin": "wda", "version": env!("CARGO_PKG_VERSION")},
        "files": entries,
    })
}

/// Largest manifest read back (ours is a few KiB).
const MAX_MANIFEST_BYTES: u64 = 1024 * 1024;

/// At most `max` bytes of `path`; `None` when it is unreadable or larger (a
/// copy on disk is never read unbounded, whatever was written there since).
fn read_capped(path: &Path, max: u64) -> Option<Vec<u8>> {
    use std::io::Read;
    let mut bytes = Vec::new();
    std::fs::File::open(path).ok()?.take(max + 1).read_to_end(&mut bytes).ok()?;
    (bytes.len() as u64 <= max).then_some(bytes)
}

/// Whether every file of `dir` matches the manifest there (each read no further
/// than the size it must have).
fn verifies(dir: &Path) -> bool {
    let Some(bytes) = read_capped(&dir.join(MANIFEST_FILE), MAX_MANIFEST_BYTES) else { return false };
    let Ok(m) = serde_json::from_slice::<Value>(&bytes) else { return false };
    m == manifest() && files().iter().all(|f| read_capped(&dir.join(f.path), f.after.len() as u64).is_some_and(|b| b == f.after.as_bytes()))
}

/// A prepared copy on disk.
pub struct Prepared {
    pub dir: PathBuf,
    pub manifest: Value,
    pub manifest_sha256: String,
    /// An existing verified copy was reused.
    pub reused: bool,
}

fn unavailable(what: &str, e: std::io::Error) -> ProviderError {
    ProviderError::new(SETUP_UNAVAILABLE, format!("{what}: {e}")).not_dispatched()
}

/// The prepared copy under `root` (`<root>/projects/<content hash>`): reused when
/// it verifies, else written to a temporary sibling and renamed into place, so a
/// concurrent setup never sees a half-written tree.
pub fn prepare(root: &Path) -> Result<Prepared, ProviderError> {
    let m = manifest();
    let text = serde_json::to_vec_pretty(&m).unwrap_or_default();
    let sha = sha256_hex(&text);
    let projects = root.join("projects");
    let dir = projects.join(&sha[..16]);
    if verifies(&dir) {
        return Ok(Prepared { dir, manifest: m, manifest_sha256: sha, reused: true });
    }
    std::fs::create_dir_all(&projects).map_err(|e| unavailable("cannot create the prepared-project directory", e))?;
    let tmp = tempfile::Builder::new().prefix(".prepare-").tempdir_in(&projects).map_err(|e| unavailable("cannot create a temporary project directory", e))?;
    for f in files() {
        let path = tmp.path().join(f.path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| unavailable("cannot write the prepared project", e))?;
        }
        std::fs::write(&path, f.after.as_bytes()).map_err(|e| unavailable("cannot write the prepared project", e))?;
    }
    std::fs::write(tmp.path().join(MANIFEST_FILE), &text).map_err(|e| unavailable("cannot write the project manifest", e))?;
    // A stale or tampered copy is replaced as a whole.
    if dir.exists() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    let staged = tmp.keep();
    if let Err(e) = std::fs::rename(&staged, &dir) {
        let _ = std::fs::remove_dir_all(&staged);
        // Another setup may have renamed the same content into place first.
        if !verifies(&dir) {
            return Err(unavailable("cannot move the prepared project into place", e));
        }
    }
    Ok(Prepared { dir, manifest: m, manifest_sha256: sha, reused: false })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_manifest_lists_before_and_after_hashes_of_every_file() {
        let m = manifest();
        assert_eq!(m["schemaVersion"], MANIFEST_SCHEMA);
        assert_eq!(m["upstream"]["version"], UPSTREAM_VERSION);
        let files = m["files"].as_array().unwrap();
        assert!(files.iter().any(|f| f["path"] == "WebDriverAgent.xcodeproj/project.pbxproj" && f["beforeSha256"].is_string()));
        assert!(files.iter().any(|f| f["path"] == "WebDriverAgentLib/AAB/sfs.c" && f["beforeSha256"].is_null()));
        for f in files {
            assert_ne!(f["beforeSha256"], f["afterSha256"], "{f}");
        }
    }

    #[test]
    fn a_copy_is_reused_only_while_it_verifies() {
        let root = tempfile::tempdir().unwrap();
        let first = prepare(root.path()).unwrap();
        assert!(!first.reused && first.dir.join(PROJECT_DIR).join("project.pbxproj").is_file());
        let on_disk: Value = serde_json::from_slice(&std::fs::read(first.dir.join(MANIFEST_FILE)).unwrap()).unwrap();
        assert_eq!(on_disk, manifest());
        assert!(prepare(root.path()).unwrap().reused);
        std::fs::write(first.dir.join("WebDriverAgentLib/Routing/FBWebServer.m"), b"tampered").unwrap();
        let again = prepare(root.path()).unwrap();
        assert!(!again.reused, "a tampered copy is rewritten");
        assert!(verifies(&again.dir));
        // A file grown past its expected size is not read through, and fails.
        let big = again.dir.join("WebDriverAgentLib/Routing/FBWebServer.m");
        std::fs::write(&big, vec![b'x'; 4 * 1024 * 1024]).unwrap();
        assert!(!verifies(&again.dir));
        assert_eq!(read_capped(&big, 16), None);
        assert_eq!(read_capped(&again.dir.join(MANIFEST_FILE), MAX_MANIFEST_BYTES).map(|b| b.is_empty()), Some(false));
        let leftovers: Vec<_> = std::fs::read_dir(root.path().join("projects")).unwrap().flatten().filter(|e| e.file_name().to_string_lossy().starts_with(".prepare-")).collect();
        assert!(leftovers.is_empty());
    }
}
