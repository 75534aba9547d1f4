//! The value checks every part of the configuration shares: each failure is
//! a [`ConfigError::Invalid`] naming the key.

use std::net::SocketAddr;

use super::ConfigError;

/// The flag's value, else the file's, else `default`.
pub(super) fn pick(flag: &Option<String>, file: &Option<String>, default: &str) -> String {
    flag.clone()
        .or_else(|| file.clone())
        .unwrap_or_else(|| default.to_string())
}

/// The one-line error of `key`.
pub(super) fn invalid(key: &'static str, message: &str) -> ConfigError {
    ConfigError::Invalid {
        key,
        message: message.to_string(),
    }
}

/// `v` (or `default`), refused when zero.
pub(super) fn positive(
    key: &'static str,
    v: Option<usize>,
    default: usize,
) -> Result<usize, ConfigError> {
    match v.unwrap_or(default) {
        0 => Err(invalid(key, "must be greater than zero")),
        n => Ok(n),
    }
}

/// `v` (or `default`), refused when zero or above `max`.
pub(super) fn within(
    key: &'static str,
    v: Option<usize>,
    default: usize,
    max: usize,
) -> Result<usize, ConfigError> {
    match positive(key, v, default)? {
        n if n > max => Err(ConfigError::Invalid {
            key,
            message: format!("{n} is too large: at most {max}"),
        }),
        n => Ok(n),
    }
}

/// [`positive`] for a `u64`.
pub(super) fn positive_u64(
    key: &'static str,
    v: Option<u64>,
    default: u64,
) -> Result<u64, ConfigError> {
    match v.unwrap_or(default) {
        0 => Err(invalid(key, "must be greater than zero")),
        n => Ok(n),
    }
}

/// An `IP:port` listen address.
pub(super) fn parse_addr(key: &'static str, s: &str) -> Result<SocketAddr, ConfigError> {
    s.parse().map_err(|_| ConfigError::Invalid {
        key,
        message: format!("{s:?} is not an IP:port address"),
    })
}

/// Refuses an admin listener that would share the proxy's port: the same
/// address, or the same port with either side on every address (`0.0.0.0`,
/// `[::]`). Two listeners on one port would split connections between them.
pub(super) fn separate_listeners(listen: SocketAddr, admin: SocketAddr) -> Result<(), ConfigError> {
    let overlap = listen.port() == admin.port()
        && (listen.ip() == admin.ip()
            || listen.ip().is_unspecified()
            || admin.ip().is_unspecified());
    if overlap {
        return Err(invalid(
            "admin_listen",
            &format!(
                "{admin} overlaps listen ({listen}); give the admin listener a port of its own"
            ),
        ));
    }
    Ok(())
}
