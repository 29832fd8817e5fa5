//! A small temporary-directory helper (no extra dependency).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::{Error, Result};

/// Prefix of every directory the kit creates under the temp root.
pub const TEMP_PREFIX: &str = "redlease-testkit-";

/// Environment variable: when set to `1`, temporary directories are kept on drop
/// (for post-mortem debugging).
pub const ENV_KEEP_TMP: &str = "REDLEASE_KEEP_TMP";

/// Environment variable: directory under which the kit creates its temporary
/// directories (default: [`std::env::temp_dir`]).
pub const ENV_TMPDIR: &str = "REDLEASE_TMPDIR";

/// Environment variable: an identifier of the current test run, embedded in the
/// names of temporary directories and in container labels so that a runner
/// (`cargo xtask test`) can check that nothing leaked.
pub const ENV_RUN_ID: &str = "REDLEASE_TESTKIT_RUN_ID";

/// File written into a directory kept because of [`ENV_KEEP_TMP`], so that the
/// stale-resource clean-up ([`crate::reaper`]) leaves it alone.
pub const KEEP_MARKER: &str = ".redlease-keep";

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A uniquely named directory, removed recursively on drop.
#[derive(Debug)]
pub struct TempDir {
    path: PathBuf,
    keep: bool,
}

impl TempDir {
    /// Creates `<temp root>/redlease-testkit-[<run id>-]<label>-<pid>-<n>-<nanos>`.
    pub fn new(label: &str) -> Result<Self> {
        let root = std::env::var_os(ENV_TMPDIR)
            .map(PathBuf::from)
            .unwrap_or_else(std::env::temp_dir);
        std::fs::create_dir_all(&root)
            .map_err(|e| Error::io(format!("creating {}", root.display()), e))?;
        let run = run_id().map(|r| format!("{r}-")).unwrap_or_default();
        loop {
            let nanos = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.subsec_nanos())
                .unwrap_or(0);
            let n = COUNTER.fetch_add(1, Ordering::Relaxed);
            let path = root.join(format!(
                "{TEMP_PREFIX}{run}{label}-{}-{n}-{nanos:08x}",
                std::process::id()
            ));
            match std::fs::create_dir(&path) {
                Ok(()) => {
                    let keep = std::env::var(ENV_KEEP_TMP).is_ok_and(|v| v == "1");
                    return Ok(TempDir { path, keep });
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(Error::io(format!("creating {}", path.display()), e)),
            }
        }
    }

    /// The directory's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if self.keep {
            let _ = std::fs::write(self.path.join(KEEP_MARKER), b"");
            eprintln!("lease-testkit: keeping {}", self.path.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

/// The current run identifier ([`ENV_RUN_ID`]), if set and made of safe characters.
pub(crate) fn run_id() -> Option<String> {
    std::env::var(ENV_RUN_ID).ok().filter(|s| {
        !s.is_empty()
            && s.len() <= 40
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    })
}
