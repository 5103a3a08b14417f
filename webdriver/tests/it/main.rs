//! aab-webdriver against real servers: chromedriver driving Debian's
//! Chromium, a Selenium Grid 4 hub with two nodes, Appium 3's fake driver,
//! and a fault server for the failure classes. Ground truth is what the
//! servers saw (the page server's request log, the fault server's log, the
//! grid's slot table, the process table), not the client's own reply.

mod appium;
mod chromedriver;
mod errors;
mod grid;
mod support;

use std::time::Duration;

/// A generous per-command budget: the test machine has two cores and runs
/// browsers and JVMs at once.
pub const BUDGET: Duration = Duration::from_secs(60);
