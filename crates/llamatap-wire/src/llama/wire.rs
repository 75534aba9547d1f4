//! Lenient serde building blocks for llama-server's JSON.
//!
//! Every type here accepts any JSON value and keeps only what it understands:
//! a field of an unexpected type reads as absent instead of failing the whole
//! event. Strings borrow from the input when they contain no escapes, so the
//! common event allocates nothing. Nothing here knows a wire format.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use serde::de::value::MapAccessDeserializer;
use serde::de::{Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// `visit_*` methods mapping booleans, null and bytes to `$v`.
macro_rules! scalars_to {
    ($v:expr) => {
        fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
            Ok($v)
        }
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok($v)
        }
        fn visit_none<E>(self) -> Result<Self::Value, E> {
            Ok($v)
        }
        fn visit_bytes<E>(self, _: &[u8]) -> Result<Self::Value, E> {
            Ok($v)
        }
    };
}

/// `visit_*` methods mapping numbers to `$v`.
macro_rules! numbers_to {
    ($v:expr) => {
        fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
            Ok($v)
        }
        fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
            Ok($v)
        }
        fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
            Ok($v)
        }
    };
}

/// `visit_str` mapping strings to `$v`.
macro_rules! str_to {
    ($v:expr) => {
        fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
            Ok($v)
        }
    };
}

/// `visit_seq` draining an array into `$v`.
macro_rules! seq_to {
    ($v:expr) => {
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            Ok($v)
        }
    };
}

/// `visit_map` draining an object into `$v`.
macro_rules! map_to {
    ($v:expr) => {
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
            Ok($v)
        }
    };
}

/// `expecting` and `visit_some` (a value inside `Some` is read as itself).
macro_rules! common {
    ($t:ty) => {
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("any JSON value")
        }
        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            <$t>::deserialize(d)
        }
    };
}

/// Parses `bytes` as a JSON object of shape `T`; anything else (including
/// an array, which serde would read positionally) gives `None`.
pub(crate) fn parse_object<'a, T: Deserialize<'a>>(bytes: &'a [u8]) -> Option<T> {
    serde_json::from_slice::<Object<T>>(bytes)
        .ok()
        .and_then(|o| o.0)
}

// === Text ===

/// A string, borrowed when unescaped; any other JSON value reads as `None`.
#[derive(Debug, Default)]
pub(crate) struct Text<'a>(pub(crate) Option<Cow<'a, str>>);

impl<'a> Text<'a> {
    /// The string, if present and non-empty.
    pub(crate) fn non_empty(self) -> Option<Cow<'a, str>> {
        self.0.filter(|s| !s.is_empty())
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Text<'a>;
            common!(Text<'a>);
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Text(Some(Cow::Borrowed(v))))
            }
            fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Text(Some(Cow::Owned(v.to_owned()))))
            }
            fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
                Ok(Text(Some(Cow::Owned(v))))
            }
            scalars_to!(Text(None));
            numbers_to!(Text(None));
            seq_to!(Text(None));
            map_to!(Text(None));
        }
        d.deserialize_any(V(PhantomData))
    }
}

// === Present ===

/// Whether a value carries something: a non-empty string, array or object,
/// or any number or boolean. `null` and `""` are not present.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Present(pub(crate) bool);

impl<'de> Deserialize<'de> for Present {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Present;
            common!(Present);
            fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Present(!v.is_empty()))
            }
            fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
                Ok(Present(true))
            }
            fn visit_unit<E>(self) -> Result<Self::Value, E> {
                Ok(Present(false))
            }
            fn visit_none<E>(self) -> Result<Self::Value, E> {
                Ok(Present(false))
            }
            numbers_to!(Present(true));
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut any = false;
                while seq.next_element::<IgnoredAny>()?.is_some() {
                    any = true;
                }
                Ok(Present(any))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut any = false;
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {
                    any = true;
                }
                Ok(Present(any))
            }
        }
        d.deserialize_any(V)
    }
}

// === Flag ===

/// True only for JSON `true`; anything else reads as false.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Flag(pub(crate) bool);

impl<'de> Deserialize<'de> for Flag {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Flag;
            common!(Flag);
            fn visit_bool<E>(self, v: bool) -> Result<Self::Value, E> {
                Ok(Flag(v))
            }
            fn visit_unit<E>(self) -> Result<Self::Value, E> {
                Ok(Flag(false))
            }
            fn visit_none<E>(self) -> Result<Self::Value, E> {
                Ok(Flag(false))
            }
            numbers_to!(Flag(false));
            str_to!(Flag(false));
            seq_to!(Flag(false));
            map_to!(Flag(false));
        }
        d.deserialize_any(V)
    }
}

// === Number ===

/// A JSON number as `f64`; any other value reads as `None`.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Number(pub(crate) Option<f64>);

impl Number {
    /// The number as a non-negative integer count (fractions truncated);
    /// `None` when negative, non-finite or above
    /// [`super::timings::MAX_TOKENS`] (an absurd count).
    pub(crate) fn count(self) -> Option<u64> {
        const MAX: f64 = super::timings::MAX_TOKENS as f64;
        self.0.filter(|v| (0.0..=MAX).contains(v)).map(|v| v as u64)
    }

    /// The number as milliseconds of a plausible duration (finite,
    /// `0 ..= MAX_MS`), else `None`.
    pub(crate) fn millis(self) -> Option<f64> {
        self.0.filter(|v| super::timings::duration_ms(*v).is_some())
    }
}

impl<'de> Deserialize<'de> for Number {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Number;
            common!(Number);
            fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> {
                Ok(Number(Some(v as f64)))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Self::Value, E> {
                Ok(Number(Some(v as f64)))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Self::Value, E> {
                Ok(Number(Some(v)))
            }
            scalars_to!(Number(None));
            str_to!(Number(None));
            seq_to!(Number(None));
            map_to!(Number(None));
        }
        d.deserialize_any(V)
    }
}

// === Object ===

/// A JSON object read as `T`; any other value reads as `None`.
#[derive(Debug)]
pub(crate) struct Object<T>(pub(crate) Option<T>);

impl<T> Default for Object<T> {
    fn default() -> Self {
        Self(None)
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Object<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = Object<T>;
            common!(Object<T>);
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                T::deserialize(MapAccessDeserializer::new(map)).map(|t| Object(Some(t)))
            }
            scalars_to!(Object(None));
            numbers_to!(Object(None));
            str_to!(Object(None));
            seq_to!(Object(None));
        }
        d.deserialize_any(V(PhantomData))
    }
}

// === First / List ===

/// The first object of a JSON array; later elements are skipped unread.
#[derive(Debug)]
pub(crate) struct First<T>(pub(crate) Option<T>);

impl<T> Default for First<T> {
    fn default() -> Self {
        Self(None)
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for First<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = First<T>;
            common!(First<T>);
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let first = seq.next_element::<Object<T>>()?.and_then(|o| o.0);
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(First(first))
            }
            scalars_to!(First(None));
            numbers_to!(First(None));
            str_to!(First(None));
            map_to!(First(None));
        }
        d.deserialize_any(V(PhantomData))
    }
}

/// The objects of a JSON array (other elements dropped); anything else is empty.
#[derive(Debug)]
pub(crate) struct List<T>(pub(crate) Vec<T>);

impl<T> Default for List<T> {
    fn default() -> Self {
        Self(Vec::new())
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for List<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = List<T>;
            common!(List<T>);
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element::<Object<T>>()? {
                    items.extend(item.0);
                }
                Ok(List(items))
            }
            scalars_to!(List(Vec::new()));
            numbers_to!(List(Vec::new()));
            str_to!(List(Vec::new()));
            map_to!(List(Vec::new()));
        }
        d.deserialize_any(V(PhantomData))
    }
}

// === ErrorField ===

/// An in-band error: an object with `message` (or `type`), or a non-empty string.
#[derive(Debug, Default)]
pub(crate) struct ErrorField<'a>(pub(crate) Option<Cow<'a, str>>);

#[derive(serde::Deserialize)]
struct ErrorObject<'a> {
    #[serde(borrow, default)]
    message: Text<'a>,
    #[serde(borrow, default, rename = "type")]
    kind: Text<'a>,
}

impl<'de: 'a, 'a> Deserialize<'de> for ErrorField<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = ErrorField<'a>;
            common!(ErrorField<'a>);
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                let obj = ErrorObject::deserialize(MapAccessDeserializer::new(map))?;
                let text = obj.message.non_empty().or(obj.kind.non_empty());
                Ok(ErrorField(Some(text.unwrap_or(Cow::Borrowed("error")))))
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(ErrorField((!v.is_empty()).then_some(Cow::Borrowed(v))))
            }
            fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                Ok(ErrorField(
                    (!v.is_empty()).then(|| Cow::Owned(v.to_owned())),
                ))
            }
            scalars_to!(ErrorField(None));
            numbers_to!(ErrorField(None));
            seq_to!(ErrorField(None));
        }
        d.deserialize_any(V(PhantomData))
    }
}
