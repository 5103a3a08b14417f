//! Figures for the remote engines (not a test: nothing is asserted): server
//! start-up, session creation and per-command round trips through
//! chromedriver, a standalone grid, a hub with two nodes, and Appium's fake
//! driver. Also lists any listening socket of the launched processes that is
//! not on loopback (there should be none).
//!
//! `cargo run -p aab-webdriver --features servers --example measure [ROUNDS]`

use std::process::Command;
use std::time::{Duration, Instant};

use aab_webdriver::servers::{self, Appium, Chromedriver, Grid};
use aab_webdriver::{Client, Endpoint, Session};
use serde_json::Value;

const BUDGET: Duration = Duration::from_secs(60);

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn summary(mut samples: Vec<Duration>) -> String {
    samples.sort();
    let pick = |q: f64| ms(samples[((samples.len() - 1) as f64 * q).round() as usize]);
    format!(
        "median {:7.1} ms  p90 {:7.1} ms  (n={})",
        pick(0.5),
        pick(0.9),
        samples.len()
    )
}

/// Listening sockets owned by the groups' processes that are not loopback.
fn non_loopback_listeners(pgids: &[i32]) -> Vec<String> {
    let pids: Vec<String> = pgids
        .iter()
        .flat_map(|&g| servers::group_members(g))
        .map(|(pid, _)| format!("pid={pid},"))
        .collect();
    let Ok(out) = Command::new("ss").args(["-ltnpH"]).output() else {
        return vec!["(ss not available)".into()];
    };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| pids.iter().any(|p| l.contains(p.as_str())))
        .filter(|l| {
            let local = l.split_whitespace().nth(3).unwrap_or("");
            !(local.starts_with("127.")
                || local.starts_with("[::1]")
                || local.starts_with("[::ffff:127."))
        })
        .map(str::to_string)
        .collect()
}

async fn measure(
    name: &str,
    url: &str,
    caps: impl Fn() -> Value,
    rounds: usize,
    pgids: &[i32],
    web: bool,
) {
    let client = Client::new(Endpoint::parse(url).unwrap());
    let mut creations = Vec::new();
    let mut deletions = Vec::new();
    let mut session: Option<Session> = None;
    for i in 0..rounds {
        let t = Instant::now();
        let s = client
            .new_session(caps(), BUDGET)
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        creations.push(t.elapsed());
        if i + 1 == rounds {
            session = Some(s);
        } else {
            let t = Instant::now();
            s.delete(BUDGET).await.unwrap();
            deletions.push(t.elapsed());
        }
    }
    let session = session.unwrap();
    let listeners = non_loopback_listeners(pgids);
    let mut get = Vec::new();
    let mut find = Vec::new();
    let selector = if web { "body" } else { "#login" };
    if web {
        session.navigate("about:blank", BUDGET).await.unwrap();
    }
    for _ in 0..30 {
        let t = Instant::now();
        if web {
            session.url(BUDGET).await.unwrap();
        } else {
            session.source(BUDGET).await.unwrap();
        }
        get.push(t.elapsed());
        let t = Instant::now();
        session.find_element(selector, BUDGET).await.unwrap();
        find.push(t.elapsed());
    }
    session.delete(BUDGET).await.unwrap();
    println!("{name}");
    println!("  new session      {}", summary(creations));
    if !deletions.is_empty() {
        println!("  delete session   {}", summary(deletions));
    }
    println!(
        "  GET {:12} {}",
        if web { "url" } else { "source" },
        summary(get)
    );
    println!("  find element     {}", summary(find));
    println!(
        "  non-loopback listeners: {}",
        if listeners.is_empty() {
            "none".to_string()
        } else {
            listeners.join(" | ")
        }
    );
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(5);
    let chromium = || servers::chromium_capabilities(true);
    let dir = tempfile::tempdir().unwrap();
    let app = dir.path().join("app.xml");
    std::fs::write(
        &app,
        r#"<app><title>m</title><MockButton id="login">x</MockButton></app>"#,
    )
    .unwrap();

    let t = Instant::now();
    let driver = Chromedriver::start();
    println!("chromedriver ready in {:.0} ms", ms(t.elapsed()));
    measure(
        "chromedriver",
        driver.url(),
        chromium,
        rounds,
        &[driver.pgid()],
        true,
    )
    .await;
    drop(driver);

    let t = Instant::now();
    let grid = Grid::standalone();
    println!("grid standalone ready in {:.0} ms", ms(t.elapsed()));
    measure(
        "grid standalone",
        grid.url(),
        chromium,
        rounds,
        &grid.pgids(),
        true,
    )
    .await;
    drop(grid);

    let t = Instant::now();
    let grid = Grid::start(2, 2);
    println!("grid hub + 2 nodes ready in {:.0} ms", ms(t.elapsed()));
    measure(
        "grid hub + 2 nodes",
        grid.url(),
        chromium,
        rounds,
        &grid.pgids(),
        true,
    )
    .await;
    drop(grid);

    let t = Instant::now();
    let appium = Appium::start();
    println!("appium ready in {:.0} ms", ms(t.elapsed()));
    measure(
        "appium fake driver",
        appium.url(),
        || servers::fake_app_capabilities(&app),
        rounds,
        &[appium.pgid()],
        false,
    )
    .await;
    drop(appium);
}
