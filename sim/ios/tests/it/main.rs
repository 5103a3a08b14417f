//! Integration tests of the simulated iOS devices through their real
//! interfaces (raw HTTP to the SDK listeners, the devicectl / xcodebuild
//! doubles as child processes), checked against control `state` / `truth`.

mod common;
mod devicectl;
mod flutter;
mod h5;
mod runner;
mod sdk;
mod wda;
