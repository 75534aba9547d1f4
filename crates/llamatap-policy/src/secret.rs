//! A secret value (an API key): compared and sent, never shown.
//!
//! Deliberately not here: how keys are compared in constant time (see
//! [`crate::tenant`]) or where they come from (the binary's configuration).

/// A secret: its `Debug` never shows the value.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a value.
    pub fn new(s: String) -> Self {
        Secret(s)
    }

    /// The value, for comparison or sending upstream only.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(***)")
    }
}
