//! The system's DNS configuration for [`super::lookup`]: `/etc/resolv.conf`
//! (read by hickory) and `/etc/hosts`, read again whenever either changes.
//!
//! Deliberately not here: watching the files (their modification times are
//! compared at each lookup, as glibc does for resolv.conf), or defaults for a
//! missing `/etc/resolv.conf` (a lookup error: the caller keeps its members).

use std::time::SystemTime;

use hickory_resolver::Hosts;

use super::{LookupError, Source};

/// The files of the system's configuration, compared for changes.
const SYSTEM_FILES: [&str; 2] = ["/etc/resolv.conf", "/etc/hosts"];

impl Source {
    /// The system's configuration as it is now: `/etc/resolv.conf` (read
    /// by hickory) and `/etc/hosts`.
    pub fn system() -> Result<Self, LookupError> {
        let (config, options) = hickory_resolver::system_conf::read_system_conf()
            .map_err(|e| LookupError::Config(format!("the system's: {e}")))?;
        // An unreadable hosts file is an empty one, as for glibc.
        let hosts = Hosts::from_system().unwrap_or_default();
        Ok(Self::configured(config, options, hosts))
    }
}

/// The system's configuration as last read, read again when
/// `/etc/resolv.conf` or `/etc/hosts` changes (their modification times),
/// so that a large hosts file is not parsed at every lookup and
/// hickory's warnings about a line it cannot read come once per change.
#[derive(Debug, Default)]
pub struct SystemSource {
    read: Option<([Option<SystemTime>; 2], Source)>,
}

impl SystemSource {
    /// The configuration now; an unreadable one is tried again next time.
    pub fn current(&mut self) -> Result<Source, LookupError> {
        let stamp = SYSTEM_FILES.map(|f| std::fs::metadata(f).and_then(|m| m.modified()).ok());
        match &self.read {
            Some((read, source)) if *read == stamp => Ok(source.clone()),
            _ => {
                self.read = None;
                let source = Source::system()?;
                self.read = Some((stamp, source.clone()));
                Ok(source)
            }
        }
    }
}
