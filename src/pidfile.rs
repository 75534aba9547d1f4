//! The PID file, written only when `--pid-file` (`LLAMATAP_PID_FILE`) names
//! one: Pingora reads and writes its `pid_file` only when it daemonizes, which
//! llamatap never does, so llamatap keeps the file itself.
//!
//! - At start the file gets this process's id, unless it holds the id of
//!   another running llamatap: then startup stops with one line (each
//!   instance needs its own file), except with `--upgrade`, where the new
//!   process takes the file over from the one it replaces.
//! - At exit the file is removed only while it still holds this process's
//!   id: a process never deletes the file of another one (the new process of
//!   an upgrade, or an instance that was given the same path).

use std::path::{Path, PathBuf};

/// A PID file problem at start.
#[derive(Debug, thiserror::Error)]
pub enum PidFileError {
    /// Another running llamatap wrote the file.
    #[error(
        "pid file {path} belongs to llamatap process {pid}, still running; \
         give each llamatap its own --pid-file (or start this one with --upgrade to replace it)"
    )]
    Taken {
        /// The file.
        path: PathBuf,
        /// The other process.
        pid: u32,
    },
    /// The file cannot be written.
    #[error("cannot write pid file {path}: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}

/// The PID file this process wrote.
#[derive(Debug)]
pub struct PidFile {
    path: PathBuf,
    pid: u32,
}

impl PidFile {
    /// Writes this process's id to `path`. `takeover` (an `--upgrade`) may
    /// replace the id of a running llamatap; otherwise that is an error.
    pub fn create(path: &Path, takeover: bool) -> Result<PidFile, PidFileError> {
        let pid = std::process::id();
        if let Some(other) = read_pid(path) {
            if other != pid && !takeover && is_running_llamatap(other) {
                return Err(PidFileError::Taken {
                    path: path.to_path_buf(),
                    pid: other,
                });
            }
        }
        // Written aside, then renamed: a reader never sees a half-written id.
        let write_err = |source| PidFileError::Write {
            path: path.to_path_buf(),
            source,
        };
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(format!(".{pid}.tmp"));
        let tmp = PathBuf::from(tmp);
        std::fs::write(&tmp, format!("{pid}\n")).map_err(write_err)?;
        std::fs::rename(&tmp, path).map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            write_err(e)
        })?;
        Ok(PidFile {
            path: path.to_path_buf(),
            pid,
        })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Removes the file if it still holds this process's id; leaves it to
    /// its new owner otherwise. Called on every way out of the process.
    pub fn remove(&self) {
        if read_pid(&self.path) == Some(self.pid) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

impl Drop for PidFile {
    fn drop(&mut self) {
        self.remove();
    }
}

/// The id in the PID file at `path`, if it holds one.
fn read_pid(path: &Path) -> Option<u32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// Whether process `pid` runs and is a llamatap (its `comm`), so that a
/// stale file whose id was reused by another program does not stop startup.
fn is_running_llamatap(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .is_ok_and(|comm| comm.trim_end() == "llamatap")
}
