//! App process lifecycle on a device: install (keeps the data container on
//! update), launch (a new pid and runtime epoch, the SDK listener, the
//! descriptor, foreground), terminate (the listener closes, a running action
//! never completes, the descriptor stays behind naming the dead process).

use std::sync::Arc;

use serde_json::{Value, json};

use crate::device::{Device, Process};
use crate::scenario::AppSpec;
use crate::util::{now_ms, uuid_upper};

#[derive(Debug)]
pub enum LaunchError {
    NotInstalled,
    Listener(String),
}

/// Launches `bundle` (or brings its running process forward unless
/// `terminate_existing`); (pid, runtime epoch).
pub fn launch(dev: &Arc<Device>, bundle: &str, terminate_existing: bool, by: &str) -> Result<(u32, String), LaunchError> {
    let (spec, running) = {
        let st = dev.st.lock().unwrap();
        let app = st.apps.get(bundle).ok_or(LaunchError::NotInstalled)?;
        (app.spec.clone(), app.process.as_ref().map(|p| (p.pid, p.epoch.clone())))
    };
    if let Some((pid, epoch)) = running {
        if !terminate_existing {
            dev.st.lock().unwrap().foreground = Some(bundle.to_string());
            dev.record("activate", json!({ "bundleId": bundle, "pid": pid, "runtimeEpoch": epoch, "by": by }));
            crate::web::sync(dev);
            return Ok((pid, epoch));
        }
        terminate(dev, bundle, "terminate-existing");
    }
    let (pid, epoch) = start_process(dev, &spec)?;
    dev.record("launch", json!({ "bundleId": bundle, "pid": pid, "runtimeEpoch": epoch, "terminateExisting": terminate_existing, "by": by }));
    crate::web::sync(dev);
    Ok((pid, epoch))
}

fn start_process(dev: &Arc<Device>, spec: &Arc<AppSpec>) -> Result<(u32, String), LaunchError> {
    let pid = dev.next_pid();
    let epoch = uuid_upper();
    let (port, listener) = if spec.sdk {
        let (port, task) = crate::sdk::listen(dev, &spec.bundle_id, &epoch, pid).map_err(|e| LaunchError::Listener(e.to_string()))?;
        (port, Some(task))
    } else {
        (0, None)
    };
    let ui = crate::native::Ui::new(spec);
    let flutter = spec.screen(&ui.screen).and_then(|s| s.flutter.as_ref()).map(crate::flutter::Engine::new);
    {
        let mut st = dev.st.lock().unwrap();
        let Some(app) = st.apps.get_mut(&spec.bundle_id) else { return Err(LaunchError::NotInstalled) };
        app.process = Some(Process {
            pid,
            epoch: epoch.clone(),
            port,
            started_ms: now_ms(),
            ui,
            flutter,
            exec: Arc::default(),
            observer: Default::default(),
            listener,
            flutter_ingress: None,
        });
        st.foreground = Some(spec.bundle_id.clone());
    }
    if spec.sdk {
        crate::sdk::publish(dev, &spec.bundle_id);
    }
    Ok((pid, epoch))
}

/// Terminates `bundle`'s process (if any); whether one ran.
pub fn terminate(dev: &Arc<Device>, bundle: &str, why: &str) -> bool {
    let gone = {
        let mut st = dev.st.lock().unwrap();
        let Some(app) = st.apps.get_mut(bundle) else { return false };
        let Some(p) = app.process.take() else { return false };
        app.previous = Some((p.epoch.clone(), p.pid, p.port));
        if st.foreground.as_deref() == Some(bundle) {
            st.foreground = None;
        }
        p
    };
    if let Some(t) = &gone.listener {
        t.abort();
    }
    gone.exec.gone();
    dev.record("terminate", json!({ "bundleId": bundle, "pid": gone.pid, "runtimeEpoch": gone.epoch, "why": why }));
    crate::web::sync(dev);
    true
}

/// Installs an app bundle: a scenario app by its bundle id, or a plain app.
pub fn install(dev: &Arc<Device>, info: &Value) -> Result<Arc<AppSpec>, String> {
    let bundle = info["CFBundleIdentifier"].as_str().filter(|b| !b.is_empty() && b.len() <= 255 && b.bytes().all(|c| c.is_ascii_alphanumeric() || b"._-".contains(&c))).ok_or("Info.plist has no valid CFBundleIdentifier")?;
    let version = info["CFBundleShortVersionString"].as_str().unwrap_or("1.0");
    let build = info["CFBundleVersion"].as_str().unwrap_or("1");
    let name = info["CFBundleName"].as_str().unwrap_or(bundle);
    let spec = match dev.scenario.app(bundle) {
        Some(s) => {
            let mut s = s.clone();
            s.version_name = version.to_string();
            s.build_number = build.to_string();
            s
        }
        None => AppSpec::plain(bundle, name, version, build),
    };
    let spec = Arc::new(spec);
    // An update of a running app terminates it (as installd does).
    terminate(dev, bundle, "install");
    dev.install_spec(spec.clone());
    dev.record("install", json!({ "bundleId": bundle, "versionName": version, "buildNumber": build, "scenarioApp": dev.scenario.app(bundle).is_some() }));
    Ok(spec)
}
