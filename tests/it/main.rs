//! The one integration-test binary of `aab-e2e` (link time dominates on 2 cores).
//!
//! Build the whole workspace first — the `aab` binary and the fixture cdylibs come
//! from other crates: `cargo build --workspace --all-targets && cargo test -p aab-e2e`.

mod android;
mod android_capture;
mod android_tree;
mod android_adbq;
mod android_demo;
mod android_executor;
mod android_intent;
mod android_matrix;
mod android_ownership;
mod android_native;
mod android_shell;
mod android_flutter;
mod android_flutter_h5;
mod android_hybrid;
mod android_scale;
mod android_uia;
mod android_install;
mod android_webview;
mod android_h5;
mod evidence_report;
mod completions;
mod executor_prepare;
mod facts;
mod h5_renderer;
mod foundation;
mod hostile;
mod intent;
mod ios;
mod ios_demo;
mod ios_wda;
mod ios_world;
mod intent_fixture;
mod isolation;
mod parity;
mod pipeline;
mod plugin_install;
mod plugin_sdk;
mod private_provider;
mod reply;
mod script;
mod trust;
mod torture;
mod web;
mod web_executor;
