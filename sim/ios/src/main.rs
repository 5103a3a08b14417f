//! `aab-ios-sim`: `serve` runs a standalone simulator; `devicectl`, `xcrun`
//! and `xcodebuild` are the tool doubles the simulator's wrapper scripts exec.

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    std::process::exit(aab_ios_sim::cli::run(args));
}
