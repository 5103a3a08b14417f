//! `aab-android-sim`: starts simulated devices and prints one JSON line
//! (control address, token, device serials) on stdout; runs until SIGINT/SIGTERM.

use clap::Parser;

#[derive(Parser)]
#[command(name = "aab-android-sim", about = "A simulated Android phone behind the real adb (adb connect 127.0.0.1:PORT)")]
struct Args {
    /// Number of devices (each on its own free port); ignored when --port is given.
    #[arg(long, default_value_t = 1)]
    devices: usize,
    /// Device port (repeatable: one device per port). Keep off 5555-5585.
    #[arg(long = "port")]
    ports: Vec<u16>,
    /// Scenario file (JSON); default the built-in sample app.
    #[arg(long)]
    scenario: Option<std::path::PathBuf>,
    /// Directory for device roots (`<dir>/<port>`); default a temp dir removed at exit.
    #[arg(long)]
    root_dir: Option<std::path::PathBuf>,
    /// Control interface port on 127.0.0.1 (0 = any free port).
    #[arg(long, default_value_t = 0)]
    control_port: u16,
}

fn main() {
    let args = Args::parse();
    let scenario = match &args.scenario {
        Some(p) => match std::fs::read_to_string(p).map_err(|e| e.to_string()).and_then(|t| aab_android_sim::Scenario::parse(&t)) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("aab-android-sim: {}: {e}", p.display());
                std::process::exit(2);
            }
        },
        None => aab_android_sim::Scenario::sample(),
    };
    let ports = if args.ports.is_empty() { vec![0; args.devices.max(1)] } else { args.ports.clone() };
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("tokio runtime");
    rt.block_on(async move {
        let opts = aab_android_sim::Options { ports, scenario, base_dir: args.root_dir, control_port: Some(args.control_port) };
        let mut sim = match aab_android_sim::Simulator::start(opts).await {
            Ok(s) => s,
            Err(e) => {
                eprintln!("aab-android-sim: {e}");
                std::process::exit(1);
            }
        };
        // Handlers first, then the line that tells a supervisor we are up: a SIGTERM
        // sent right after reading it must still reach the clean shutdown path.
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
        let ctrl_c = tokio::signal::ctrl_c();
        println!("{}", sim.describe());
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
        sim.shutdown();
        // Do not wait for device work still queued on the runtime: leave now.
        std::process::exit(0);
    });
}
