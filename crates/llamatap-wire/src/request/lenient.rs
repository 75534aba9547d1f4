//! Lenient JSON reading for [`inspect_body`](super::inspect_body): the
//! top-level fields of interest, each kept whatever its type, the rest
//! skipped without being stored.

use super::{PromptField, PromptReader, MAX_MODEL_BYTES};
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use std::fmt;

/// The last value of each field of interest, whatever its JSON type.
#[derive(Default)]
pub(super) struct Fields {
    pub model: Option<Value>,
    pub stream: Option<Value>,
    pub max_completion_tokens: Option<Value>,
    pub max_tokens: Option<Value>,
    pub max_output_tokens: Option<Value>,
    pub n_predict: Option<Value>,
    pub temperature: Option<Value>,
    pub top_p: Option<Value>,
    pub seed: Option<Value>,
    pub return_progress: Option<Value>,
    /// `response_fields`, as llama-server reads it.
    pub response_fields: Option<Kept>,
}

impl Fields {
    /// Reads the fields of a JSON object body. An error (not JSON, not an
    /// object, cut short, nested too deep) keeps the fields read before it;
    /// bytes after the object are not read. A UTF-8 byte order mark is skipped.
    pub fn read(body: &[u8]) -> Self {
        Self::read_with(body, &mut Skip)
    }

    /// As [`Fields::read`], also handing the prompt's fields to `reader`,
    /// in the same single pass.
    pub fn read_with<R: PromptReader>(body: &[u8], reader: &mut R) -> Self {
        let mut fields = Self::default();
        let body = body.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(body);
        let mut json = serde_json::Deserializer::from_slice(body);
        let _ = (&mut json).deserialize_map(FieldsVisitor(&mut fields, reader));
        fields
    }
}

/// A [`PromptReader`] that skips the prompt.
struct Skip;

impl PromptReader for Skip {
    fn read<'de, D: Deserializer<'de>>(
        &mut self,
        _: PromptField,
        value: D,
    ) -> Result<(), D::Error> {
        IgnoredAny::deserialize(value).map(|_| ())
    }
}

/// A [`PromptReader`] that keeps the prompt's fields as parsed JSON.
#[derive(Default)]
pub(super) struct Collect(pub serde_json::Map<String, serde_json::Value>);

impl PromptReader for Collect {
    fn read<'de, D: Deserializer<'de>>(
        &mut self,
        field: PromptField,
        value: D,
    ) -> Result<(), D::Error> {
        let value = serde_json::Value::deserialize(value)?;
        self.0.insert(field.as_str().to_string(), value);
        Ok(())
    }
}

/// Hands one prompt field's value to a [`PromptReader`].
struct PromptSeed<'a, R>(&'a mut R, PromptField);

impl<'de, R: PromptReader> DeserializeSeed<'de> for PromptSeed<'_, R> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, value: D) -> Result<(), D::Error> {
        self.0.read(self.1, value)
    }
}

/// A JSON value reduced to what the facts need; arrays, objects, null and
/// long strings are `Other` (and are skipped without being stored).
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Value {
    Bool(bool),
    U64(u64),
    I64(i64),
    F64(f64),
    Str(String),
    Other,
}

impl Value {
    pub fn into_u64(self) -> Option<u64> {
        match self {
            Value::U64(n) => Some(n),
            _ => None,
        }
    }

    pub fn into_i64(self) -> Option<i64> {
        match self {
            Value::U64(n) => i64::try_from(n).ok(),
            Value::I64(n) => Some(n),
            _ => None,
        }
    }

    pub fn into_f64(self) -> Option<f64> {
        match self {
            Value::U64(n) => Some(n as f64),
            Value::I64(n) => Some(n as f64),
            Value::F64(n) => Some(n),
            _ => None,
        }
    }
}

struct FieldsVisitor<'a, R>(&'a mut Fields, &'a mut R);

impl<'de, R: PromptReader> Visitor<'de> for FieldsVisitor<'_, R> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<Key>()? {
            let slot = match key {
                Key::Model => &mut self.0.model,
                Key::Stream => &mut self.0.stream,
                Key::MaxCompletionTokens => &mut self.0.max_completion_tokens,
                Key::MaxTokens => &mut self.0.max_tokens,
                Key::MaxOutputTokens => &mut self.0.max_output_tokens,
                Key::NPredict => &mut self.0.n_predict,
                Key::Temperature => &mut self.0.temperature,
                Key::TopP => &mut self.0.top_p,
                Key::Seed => &mut self.0.seed,
                Key::ReturnProgress => &mut self.0.return_progress,
                Key::ResponseFields => {
                    self.0.response_fields = Some(map.next_value_seed(KeptSeed)?);
                    continue;
                }
                Key::Prompt(field) => {
                    map.next_value_seed(PromptSeed(&mut *self.1, field))?;
                    continue;
                }
                Key::Other => {
                    map.next_value::<IgnoredAny>()?;
                    continue;
                }
            };
            *slot = Some(map.next_value_seed(ValueSeed)?);
        }
        Ok(())
    }
}

/// A top-level key, read without allocating unless it is escaped.
enum Key {
    Model,
    Stream,
    MaxCompletionTokens,
    MaxTokens,
    MaxOutputTokens,
    NPredict,
    Temperature,
    TopP,
    Seed,
    ReturnProgress,
    ResponseFields,
    /// A field of the prompt, handed to the [`PromptReader`].
    Prompt(PromptField),
    Other,
}

impl<'de> serde::Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_str(KeyVisitor)
    }
}

struct KeyVisitor;

impl Visitor<'_> for KeyVisitor {
    type Value = Key;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object key")
    }

    fn visit_str<E: serde::de::Error>(self, key: &str) -> Result<Key, E> {
        Ok(match key {
            "model" => Key::Model,
            "stream" => Key::Stream,
            "max_completion_tokens" => Key::MaxCompletionTokens,
            "max_tokens" => Key::MaxTokens,
            "max_output_tokens" => Key::MaxOutputTokens,
            "n_predict" => Key::NPredict,
            "temperature" => Key::Temperature,
            "top_p" => Key::TopP,
            "seed" => Key::Seed,
            "return_progress" => Key::ReturnProgress,
            "response_fields" => Key::ResponseFields,
            "messages" => Key::Prompt(PromptField::Messages),
            "tools" => Key::Prompt(PromptField::Tools),
            "system" => Key::Prompt(PromptField::System),
            "instructions" => Key::Prompt(PromptField::Instructions),
            "input" => Key::Prompt(PromptField::Input),
            _ => Key::Other,
        })
    }
}

struct ValueSeed;

impl<'de> DeserializeSeed<'de> for ValueSeed {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(ValueVisitor)
    }
}

struct ValueVisitor;

impl<'de> Visitor<'de> for ValueVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::U64(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::I64(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::F64(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(if v.len() <= MAX_MODEL_BYTES {
            Value::Str(v.to_owned())
        } else {
            Value::Other
        })
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Other)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Value::Other)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Value::Other)
    }
}

// === response_fields ===

/// What a native request's `response_fields` leaves of llama-server's final
/// answer, as far as token counts go. llama-server reads the field as a list
/// of strings: any other value (or a list holding a non-string) falls back
/// to its default, the empty list, which filters nothing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Kept {
    /// A list of strings with at least one entry: the answer is filtered.
    pub filters: bool,
    /// `"timings"` is listed.
    pub timings: bool,
    /// `"tokens_predicted"` is listed.
    pub predicted: bool,
    /// `"tokens_evaluated"` is listed.
    pub evaluated: bool,
}

struct KeptSeed;

impl<'de> DeserializeSeed<'de> for KeptSeed {
    type Value = Kept;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Kept, D::Error> {
        deserializer.deserialize_any(KeptVisitor)
    }
}

struct KeptVisitor;

impl<'de> Visitor<'de> for KeptVisitor {
    type Value = Kept;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of field names")
    }

    fn visit_bool<E>(self, _: bool) -> Result<Kept, E> {
        Ok(Kept::default())
    }

    fn visit_u64<E>(self, _: u64) -> Result<Kept, E> {
        Ok(Kept::default())
    }

    fn visit_i64<E>(self, _: i64) -> Result<Kept, E> {
        Ok(Kept::default())
    }

    fn visit_f64<E>(self, _: f64) -> Result<Kept, E> {
        Ok(Kept::default())
    }

    fn visit_str<E>(self, _: &str) -> Result<Kept, E> {
        Ok(Kept::default())
    }

    fn visit_unit<E>(self) -> Result<Kept, E> {
        Ok(Kept::default())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Kept, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Kept::default())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Kept, A::Error> {
        let mut kept = Kept::default();
        let mut strings = true;
        while let Some(name) = seq.next_element_seed(NameSeed)? {
            match name {
                Name::Timings => kept.timings = true,
                Name::Predicted => kept.predicted = true,
                Name::Evaluated => kept.evaluated = true,
                Name::Other => {}
                Name::NotString => strings = false,
            }
            kept.filters = true;
        }
        Ok(if strings { kept } else { Kept::default() })
    }
}

/// One entry of `response_fields`.
enum Name {
    Timings,
    Predicted,
    Evaluated,
    Other,
    NotString,
}

struct NameSeed;

impl<'de> DeserializeSeed<'de> for NameSeed {
    type Value = Name;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Name, D::Error> {
        deserializer.deserialize_any(NameVisitor)
    }
}

struct NameVisitor;

impl<'de> Visitor<'de> for NameVisitor {
    type Value = Name;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a field name")
    }

    fn visit_str<E>(self, v: &str) -> Result<Name, E> {
        Ok(match v {
            "timings" => Name::Timings,
            "tokens_predicted" => Name::Predicted,
            "tokens_evaluated" => Name::Evaluated,
            _ => Name::Other,
        })
    }

    fn visit_bool<E>(self, _: bool) -> Result<Name, E> {
        Ok(Name::NotString)
    }

    fn visit_u64<E>(self, _: u64) -> Result<Name, E> {
        Ok(Name::NotString)
    }

    fn visit_i64<E>(self, _: i64) -> Result<Name, E> {
        Ok(Name::NotString)
    }

    fn visit_f64<E>(self, _: f64) -> Result<Name, E> {
        Ok(Name::NotString)
    }

    fn visit_unit<E>(self) -> Result<Name, E> {
        Ok(Name::NotString)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Name, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Name::NotString)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Name, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Name::NotString)
    }
}
