//! The simulated prepared WebDriverAgent Runner (protocols §5): one Runner
//! process with its own `runtimeEpoch`, an HTTP/1.1 listener on an OS-assigned
//! port, `wdaBinding` on every response, W3C source/element reads, one managed
//! admission slot for `aab.wda-execution/v1` actions and the durable
//! `aab.wda-completion/v1` store. It sees and drives the device only through
//! [`NativeScreen`], so its effects land on the same model the SDK renders.
//!
//! Submodules: `http` (bounded request reader / response writer), `binding`
//! (identity headers, envelopes, rejections), `routes` (the route table and
//! connection loop), `action` (managed-action body validation), `exec` (the
//! admission slot, timeouts, cancel, pending replies), `ops` (each operation's
//! events with permission checks), `store` (the append-only completion store and
//! its result pages), `faults`, `ids`.

mod action;
mod binding;
mod exec;
mod faults;
mod http;
mod ids;
mod ops;
mod routes;
mod store;

#[cfg(test)]
mod fake_screen;
#[cfg(test)]
mod tests;
#[cfg(test)]
use crate::screen::{EventError, Foreground};

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::{JoinHandle, JoinSet};

use crate::screen::NativeScreen;

/// Concurrent connections the Runner serves; more are accepted and closed at
/// once so a misbehaving client cannot exhaust the simulator.
const MAX_CONNECTIONS: usize = 32;

/// How the device model starts a Runner process.
#[derive(Clone, Debug)]
pub struct RunnerConfig {
    /// The Runner application id (`<test bundle id>.xctrunner`), owner of the descriptor container.
    pub runner_bundle_id: String,
    /// The interface the WDA HTTP listener binds (the device's tunnel address).
    pub bind: IpAddr,
    /// The Runner's process id on the simulated device.
    pub process_id: u32,
    /// Where the durable completion store lives; it outlives Runner processes.
    pub store_dir: PathBuf,
}

/// The one WDA session a Runner holds: the App and process frozen at creation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Session {
    pub session_id: String,
    pub bundle_id: String,
    pub process_id: u32,
}

impl Session {
    fn to_json(&self) -> Value {
        json!({ "sessionId": self.session_id, "bundleId": self.bundle_id, "processId": self.process_id })
    }
}

/// Everything the connection and action tasks share.
pub(crate) struct Shared {
    pub cfg: RunnerConfig,
    pub epoch: String,
    pub port: u16,
    pub screen: Arc<dyn NativeScreen>,
    pub faults: Mutex<faults::Faults>,
    pub session: Mutex<Option<Session>>,
    pub slot: exec::Slot,
    pub store: store::Store,
}

impl Shared {
    pub fn session(&self) -> Option<Session> {
        self.session.lock().unwrap().clone()
    }

    pub fn faults(&self) -> faults::Faults {
        self.faults.lock().unwrap().clone()
    }
}

/// A running simulated Runner process.
pub struct Runner {
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

impl Runner {
    /// Binds the WDA listener and starts serving; the descriptor is ready once this returns.
    pub async fn start(cfg: RunnerConfig, screen: Arc<dyn NativeScreen>) -> std::io::Result<Runner> {
        let listener = TcpListener::bind(SocketAddr::new(cfg.bind, 0)).await?;
        let port = listener.local_addr()?.port();
        let dir = cfg.store_dir.clone();
        let store = tokio::task::spawn_blocking(move || store::Store::open(&dir)).await.map_err(std::io::Error::other)?;
        let shared = Arc::new(Shared {
            epoch: ids::uuid_v4(),
            port,
            screen,
            faults: Mutex::new(faults::Faults::default()),
            session: Mutex::new(None),
            slot: exec::Slot::default(),
            store,
            cfg,
        });
        let accept = tokio::spawn(accept_loop(listener, shared.clone()));
        Ok(Runner { shared, accept: Some(accept) })
    }

    /// This Runner process's `runtimeEpoch` (a UUID).
    pub fn epoch(&self) -> &str {
        &self.shared.epoch
    }

    /// The WDA HTTP port on `cfg.bind`.
    pub fn port(&self) -> u16 {
        self.shared.port
    }

    /// The `Documents/ai_app_bridge_wda.json` document (`aab.ios-wda/v1`, sorted keys).
    pub fn descriptor(&self) -> Value {
        let s = &self.shared;
        // serde_json preserves insertion order here, so the keys are written sorted by hand.
        json!({
            "bundleId": s.cfg.runner_bundle_id,
            "ok": true,
            "port": s.port,
            "processId": s.cfg.process_id,
            "runtimeEpoch": s.epoch,
            "schemaVersion": binding::WDA_SCHEMA,
        })
    }

    /// Ground truth for the control `state` op: sessions, the active action,
    /// completion counts and the armed faults.
    pub fn state(&self) -> Value {
        let s = &self.shared;
        let session = s.session();
        let (active, completions) = s.slot.snapshot();
        json!({
            "runnerBundleId": s.cfg.runner_bundle_id,
            "runtimeEpoch": s.epoch,
            "processId": s.cfg.process_id,
            "port": s.port,
            "session": session.as_ref().map(Session::to_json),
            "sessions": session.iter().map(Session::to_json).collect::<Vec<_>>(),
            "active": active,
            "completions": completions,
            "storedCompletions": s.store.len(),
            "storeAvailable": s.store.available(),
            "faults": s.faults().to_json(),
        })
    }

    /// Applies the WDA fault keys present in `faults` (see `faults.rs`); other keys are ignored.
    pub fn set_faults(&self, faults: &Value) {
        self.shared.faults.lock().unwrap().apply(faults);
    }

    /// Stops the process: the listener, every connection and any in-flight
    /// action (a killed Runner never completes it).
    pub async fn stop(mut self) {
        self.shared.slot.abort_tasks();
        if let Some(accept) = self.accept.take() {
            accept.abort();
            let _ = accept.await;
        }
    }
}

impl Drop for Runner {
    fn drop(&mut self) {
        self.shared.slot.abort_tasks();
        if let Some(accept) = self.accept.take() {
            accept.abort();
        }
    }
}

/// Accepts connections under the cap; the `JoinSet` owns every connection task,
/// so aborting this loop closes them all.
async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    let permits = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let mut connections = JoinSet::new();
    loop {
        let socket = match listener.accept().await {
            Ok((socket, _)) => socket,
            Err(_) => {
                // Transient (EMFILE, aborted handshake): back off briefly instead of spinning.
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                continue;
            }
        };
        while connections.try_join_next().is_some() {}
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            drop(socket);
            continue;
        };
        let _ = socket.set_nodelay(true);
        let shared = shared.clone();
        connections.spawn(async move {
            let _permit = permit;
            routes::serve_connection(shared, socket).await;
        });
    }
}
