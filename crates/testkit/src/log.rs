//! The log of what a test runs inside its own process (the appliers,
//! archivers and replays the harness starts): written to a file when
//! `STOCKLEDGER_TEST_LOG_DIR` names a directory, as `deploy/local/test.sh`
//! does, so a failure seen once in CI can be read afterwards. Without it
//! those components log nowhere, as a library's do.

use std::fs::File;
use std::path::Path;
use std::sync::{Mutex, OnceLock};

use tracing_subscriber::EnvFilter;

/// The filter unless `STOCKLEDGER_TEST_LOG` gives one: progress and
/// trouble, without librdkafka's and sqlx's routine chatter.
const DEFAULT_FILTER: &str = "info,librdkafka=warn,rdkafka=warn,sqlx=warn";

/// Sends this process's log to `<test binary>-<pid>.log` in
/// `STOCKLEDGER_TEST_LOG_DIR`, once; does nothing when that is not set.
pub fn init() {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        let Some(dir) = std::env::var_os("STOCKLEDGER_TEST_LOG_DIR").filter(|d| !d.is_empty())
        else {
            return;
        };
        let binary = std::env::current_exe()
            .ok()
            .and_then(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
            .unwrap_or_else(|| "test".into());
        let path = Path::new(&dir).join(format!("{binary}-{}.log", std::process::id()));
        let file = match std::fs::create_dir_all(&dir).and_then(|()| File::create(&path)) {
            Ok(file) => file,
            Err(e) => {
                eprintln!("cannot write the test log {}: {e}", path.display());
                return;
            }
        };
        let filter = EnvFilter::try_from_env("STOCKLEDGER_TEST_LOG")
            .unwrap_or_else(|_| EnvFilter::new(DEFAULT_FILTER));
        // A test that installed its own subscriber keeps it.
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_ansi(false)
            .with_writer(Mutex::new(file))
            .try_init();
    });
}
