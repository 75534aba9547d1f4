//! llama-server's model list: the answer of `/v1/models` (OpenAI's shape,
//! `{"data": [{"id": ..}]}`) or of its own `/models` (`{"models": [{"name":
//! .., "model": ..}]}`), read for the names it serves.
//!
//! Pure: parses bytes, no I/O. Deliberately not here: which names become
//! metric labels and how many (telemetry's `models`), and which member
//! serves which model (the fleet).

#[cfg(test)]
mod tests;

/// Model ids in a `/v1/models` (or llama-server `/models`) JSON body:
/// every `id`, `name` and `model` of the `data` and `models` lists, sorted
/// and without repeats. A body that is not JSON gives none.
pub fn parse_model_list(body: &[u8]) -> Vec<String> {
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(body) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for key in ["data", "models"] {
        if let Some(items) = v.get(key).and_then(|d| d.as_array()) {
            for item in items {
                for f in ["id", "name", "model"] {
                    if let Some(s) = item.get(f).and_then(|s| s.as_str()) {
                        out.push(s.to_string());
                    }
                }
            }
        }
    }
    out.sort();
    out.dedup();
    out
}
