//! Runs the IMS-ALG with its in-process TrGW from a file holding `[alg]`
//! and `[trgw]`: `cargo run -p alg --example serve -- v6gate.toml`.

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt().with_env_filter(tracing_subscriber::EnvFilter::from_default_env()).init();
    let path = std::env::args().nth(1).ok_or_else(|| anyhow::anyhow!("usage: serve CONFIG.toml"))?;
    let text = std::fs::read_to_string(&path)?;
    let s = alg::cli::serve_text(&text)?;
    eprintln!("IMS-ALG on {} and {}; Enter or Ctrl-C stops", s.alg.udp_v6, s.alg.udp_v4);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = std::io::stdin().read_line(&mut line);
        let _ = tx.send(());
    });
    let _ = rx.recv();
    s.alg.stop();
    Ok(())
}
