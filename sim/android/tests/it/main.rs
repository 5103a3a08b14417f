//! Integration tests of aab-android-sim against the REAL adb server (Debian
//! `adb`): each test starts its own server on a private port with its own HOME,
//! connects to in-process simulated devices and checks real behaviour; the
//! server is killed and the simulator shut down at the end (no process left).

mod adbd;
mod apps;
mod cli;
mod control;
mod h5;
mod hold;
mod installer;
mod native_slot;
mod effects;
mod executor;
mod flutter;
mod flutter_h5;
mod sdk;
mod support;
mod uia;
mod userland;
mod webview;
